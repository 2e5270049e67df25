"""One client connection, as a thin asyncio Protocol: TLS (optional) -> HTTP -> DERP frames.

in:  socket bytes; out: socket bytes. TLS is an ssl.MemoryBIO session (tlsio.py), WebSocket framing
and DERP live in protocol/; this file only moves bytes between them, the registry and the timers.
Writes are batched: deliver() queues, and one call_soon per loop pass flushes every dirty client
with a single write each (the send side is peer.py, shared with the iroh connection); the packets one
mesh read holds for a client go out at once in one write (deliver_frames). A client's packets come from
the wire machine as ready RecvPacket frames grouped per destination (Sends): one route per destination
per read (registry.route_frames), then queued like deliver()'s (deliver_frames_queued).
"""

from __future__ import annotations

import logging
import random
import time

from burrow.wire.derp import frames as f
from burrow.wire.derp.connection import (
    ClientHello,
    Forwarded,
    ForwardedBatch,
    Sends,
    ServerConnection,
    Throttled,
)
from burrow.wire.errors import WireError
from burrow.wire.http import HttpError, RequestReader, response
from burrow.wire.websocket import WebSocketStream

from .http_routes import handle_request
from .interfaces import DerpHost
from .peer import Peer
from .tlsio import TLSError, TLSSession

log = logging.getLogger(__name__)
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
KEEPALIVE_JITTER = 5.0  # seconds at most (derper: 60 s + rand(5 s)); a tenth of shorter intervals
_RECV_HDR = f.RECV_PACKET
_RECV_OVERHEAD = f.FRAME_HEADER_LEN + f.KEY_LEN  # a RecvPacket frame's bytes around its payload


class RelayConn(Peer):
    __slots__ = ("reader", "machine", "key", "kind", "started", "home", "mesh")

    protocol = "derp"
    live_phase = "derp"

    server: DerpHost

    def __init__(self, server: DerpHost, use_tls: bool) -> None:
        super().__init__(server, None, TLSSession(server.ssl_context) if use_tls else None, None, "http", "")
        self.reader: RequestReader | None = RequestReader()
        self.machine: ServerConnection | None = None
        self.key = b""
        self.kind = "upgrade"
        self.started = 0.0
        self.home = False
        self.mesh = False

    # ---- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer_ip = peer[0] if peer else ""
        if self.server.caps.try_acquire(self.peer_ip) is not None:
            self.server.stats.http["refused_limit"] += 1
            transport.abort()
            self.phase = "closed"
            return
        self.admitted_cap = True
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)
        self.server.conns.add(self)
        self.timer = self.server.loop.call_later(self.server.config.handshake_timeout, self._deadline)

    def data_received(self, data: bytes) -> None:
        try:
            if self.tls is not None:
                data, back = self.tls.receive(data)
                if back:
                    self.transport.write(back)
                if self.tls.peer_closed:
                    if data and self.phase == "derp":
                        self._derp_in(data)
                    self.close("client")
                    return
                if not data:
                    return
            if self.phase == "derp":
                self._derp_in(data)
            elif self.phase == "http":
                self._http_in(data)
        except TLSError:
            self.close("protocol" if self.phase == "derp" else "client")
        except WireError as exc:
            self.server.stats.errors[(self.protocol, exc.reason)] += 1
            log.debug("protocol error from client: %s", exc)
            self.close("protocol")

    # ---- HTTP phase
    def _http_in(self, data: bytes) -> None:
        try:
            got = self.reader.feed(data)
        except HttpError as exc:
            self.server.stats.http["bad_request"] += 1
            self.write_raw(response(exc.status, body=str(exc).encode() + b"\n"))
            self.close("client")
            return
        if got is not None:
            request, rest = got
            self.reader = None
            handle_request(self, request, rest)

    def start_derp(self, kind: str, rest: bytes, ws: WebSocketStream | None) -> None:
        """Called by the /derp route after the 101 (or none, with fast start)."""
        cfg = self.server.config
        self.phase = "derp"
        self.kind = kind
        self.ws = ws
        self.started = time.time()
        self.server.stats.connections[(self.protocol, kind)] += 1
        rate = self.server.new_rate_bucket()
        self.machine = ServerConnection(
            self.server.private_key, time.monotonic(), handshake_timeout=cfg.handshake_timeout,
            max_frame_len=max(cfg.max_packet_bytes + f.KEY_LEN, f.MAX_PING_LEN), max_client_info_len=cfg.max_client_info_bytes,
            rate=rate, server_public=self.server.public_key)
        self.machine.send_frames = True  # a read's packets come grouped per destination, frames ready
        self.send(self.machine.greeting())
        if rest:
            self._derp_in(rest)

    # ---- DERP phase
    def _derp_in(self, data: bytes) -> None:
        ws = self.ws
        if ws is not None:
            data = ws.feed(data)
            back = ws.data_to_send()
            if back:
                self.write_raw(back)
            if ws.closed:
                self.close("client")
                return
        events = self.machine.receive_data(data, time.monotonic())
        if not events:
            return
        registry = self.server.registry
        route_frames = registry.route_frames
        forward_packet = f.ForwardPacket
        now = 0.0
        packets = nbytes = fwd_packets = fwd_bytes = meshed = 0
        for ev in events:
            if type(ev) is Sends:  # this client's packets, ready RecvPacket frames per destination
                packets += ev.packets
                if not now:
                    now = time.monotonic()
                    registry.note_activity(self)
                for dst, frames in ev.frames.items():
                    n = sum(map(len, frames)) - len(frames) * _RECV_OVERHEAD
                    nbytes += n
                    sent, sent_bytes = route_frames(self, dst, frames, n, now)
                    fwd_packets += sent
                    fwd_bytes += sent_bytes
            elif type(ev) is Forwarded:  # from a peer relay, ready RecvPacket frames: delivered here or dropped
                meshed += ev.packets
                active = registry.active
                for dst, frames in ev.frames.items():
                    receiver = active(dst)
                    if receiver is None:
                        self.server.stats.drop(self.protocol, "unknown_dest_on_fwd", len(frames))
                    else:
                        fwd_bytes += receiver.deliver_frames(frames)
                        fwd_packets += len(frames)
            elif type(ev) is ForwardedBatch:  # from a peer relay: one read's frames for one client, whole
                meshed += ev.packets
                self.server.stats.mesh_batches_in += 1
                receiver = registry.active(ev.dst)
                if receiver is None:
                    self.server.stats.drop(self.protocol, "unknown_dest_on_fwd", ev.packets)
                else:
                    receiver.deliver_batch(ev.data, ev.packets, ev.nbytes)
                    fwd_packets += ev.packets
                    fwd_bytes += ev.nbytes
            elif type(ev) is forward_packet and self.mesh:
                # from a peer relay: delivered here or dropped, never forwarded again
                meshed += 1
                receiver = registry.active(ev.dst)
                if receiver is None:
                    self.server.stats.drop(self.protocol, "unknown_dest_on_fwd")
                else:
                    receiver.deliver(ev.src, ev.payload)
                    fwd_packets += 1
                    fwd_bytes += len(ev.payload)
            else:
                self._event(ev)
                if self.phase == "closed":
                    break
        if packets or meshed:
            self.packets_in += packets + meshed
            self.bytes_in += nbytes
            stats = self.server.stats
            stats.packets[self.protocol] += fwd_packets
            stats.bytes[self.protocol] += fwd_bytes
            stats.mesh_in += meshed

    def _event(self, ev) -> None:
        t = type(ev)
        if t is ClientHello:
            self.key = ev.key
            self.transport.pause_reading()  # bytes wait in the socket while access is checked
            self.server.loop.create_task(self._verify(ev))
        elif t is f.NotePreferred:
            self.home = ev.preferred
        elif t is f.Ping:
            self.control(f.Pong(ev.data).encode())
        elif t is Throttled:
            self.server.stats.throttled[self.protocol] += 1
            self.transport.pause_reading()
            self.server.loop.call_later(ev.wait, self._unthrottle)
        elif t is f.Pong:
            pass
        elif not self.mesh:
            raise f.ProtocolError(f"{t.__name__} needs the mesh key")
        elif t is f.WatchConns:
            self.server.registry.add_watcher(self)
        elif t is f.ForwardIroh:  # an iroh datagram frame from a peer relay: delivered here or dropped
            stats = self.server.stats
            stats.mesh_in += 1
            receiver = self.server.registry.active(("iroh", ev.dst))
            if receiver is None:
                stats.drop("iroh", "unknown_dest_on_fwd")
            elif not receiver.deliver_forwarded(ev.kind, ev.src, ev.body):
                raise f.MalformedFrame(f"ForwardIroh: datagram frame type {ev.kind} is not one")
        elif t is f.ClosePeer:
            self.server.registry.close_key(ev.key, "denied")


    async def _verify(self, hello: ClientHello) -> None:
        server = self.server
        if hello.info.mesh_key and server.is_mesh_key(hello.info.mesh_key):
            self.mesh = True
            # ForwardPacket carries two keys; ForwardIroh a type byte and up to 3 bytes of iroh header too
            self.machine.max_frame_len += f.KEY_LEN + 4
            self.machine.rate = None  # peer relays are exempt from the per-client rate limit
            self.machine.mesh_extensions = True
            self.machine.recv_frames = True
            if server.mesh_server_info.forward_batch:
                self.machine.forward_batch = True
                self.machine.max_frame_len = max(self.machine.max_frame_len, f.KEY_LEN + 4 + f.FORWARD_BATCH_MAX)
            refusal = None
        else:
            refusal = await server.access.check(hello.key, self.peer_ip)
        if self.phase == "closed":
            return
        if refusal is not None:
            server.stats.denied[(self.protocol, refusal)] += 1
            self.send(f.Health(f"access denied by {refusal}").encode())
            self.close("denied")
            return
        self.send(self.machine.accept(server.mesh_server_info if self.mesh else server.server_info))
        server.stats.handshake_done(self.protocol, time.time() - self.started)
        self.registered = True
        server.registry.register(self)
        if self.phase == "closed":  # register() may have closed an older duplicate, never us
            return
        self._arm_keepalive()
        self.transport.resume_reading()
        try:
            self._derp_in(b"")  # frames that arrived behind ClientInfo
        except WireError as exc:
            server.stats.errors[(self.protocol, exc.reason)] += 1
            self.close("protocol")

    def _unthrottle(self) -> None:
        if self.phase != "derp":
            return
        self.transport.resume_reading()
        try:
            self._derp_in(b"")
        except WireError as exc:
            self.server.stats.errors[(self.protocol, exc.reason)] += 1
            self.close("protocol")

    def _deadline(self) -> None:
        self.timer = None
        if self.phase == "http" or (self.machine is not None and not self.registered):
            self.close("timeout")

    def _arm_keepalive(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        interval = self.server.config.keepalive_interval
        delay = interval + random.uniform(0, min(KEEPALIVE_JITTER, interval / 10))
        self.timer = self.server.loop.call_later(delay, self._keepalive)

    def _keepalive(self) -> None:
        self.timer = None
        if self.phase == "derp":
            self.control(f.KeepAlive().encode())
            self._arm_keepalive()

    # ---- the peer interface used by the registry
    def deliver(self, src: bytes, payload: bytes) -> None:
        n = len(payload)
        frame = f.header(_RECV_HDR, 32 + n) + src + payload
        if not self.paused and self.queue.full():
            self.flush()  # the socket is keeping up: a big read batch must not overflow the queue
        if self.queue.push_packet(frame, n):
            self._drop("queue_head")
        if not self.flush_pending:
            self._schedule_flush()

    def deliver_frames_queued(self, frames: list[bytes]) -> None:
        """Ready RecvPacket frames from one sender's read, queued as deliver() queues one packet (all at
        once when they fit)."""
        queue = self.queue
        if not queue.push_packets(frames, _RECV_OVERHEAD):
            push = queue.push_packet
            for frame in frames:
                if not self.paused and queue.full():
                    self.flush()
                if push(frame, len(frame) - _RECV_OVERHEAD):
                    self._drop("queue_head")
        if not self.flush_pending:
            self._schedule_flush()

    def deliver_frames(self, frames: list[bytes]) -> int:
        """RecvPacket frames from one mesh read for this client; returns their payload bytes. While the
        client keeps up they go out with whatever is queued in one write now (one encryption, one send,
        however many packets the read held); while it is behind they queue like any packet (drop-oldest)."""
        n = len(frames)
        nbytes = sum(map(len, frames)) - n * _RECV_OVERHEAD
        queue = self.queue
        if self.paused or self.phase != "derp":
            push = queue.push_packet
            for frame in frames:
                if push(frame, len(frame) - _RECV_OVERHEAD):
                    self._drop("queue_head")
            if not self.flush_pending:
                self._schedule_flush()
            return nbytes
        if len(queue):  # what was queued before goes first
            queued, packets, qbytes = queue.drain()
            frames.insert(0, queued)
            self.packets_out += packets
            self.bytes_out += qbytes
        self.packets_out += n
        self.bytes_out += nbytes
        self._out(b"".join(frames))
        return nbytes

    def deliver_batch(self, data: bytes, packets: int, nbytes: int) -> None:
        """A peer relay's ForwardBatch for this client: whole RecvPacket frames. While the client keeps up
        they go out as they came, behind what was queued; while it is behind they are cut apart and queue
        one by one (drop-oldest per packet)."""
        queue = self.queue
        if self.paused or self.phase != "derp":
            self.deliver_frames_queued(f.split_frames(data))
            return
        if len(queue):
            queued, qpackets, qbytes = queue.drain()
            self.packets_out += qpackets
            self.bytes_out += qbytes
            data = queued + data
        self.packets_out += packets
        self.bytes_out += nbytes
        self._out(data)

    def peer_gone(self, key: bytes, reason: int) -> None:
        self.control(f.PeerGone(key, reason).encode())

    def peer_present(self, key: bytes, flags: int) -> None:
        self.control(f.PeerPresent(key, flags=flags).encode())

    # ---- output
    def send(self, data: bytes) -> None:
        if self.ws is not None:
            data = self.ws.wrap(data)
        self.write_raw(data)

    _out = send  # a drained queue goes out as one WebSocket message when there is a WebSocket

    def _release(self) -> None:
        if self.machine is not None:
            self.machine.close()
            if self.machine.unknown_frames:
                self.server.stats.unknown_frames[self.protocol] += self.machine.unknown_frames

    def _unregister(self) -> None:
        self.server.registry.unregister(self)
