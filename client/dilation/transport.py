"""asyncio L2: listeners, dialers and the race of one generation (the thin adapter over selection.py).

in:  hints from the peer (use_hints), our listening addresses and relay, the runtime's role and key
out: connection-hints to publish, exactly one selected L2Protocol (l2protocol.py: one connection's bytes)
     handed to the runtime per generation
states (Connector): running -> connected | stopped. Losers, listeners and pending dials are dropped on
selection or stop, except that a Follower whose peer takes upgrades keeps listening after a relayed win (the
Leader's probes connect there; the connections are closed at once) until the next generation.

Direct hints: we listen on one port on every local address (or the addresses given) and advertise each
non-loopback address (loopback only when nothing else exists, as magic-wormhole does). Relay hints: our relay
plus the peer's, each dialled once with the sided handshake. Direct paths get a head start: relays are
dialled `relay_delay` seconds late while any direct path is possible, and the Leader's Selector prefers a
direct candidate.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket

from ..nat.hints import PortMapper, dial_from, global_v6_addresses, listening_sockets, stun_hint
from . import disco_link
from .l2protocol import L2Protocol
from .selection import Attempt, Selector, dial_delays

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds for one TCP connect
QUIC_RETRY = 1.0  # seconds before the Leader opens another QUIC connection after one ended unselected
RECONSIDER_EVERY = 0.5  # seconds between the Leader's looks while a candidate waits for other attempts
MAX_PROBE_HINTS = 16  # direct hints of the peer kept for upgrade probes


def local_addresses() -> list[str]:
    """Every local IPv4 address, non-loopback ones only when there are any."""
    addrs: list[str] = []
    try:
        import psutil

        for entries in psutil.net_if_addrs().values():
            for e in entries:
                if e.family == socket.AF_INET:
                    addrs.append(e.address)
    except Exception:  # psutil missing or restricted: fall back to the resolver
        with contextlib.suppress(OSError):
            addrs = [i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    addrs = list(dict.fromkeys(addrs))
    outside = [a for a in addrs if not ipaddress.ip_address(a).is_loopback]
    return outside or ["127.0.0.1"]


def failure(e: BaseException) -> str:
    """A failed dial as a user reads it: "connection refused", not asyncio's "Connect call failed (...)"."""
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno).lower()
    return "no answer" if isinstance(e, TimeoutError) else str(e) or type(e).__name__


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_hints(hints: list) -> tuple[list[tuple[str, int, float]], list[tuple[str, int]]]:
    """-> (direct (host, port, priority) sorted by priority, relay (host, port)). Unknown types dropped."""
    direct: list[tuple[str, int, float]] = []
    relays: list[tuple[str, int]] = []

    def tcp(h) -> tuple[str, int, float] | None:
        if not isinstance(h, dict) or h.get("type") != "direct-tcp-v1":
            return None
        host, port, prio = h.get("hostname"), h.get("port"), h.get("priority", 0.0)
        if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
            return None
        return host, port, float(prio) if isinstance(prio, int | float) else 0.0

    for h in hints:
        if isinstance(h, dict) and h.get("type") == "relay-v1" and isinstance(h.get("hints"), list):
            for rh in h["hints"]:
                t = tcp(rh)
                if t:
                    relays.append((t[0], t[1]))
        else:
            t = tcp(h)
            if t:
                direct.append(t)
    direct.sort(key=lambda t: -t[2])
    return direct, relays


def relay_hint(host: str, port: int) -> dict:
    return {"type": "relay-v1", "hints": [{"type": "direct-tcp-v1", "priority": 0.0, "hostname": host,
                                           "port": port}]}


def parse_relay_location(location: str) -> tuple[str, int]:
    """`tcp:HOST:PORT` (magic-wormhole's transit helper form) or `HOST:PORT`."""
    loc = location[4:] if location.startswith("tcp:") else location
    host, _, port = loc.rpartition(":")
    return host.strip("[]"), int(port.split(":")[0])


PROBE_TIMEOUT = 3.0  # seconds for one upgrade probe's TCP connect


async def probe_direct(hints: list[tuple[str, int]], timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether any of the peer's direct hints takes a TCP connection now (closed at once: only reachability is
    asked; the next generation's race makes the real connection)."""
    async def one(host: str, port: int) -> bool:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, OSError):
            return False
        writer.close()
        return True

    return any(await asyncio.gather(*(one(h, p) for h, p in hints)))


class Connector:
    """All L2 attempts of one generation."""

    def __init__(self, runtime, generation: int, *, leader: bool, side: str, key: bytes, codec_factory,
                 relay: tuple[str, int] | None, listen: bool, listen_addresses: list[str] | None,
                 relay_delay: float, max_frame: int, nat=None, simopen: bool = False, prefer_quic: bool = False,
                 relay_first: bool = False):
        self.runtime = runtime
        self.generation = generation
        self.leader = leader
        self._side, self._key, self._codec_factory = side, key, codec_factory
        self._relay = relay
        self._listen = listen
        self._listen_addresses = listen_addresses
        # relay-first (burrow peers): no head start; after a relayed win the direct attempts go on (searching)
        self.relay_first = relay_first
        self._relay_delay = 0.0 if relay_first else relay_delay
        self._max_frame = max_frame
        self.attempts: set[L2Protocol] = set()
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self._dialled: set[tuple[str, int, bool]] = set()
        self._direct_known = listen
        loop = asyncio.get_running_loop()
        self._selector = Selector(now=loop.time(), relay_head_start=self._relay_delay,
                                  prefer_quic=prefer_quic) if leader else None
        self._select_timer: asyncio.TimerHandle | None = None
        self.winner: L2Protocol | None = None
        self.stopped = False
        self.paths: list[str] = []
        self._nat = nat  # client.nat.hints.NatOptions, or None: local hints only
        self._simopen = simopen  # the peer dials from its listening port too: so do we
        self._listen_port: int | None = None
        self._mapper: PortMapper | None = None
        self._link: disco_link.DiscoLink | None = None  # UDP punching, when both sides name a DERP relay
        self._peer_disco: tuple[str, bytes, bytes, list] | None = None
        self._quic_tasks: set[asyncio.Task] = set()
        self._dials: set[asyncio.Task] = set()  # TCP dials not finished yet (hint lookups are in _tasks too)
        self._relay_dials: set[asyncio.Task] = set()  # the relayed ones among them
        self.peer_direct: list[tuple[str, int]] = []  # the peer's direct hints (the Leader's upgrade probes)
        self.keep_listening = False  # Follower: listen on after a relayed win, for the Leader's upgrade probes
        # what no_path_left() reports: failed dials ("relay 10.0.0.1:4001 (connection refused)") and hint counts
        self.failures: list[str] = []
        self.hints_sent = self.hints_seen = 0
        self._started = False

    def _send_hints(self, hints: list) -> None:
        self.hints_sent += len(hints)
        self.runtime.send_hints(hints)

    def no_path_left(self) -> bool:
        """Nothing of ours could still connect: start() ended, every dial and hint lookup ended, no attempt is
        alive and no UDP punching runs. Our listeners may still take the peer's dials: whether the peer has
        anything left is for the two sides to compare (hints_sent / hints_seen)."""
        return (self._started and not self.stopped and self.winner is None and self._link is None
                and not self._quic_tasks and all(t.done() for t in self._tasks)
                and all(p.attempt.state == "failed" or p.closed for p in self.attempts))

    def check_no_path(self) -> None:
        if self.no_path_left():
            self.runtime.no_path_left(self)

    def _quic_protocol(self, addr) -> L2Protocol | None:
        if self.stopped or self.winner is not None:
            return None
        return L2Protocol(self, self._attempt(via_relay=False, direct=False, quic=True,
                                              description=disco_link.describe(addr)))

    def _attempt(self, *, via_relay: bool, direct: bool, description: str, quic: bool = False) -> Attempt:
        return Attempt(self._key, leader=self.leader, side=self._side, via_relay=via_relay, direct=direct,
                       description=description, codec=self._codec_factory(), max_frame=self._max_frame, quic=quic)

    @property
    def searching(self) -> bool:
        """Relay-first: the relayed connection won and the direct attempts go on behind it."""
        return self.winner is not None and not self.stopped

    def hand_over(self) -> list[L2Protocol]:
        """The live direct TCP attempts, taken out of this (searching) generation for the next one."""
        live = [p for p in self.attempts if p.attempt.direct and not p.attempt.quic and not p.closed
                and p.attempt.state != "failed" and p is not self.winner]
        self.attempts.difference_update(live)
        return live

    def adopt(self, carried: list[L2Protocol]) -> None:
        """Take over attempts the previous generation found while searching behind its relayed connection."""
        for p in carried:
            p.connector = self
            self.attempts.add(p)

    async def start(self) -> None:
        try:
            await self._start()
        finally:
            self._started = True
            self.check_no_path()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.leader:  # an adopted attempt that finished its handshake: a direct candidate now
            for p in [p for p in self.attempts if p.attempt.state == "viable"]:
                self.viable(p)
        if self.stopped:
            return
        if self._listen:
            def factory():
                return L2Protocol(self, self._attempt(via_relay=False, direct=True, description="direct inbound"))

            if self._listen_addresses:
                addrs = self._listen_addresses
                server = await loop.create_server(factory, host=addrs, port=0)
                self._servers.append(server)
                port = server.sockets[0].getsockname()[1]
            else:  # one port for IPv4 and IPv6, shared with our simultaneous-open dials
                socks = listening_sockets()
                for sock in socks:
                    self._servers.append(await loop.create_server(factory, sock=sock))
                port = self._listen_port = socks[0].getsockname()[1]
                addrs = local_addresses() + (global_v6_addresses() if len(socks) > 1 else [])
            if self.stopped:
                for s in self._servers:
                    s.close()
                return
            self._send_hints([{"type": "direct-tcp-v1", "priority": 0.0, "hostname": a, "port": port}
                                  for a in addrs])
            if self._nat is not None and self._listen_port is not None:
                self._external_hints(port, set(addrs))
        if self._relay is not None and not self.stopped:
            self._send_hints([relay_hint(*self._relay)])
            self._dial(self._relay[0], self._relay[1], via_relay=True,
                       delay=self._relay_delay if self._direct_known else 0.0)
        link = await self.runtime.disco_link()
        if link is not None and not self.stopped and self.winner is None:
            self._link = link
            if not self.leader:
                link.accept(self._quic_protocol)
            self._send_hints([link.hint()])
            self._maybe_punch()
        elif link is not None and self.winner is not None and self.winner.runtime is not None and \
                not self.winner.attempt.quic:
            self._send_hints([link.hint()])  # won already (the relay): for the Leader's QUIC rate probes
            self.runtime.know_peer_disco()

    def _maybe_punch(self) -> None:
        """Once we have a Disco endpoint and the peer's hint: punch, and (Leader) open QUIC on the path."""
        if self._link is None or self._peer_disco is None or self._quic_tasks or self.stopped:
            return
        t = asyncio.get_running_loop().create_task(self._punch(self._link, self._peer_disco))
        self._quic_tasks.add(t)

    async def _punch(self, link: disco_link.DiscoLink, hint: tuple[str, bytes, bytes, list]) -> None:
        """Until the generation ends (stop() cancels us): find the path (each round one CallMeMaybe and
        PUNCH_TIMEOUT seconds of pings); the Leader then opens QUIC on it, and again QUIC_RETRY seconds after
        a connection that ended unselected (a failed handshake, or a candidate that waited past its timeout)."""
        while not self.stopped:
            addr = await link.punch(hint)
            if addr is None:
                log.debug("no direct UDP path to the peer yet")
                continue
            if not self.leader:
                return
            path = link.connect(addr, self._quic_protocol)
            if path is not None:
                await path.done.wait()
            await asyncio.sleep(QUIC_RETRY)

    def _external_hints(self, port: int, local: set[str]) -> None:
        """Publish our NAT's address for `port` as extra hints as each lookup answers (client/nat/hints.py)."""
        async def publish(lookup) -> None:
            hint = await lookup
            if hint is not None and not self.stopped:
                self._send_hints([hint])

        nat = self._nat
        if nat.portmap:
            self._mapper = PortMapper(port, upnp=nat.upnp)
            self._spawn(publish(self._mapper.hint(local)))
        if nat.stun_server is not None:
            self._spawn(publish(stun_hint(port, nat.stun_server, stun_port2=nat.stun_port2, local=local)))

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_ended)

    def _task_ended(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        self.check_no_path()

    def use_hints(self, hints: list) -> None:
        self.hints_seen += len(hints)
        direct, relays = parse_hints(hints)
        for host, port, _ in direct:
            if (host, port) not in self.peer_direct and len(self.peer_direct) < MAX_PROBE_HINTS:
                self.peer_direct.append((host, port))
        if self.stopped:
            return
        self._direct_known = self._direct_known or bool(direct)
        for h in hints:
            peer_disco = disco_link.parse_hint(h)
            if peer_disco is not None and self._peer_disco is None and self.winner is None:
                self._peer_disco = peer_disco
                self._maybe_punch()
        for delay, host, port, via_relay in dial_delays(direct, relays, direct_possible=self._direct_known,
                                                        relay_delay=self._relay_delay):
            self._dial(host, port, via_relay=via_relay, delay=delay)
        self.check_no_path()  # nothing new to dial: the peer's count of our hints may be what we waited for

    def _dial(self, host: str, port: int, *, via_relay: bool, delay: float) -> None:
        key = (host, port, via_relay)
        if key in self._dialled:
            return
        self._dialled.add(key)
        t = asyncio.get_running_loop().create_task(self._connect(host, port, via_relay, delay))
        self._tasks.add(t)
        self._dials.add(t)
        t.add_done_callback(self._dials.discard)
        t.add_done_callback(self._task_ended)
        if via_relay:
            self._relay_dials.add(t)
            t.add_done_callback(self._relay_dials.discard)

    async def _connect(self, host: str, port: int, via_relay: bool, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self.stopped or (self.winner is not None and (via_relay or not self.relay_first)):
            return
        kind = "relay" if via_relay else "direct"
        desc = f"{kind} tcp:{host}:{port}"
        loop = asyncio.get_running_loop()
        def factory():
            return L2Protocol(self, self._attempt(via_relay=via_relay, direct=not via_relay, description=desc))

        try:
            if self._simopen and not via_relay and self._listen_port is not None and _is_ip(host):
                sock = await dial_from(self._listen_port, host, port, CONNECT_TIMEOUT)
                if self.stopped or (self.winner is not None and not self.relay_first):
                    sock.close()
                    return
                await loop.create_connection(factory, sock=sock)
            else:
                await asyncio.wait_for(loop.create_connection(factory, host, port), CONNECT_TIMEOUT)
        except (TimeoutError, OSError) as e:
            log.debug("dial %s failed: %s", desc, e)
            self.failures.append(f"{desc.replace('tcp:', '')} ({failure(e)})")
            if self.leader:
                self._reconsider()

    def _direct_alive(self) -> bool:
        return any(p.attempt.direct and p.attempt.state not in ("failed",) for p in self.attempts) or any(
            not t.done() for t in self._tasks)

    def viable(self, p: L2Protocol) -> None:
        if self.stopped or self._selector is None:
            return
        if self.winner is not None:  # searching behind the relay: a direct path is ready to take over
            if p.attempt.direct and not p.attempt.quic:
                self.runtime.direct_found(self, p)
            return
        loop = asyncio.get_running_loop()
        chosen = self._selector.candidate(p.attempt, loop.time(), self._direct_alive(), self._tcp_alive(),
                                          self._relay_alive())
        if chosen is not None:
            self._win(self._find(chosen))
            return
        deadline = self._selector.deadline()
        if deadline is not None and self._select_timer is None:
            self._select_timer = loop.call_at(deadline, self._reconsider)

    def _reconsider(self) -> None:
        self._select_timer = None
        if self.stopped or self._selector is None or self.winner is not None:
            return
        loop = asyncio.get_running_loop()
        chosen = self._selector.tick(loop.time(), self._direct_alive(), self._tcp_alive(), self._relay_alive())
        if chosen is not None:
            self._win(self._find(chosen))
        elif self._selector.waiting and self._select_timer is None:  # a QUIC candidate waits for TCP to end
            self._select_timer = loop.call_later(RECONSIDER_EVERY, self._reconsider)

    def _tcp_alive(self) -> bool:
        return any(not p.attempt.quic and p.attempt.state != "failed" for p in self.attempts) or any(
            not t.done() for t in self._dials)

    def _relay_alive(self) -> bool:
        return any(p.attempt.via_relay and p.attempt.state != "failed" for p in self.attempts) or any(
            not t.done() for t in self._relay_dials)

    def _find(self, attempt: Attempt) -> L2Protocol:
        return next(p for p in self.attempts if p.attempt is attempt)

    def follower_selected(self, p: L2Protocol) -> None:
        if self.stopped or self.winner is not None:
            p.drop()
            return
        self._win(p)

    def _win(self, p: L2Protocol) -> None:
        self.winner = p
        if self.leader:
            p.transport.write(p.attempt.select())
        if self.relay_first and p.attempt.via_relay:
            self._search_behind(p)
        else:
            self.stop(keep=p)
        self.runtime.on_connection_made(self, p)

    def _search_behind(self, relayed: L2Protocol) -> None:
        """Relay-first: the relayed connection carries the data while direct TCP dials, listeners and
        handshakes go on; other relayed and QUIC attempts end (QUIC is only taken on a measured rate)."""
        if self._select_timer:
            self._select_timer.cancel()
            self._select_timer = None
        for t in self._quic_tasks:
            t.cancel()
        if self._link is not None and not self.leader:
            self._link.accept(None)
        for p in list(self.attempts):
            if p is not relayed and (p.attempt.via_relay or p.attempt.quic):
                p.drop()

    def stop(self, keep: L2Protocol | None = None) -> None:
        self.stopped = True
        if self._mapper is not None:  # the listening port closes: so does its mapping
            asyncio.get_running_loop().create_task(self._mapper.close())
            self._mapper = None
        if self._select_timer:
            self._select_timer.cancel()
        if not (self.keep_listening and keep is not None and keep.attempt.via_relay):
            self.close_listeners()
        for t in [*self._tasks, *self._quic_tasks]:
            t.cancel()
        if self._link is not None and not self.leader:
            self._link.accept(None)
        for p in list(self.attempts):
            if p is not keep:
                p.drop()

    def close_listeners(self) -> None:
        for s in self._servers:
            s.close()
        self._servers.clear()
