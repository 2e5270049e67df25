"""The relay mesh: one outbound link per peer relay, and the forwarding table they fill.

`--mesh-with` lists peers as URLs (`https://relay-b:8443`, `http://10.0.0.2:8080`) or as a DNS name
whose every address is a peer (`dns+https://relay-mesh.ns.svc:8443`: a Kubernetes headless Service),
re-resolved every `--mesh-resolve-interval`. A node may list itself: the link sees its own server
key in the handshake and stops for good, as derper's does.

Each link (MeshLink, an asyncio Protocol driving mesh_session.MeshSession) dials its peer, presents
the mesh key, sends WatchConns and feeds PeerPresent / PeerGone into the ForwardingTable
(mesh_table.py). When the link breaks every key it announced is forgotten and it redials with
back-off (0.5 s doubling to 5 s, jittered); the peer's list after WatchConns resyncs the table.

A packet for a key held by a peer goes out on that link as ForwardPacket; when the peer's ServerInfo
announces ForwardBatch (a burrow relay), one read's packets for one key go out as one ForwardBatch of
the ready RecvPacket frames instead, which the peer hands to the client as they are. Writes are batched (one
write per loop pass, like every client connection, or per 64 KiB when a read brings more). While the peer is not reading (the link's socket
buffer is full) every client that sends into the link has its reading paused until the link drains,
as derper's blocking mesh write does: a fast sender is slowed to what the mesh carries instead of
losing most of its packets. What arrives meanwhile waits, up to `MAX_BACKLOG` bytes per link; beyond
that packets are dropped and counted (`mesh_backlog`). Packets that arrive by ForwardPacket are only
ever delivered locally (conn.py), never forwarded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from burrow.wire.derp.frames import (
    _HEADER,
    FORWARD_PACKET,
    FRAME_HEADER_LEN,
    KEY_LEN,
    forward_batch_head,
    forward_batch_runs,
)
from burrow.wire.proxy_protocol import encode_v2

from .interfaces import MeshHost
from .mesh_session import Gone, MeshError, MeshSession, Present, SelfConnect, Synced, Watching
from .mesh_table import ForwardingTable

log = logging.getLogger(__name__)

MAX_BACKLOG = 4 * 1024 * 1024     # bytes of ForwardPacket frames waiting per link while the peer is slow
HIGH_WATER = 1024 * 1024          # transport buffer at which the link stops writing
CONNECT_TIMEOUT = 10.0            # TCP + TLS + upgrade + DERP handshake
PING_INTERVAL = 10.0              # a Ping this often; a link silent for 3 intervals is dead
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 5.0
_pack_header = _HEADER.pack
_RECV_OVERHEAD = FRAME_HEADER_LEN + KEY_LEN  # a RecvPacket frame's bytes before its payload
FLUSH_AT = 64 * 1024              # bytes after which the link writes at once instead of at the end of the pass


@dataclass(frozen=True)
class Target:
    """Where one link dials: the address to connect to and the name TLS and Host: use."""

    tls: bool
    address: str
    port: int
    name: str

    @property
    def label(self) -> str:
        scheme = "https" if self.tls else "http"
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{scheme}://{host}:{self.port}" + ("" if self.name == self.address else f" ({self.name})")


def parse_peers(text: str | None) -> tuple[list[Target], list[Target]]:
    """`--mesh-with` -> (static targets, DNS names to resolve); raises ValueError on a bad entry."""
    static: list[Target] = []
    dns: list[Target] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        discover = item.startswith("dns+")
        parts = urlsplit(item[4:] if discover else item)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--mesh-with: {item!r} is not http(s)://host[:port] or dns+http(s)://name[:port]")
        tls = parts.scheme == "https"
        target = Target(tls, parts.hostname, parts.port or (443 if tls else 80), parts.hostname)
        (dns if discover else static).append(target)
    return static, dns


class MeshLink(asyncio.Protocol):
    """One peer relay: dial, watch, forward; redial until the mesh stops."""

    def __init__(self, mesh: Mesh, target: Target) -> None:
        self.mesh = mesh
        self.target = target
        self.state = "down"            # down -> connecting -> live; "self" and "stopped" are final
        self.server_key: bytes | None = None
        self.transport: asyncio.Transport | None = None
        self.session: MeshSession | None = None
        self.synced = False
        self.batch = False             # the peer takes ForwardBatch (said so in its ServerInfo)
        self.connects = 0
        self.last_error = ""
        self._out = bytearray()         # ForwardPacket frames waiting for the next flush, at most MAX_BACKLOG
        self.packets = 0                 # how many frames _out holds
        self.paused = False
        self.flush_pending = False
        self.held: list = []          # senders whose reading waits for this link to drain
        self.last_rx = 0.0
        self._closed: asyncio.Future | None = None
        self._watching: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._ping: asyncio.TimerHandle | None = None

    # ---- the hot path: the registry (DERP) and the iroh service call these for keys the table maps here
    def forward(self, src: bytes, dst: bytes, payload: bytes, sender=None) -> bool:
        """Append one ForwardPacket frame to the link's outgoing bytes (the payload is copied once)."""
        out = self._out
        if self.state != "live" or len(out) > MAX_BACKLOG:
            return self._refuse()
        out += _pack_header(FORWARD_PACKET, 2 * KEY_LEN + len(payload))
        out += src
        out += dst
        out += payload
        return self._queued(sender)

    def forward_frames(self, src: bytes, dst: bytes, frames: list[bytes], sender=None) -> tuple[int, int]:
        """forward() for one sender's packets to one key, given as RecvPacket frames (a client's Sends):
        returns the packets and payload bytes queued."""
        if self.batch:
            return self._forward_batch(dst, frames, sender)
        sent = nbytes = 0
        keys = src + dst
        for frame in frames:
            out = self._out
            if self.state != "live" or len(out) > MAX_BACKLOG:
                self._refuse()
                continue
            payload = memoryview(frame)[_RECV_OVERHEAD:]
            out += _pack_header(FORWARD_PACKET, 2 * KEY_LEN + len(payload))
            out += keys
            out += payload
            sent += 1
            nbytes += len(payload)
            self._queued(sender)
        return sent, nbytes

    def _forward_batch(self, dst: bytes, frames: list[bytes], sender) -> tuple[int, int]:
        """The frames as they are, in ForwardBatch frames (the peer announced it takes them)."""
        n = len(frames)
        out = self._out
        if self.state != "live" or len(out) > MAX_BACKLOG:
            self.mesh.stats.drops[("mesh", "mesh_down" if self.state != "live" else "mesh_backlog")] += n
            return 0, 0
        for start, stop, size in forward_batch_runs(frames):
            out += forward_batch_head(dst, stop - start, size)
            for i in range(start, stop):
                out += frames[i]
            self.mesh.stats.mesh_batches_out += 1
        self.packets += n - 1  # _queued counts the last one
        self.mesh.stats.mesh_out += n - 1
        self._queued(sender)
        return n, sum(map(len, frames)) - n * _RECV_OVERHEAD

    def forward_iroh(self, src: bytes, dst: bytes, kind: int, body: bytes, sender=None) -> bool:
        """An iroh datagram frame for an endpoint on the peer (a burrow relay: only those announce iroh ids)."""
        out = self._out
        if self.state != "live" or len(out) > MAX_BACKLOG:
            return self._refuse()
        out += MeshSession.forward_iroh_head(src, dst, kind, len(body))
        out += body
        return self._queued(sender)

    def _refuse(self) -> bool:
        reason = "mesh_down" if self.state != "live" else "mesh_backlog"
        self.mesh.stats.drops[("mesh", reason)] += 1
        return False

    def _queued(self, sender) -> bool:
        self.packets += 1
        self.mesh.stats.mesh_out += 1
        if self.paused:
            if sender is not None and sender not in self.held and sender.transport is not None:
                sender.transport.pause_reading()  # back-pressure: the peer is behind
                self.held.append(sender)
                self.mesh.stats.mesh_held += 1
        elif len(self._out) >= FLUSH_AT:
            self.flush()  # a big read batch goes out in pieces while its bytes are still in the cache
        elif not self.flush_pending:
            self.flush_pending = True
            self.mesh.server.mark_dirty(self)
        return True

    def _release(self) -> None:
        held, self.held = self.held, []
        for sender in held:
            transport = sender.transport
            if sender.phase == sender.live_phase and transport is not None and not transport.is_closing():
                transport.resume_reading()

    def flush(self) -> None:
        self.flush_pending = False
        if self.paused or not self._out or self.transport is None:
            return
        data, self._out, self.packets = self._out, bytearray(), 0
        self.transport.write(data)

    # ---- life cycle
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self.state = "stopped"
        if self.transport is not None:
            self.transport.abort()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        delay = BACKOFF_FIRST
        while self.state not in ("self", "stopped"):
            try:
                await self._connect_once()
                delay = BACKOFF_FIRST
                await self._closed
            except (OSError, TimeoutError, MeshError, ValueError) as exc:
                self.last_error = str(exc) or type(exc).__name__
                log.info("mesh link %s: %s", self.target.label, self.last_error)
                if self.transport is not None:
                    self.transport.abort()
                    await self._closed
            if self.state in ("self", "stopped"):
                return
            self.state = "down"
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, BACKOFF_MAX)

    async def _connect_once(self) -> None:
        loop = asyncio.get_running_loop()
        t = self.target
        self.state = "connecting"
        self.synced = False
        self._closed = loop.create_future()
        self._watching = loop.create_future()
        server = self.mesh.server
        host = f"[{t.name}]" if ":" in t.name else t.name
        self.session = MeshSession(server.private_key, server.public_key, server.mesh_key, f"{host}:{t.port}")
        tls = {"ssl": self.mesh.ssl_context, "server_hostname": t.name} if t.tls else {}
        async with asyncio.timeout(CONNECT_TIMEOUT):
            if self.mesh.proxy_header:  # the LOCAL header goes before TLS, on the bare TCP connection
                await loop.create_connection(lambda: self, sock=await _proxied_socket(t.address, t.port), **tls)
            else:
                await loop.create_connection(lambda: self, t.address, t.port, **tls)
            await asyncio.shield(self._watching)

    # ---- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER, HIGH_WATER // 4)
        with contextlib.suppress(OSError, AttributeError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.last_rx = time.monotonic()
        transport.write(self.session.data_to_send())

    def data_received(self, data: bytes) -> None:
        self.last_rx = time.monotonic()
        try:
            events = self.session.receive_data(data)
        except (MeshError, ValueError) as exc:  # wire errors are ValueErrors too
            self._fail(exc)
            return
        out = self.session.data_to_send()
        if out:
            self.transport.write(out)
        table = self.mesh.table
        for ev in events:
            t = type(ev)
            if t is Present:
                table.present(self, ev.key, ev.initial)
            elif t is Gone:
                table.gone(self, ev.key)
            elif t is Synced:
                self.synced = True
            elif t is Watching:
                self._on_watching(ev.server_key, ev.forward_batch)
            elif t is SelfConnect:
                self.state = "self"
                self.server_key = ev.server_key
                log.info("mesh link %s is this relay; not meshing with it", self.target.label)
                self._resolve_watching(None)
                self.transport.close()

    def _on_watching(self, server_key: bytes, batch: bool) -> None:
        self.server_key = server_key
        self.batch = batch
        self.state = "live"
        self.connects += 1
        self.last_error = ""
        log.info("mesh link %s up (nodekey:%s)", self.target.label, server_key.hex()[:16])
        self._arm_ping()
        self._resolve_watching(None)

    def _resolve_watching(self, exc: BaseException | None) -> None:
        if self._watching is not None and not self._watching.done():
            if exc is None:
                self._watching.set_result(None)
            else:
                self._watching.set_exception(exc)

    def _fail(self, exc: BaseException) -> None:
        self.last_error = str(exc)
        log.info("mesh link %s: %s", self.target.label, exc)
        self.transport.abort()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.flush()
        self._release()

    def connection_lost(self, exc) -> None:
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
        lost = self.mesh.table.link_lost(self)
        if self.state == "live":
            log.info("mesh link %s down (%d keys forgotten)", self.target.label, lost)
            self.mesh.stats.drops[("mesh", "mesh_down")] += self.packets
        self._out, self.packets, self.paused, self.transport = bytearray(), 0, False, None
        self._release()
        if self.state not in ("self", "stopped"):
            self.state = "down"
        self._resolve_watching(ConnectionError("peer closed the connection"))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _arm_ping(self) -> None:
        self._ping = asyncio.get_running_loop().call_later(PING_INTERVAL, self._keepalive)

    def _keepalive(self) -> None:
        self._ping = None
        if self.transport is None or self.state != "live":
            return
        if time.monotonic() - self.last_rx > 3 * PING_INTERVAL:
            self._fail(TimeoutError("peer silent"))
            return
        self.transport.write(self.session.ping())
        self._arm_ping()


async def _proxied_socket(host: str, port: int) -> socket.socket:
    """A TCP connection that has sent a PROXY v2 LOCAL header (a relay's own connection, no client)."""
    loop = asyncio.get_running_loop()
    family, kind, proto, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
        await loop.sock_sendall(sock, encode_v2(None, None, local=True))
    except BaseException:
        sock.close()
        raise
    return sock


class Mesh:
    """All the links of this relay, the table they fill, and DNS discovery of peers."""

    def __init__(self, server: MeshHost, peers: str | None, ca_file: str | None = None,
                 resolve_interval: float = 30.0, proxy_header: bool = False) -> None:
        """`proxy_header`: this relay's listeners want PROXY headers, so its peers' do too (one config for
        all nodes): links open with a LOCAL header (no client address: a relay's own connection)."""
        self.server = server
        self.proxy_header = proxy_header
        self.stats = server.stats
        self.static, self.dns = parse_peers(peers)
        self.resolve_interval = resolve_interval
        self.table = ForwardingTable(server.registry.__contains__)
        self.links: dict[Target, MeshLink] = {}
        self.ca_file = ca_file
        self.ssl_context: ssl.SSLContext | None = None
        self._resolver: asyncio.Task | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.static or self.dns)

    def start(self) -> None:
        """After the relay's listeners are up (a --dev-tls certificate given as --mesh-ca-file exists now)."""
        self.ssl_context = ssl.create_default_context(cafile=self.ca_file)
        self.ssl_context.set_alpn_protocols(["http/1.1"])
        for target in self.static:
            self._add(target)
        if self.dns:
            self._resolver = asyncio.get_running_loop().create_task(self._resolve_loop())

    def _add(self, target: Target) -> None:
        if target not in self.links:
            link = self.links[target] = MeshLink(self, target)
            link.start()

    async def _resolve_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for name in self.dns:
                try:
                    infos = await loop.getaddrinfo(name.address, name.port, type=socket.SOCK_STREAM)
                except OSError as exc:
                    log.info("mesh discovery: %s: %s", name.address, exc)
                    continue
                found = {Target(name.tls, info[4][0], name.port, name.name) for info in infos}
                for target in found:
                    self._add(target)
                for target in [t for t in self.links if t.name == name.name and t not in self.static]:
                    if target not in found:  # that pod is gone; its replacement has a new address
                        await self.links.pop(target).stop()
            await asyncio.sleep(self.resolve_interval)

    async def stop(self) -> None:
        if self._resolver is not None:
            self._resolver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resolver
        for link in list(self.links.values()):
            await link.stop()

    # ---- status
    def peers_up(self) -> int:
        return sum(1 for link in self.links.values() if link.state == "live")

    def describe(self) -> str:
        """The /readyz detail: one line for the mesh, one per peer address."""
        peers = [link for link in self.links.values() if link.state != "self"]
        lines = [f"mesh: {self.peers_up()}/{len(peers)} peers up, {len(self.table)} remote keys"]
        for s in self.status():
            extra = "".join(f" {k}={s[k]}" for k in ("keys", "connects", "error") if k in s and s["state"] != "self")
            lines.append(f"  {s['peer']} {s['state']}{' synced' if s['synced'] else ''}{extra}")
        return "\n".join(lines)  # the admin server ends the text with a newline

    def status(self) -> list[dict]:
        return [{"peer": link.target.label, "state": link.state, "synced": link.synced,
                 "keys": self.table.keys_via(link), "connects": link.connects,
                 **({"server_key": "nodekey:" + link.server_key.hex()} if link.server_key else {}),
                 **({"error": link.last_error} if link.last_error and link.state != "live" else {})}
                for link in self.links.values()]


class MeshCollector:
    """Prometheus view of the mesh, read at scrape time (the hot path only bumps ints)."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from burrow.common.metrics import labelled_counter

        mesh, stats = self.mesh, self.mesh.stats
        up = GaugeMetricFamily("burrow_relay_mesh_peers_up", "Mesh links to peer relays that are up")
        up.add_metric([], mesh.peers_up())
        yield up
        links = GaugeMetricFamily("burrow_relay_mesh_peers", "Mesh peer addresses known (self excluded)")
        links.add_metric([], sum(1 for link in mesh.links.values() if link.state != "self"))
        yield links
        keys = GaugeMetricFamily("burrow_relay_mesh_remote_keys", "Client keys reachable through a peer relay")
        keys.add_metric([], len(mesh.table))
        yield keys
        packets = CounterMetricFamily("burrow_relay_mesh_packets", "Packets sent to and received from peer "
                                      "relays (ForwardPacket or inside ForwardBatch)", labels=["direction"])
        packets.add_metric(["to_peer"], stats.mesh_out)
        packets.add_metric(["from_peer"], stats.mesh_in)
        yield packets
        batches = CounterMetricFamily("burrow_relay_mesh_batches", "ForwardBatch frames sent to and received "
                                      "from peer relays", labels=["direction"])
        batches.add_metric(["to_peer"], stats.mesh_batches_out)
        batches.add_metric(["from_peer"], stats.mesh_batches_in)
        yield batches
        yield labelled_counter("burrow_relay_mesh_forward_drops", "Packets for a peer relay dropped: link down, "
                               "or its backlog full", ["reason"],
                               {(reason,): n for (proto, reason), n in stats.drops.items() if proto == "mesh"},
                               [("mesh_down",), ("mesh_backlog",)])
        held = CounterMetricFamily("burrow_relay_mesh_senders_paused", "Times a client's reading paused "
                                   "because the mesh link its packets go to was backed up")
        held.add_metric([], stats.mesh_held)
        yield held
