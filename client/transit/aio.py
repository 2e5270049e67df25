"""Asyncio Transit connector and record pipe (thin adapter over protocol.py).

The race: we listen (unless no_listen) on one port for IPv4 and IPv6 and advertise every local address as
a direct hint, plus, with NAT options, our NAT's address for that port (a NAT-PMP / UPnP mapping, or the
STUN-mapped address when the NAT keeps ports; client/nat/hints.py). We dial every direct hint of the peer
at once (from our listening port when both offer tcp-simultaneous-open-v1, so the SYNs cross in the NATs), and the relay hints (ours + theirs) after RELAY_DELAY seconds
when the peer offered direct hints (immediately otherwise), so a direct path gets a head start. With a burrow
peer (it offers simultaneous open) the head start ends early once every direct dial of ours has failed (an
unreachable network, a refused port): the peer's own head start still covers its dials to us. The
sender picks the first connection whose handshake verifies and writes "go" on it, "nevermind" on the
others; the receiver takes the connection on which "go" arrives.

It fails fast: once every connection we dialled has failed and no connection the peer made to us is
being negotiated (after INBOUND_GRACE seconds more, when we listen), connect() raises TransitError naming
each path tried and why it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import struct
from dataclasses import dataclass

from ..errors import TransitError
from ..nat.hints import PortMapper, dial_from, global_v6_addresses, listening_sockets, stun_hint
from . import protocol as P
from .pipe import RecordPipe

__all__ = ["RecordPipe", "Transit", "local_addresses"]

log = logging.getLogger(__name__)

RELAY_DELAY = 2.0  # seconds of head start for direct hints (magic-wormhole's RELAY_DELAY)
NEGOTIATION_TIMEOUT = 60.0  # seconds per candidate connection
CONNECT_TIMEOUT = 120.0  # seconds for the whole race
DIAL_TIMEOUT = 10.0  # seconds for one TCP connect
INBOUND_GRACE = 2.0  # seconds a listening side still waits for the peer's connection once its own dials failed
STREAM_LIMIT = 4 * 1024 * 1024  # bytes buffered by a StreamReader before it pauses the socket
# seconds from the start of the external hint lookups (listen_early) to the last moment get_hints waits for
# them: STUN answers in a round trip and a NAT-PMP gateway at once; a slower lookup (a UPnP search) is left out
# of the hints, and its mapping undone at close()
EXTERNAL_WAIT = 0.3
MAPPING_CLOSE_WAIT = 3.0  # seconds a late port mapping gets to finish after close(), to be deleted


def local_addresses(include_loopback: bool = True) -> list[str]:
    """IPv4 addresses of this host's interfaces (Linux ioctl; falls back to the hostname)."""
    addrs: list[str] = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:
                    req = struct.pack("256s", name.encode()[:15])
                    res = fcntl.ioctl(s.fileno(), 0x8915, req)  # SIOCGIFADDR
                    addrs.append(socket.inet_ntoa(res[20:24]))
                except OSError:
                    continue
    except (OSError, AttributeError):
        pass
    if not addrs:
        with contextlib.suppress(OSError):
            addrs = sorted({ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)})
    out = [a for a in dict.fromkeys(addrs) if not a.startswith("127.")]
    # loopback last: it only helps two peers on one host (documented in docs/client.md)
    if include_loopback or not out:
        out.append("127.0.0.1")
    return out


@dataclass
class _Candidate:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    description: str
    handshake: P.Handshake | None = None


class Transit:
    def __init__(self, role: str, *, transit_helper: str | None = None, no_listen: bool = False,
                 relay_delay: float = RELAY_DELAY, nat=None):
        if role not in ("sender", "receiver"):
            raise ValueError(role)
        self.role = role
        self.no_listen = no_listen
        self.relay_delay = relay_delay
        self._relays: list[P.TcpHint] = [P.parse_helper(transit_helper)] if transit_helper else []
        self._direct: list[P.TcpHint] = []
        self._peer_direct: list[P.TcpHint] = []
        self._relay_side = P.new_relay_side()
        self._servers: list[asyncio.AbstractServer] = []
        self.nat = nat  # client.nat.hints.NatOptions: external hints; None: local hints only
        self.peer_simopen = False  # the peer listed tcp-simultaneous-open-v1 in abilities-v1
        self._listen_port: int | None = None
        self._socks: list[socket.socket] = []  # our listening sockets (listen_early), served from get_hints()
        self._hints_due = 0.0  # loop time when get_hints() stops waiting for external hints
        self._lookups: list[asyncio.Future] = []  # external hint lookups get_hints() has not collected yet
        self._mapper: PortMapper | None = None
        self._mapping: asyncio.Future | None = None
        self._key: bytes | None = None
        self._key_set = asyncio.Event()
        self._winner: asyncio.Future[_Candidate] = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task] = set()
        self._relay_addrs: set[tuple] = set()
        self._dialling = 0  # our outgoing attempts still running
        self._direct_left = 0  # our direct dials still running
        self._directs_failed = asyncio.Event()  # set once every direct dial of ours has ended without a winner
        self._inbound = 0  # connections from the peer still negotiating
        self._failures: list[str] = []  # "relay 10.0.0.1:4001 (connection refused)", for the error
        self._grace: asyncio.TimerHandle | None = None
        self._grace_over = False

    # ---- hints
    def listen_early(self) -> None:
        """Open our listening port and start looking up its external hint now, well before get_hints().

        The lookup's wait (up to EXTERNAL_WAIT, all of it when the gateway stays silent) then runs beside
        work the transfer does anyway (the mailbox connection, the key exchange), and get_hints() waits only
        for what is left of it. Until get_hints() nothing is accepted: a connection (none can come before
        our hints go out) waits in the kernel's listen backlog."""
        if self.no_listen or self._socks:
            return
        self._socks = listening_sockets()  # one port number for IPv4 and IPv6, shared with simultaneous-open dials
        port = self._listen_port = self._socks[0].getsockname()[1]
        addrs = local_addresses() + (global_v6_addresses() if len(self._socks) > 1 else [])
        self._direct = [P.TcpHint(a, port) for a in addrs]
        self._hints_due = asyncio.get_running_loop().time() + EXTERNAL_WAIT
        if self.nat is not None:
            self._lookups = self._start_lookups(port, set(addrs))

    async def get_hints(self) -> list[dict]:
        if not self.no_listen and not self._servers:
            self.listen_early()
            for sock in self._socks:
                self._servers.append(await asyncio.start_server(self._accepted, sock=sock, limit=STREAM_LIMIT))
            external = await self._external_hints()
            self._direct += [h for h in dict.fromkeys(external) if h not in self._direct]
        return P.encode_hints(self._direct, self._relays)

    def _start_lookups(self, port: int, local: set[str]) -> list[asyncio.Future]:
        nat, lookups = self.nat, []
        if nat.portmap:
            self._mapper = PortMapper(port, upnp=nat.upnp)
            self._mapping = asyncio.ensure_future(self._mapper.hint(local))
            lookups.append(self._mapping)
        if nat.stun_server is not None:
            lookups.append(asyncio.ensure_future(stun_hint(port, nat.stun_server, stun_port2=nat.stun_port2,
                                                           local=local)))
        return lookups

    async def _external_hints(self) -> list[P.TcpHint]:
        """Our NAT's address for our port, from the lookups that answer within EXTERNAL_WAIT of their start."""
        lookups, self._lookups = self._lookups, []
        if not lookups:
            return []
        left = self._hints_due - asyncio.get_running_loop().time()
        done, _pending = await asyncio.wait(lookups, timeout=max(0.0, left))
        hints = []
        for t in lookups:
            if t not in done:
                if t is not self._mapping:  # a late mapping still has to be deleted at close()
                    t.cancel()
                continue
            if t.exception() is not None:
                log.debug("external hint lookup failed: %r", t.exception())
            elif t.result() is not None:
                hints.append(P.TcpHint(t.result()["hostname"], t.result()["port"]))
        return hints

    def add_peer_transit(self, transit_message: dict) -> None:
        """The peer's `transit` message: its hints, and whether it does TCP simultaneous open."""
        if not isinstance(transit_message, dict):
            return
        self.peer_simopen = self.peer_simopen or P.offers_simultaneous_open(transit_message)
        self.add_peer_hints(transit_message.get("hints-v1", []))

    def add_peer_hints(self, hints: list) -> None:
        direct, relays = P.decode_hints(hints)
        self._peer_direct += [h for h in direct if h not in self._peer_direct]
        self._relays += [h for h in relays if h not in self._relays]

    def set_key(self, key: bytes) -> None:
        self._key = key
        self._key_set.set()

    # ---- the race
    async def connect(self, timeout: float = CONNECT_TIMEOUT) -> RecordPipe:
        await self._key_set.wait()
        for h in self._peer_direct:
            self._dialling += 1  # counted here, not when the task starts: _check_exhausted() runs first
            self._direct_left += 1
            self._spawn(self._dial(h, relay=False, delay=0.0))
        delay = self.relay_delay if self._peer_direct else 0.0
        for h in self._relays:
            self._dialling += 1
            self._spawn(self._dial(h, relay=True, delay=delay))
        if not self._tasks and not self._servers:
            raise TransitError("no transit hints to try (no direct hints and no relay)")
        self._check_exhausted()
        try:
            cand = await asyncio.wait_for(asyncio.shield(self._winner), timeout)
        except TimeoutError as e:
            raise TransitError(f"no transit connection succeeded within {timeout:.0f}s") from e
        finally:
            if self._grace is not None:
                self._grace.cancel()
            await self._cleanup()
            self._stop_searching()
        assert self._key is not None
        return RecordPipe(cand.reader, cand.writer, self._key, self.role, cand.description)

    def _spawn(self, coro) -> None:
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _check_exhausted(self) -> None:
        """Fail the race when nothing is left that could still win."""
        if self._winner.done() or self._dialling or self._inbound:
            return
        if self._servers and not self._grace_over:  # the peer may still be dialling us
            if self._grace is None:
                self._grace = asyncio.get_running_loop().call_later(INBOUND_GRACE, self._end_grace)
            return
        tried = ", ".join(self._failures) or "no path"
        listening = "; nothing connected to our listener" if self._servers else ""
        self._winner.set_exception(TransitError(f"no transit path works: tried {tried}{listening}"))
        self._winner.exception()  # retrieved by connect(); never logged as lost

    def _end_grace(self) -> None:
        self._grace_over = True
        self._check_exhausted()

    def _failed(self, desc: str, e: BaseException) -> None:
        log.debug("transit %s failed: %s", desc, e)
        if isinstance(e, OSError) and e.errno:
            why = os.strerror(e.errno).lower()  # "connection refused", not asyncio's "Connect call failed"
        else:
            why = str(e) or {TimeoutError: "no answer", asyncio.IncompleteReadError: "closed by the other end"}.get(
                type(e), type(e).__name__)
        self._failures.append(f"{desc} ({why})")

    async def _dial(self, hint: P.TcpHint, relay: bool, delay: float) -> None:
        try:
            await self._dial_once(hint, relay, delay)
        finally:
            self._dialling -= 1
            if not relay:
                self._direct_left -= 1
                if not self._direct_left:
                    self._directs_failed.set()
            self._check_exhausted()

    async def _head_start(self, delay: float) -> None:
        """A relay dial's wait: `delay`, cut short for a burrow peer once all our direct dials failed."""
        if not self.peer_simopen:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._directs_failed.wait(), delay)

    async def _dial_once(self, hint: P.TcpHint, relay: bool, delay: float) -> None:
        if delay:
            await self._head_start(delay)
        if self._winner.done():
            return
        desc = f"{'relay' if relay else 'direct'} {hint.hostname}:{hint.port}"
        try:
            async with asyncio.timeout(DIAL_TIMEOUT):
                infos = await asyncio.get_running_loop().getaddrinfo(hint.hostname, hint.port,
                                                                    type=socket.SOCK_STREAM)
                # one connection per relay address: our helper and the peer's are often the same relay
                # under two names, and two same-side connections with one token only confuse the relay
                addr = infos[0][4][:2]
                if relay:
                    if addr in self._relay_addrs:
                        return
                    self._relay_addrs.add(addr)
                if not relay and self.peer_simopen and self._listen_port is not None:
                    sock = await dial_from(self._listen_port, addr[0], addr[1], DIAL_TIMEOUT)
                    reader, writer = await asyncio.open_connection(sock=sock, limit=STREAM_LIMIT)
                else:
                    reader, writer = await asyncio.open_connection(addr[0], addr[1], limit=STREAM_LIMIT)
        except (OSError, TimeoutError, IndexError) as e:
            self._failed(desc, e)
            return
        await self._negotiate(_Candidate(reader, writer, desc), relay)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        cand = _Candidate(reader, writer, f"direct {peer[0]}:{peer[1]}" if peer else "direct")
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._inbound += 1
        try:
            await self._key_set.wait()
            await self._negotiate(cand, relay=False)
        except asyncio.CancelledError:
            # a server callback task must not end cancelled (asyncio would log it as an error)
            writer.close()
        finally:
            self._inbound -= 1
            if self._grace is not None:  # connect() is running
                self._check_exhausted()

    async def _negotiate(self, cand: _Candidate, relay: bool) -> None:
        assert self._key is not None
        hs = P.Handshake(self._key, self.role, self._relay_side if relay else None)
        cand.handshake = hs
        try:
            async with asyncio.timeout(NEGOTIATION_TIMEOUT):
                cand.writer.write(hs.start())
                while hs.state not in ("wait-go", "records"):
                    data = await cand.reader.readexactly(hs.wanted())
                    _events, out = hs.feed(data)
                    if out:
                        cand.writer.write(out)
                    await cand.writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, P.TransitProtocolError) as e:
            self._failed(cand.description, e)
            cand.writer.close()
            return
        except asyncio.CancelledError:
            cand.writer.close()
            raise
        if self._winner.done():
            if self.role == "sender":
                cand.writer.write(b"nevermind\n")
            cand.writer.close()
            return
        if self.role == "sender":
            cand.writer.write(hs.select())
        self._winner.set_result(cand)

    def _stop_searching(self) -> None:
        """The race is over and our hints went out long ago: a port-mapping lookup still searching for a
        gateway can only cost CPU from here on (the UPnP library's import, during the transfer's first
        seconds). One that may have asked the gateway already runs on, so that close() deletes its mapping."""
        if self._mapping is not None and not self._mapping.done() and not self._mapper.committed:
            self._mapping.cancel()

    async def _cleanup(self) -> None:
        for server in self._servers:
            server.close()
        me = asyncio.current_task()
        for t in list(self._tasks):
            if t is not me:
                t.cancel()

    async def close(self) -> None:
        await self._cleanup()
        if not self._servers:  # listening early, never served: close the sockets and the lookups ourselves
            for sock in self._socks:
                sock.close()
            for t in self._lookups:
                if t is not self._mapping:
                    t.cancel()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        if self._mapper is not None:  # the listening port is gone: so goes its mapping, in the background
            # (the sender closes right after connecting: its data must not wait on the gateway)
            task = asyncio.ensure_future(_release(self._mapper, self._mapping))
            _releasing.add(task)
            task.add_done_callback(_releasing.discard)
            self._mapper = None


_releasing: set[asyncio.Future] = set()  # mapping deletions under way (held so they are not collected)


async def _release(mapper: PortMapper, mapping: asyncio.Future | None) -> None:
    """Delete the port mapping; a lookup still searching is cancelled, one that may have asked the gateway
    gets MAPPING_CLOSE_WAIT to finish first (an unfinished one is dropped with the event loop, and the
    gateway expires its mapping by itself)."""
    if mapping is not None and not mapping.done():
        if not mapper.committed:
            mapping.cancel()
        await asyncio.wait([mapping], timeout=MAPPING_CLOSE_WAIT)
    with contextlib.suppress(Exception):
        await mapper.close()
