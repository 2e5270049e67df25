"""Transit replicas that pair across each other: a token registry in Redis and the replica-to-replica hop.

A side that starts waiting on a replica (the core's `Waiting` action) claims its token in Redis with one
script (`_CLAIM`): `burrow:transit:{TOKEN}:waiting` is set to this replica's advertise address (expiring
with the pending timeout) if free. If another replica holds it, the partner waits there: the script
takes that claim away (the two sides are about to pair, so the holder has nothing to release later)
and this replica sends that replica's peer port one hop line,

    hop TOKEN SIDE TRANSPORT CLIENT_IP TIME_MS MAC\\n

(SIDE `-` for a legacy handshake; MAC = HMAC-SHA256 under the shared `--peer-secret-file` over the
rest of the line; lines older than HOP_MAX_AGE are refused). The holder treats the hop as a client
connection from CLIENT_IP that must pair at once (`Relay.hop_in`): it answers `ok\\n` and relays as for
any pair, writing the pair's one session line, or `no partner\\n` when its waiting side is gone. On `ok`
this replica joins its waiting side to the hop (`Relay.hop_out`, a pair that writes no session line) and
both replicas splice bytes. A hop that fails (`no partner`, unreachable: the holder died) claims again
(the stale claim is gone already), at most CLAIM_ATTEMPTS times; after that the side simply waits here.
A hop the holder refuses (a limit) puts the holder's claim back. With Redis unreachable every replica
pairs on its own. The scripts travel on the lean pipelined connection of common/resp.py (redis-py's
CPU per command is several times Redis's own); `rediss://` and Redis Cluster use redis-py.

Hop lines normally travel on warm connections opened in advance (hop_pool.py), so a pairing costs one
Redis round trip and one exchange on an open connection; a hop finding none, or a dead one, dials.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import time
from collections import Counter
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from burrow.common.listen import accept_ready, tcp_listener
from burrow.common.redis import UNAVAILABLE, RedisLink, RedisMetrics, key
from burrow.common.resp import LeanClient, ReplyError, lean_capable
from burrow.transit_relay.handover import LEFT, HandedEndpoint, Handover
from burrow.transit_relay.hop_pool import (
    HopPool,
    PeerLine,
    hop_seconds_histogram,
    read_available_line,
    read_line,
    signed,
    verified,
)
from burrow.transit_relay.interfaces import RelayHost
from burrow.transit_relay.protocol import (
    NO_PARTNER,
    OK,
    Conn,
    Handshake,
    Phase,
    Unwaited,
    Waiting,
    refusal_line,
)
from burrow.transit_relay.tcp import TcpEndpoint

log = logging.getLogger("burrow.transit.cluster")
CLAIM_ATTEMPTS = 3
HOP_CONNECT_TIMEOUT = 2.0   # seconds to reach another replica's peer port
HOP_REPLY_TIMEOUT = 5.0     # seconds for its `ok` / `no partner`
HOP_LINE_TIMEOUT = 5.0      # seconds an incoming hop may take to send its line
HOP_MAX_AGE = 30.0          # seconds a hop line stays valid (clocks of the replicas roughly agree)
MAX_HOP_LINE = 512
_HOP = re.compile(rb"^hop (\w{64}) (\w{16}|-) (tcp|websocket) (\S{1,64}) (\d{1,16}) ([0-9a-f]{64})$")
_RELEASE = """if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"""
# Claim the token for this replica (ARGV[1]) if free; else return its holder, and when that is another
# replica take the claim away: this side is about to pair with the holder's, so the holder has nothing
# to release afterwards (one round trip per side, none after the pair forms).
_CLAIM = """local holder = redis.call('get', KEYS[1])
if not holder then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) return false end
if holder ~= ARGV[1] then redis.call('del', KEYS[1]) end
return holder"""


def hop_line(secret: bytes, handshake: Handshake, transport: str, ip: str, now: float) -> bytes:
    return signed(secret, b"hop %s %s %s %s %d" % (handshake.token, handshake.side or b"-", transport.encode(),
                                                   ip.encode(), int(now * 1000)))


def parse_hop(secret: bytes, line: bytes, now: float) -> tuple[Handshake, str, str] | None:
    """(handshake, transport, client ip) of a valid, fresh, authentic hop line, else None."""
    m = verified(secret, _HOP, line, now, HOP_MAX_AGE, time_group=5)
    if m is None:
        return None
    side = None if m.group(2) == b"-" else m.group(2)
    return Handshake(m.group(1), side), m.group(3).decode(), m.group(4).decode()


class HopEndpoint(TcpEndpoint):
    """The hop socket on the arriving side's replica: already past its handshake, it is never sent `ok`."""

    def take_over(self) -> None:
        pass


class Cluster:
    """One replica's part of the cluster: claims, outgoing hops, and the peer port for incoming ones."""

    def __init__(self, server: RelayHost, registry, node: str) -> None:
        cfg = server.config
        self.server = server
        self.secret = Path(cfg.peer_secret_file).read_bytes().strip()
        if len(self.secret) < 16:
            raise ValueError("the peer secret must be at least 16 bytes")
        self.link = RedisLink(cfg.redis_url, RedisMetrics(registry, "transit", node))
        self.lean: LeanClient | None = None  # the claims' connection (redis://, unix://, no Cluster)
        self.address = cfg.advertise_address
        self.ttl_ms = int(cfg.pending_timeout * 1000)
        self.hops_out: Counter[str] = Counter()  # paired, no_partner, unreachable
        self.hops_in: Counter[str] = Counter()   # paired, no_partner, refused
        self.local_only = 0  # sides that waited without a claim (Redis unavailable)
        self.claimed: set[bytes] = set()  # tokens whose claim names this replica
        self._lsock: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()
        self._lines: set[PeerLine] = set()  # incoming peer connections whose first line is awaited
        self._start: asyncio.Task | None = None
        self.peer_port: int | None = None
        self.pool: HopPool | None = None  # made in start(), on the running loop
        self.handover = (Handover(server, cfg.handover_dir, MAX_HOP_LINE, self._handed_in)
                         if cfg.handover_dir else None)  # replicas on this host: pass the client's socket
        self.hop_seconds = hop_seconds_histogram(registry)
        self._registry = registry
        registry.register(_ClusterCollector(self))

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.server.config
        self._lsock = tcp_listener(cfg.host, cfg.peer_port)
        self.peer_port = self._lsock.getsockname()[1]
        if self.address is None:
            if cfg.host in ("", "::", "0.0.0.0"):
                raise ValueError("--redis-url with a wildcard --host needs --advertise-address HOST:PORT")
            self.address = f"{cfg.host}:{self.peer_port}"
        self.pool = HopPool(self.server.loop, self.secret, cfg.peer_pool_size, self.server.clock,
                            lambda holder: _resolve(self.server.loop, holder), self._registry)
        self.pool.address = self.address
        self.server.loop.add_reader(self._lsock.fileno(), self._accept)
        if self.handover is not None:
            self.handover.start(self.address)
        self.link.on_health_change(self._redis_changed)
        self._start = asyncio.create_task(self.link.start(connect_deadline=None))  # serves meanwhile

    async def stop(self) -> None:
        if self._lsock is not None:
            self.server.loop.remove_reader(self._lsock.fileno())
            self._lsock.close()
            self._lsock = None
        if self.handover is not None:
            self.handover.stop()
        for waiting in list(self._lines):
            waiting.close()
        if self.pool is not None:
            await self.pool.close()
        if self._tasks:  # let the claims of the sides just closed be released (bounded)
            await asyncio.wait(list(self._tasks), timeout=1.0)
        for task in [*self._tasks, *([self._start] if self._start else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.lean is not None:
            self.lean.close()
        await self.link.close()

    def detail(self) -> str:
        """For /readyz: whether sides on other replicas can be reached."""
        if self.link.healthy:
            return "cluster: Redis reachable, pairing across replicas"
        return f"cluster: Redis unavailable ({self.link.last_error or 'connecting'}), pairing on this replica only"

    # -- the core's Waiting / Unwaited ----------------------------------------------------------
    def on_action(self, action: Waiting | Unwaited) -> None:
        if isinstance(action, Waiting):
            self._spawn_claim(action.conn)
        else:
            token = action.conn.handshake.token
            if token in self.claimed and not self.server.relay.by_token.get(token):  # none waits here now
                self.claimed.discard(token)
                self._track(asyncio.ensure_future(self._release(token, self.address)))

    def _spawn_claim(self, conn: Conn) -> None:
        self._track(asyncio.ensure_future(self._claim(conn)))

    def _track(self, task: asyncio.Future) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _redis_changed(self, healthy: bool) -> None:
        """Redis is back (or reached for the first time): register the sides that waited unregistered."""
        if healthy and self._lean() is not None:  # open it now rather than on the first claim
            self._track(asyncio.ensure_future(self._open_lean()))
        if healthy:
            for conn in list(self.server.relay.pending.values()):
                if conn.handshake.token not in self.claimed:
                    self._spawn_claim(conn)

    async def _open_lean(self) -> None:
        with contextlib.suppress(*UNAVAILABLE):
            await self.link.timed(self.lean.connection())

    def _key(self, token: bytes) -> str:
        return key("transit", token.decode(), "waiting")

    async def _claim(self, conn: Conn) -> None:
        token = conn.handshake.token
        for _ in range(CLAIM_ATTEMPTS):
            if conn.phase is not Phase.PENDING:
                return
            if not self.link.healthy:
                self.local_only += 1
                return
            try:  # one round trip: claim if free, else learn (and take over) the holder's claim
                holder = await self._eval(_CLAIM, token, self.address, self.ttl_ms)
            except UNAVAILABLE:
                self.local_only += 1
                return
            if not holder:  # nil (RESP2) or false (RESP3)
                self.claimed.add(token)  # the claim is ours: sides arriving elsewhere hop here
                return
            holder = holder.decode() if isinstance(holder, bytes) else holder
            if holder == self.address:
                self.claimed.add(token)  # another side of this token waits here (same side: redundant)
                return
            if await self._hop(conn, holder):
                return
            # the holder's side is gone (or the holder is): its claim went with the script; claim again

    async def _restore(self, token: bytes, holder: str) -> None:
        with contextlib.suppress(*UNAVAILABLE):
            await self.link.timed(self.link.client.set(self._key(token), holder, nx=True, px=self.ttl_ms))

    async def _release(self, token: bytes, holder: str) -> None:
        with contextlib.suppress(*UNAVAILABLE):
            await self._eval(_RELEASE, token, holder)

    def _lean(self) -> LeanClient | None:
        if self.lean is None and self.link.healthy and not self.link.cluster and lean_capable(self.link.url):
            self.lean = LeanClient(self.link.url)  # healthy: the link has connected, so `cluster` is known
        return self.lean

    async def _eval(self, script: str, token: bytes, *args: object) -> object:
        """Run a script on the token's key. The lean pipelined connection (common/resp.py) costs a fraction
        of redis-py's CPU per command, and fewer event-loop steps on the pairing's critical path; redis-py
        stays for TLS and Cluster."""
        if self._lean() is None:
            return await self.link.timed(self.link.client.eval(script, 1, self._key(token), *args))
        (reply,) = await self.link.timed(self.lean.execute([("EVAL", script, 1, self._key(token), *args)]))
        if isinstance(reply, ReplyError):  # a bug in the script, not an unavailable Redis
            raise reply
        return reply

    # -- outgoing hop ---------------------------------------------------------------------------
    async def _hop(self, conn: Conn, holder: str) -> bool:
        """Join `conn` to its partner on `holder`; False if that side (or replica) is not there."""
        server = self.server
        started = time.perf_counter()
        line = hop_line(self.secret, conn.handshake, conn.transport, conn.ip, server.clock())
        if self.handover is not None:
            reply = await self.handover.send(conn, holder, line)
            if reply is not None:
                self.hop_seconds.labels("handover").observe(time.perf_counter() - started)
                return await self._handed_out(conn, holder, reply)
        sock = self.pool.take(holder)
        if sock is not None:
            reply = await self._exchange(sock, line)
            if not reply:  # the warm connection died unnoticed: dial instead
                self.pool.dropped["stale"] += 1
                sock.close()
                sock = None
        kind = "warm" if sock is not None else "fresh"
        if sock is None:
            try:
                sock = await self._dial(holder)
                reply = await self._exchange(sock, line)
            except (TimeoutError, OSError, ValueError) as exc:
                log.info("hop to %s failed: %s", holder, exc)
                reply = b""
            if not reply:
                if sock is not None:
                    sock.close()
                self.hops_out["unreachable"] += 1
                self.pool.forget(holder)
                return False
        self.hop_seconds.labels(kind).observe(time.perf_counter() - started)
        self.pool.replenish(holder)  # after the exchange, so that refilling never delays it
        if reply.startswith(b"error: "):  # the holder refused our client (a limit): so do we
            sock.close()
            self.hops_out["refused"] += 1
            await self._restore(conn.handshake.token, holder)  # its side still waits there
            if conn.phase is Phase.PENDING:
                server.dispatch(server.relay.protocol_error(conn, server.clock()))
            return True
        if reply != OK:
            sock.close()
            self.hops_out["no_partner"] += 1
            return False
        if conn.phase is not Phase.PENDING:  # our side left meanwhile: end the far pair too
            sock.close()
            self.hops_out["abandoned"] += 1
            return True
        self.hops_out["paired"] += 1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        endpoint = HopEndpoint(server, sock, conn)  # its conn is replaced by the hop's own below
        actions = server.relay.hop_out(conn, endpoint, server.clock())
        endpoint.conn = conn.pair.first
        server.dispatch(actions)
        return True

    async def _handed_out(self, conn: Conn, holder: str, reply: bytes) -> bool:
        """The holder's answer to a handover (b"": none came after the socket went); False: claim again."""
        server = self.server
        if reply is LEFT:  # our side left before the handover: the holder's side still waits, claimed again
            self.hops_out["abandoned"] += 1
            await self._restore(conn.handshake.token, holder)
            return True
        if reply == OK or not reply:  # the holder has the client now (or may have it): let go, say nothing
            self.hops_out["handed_over" if reply else "lost"] += 1
            Handover.release(conn.handle)
            server.dispatch(server.relay.hand_over(conn, server.clock()))
            return True
        if reply.startswith(b"error: "):  # the holder refused our client (a limit): so do we
            self.hops_out["refused"] += 1
            await self._restore(conn.handshake.token, holder)
            if conn.phase is Phase.PENDING:
                server.dispatch(server.relay.protocol_error(conn, server.clock()))
            return True
        self.hops_out["no_partner"] += 1
        return False

    async def _dial(self, holder: str) -> socket.socket:
        family, address = await _resolve(self.server.loop, holder)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(HOP_CONNECT_TIMEOUT):  # (no extra task, unlike wait_for)
                await self.server.loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    async def _exchange(self, sock: socket.socket, line: bytes) -> bytes:
        """Send the hop line and read the holder's answer; b"" if the connection failed or closed."""
        loop = self.server.loop
        try:
            await loop.sock_sendall(sock, line)
            async with asyncio.timeout(HOP_REPLY_TIMEOUT):
                return await read_line(loop, sock, MAX_HOP_LINE)
        except (TimeoutError, OSError):
            return b""

    # -- incoming hops ----------------------------------------------------------------------------
    def _accept(self) -> None:
        for sock, _ in accept_ready(self._lsock, "peer"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            PeerLine(self.server.loop, sock, MAX_HOP_LINE, HOP_LINE_TIMEOUT, self._first_line, self._lines)

    def _first_line(self, sock: socket.socket, line: bytes) -> None:
        if line.startswith(b"warm ") and self.pool is not None:  # a peer's warm connection: park it
            self.pool.park(sock, line.rstrip(b"\n"), self._warm_hop_in)
        else:
            self._hop_line(sock, line)

    def _warm_hop_in(self, sock: socket.socket) -> None:
        """A parked warm connection has its hop line: handled in this callback when it is whole."""
        line = read_available_line(sock, MAX_HOP_LINE)
        if line is None:
            PeerLine(self.server.loop, sock, MAX_HOP_LINE, HOP_LINE_TIMEOUT, self._hop_line, self._lines)
        else:
            self._hop_line(sock, line)

    def _hop_line(self, sock: socket.socket, line: bytes) -> None:
        """An incoming hop's line (b"" if none came): pair it with the side waiting here, or refuse it."""
        server = self.server
        parsed = parse_hop(self.secret, line.rstrip(b"\n"), server.clock()) if line else None
        if parsed is None:
            self.hops_in["refused"] += 1
            with contextlib.suppress(OSError):
                sock.send(b"error: bad hop\n")
            sock.close()
            return
        handshake, transport, ip = parsed
        now = server.clock()
        conn = server.relay.open(ip, transport, now)
        if isinstance(conn, str):
            self.hops_in["refused"] += 1
            with contextlib.suppress(OSError):
                sock.send(refusal_line(conn))
            sock.close()
            return
        endpoint = TcpEndpoint(server, sock, conn)
        conn.handle = endpoint
        actions = server.relay.hop_in(conn, handshake, now)
        self.hops_in["paired" if conn.phase is Phase.PAIRED else "no_partner"] += 1
        if conn.phase is Phase.PAIRED:  # the hopping replica took the claim over: nothing to release here
            self.claimed.discard(handshake.token)
        server.dispatch(actions)


    def _handed_in(self, client: socket.socket, line: bytes) -> bytes:
        """A client handed over by a replica on this host: pair it like one connected here; the answer."""
        server = self.server
        now = server.clock()
        parsed = parse_hop(self.secret, line.rstrip(b"\n"), now)
        if parsed is None:
            self.hops_in["refused"] += 1
            client.close()
            return b"error: bad hop\n"
        handshake, _transport, ip = parsed
        conn = server.relay.open(ip, "tcp", now)
        if isinstance(conn, str):
            self.hops_in["refused"] += 1
            client.close()
            return refusal_line(conn)
        conn.handle = endpoint = HandedEndpoint(server, client, conn)
        actions = server.relay.hop_in(conn, handshake, now)
        paired = conn.phase is Phase.PAIRED
        if paired:
            self.claimed.discard(handshake.token)
        server.dispatch(actions)  # unpaired: the endpoint keeps the reply (a limit's refusal, no partner)
        answer = OK if paired else endpoint.reply or NO_PARTNER
        self.hops_in["handed_over" if paired else "refused" if answer.startswith(b"error: ") else "no_partner"] += 1
        return answer


async def _resolve(loop: asyncio.AbstractEventLoop, holder: str) -> tuple[int, tuple]:
    """(family, sockaddr) of an advertise address HOST:PORT; IP literals skip the resolver's thread."""
    host, _, port = holder.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        info = await loop.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        return info[0][0], info[0][4]
    return (socket.AF_INET6, (host, int(port))) if ip.version == 6 else (socket.AF_INET, (host, int(port)))


class _ClusterCollector(Collector):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def collect(self):
        c = self.cluster
        out = CounterMetricFamily("burrow_transit_cluster_hops_out", "hops this replica opened to join a "
                                  "side waiting on another (paired, handed_over, no_partner, unreachable, refused, "
                                  "abandoned, lost)", labels=["result"])
        for result in ("paired", "handed_over", "no_partner", "unreachable", "refused", "abandoned", "lost"):
            out.add_metric([result], c.hops_out.get(result, 0))
        yield out
        hin = CounterMetricFamily("burrow_transit_cluster_hops_in", "hops other replicas opened to this "
                                  "one (paired, handed_over, no_partner, refused)", labels=["result"])
        for result in ("paired", "handed_over", "no_partner", "refused"):
            hin.add_metric([result], c.hops_in.get(result, 0))
        yield hin
        yield CounterMetricFamily("burrow_transit_cluster_local_only", "sides that waited unregistered "
                                  "because Redis was unavailable (pairing on this replica only)",
                                  value=c.local_only)
        yield GaugeMetricFamily("burrow_transit_cluster_redis_reachable", "1 while Redis answers (pairing "
                                "across replicas), 0 while this replica pairs on its own",
                                value=1 if c.link.healthy else 0)
        yield CounterMetricFamily("burrow_transit_cluster_hop_bytes", "payload bytes this replica moved "
                                  "for pairs whose session the other replica records",
                                  value=c.server.relay.hop_bytes_finished)
