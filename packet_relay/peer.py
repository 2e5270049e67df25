"""The send side every relay client connection shares, DERP (conn.py) and iroh (iroh/conn.py).

One bounded SendQueue per client, drop accounting, one flush per loop pass (the server calls flush()
on every client marked dirty), TLS writes, write flow control, the traffic counters and the close
bookkeeping. A subclass sets `protocol` and `live_phase` (the phase in which queued frames may go
out), `_out` (how a drained queue is written) and `_release()` / `_unregister()` (its own part of
closing). The per-packet deliver() stays in the subclass: it is the hot path.
"""

from __future__ import annotations

import asyncio

from .interfaces import PeerHost
from .queues import SendQueue
from .tlsio import TLSError


class Peer(asyncio.Protocol):
    __slots__ = ("server", "transport", "tls", "ws", "phase", "peer_ip", "packets_in", "bytes_in",
                 "packets_out", "bytes_out", "drops", "queue", "paused", "flush_pending", "timer",
                 "write_timer", "close_reason", "registered", "admitted_cap")

    protocol = ""
    live_phase = ""
    abort_on_write_timeout = True   # a client that stopped reading gets its unsent bytes dropped

    def __init__(self, server: PeerHost, transport, tls, ws, phase: str, peer_ip: str) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = transport
        self.tls = tls
        self.ws = ws
        self.phase = phase
        self.peer_ip = peer_ip
        self.packets_in = self.bytes_in = self.packets_out = self.bytes_out = 0
        self.drops: dict[str, int] | None = None
        self.queue = SendQueue(server.config.send_queue_depth)
        self.paused = self.flush_pending = self.registered = self.admitted_cap = False
        self.timer: asyncio.TimerHandle | None = None
        self.write_timer: asyncio.TimerHandle | None = None
        self.close_reason = ""

    # ---- asyncio.Protocol: write flow control and the end of the socket
    def pause_writing(self) -> None:
        self.paused = True
        self.write_timer = self.server.loop.call_later(self.server.config.write_timeout, self.close, "timeout",
                                                       self.abort_on_write_timeout)

    def resume_writing(self) -> None:
        self.paused = False
        if self.write_timer is not None:
            self.write_timer.cancel()
            self.write_timer = None
        if len(self.queue):
            self._schedule_flush()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc) -> None:
        if self.phase != "closed":
            self.close("client")

    # ---- queue and flush
    def control(self, frame: bytes) -> None:
        if not self.queue.push_control(frame):
            self._drop("control_overflow")
        if not self.flush_pending:
            self._schedule_flush()

    def _drop(self, reason: str, n: int = 1) -> None:
        if self.drops is None:
            self.drops = {}
        self.drops[reason] = self.drops.get(reason, 0) + n
        self.server.stats.drops[(self.protocol, reason)] += n

    def _schedule_flush(self) -> None:
        if self.paused or self.phase == "closed":
            return
        self.flush_pending = True
        self.server.mark_dirty(self)

    def flush(self) -> None:
        self.flush_pending = False
        if self.phase != self.live_phase or self.paused:
            return
        data, packets, nbytes = self.queue.drain()
        if data:
            self.packets_out += packets
            self.bytes_out += nbytes
            self._out(data)

    # ---- output
    def write_raw(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.tls is not None:
            try:
                data = self.tls.encrypt(data)
            except TLSError:
                return
        self.transport.write(data)

    _out = write_raw

    # ---- close
    def _release(self) -> None:
        """Protocol-specific teardown, before the client leaves the registry."""

    def _unregister(self) -> None:
        raise NotImplementedError

    def close(self, reason: str, abort: bool = False) -> None:
        """End the connection; `abort` drops unsent bytes (a client that stopped reading)."""
        if self.phase == "closed":
            return
        was_live = self.phase == self.live_phase
        self.phase = "closed"
        self.close_reason = reason
        for t in (self.timer, self.write_timer):
            if t is not None:
                t.cancel()
        self.timer = self.write_timer = None
        lost = self.queue.discard()
        if lost:
            self._drop("gone_disconnected", lost)
        self._release()
        server = self.server
        if self.registered:
            self.registered = False
            self._unregister()
        server.conns.discard(self)
        if self.admitted_cap:
            self.admitted_cap = False
            server.caps.release(self.peer_ip)
        transport = self.transport
        if transport is not None and abort:
            transport.abort()
        elif transport is not None and not transport.is_closing():
            if self.ws is not None and not self.ws.closed:
                self.write_raw(self.ws.close_frame(1001 if reason == "shutdown" else 1000))
            if self.tls is not None:
                tail = self.tls.close_notify()
                if tail:
                    transport.write(tail)
            transport.close()
        if was_live:
            server.connection_closed(self)
