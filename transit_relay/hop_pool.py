"""Warm hop connections: pre-opened, pre-authenticated TCP connections to each peer replica's peer port.

With them a cross-replica pairing sends its hop line on a connection that is already open, so it costs no
TCP connect, no accept and no task start on the holder: the hop line and its `ok` are all that cross.

On the peer port, a connection that starts with

    warm TIME_MS ADDRESS MAC\\n

(ADDRESS: the dialer's own advertise address; MAC = HMAC-SHA256 under the shared peer secret over the
rest of the line; lines older than WARM_MAX_AGE are refused) is answered `ready\\n` and parked: it stays
open, sending nothing, until the dialer sends one ordinary hop line on it (cluster.py), or either end
closes it. A refused one is answered `error: bad hop\\n` (bad MAC, stale) or `error: busy\\n` (the holder
parks MAX_PARKED at most) and closed.

Dialer side (`HopPool`): a peer is learned from a claim naming it (or from its own warm connections);
a background filler keeps up to `--peer-pool-size` ready connections to it, one dial at a time. An idle
connection that becomes readable (the peer closed it or died) is dropped at once and replaced; one
older than MAX_AGE is replaced; TCP keepalive notices a peer host that vanished silently. After
DROP_AFTER failed dials in a row the peer is forgotten (and learned again from the next claim naming
it). A hop that finds no warm connection, or whose warm connection turns out dead, dials a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
import socket
import time
from collections import Counter, deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("burrow.transit.cluster")
READY = b"ready\n"
BAD = b"error: bad hop\n"
BUSY = b"error: busy\n"
WARM_MAX_AGE = 30.0     # seconds a warm line stays valid (clocks of the replicas roughly agree)
DIAL_TIMEOUT = 2.0      # seconds for connect + `ready`
MAX_AGE = 300.0         # seconds a warm connection may idle before it is replaced
SWEEP_INTERVAL = 30.0   # seconds between checks of a full pool's ages
DROP_AFTER = 3          # failed dials in a row before a peer is forgotten
RETRY_DELAY = 0.2       # seconds before the next dial after a failure (doubles per failure)
MAX_PARKED = 1024       # warm connections this replica holds open for its peers, all peers together
MAX_LINE = 256
HOP_SECONDS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)
_WARM = re.compile(rb"^warm (\d{1,16}) (\S{1,200}) ([0-9a-f]{64})$")


def signed(secret: bytes, body: bytes) -> bytes:
    """`body MAC\n`, MAC = hex HMAC-SHA256 of body under the peer secret (hop and warm lines)."""
    return body + b" " + hmac.new(secret, body, hashlib.sha256).hexdigest().encode() + b"\n"


def verified(secret: bytes, pattern: re.Pattern, line: bytes, now: float, max_age: float,
             time_group: int) -> re.Match | None:
    """The match of a signed line whose MAC (the last group) is authentic and whose TIME_MS (group
    `time_group`) is within max_age of now, else None."""
    m = pattern.match(line)
    if m is None:
        return None
    mac = m.lastindex
    if not hmac.compare_digest(hmac.new(secret, line[:m.start(mac) - 1], hashlib.sha256).hexdigest().encode(),
                               m.group(mac)):
        return None
    if abs(now - int(m.group(time_group)) / 1000) > max_age:
        return None
    return m


def warm_line(secret: bytes, address: str, now: float) -> bytes:
    return signed(secret, b"warm %d %s" % (int(now * 1000), address.encode()))


def parse_warm(secret: bytes, line: bytes, now: float) -> str | None:
    """The dialer's advertise address in a valid, fresh, authentic warm line, else None."""
    m = verified(secret, _WARM, line, now, WARM_MAX_AGE, time_group=1)
    return None if m is None else m.group(2).decode()


def hop_seconds_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram("burrow_transit_cluster_hop_seconds", "time from learning a token's holder to the "
                     "holder's answer on the hop (connection: warm from the pool, fresh, or handover: the "
                     "client's socket passed to a replica on this host)", ["connection"],
                     buckets=HOP_SECONDS_BUCKETS, registry=registry)


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


def _alive(sock: socket.socket) -> bool:
    """An idle warm connection is alive while it has nothing to read (no EOF, no stray bytes)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False
    return False


def read_available_line(sock: socket.socket, limit: int) -> bytes | None:
    """The first line already received on `sock`, newline included, taking nothing after it; None when
    no whole line is there yet (or the connection failed: the caller's slow path finds out)."""
    try:
        data = sock.recv(limit, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return None
    end = data.find(b"\n")
    if end < 0:
        return None
    return sock.recv(end + 1)


async def read_line(loop: asyncio.AbstractEventLoop, sock: socket.socket, limit: int) -> bytes:
    """Bytes up to and including the first newline; nothing after it is taken (relayed bytes may follow)."""
    line = bytearray()
    while len(line) < limit:
        try:
            data = sock.recv(limit, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable = loop.create_future()
            loop.add_reader(sock.fileno(), readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())
            continue
        if not data:
            break
        end = data.find(b"\n")
        line += sock.recv(end + 1 if end >= 0 else len(data))
        if end >= 0:
            break
    return bytes(line)


class PeerLine:
    """Reads the first line of a connection to the peer port in reader callbacks (no task), at most
    `limit` bytes and `timeout` seconds, then calls `done(sock, line)`; line is b"" on EOF, timeout or
    overflow. Nothing follows the line before this replica answers it, so reading greedily is safe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, limit: int, timeout: float,
                 done: Callable[[socket.socket, bytes], None], waiting: set) -> None:
        self.loop, self.sock, self.limit, self.done, self.waiting = loop, sock, limit, done, waiting
        self.fd = sock.fileno()
        self.buf = b""
        self.timer = loop.call_later(timeout, self._finish, b"")
        waiting.add(self)
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data = self.sock.recv(self.limit - len(self.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self.buf += data
        if data and not self.buf.endswith(b"\n") and len(self.buf) < self.limit:
            return
        self._finish(self.buf if self.buf.endswith(b"\n") else b"")

    def _finish(self, line: bytes) -> None:
        self.close(keep_socket=True)
        self.done(self.sock, line)

    def close(self, keep_socket: bool = False) -> None:
        self.timer.cancel()
        self.waiting.discard(self)
        self.loop.remove_reader(self.fd)
        if not keep_socket:
            self.sock.close()


class _Peer:
    def __init__(self, address: str) -> None:
        self.address = address
        self.idle: deque[tuple[socket.socket, float]] = deque()  # (socket, when it became ready)
        self.wake = asyncio.Event()
        self.filler: asyncio.Task | None = None
        self.failures = 0


class HopPool:
    """Warm connections to the peer replicas (dialer side) and the ones peers keep here (parked)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, secret: bytes, size: int, clock: Callable[[], float],
                 resolve, registry: CollectorRegistry) -> None:
        self.loop = loop
        self.secret = secret
        self.size = size
        self.clock = clock
        self.resolve = resolve  # async (address) -> (family, sockaddr)
        self.address = ""  # this replica's advertise address, set once known
        self.peers: dict[str, _Peer] = {}
        self.parked: dict[int, socket.socket] = {}  # fd -> warm connection a peer keeps here
        self.dials: Counter[str] = Counter()  # ok, unreachable, refused (auth or busy)
        self.dropped: Counter[str] = Counter()  # closed (peer closed or died), stale (found dead at use), aged
        self.warm_in: Counter[str] = Counter()  # accepted, refused, busy
        self.closing = False
        registry.register(_PoolCollector(self))

    # -- dialer side ----------------------------------------------------------------------------
    def learn(self, address: str) -> None:
        """Keep warm connections to `address` from now on."""
        if self.size <= 0 or self.closing or address == self.address or address in self.peers:
            return
        peer = self.peers[address] = _Peer(address)
        peer.filler = asyncio.ensure_future(self._fill(peer))

    def take(self, address: str) -> socket.socket | None:
        """A ready connection to `address`, or None (the caller dials); learns `address` either way."""
        self.learn(address)
        peer = self.peers.get(address)
        if peer is None:
            return None
        sock = None
        while peer.idle:
            candidate, _ = peer.idle.popleft()
            self.loop.remove_reader(candidate.fileno())
            if _alive(candidate):
                sock = candidate
                break
            self.dropped["stale"] += 1
            candidate.close()
        return sock

    def replenish(self, address: str) -> None:
        """Top the pool to `address` up again (called once a hop's exchange is over)."""
        peer = self.peers.get(address)
        if peer is not None:
            peer.wake.set()

    def forget(self, address: str) -> None:
        """`address` is unreachable: drop its connections and stop dialing it."""
        peer = self.peers.pop(address, None)
        if peer is not None:
            self._drop_peer(peer)

    def _drop_peer(self, peer: _Peer) -> None:
        if peer.filler is not None and peer.filler is not asyncio.current_task():
            peer.filler.cancel()
        while peer.idle:
            sock, _ = peer.idle.popleft()
            self.loop.remove_reader(sock.fileno())
            sock.close()

    async def _fill(self, peer: _Peer) -> None:
        try:
            while self.peers.get(peer.address) is peer:
                self._sweep(peer)
                if len(peer.idle) >= self.size:
                    peer.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(peer.wake.wait(), SWEEP_INTERVAL)
                    continue
                sock, result = await self._dial(peer.address)
                if result == "busy":  # the peer holds all the warm connections it will: keep what we have
                    await asyncio.sleep(SWEEP_INTERVAL)
                    continue
                if sock is None:
                    peer.failures += 1
                    if peer.failures >= DROP_AFTER:
                        log.info("peer %s unreachable: no warm hop connections to it", peer.address)
                        self.peers.pop(peer.address, None)
                        self._drop_peer(peer)
                        return
                    await asyncio.sleep(RETRY_DELAY * 2 ** (peer.failures - 1))
                    continue
                peer.failures = 0
                peer.idle.append((sock, time.monotonic()))
                self.loop.add_reader(sock.fileno(), self._idle_readable, peer, sock)
        except asyncio.CancelledError:
            pass

    def _sweep(self, peer: _Peer) -> None:
        now = time.monotonic()
        while peer.idle and now - peer.idle[0][1] > MAX_AGE:
            sock, _ = peer.idle.popleft()
            self.loop.remove_reader(sock.fileno())
            sock.close()
            self.dropped["aged"] += 1

    def _idle_readable(self, peer: _Peer, sock: socket.socket) -> None:
        """An idle connection has something to read: the peer closed it (or died). Replace it."""
        self.loop.remove_reader(sock.fileno())
        for item in peer.idle:
            if item[0] is sock:
                peer.idle.remove(item)
                break
        sock.close()
        self.dropped["closed"] += 1
        peer.wake.set()

    async def _dial(self, address: str) -> tuple[socket.socket | None, str]:
        """(a ready connection or None, result: ok, unreachable, refused, busy), counted."""
        sock = None
        try:
            family, sockaddr = await self.resolve(address)
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            async with asyncio.timeout(DIAL_TIMEOUT):
                await self._handshake(sock, sockaddr)
            result = "ok"
        except PermissionError as exc:
            result = "busy" if exc.args and exc.args[0] == BUSY else "refused"
        except (OSError, ValueError, TimeoutError) as exc:
            log.debug("warm dial to %s failed: %s", address, exc)
            result = "unreachable"
        self.dials[result] += 1
        if result != "ok" and sock is not None:
            sock.close()
            sock = None
        return sock, result

    async def _handshake(self, sock: socket.socket, sockaddr: tuple) -> None:
        await self.loop.sock_connect(sock, sockaddr)
        _keepalive(sock)
        await self.loop.sock_sendall(sock, warm_line(self.secret, self.address, self.clock()))
        reply = await read_line(self.loop, sock, MAX_LINE)
        if reply != READY:
            if reply == BUSY:
                raise PermissionError(reply)
            if reply.startswith(b"error: "):
                log.warning("peer refused a warm hop connection: %s", reply.strip().decode(errors="replace"))
                raise PermissionError(reply)
            raise ConnectionError(f"unexpected reply {reply[:40]!r}")

    # -- holder side --------------------------------------------------------------------------------
    def park(self, sock: socket.socket, line: bytes, on_hop: Callable[[socket.socket], None]) -> None:
        """A peer's warm line: answer it, then hold the connection until its hop line (`on_hop`)."""
        address = parse_warm(self.secret, line, self.clock())
        if address is None or self.closing or len(self.parked) >= MAX_PARKED:
            self.warm_in["refused" if address is None else "busy"] += 1
            with contextlib.suppress(OSError):
                sock.send(BAD if address is None else BUSY)
            sock.close()
            return
        try:
            sock.send(READY)
        except OSError:
            sock.close()
            return
        _keepalive(sock)
        self.warm_in["accepted"] += 1
        self.parked[sock.fileno()] = sock
        self.loop.add_reader(sock.fileno(), self._parked_readable, sock, on_hop)
        self.learn(address)  # warm up the other direction too

    def _parked_readable(self, sock: socket.socket, on_hop: Callable[[socket.socket], None]) -> None:
        try:
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):  # spurious wake-up: keep waiting
            return
        except OSError:
            data = b""
        self.loop.remove_reader(sock.fileno())
        self.parked.pop(sock.fileno(), None)
        if not data:  # the dialer closed it (replaced, aged, or stopping): nothing to count
            sock.close()
            return
        on_hop(sock)

    async def close(self) -> None:
        self.closing = True
        fillers = [peer.filler for peer in self.peers.values() if peer.filler is not None]
        for peer in list(self.peers.values()):
            self._drop_peer(peer)
        self.peers.clear()
        if fillers:
            await asyncio.wait(fillers, timeout=DIAL_TIMEOUT)
        for sock in self.parked.values():
            self.loop.remove_reader(sock.fileno())
            sock.close()
        self.parked.clear()


class _PoolCollector(Collector):
    def __init__(self, pool: HopPool) -> None:
        self.pool = pool

    def collect(self):
        p = self.pool
        yield GaugeMetricFamily("burrow_transit_cluster_pool_idle", "warm hop connections ready to use, "
                                "all peers together", value=sum(len(peer.idle) for peer in p.peers.values()))
        yield GaugeMetricFamily("burrow_transit_cluster_pool_peers", "peer replicas this replica keeps warm "
                                "hop connections to", value=len(p.peers))
        yield GaugeMetricFamily("burrow_transit_cluster_pool_parked", "warm hop connections peers keep open "
                                "to this replica", value=len(p.parked))
        dials = CounterMetricFamily("burrow_transit_cluster_pool_dials", "warm connections dialed (ok, "
                                    "unreachable, refused: the peer refused the warm line, e.g. another "
                                    "secret; busy: the peer holds as many as it will)", labels=["result"])
        for result in ("ok", "unreachable", "refused", "busy"):
            dials.add_metric([result], p.dials.get(result, 0))
        yield dials
        dropped = CounterMetricFamily("burrow_transit_cluster_pool_dropped", "warm connections dropped "
                                      "unused (closed: by the peer or its death; stale: found dead when "
                                      "taken; aged)", labels=["reason"])
        for reason in ("closed", "stale", "aged"):
            dropped.add_metric([reason], p.dropped.get(reason, 0))
        yield dropped
        warm_in = CounterMetricFamily("burrow_transit_cluster_pool_warm_in", "warm connections peers opened "
                                      "to this replica (accepted, refused: bad or stale line, busy)",
                                      labels=["result"])
        for result in ("accepted", "refused", "busy"):
            warm_in.add_metric([result], p.warm_in.get(result, 0))
        yield warm_in
