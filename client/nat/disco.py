"""UDP hole punching with Disco (asyncio): one UDP socket, the DERP relay for coordination.

    derp = DerpClient(relay_url, node_private_key, ca_file=...)
    await derp.start()
    ep = DiscoEndpoint(derp, stun_server=("relay.example.com", 3478))
    await ep.start()                                   # binds UDP, learns the STUN-mapped address
    peer = ep.add_peer(peer_derp_key, peer_disco_key)  # what the peer told us (its keys; endpoints optional)
    await ep.call(peer)                                # CallMeMaybe over DERP, pings over UDP
    path = await ep.wait_direct(peer, timeout=5)       # Path(DIRECT, (ip, port), latency) or TimeoutError
    ep.path(peer)                                      # at any time: DIRECT, or RELAY while none answers

`call` sends a CallMeMaybe with our endpoints (local addresses with our UDP port, and the STUN-mapped
address) to the peer's DERP key, and starts pinging the peer's known endpoints; a peer that gets a
CallMeMaybe pings the endpoints in it and calls back (at most once per punch window), so both NATs
open towards each other at the same time. Pings are answered with pongs from the socket they came to;
a ping from an address we did not know makes it a candidate (the peer's NAT mapping towards us).
`client/nat/disco_paths.py` decides when to ping and which path is best.

The endpoint owns its DERP client's received packets (`derp.recv`). Disco from a key that was not
added, packets that do not open, and CallMeMaybe over UDP are dropped and counted in `stats`.
UDP packets that are not Disco go to `on_datagram(data, addr)` when set (QUIC on the same socket,
client/dilation/disco_link.py), else they are dropped and counted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import Counter
from dataclasses import dataclass, field

from burrow.client.derp.client import DerpClientError
from burrow.wire import disco as d

from .disco_paths import DIRECT, Path, PathSelector
from .netcheck import stun

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]
DERP_MAGIC_ENDPOINT = ("127.3.3.40", 0)  # how Tailscale names "via DERP" in a Pong's source
MAX_ADVERTISED = 16   # endpoints in one CallMeMaybe
MAX_TICK = 1.0        # the ping loop looks again at least this often (seconds)


@dataclass
class DiscoPeer:
    derp_key: bytes
    disco_key: bytes
    box: d.SharedBox
    selector: PathSelector
    endpoints: list[Endpoint] = field(default_factory=list)  # given by add_peer; CallMeMaybe's go to the selector
    last_call: float = float("-inf")
    observed: Endpoint | None = None  # our address as the peer saw it (its last Pong)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


DRAIN = 64  # datagrams read per wake-up beyond the one asyncio hands us (QUIC answers a batch once)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, owner: DiscoEndpoint, sock: socket.socket) -> None:
        self.owner = owner
        self._sock = sock

    def datagram_received(self, data: bytes, addr) -> None:
        """This datagram, then whatever else is queued on the socket (at most DRAIN): asyncio reads one per
        loop turn, and a QUIC connection that sees several before it next transmits sends one ACK for them."""
        owner = self.owner
        owner._udp_received(data, (addr[0], addr[1]))
        for _ in range(DRAIN):
            try:
                data, addr = self._sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.error_received(e)
                return
            owner._udp_received(data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable for a ping: nothing to do
        self.owner.stats["udp_errors"] += 1


class DiscoEndpoint:
    def __init__(self, derp, disco_private: bytes | None = None, *, host: str = "0.0.0.0", port: int = 0,
                 stun_server: tuple[str, int] | None = None, stun_timeout: float = 2.0,
                 advertise: list[Endpoint] | None = None, max_peers: int = 256, **selector_options) -> None:
        self.derp = derp
        self.private_key = disco_private or d.generate_private_key()
        self.public_key = d.public_key(self.private_key)
        self.host, self.port = host, port
        self.stun_server, self.stun_timeout = stun_server, stun_timeout
        self.advertise = advertise
        self.max_peers = max_peers
        self.selector_options = selector_options
        self.mapped: Endpoint | None = None
        self.stats: Counter = Counter()
        self._peers: dict[bytes, DiscoPeer] = {}  # by disco key
        self._transport: asyncio.DatagramTransport | None = None
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._closed = False
        # (data, addr) for UDP packets that are not Disco: what else shares the socket (QUIC,
        # client/dilation/disco_link.py); None drops and counts them
        self.on_datagram = None

    # ---- life cycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            sock.bind((self.host, self.port))
            if self.stun_server is not None:
                got = await stun(sock, await self._resolve(self.stun_server), self.stun_timeout)
                self.mapped = got[:2] if got else None
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self, sock), sock=sock)
        self._tasks = [loop.create_task(self._derp_loop()), loop.create_task(self._ping_loop())]

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._transport is not None:
            self._transport.close()

    async def _resolve(self, server: tuple[str, int]) -> tuple[str, int]:
        infos = await asyncio.get_running_loop().getaddrinfo(server[0], server[1], family=socket.AF_INET,
                                                              type=socket.SOCK_DGRAM)
        return infos[0][4][:2]

    # ---- API
    def endpoints(self) -> list[Endpoint]:
        """Where the peer may reach our socket: `advertise`, or the local addresses, and the mapped one."""
        if self.advertise is not None:
            eps = list(self.advertise)
        elif self.host not in ("0.0.0.0", ""):
            eps = [(self.host, self.port)]
        else:
            from ..transit.aio import local_addresses  # here, as in netcheck (import order)
            eps = [(ip, self.port) for ip in local_addresses(include_loopback=False)]
        if self.mapped is not None:
            eps.append(self.mapped)
        return list(dict.fromkeys(eps))[:MAX_ADVERTISED]

    def add_peer(self, derp_key: bytes, disco_key: bytes, endpoints: list[Endpoint] = ()) -> DiscoPeer:
        peer = self._peers.get(disco_key)
        if peer is None:
            if len(self._peers) >= self.max_peers:
                raise ValueError("too many disco peers")
            peer = DiscoPeer(derp_key, disco_key, d.SharedBox(self.private_key, disco_key),
                             PathSelector(**self.selector_options))
            self._peers[disco_key] = peer
        peer.endpoints = list(dict.fromkeys([*peer.endpoints, *endpoints]))[:peer.selector.max_candidates]
        return peer

    async def call(self, peer: DiscoPeer) -> None:
        """CallMeMaybe to the peer through the relay, and punch towards what we know of it."""
        now = asyncio.get_running_loop().time()
        peer.last_call = now
        peer.selector.add_candidates(peer.endpoints, now)
        self._wake.set()
        await self.derp.send(peer.derp_key, peer.box.seal(d.CallMeMaybe(tuple(self.endpoints()))))
        self.stats["call_me_maybe_sent"] += 1

    def path(self, peer: DiscoPeer) -> Path:
        return peer.selector.path(asyncio.get_running_loop().time())

    async def wait_direct(self, peer: DiscoPeer, timeout: float) -> Path:
        async with asyncio.timeout(timeout):
            while (path := self.path(peer)).kind != DIRECT:
                peer.changed.clear()
                await peer.changed.wait()
        return path

    # ---- the relay side
    async def _derp_loop(self) -> None:
        while True:
            src, payload = await self.derp.recv()
            if not d.looks_like_disco(payload):
                self.stats["derp_not_disco"] += 1
                continue
            peer = self._peers.get(d.sender_key(payload))
            if peer is None or peer.derp_key != src:
                self.stats["unknown_sender"] += 1
                continue
            msg = self._open(peer, payload)
            try:
                if isinstance(msg, d.CallMeMaybe):
                    await self._on_call_me_maybe(peer, msg)
                elif isinstance(msg, d.Ping):
                    await self.derp.send(peer.derp_key, peer.box.seal(d.Pong(msg.tx_id, DERP_MAGIC_ENDPOINT)))
            except (OSError, TimeoutError, ConnectionError, DerpClientError) as exc:
                log.info("disco: cannot answer through the relay: %s", exc)  # the relay reconnects
                self.stats["derp_send_errors"] += 1

    async def _on_call_me_maybe(self, peer: DiscoPeer, msg: d.CallMeMaybe) -> None:
        self.stats["call_me_maybe_received"] += 1
        now = asyncio.get_running_loop().time()
        peer.selector.add_candidates(msg.endpoints, now)
        self._wake.set()
        if now - peer.last_call >= peer.selector.punch_for:  # call back once: the peer punches too
            await self.call(peer)

    # ---- the UDP side
    def _udp_received(self, data: bytes, addr: Endpoint) -> None:
        if not d.looks_like_disco(data):
            if self.on_datagram is not None:
                self.on_datagram(data, addr)
            else:
                self.stats["udp_not_disco"] += 1
            return
        peer = self._peers.get(d.sender_key(data))
        if peer is None:
            self.stats["unknown_sender"] += 1
            return
        msg = self._open(peer, data)
        now = asyncio.get_running_loop().time()
        if isinstance(msg, d.Ping):
            self._sendto(peer.box.seal(d.Pong(msg.tx_id, addr)), addr)
            self.stats["pongs_sent"] += 1
            peer.selector.note_ping_from(addr, now)
            self._wake.set()
        elif isinstance(msg, d.Pong):
            if peer.selector.on_pong(msg.tx_id, addr, now) is not None:
                peer.observed = msg.src
                peer.changed.set()
        elif isinstance(msg, d.CallMeMaybe):
            self.stats["call_me_maybe_over_udp"] += 1  # only the relay may carry it

    def _open(self, peer: DiscoPeer, packet: bytes) -> d.Message | None:
        try:
            return peer.box.open(packet)
        except d.DiscoError as exc:
            self.stats[exc.reason] += 1  # bad_box, malformed, unknown_type
            return None

    def knows(self, addr: Endpoint) -> bool:
        """Whether `addr` is a candidate path of some peer (it pinged us, or was advertised)."""
        return any(p.selector.knows(addr) for p in self._peers.values())

    def sendto(self, packet: bytes, addr: Endpoint) -> None:
        self._sendto(packet, addr)

    def _sendto(self, packet: bytes, addr: Endpoint) -> None:
        if self._transport is None:
            return
        try:
            self._transport.sendto(packet, addr)
        except OSError as exc:
            log.debug("disco: cannot send to %s: %s", addr, exc)
            self.stats["udp_errors"] += 1

    async def _ping_loop(self) -> None:
        loop = asyncio.get_running_loop()
        node_key = self.derp.public_key
        while not self._closed:
            now = loop.time()
            wake_at = now + MAX_TICK
            for peer in list(self._peers.values()):
                for ep, tx in peer.selector.pings_due(now):
                    self._sendto(peer.box.seal(d.Ping(tx, node_key)), ep)
                    self.stats["pings_sent"] += 1
                wake_at = min(wake_at, peer.selector.next_deadline(now))
                peer.changed.set()  # expiry may have changed the path: let waiters look again
            self._wake.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that races its wake-up
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.005, wake_at - loop.time())):
                    await self._wake.wait()
