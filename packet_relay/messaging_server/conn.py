"""One messaging link as a thin asyncio Protocol: link handshake (responder), then frames into the switch.

in:  socket bytes; out: socket bytes. The handshake is messaging/handshake.py, channels and forwarding
are messaging/switch.py; this file moves bytes, arms the timers and applies back-pressure:

- Writes are batched: the switch appends to each link's outbox, and one flush per loop pass writes each
  dirty link once (service.py).
- A Send cannot be dropped (Noise nonces are implicit), so when a frame lands in a link whose socket is
  backed up, the sender stops being read until that link drains; a link whose socket accepts nothing
  for `write_timeout` is closed as stalled, and its peers get ChannelClosed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from burrow.messaging.errors import HandshakeError, ProtocolError
from burrow.messaging.handshake import ResponderHandshake

log = logging.getLogger(__name__)
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class MessagingConn(asyncio.Protocol):
    def __init__(self, service) -> None:
        self.service = service
        self.transport: asyncio.Transport | None = None
        self.peer_ip = ""
        self.handshake: ResponderHandshake | None = ResponderHandshake(service.key, service.admit)
        self.link = None
        self.started = time.time()
        self.close_reason = "client"
        self.closed = False
        self.write_paused = False
        self.read_paused = False
        self.waiters: set[MessagingConn] = set()  # links not read until this one drains
        self.waiting_on: set[MessagingConn] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.admitted = False

    # ---- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer_ip = peer[0] if peer else ""
        svc = self.service
        if svc.caps.try_acquire(self.peer_ip) is not None:
            svc.stats["refused_connection_limit"] += 1
            self.closed = True
            transport.abort()
            return
        self.admitted = True
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)
        svc.conns.add(self)
        self.timer = svc.loop.call_later(svc.settings.handshake_timeout, self._handshake_deadline)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            if self.handshake is not None:
                self._handshake_in(data)
            else:
                self._frames_in(data)
        except HandshakeError as exc:
            self.service.stats[f"handshake_{exc.reason}"] += 1
            log.debug("link handshake failed: %s", exc)
            if exc.reply:
                self.transport.write(exc.reply)
            self.close("handshake")
        except ProtocolError as exc:
            self.service.stats[f"protocol_{exc.reason}"] += 1
            log.debug("protocol error on a link: %s", exc)
            self.close("protocol")

    def _handshake_in(self, data: bytes) -> None:
        hs = self.handshake
        out = hs.receive_data(data)
        if out:
            self.transport.write(out)
        if hs.complete:
            self.handshake = None
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.started = time.time()
            self.service.link_up(self, hs.remote)
            if hs.rest:
                self._frames_in(hs.rest)

    def _frames_in(self, data: bytes) -> None:
        svc = self.service
        svc.switch.feed(self.link, data)
        dirty = svc.switch.dirty
        if dirty:
            svc.schedule_flush()
            for link in dirty:
                conn = link.owner
                if conn is not self and (conn.write_paused or len(link.outbox) > HIGH_WATER):
                    self._wait_for(conn)

    def _wait_for(self, busy: MessagingConn) -> None:
        busy.waiters.add(self)
        self.waiting_on.add(busy)
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def wake_waiters(self) -> None:
        for conn in self.waiters:
            conn.waiting_on.discard(self)
            if conn.read_paused and not conn.waiting_on and not conn.closed:
                conn.read_paused = False
                conn.transport.resume_reading()
        self.waiters.clear()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.timer is None:
            self.timer = self.service.loop.call_later(self.service.settings.write_timeout, self._stalled)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.timer is not None and self.handshake is None:
            self.timer.cancel()
            self.timer = None
        self.wake_waiters()

    def connection_lost(self, exc) -> None:
        self.close(self.close_reason)

    # ---- timers
    def _handshake_deadline(self) -> None:
        self.timer = None
        if self.handshake is not None:
            self.service.stats["handshake_timeout"] += 1
            self.close("timeout")

    def _stalled(self) -> None:
        self.timer = None
        if self.write_paused and not self.closed:
            self.service.stats["links_stalled"] += 1
            self.transport.abort()  # its buffered bytes can never be delivered
            self.close("stalled")

    # ---- output and teardown
    def flush(self) -> None:
        link = self.link
        if link is None or not link.outbox or self.closed:
            return
        out, link.outbox = link.outbox, bytearray()  # hand the buffer to the transport; no copy
        self.transport.write(out)
        if not self.write_paused:
            self.wake_waiters()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.wake_waiters()
        for busy in self.waiting_on:
            busy.waiters.discard(self)
        self.waiting_on.clear()
        self.service.link_down(self)
