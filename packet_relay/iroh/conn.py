"""One iroh relay client after the WebSocket upgrade: a thin asyncio Protocol around IrohSession.

The relay's HTTP listener (packet_relay/conn.py) reads the request; the /relay route answers 101 and
hands the transport (and its TLS session) to an IrohConn, which from then on moves bytes between
TLS, the WebSocket message codec, the sans-IO session and the shared registry. The send side (bounded
queue, drops, one flush per loop pass, TLS writes, close bookkeeping) is the one DERP uses (peer.py).
"""

from __future__ import annotations

import logging
import os
import random
import time

from burrow.wire.iroh import frames as f
from burrow.wire.websocket import MessageStream, WebSocketError, binary_header, wrap

from ..interfaces import IrohConnHost
from ..peer import Peer
from ..tlsio import TLSError
from .session import Authenticated, Closed, IrohSession

log = logging.getLogger(__name__)
MAX_EARLY_MESSAGES = 64      # frames a client may send while its access check runs
PING_JITTER = (1.0, 5.0)     # seconds added to the ping interval, as the upstream relay does
_DELIVER_TYPE = {f.CLIENT_TO_RELAY_DATAGRAM: bytes([f.RELAY_TO_CLIENT_DATAGRAM]),
                 f.CLIENT_TO_RELAY_DATAGRAM_BATCH: bytes([f.RELAY_TO_CLIENT_DATAGRAM_BATCH])}


class IrohConn(Peer):
    __slots__ = ("service", "token", "session", "key", "endpoint_id", "started", "inactive", "checking",
                 "throttled", "rate_limited_told", "early", "_last_dst", "rate", "_header")

    protocol = "iroh"
    live_phase = "iroh"
    abort_on_write_timeout = False   # as it always was here: the close after a write timeout is graceful
    kind = "websocket"
    home = False   # iroh has no NotePreferred; the event-log field stays false
    mesh = False

    def __init__(self, service: IrohConnHost, transport, tls, peer_ip: str, version: str, token: str | None,
                 header_auth: f.KeyMaterialClientAuth | None = None,
                 key_material: bytes | None = None) -> None:
        super().__init__(service.server, transport, tls, MessageStream(f.MAX_FRAME_SIZE), "iroh", peer_ip)
        self.service = service
        self.token = token
        st = service.settings
        self.session = IrohSession(version, os.urandom(f.CHALLENGE_LEN), ping_interval=st.ping_interval,
                                   pong_timeout=st.pong_timeout, jitter=lambda: random.uniform(*PING_JITTER))
        self.key: tuple[str, bytes] | None = None   # registry key: iroh ids live apart from DERP keys
        self.endpoint_id = b""
        self.started = time.time()
        self.inactive = self.checking = self.throttled = False
        self.rate_limited_told = False
        self.early: list[bytes] | None = None
        self._last_dst = b""
        self.rate = self.server.new_rate_bucket()
        self._header = (header_auth, key_material)

    # ---- start (called by the /relay route after the 101)
    def begin(self, rest: bytes) -> None:
        server = self.server
        server.conns.add(self)
        server.stats.connections[(self.protocol, self.kind)] += 1
        self.timer = server.loop.call_later(self.service.settings.handshake_timeout, self._handshake_expired)
        header_auth, key_material = self._header
        if header_auth is not None:
            out = self.session.start_with_key_material(header_auth, key_material, time.monotonic())
        else:
            out = self.session.start(time.monotonic())
        self.send(out.send)
        self._events(out.events)
        if rest and self.phase != "closed":
            self.data_received_plain(rest)

    # ---- asyncio.Protocol
    def data_received(self, data: bytes) -> None:
        if self.phase == "closed":
            return
        if self.tls is not None:
            try:
                data, back = self.tls.receive(data)
            except TLSError:
                self.close("protocol")
                return
            if back:
                self.transport.write(back)
            if self.tls.peer_closed:
                if data:
                    self.data_received_plain(data)
                self.close("client")
                return
            if not data:
                return
        self.data_received_plain(data)

    def data_received_plain(self, data: bytes) -> None:
        if self.rate is not None:
            self._charge(len(data))
        try:
            messages = self.ws.feed_messages(data)
        except WebSocketError as exc:
            self._error("websocket", str(exc))
            return
        back = self.ws.data_to_send()
        if back:
            self.write_raw(back)
        if messages:
            self._messages(messages)
        if self.ws.closed and self.phase != "closed":
            self.close("client")

    def _messages(self, messages: list[bytes]) -> None:
        session = self.session
        if session.state != "active":
            if session.state == "checking":
                self._hold(messages)
                return
            first, messages = messages[0], messages[1:]
            self._slow(first)
            if not messages or self.phase == "closed":
                return
            if session.state == "checking":
                self._hold(messages)
                return
        now = time.monotonic()
        fwd = session.forward
        for m in messages:
            if m and m[0] in _DELIVER_TYPE and session.state == "active":
                got = fwd(m, now)
                if got is None:
                    self._error("malformed", "bad datagram frame")
                    return
                self._forward(m[0], *got)
            else:
                self._slow(m)
                if self.phase == "closed":
                    return

    def _hold(self, messages: list[bytes]) -> None:
        """Frames behind ClientAuth wait (bounded) until the access check has answered."""
        if self.early is None:
            self.early = []
        self.early.extend(messages)
        if len(self.early) > MAX_EARLY_MESSAGES:
            self._error("early_frames", "too many frames before authentication finished")

    def _slow(self, message: bytes) -> None:
        out = self.session.receive(message, time.monotonic())
        if out.send:
            for frame in out.send:
                self.control(frame)
        self._events(out.events)

    def _events(self, events: list) -> None:
        for ev in events:
            if type(ev) is Authenticated:
                self.service.logins[self.session.login] += 1
                self.endpoint_id = ev.endpoint_id
                self.key = ("iroh", ev.endpoint_id)
                self.checking = True
                self.transport.pause_reading()  # further bytes wait in the socket during the check
                self.server.loop.create_task(self._admit())
            elif type(ev) is Closed:
                if ev.reason == "denied":  # bad signature: the denial frame goes out first
                    self.server.stats.denied[(self.protocol, "signature")] += 1
                    self.flush()
                    self.close("denied")
                elif ev.reason == "timeout":
                    self.close("timeout")
                else:
                    self._error("protocol", ev.detail)
                return

    def _forward(self, kind: int, dst: bytes, body: bytes, payload: int) -> None:
        self.packets_in += 1
        self.bytes_in += payload
        self.service.forward(self, dst, kind, body, payload)

    async def _admit(self) -> None:
        refusal = await self.service.check_access(self)
        if self.phase == "closed":
            return
        if refusal is not None:
            reason, text = refusal
            self.server.stats.denied[(self.protocol, reason)] += 1
            self.send(self.session.deny(text).send)
            self.close("denied")
            return
        self.send(self.session.accept().send)
        self.server.stats.handshake_done(self.protocol, time.time() - self.started)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.service.register(self)
        if self.phase == "closed":
            return
        self._arm_timer()
        self.checking = False
        early, self.early = self.early, None
        if early:
            self._messages(early)
        if self.phase != "closed" and not self.throttled:
            self.transport.resume_reading()

    # ---- timers
    def _handshake_expired(self) -> None:
        self.timer = None
        if self.session.state != "active":
            self.close("timeout")

    def _arm_timer(self) -> None:
        due = self.session.next_deadline()
        if due is not None and self.phase != "closed":
            self.timer = self.server.loop.call_at(self._loop_time(due), self._tick)

    def _loop_time(self, monotonic_due: float) -> float:
        return self.server.loop.time() + max(0.0, monotonic_due - time.monotonic())

    def _tick(self) -> None:
        self.timer = None
        if self.phase == "closed":
            return
        out = self.session.tick(time.monotonic())
        for frame in out.send:
            self.control(frame)
        if any(type(ev) is Closed for ev in out.events):
            self.close("timeout")
            return
        self._arm_timer()

    # ---- rate limit: charged on bytes read, before WebSocket parsing, as upstream does
    def _charge(self, n: int) -> None:
        bucket = self.rate
        now = time.monotonic()
        if bucket.take(n, now):
            return
        bucket.tokens -= n  # go into debt and pause until it is paid back
        wait = -bucket.tokens / bucket.rate
        self.server.stats.throttled[self.protocol] += 1
        self.throttled = True
        self.transport.pause_reading()
        self.server.loop.call_later(wait, self._unthrottle)
        if not self.rate_limited_told and self.session.version == "iroh-relay-v2" and self.registered:
            self.rate_limited_told = True
            self.control(f.Status(f.STATUS_RATE_LIMITED).encode())

    def _unthrottle(self) -> None:
        self.throttled = False
        if self.phase != "closed" and not self.checking:
            self.transport.resume_reading()

    # ---- the peer interface used by the registry and the iroh service
    def deliver_frame(self, kind: int, src: bytes, body: bytes, payload: int) -> None:
        """Queue a datagram frame from `src`; the body (ECN [+ segment size] + data) is copied as is."""
        head = _DELIVER_TYPE[kind]
        frame = b"".join((binary_header(1 + f.KEY_LEN + len(body)), head, src, body))
        if not self.paused and self.queue.full():
            self.flush()  # the socket is keeping up: a big read batch must not overflow the queue
        if self.queue.push_packet(frame, payload):
            self._drop("queue_head")
        if not self.flush_pending:
            self._schedule_flush()

    def deliver_forwarded(self, kind: int, src: bytes, body: bytes) -> bool:
        """A datagram frame a peer relay forwarded (mesh ForwardIroh); False for a kind that is none."""
        if kind not in _DELIVER_TYPE:
            return False
        payload = max(0, len(body) - (3 if kind == f.CLIENT_TO_RELAY_DATAGRAM_BATCH else 1))
        self.deliver_frame(kind, src, body, payload)
        stats = self.server.stats
        stats.packets["iroh"] += 1
        stats.bytes["iroh"] += payload
        return True

    def deliver(self, src, payload: bytes) -> None:
        """Registry interface for DERP packets; unreachable, as no DERP key equals an iroh registry key."""
        self._drop("wrong_protocol")

    def peer_gone(self, key, reason: int) -> None:
        """Registry interface; EndpointGone is sent by the iroh service from its own sent_to map."""

    def peer_present(self, key, flags: int) -> None:
        """Registry interface for mesh watchers; iroh has no watchers."""

    def endpoint_gone(self, endpoint_id: bytes) -> None:
        self.control(f.EndpointGone(endpoint_id).encode())

    def set_status(self, code: int) -> None:
        """Duplicate ids: tell an older connection it became inactive, or that it is active again."""
        self.inactive = code == f.STATUS_SAME_ENDPOINT_ID_CONNECTED
        if code == f.STATUS_HEALTHY and self.session.version != "iroh-relay-v2":
            return  # v1 has no "healthy again" message; an empty Health would read as a problem
        self.control(self.session.status_frame(code))

    def control(self, frame: bytes) -> None:
        Peer.control(self, wrap(frame))  # one WebSocket message each; queued datagrams come wrapped

    # ---- output
    def send(self, frames: list[bytes]) -> None:
        """Handshake frames go out at once, ahead of anything queued."""
        if frames:
            self.write_raw(b"".join(wrap(fr) for fr in frames))

    def _error(self, kind: str, detail: str) -> None:
        self.server.stats.errors[(self.protocol, kind)] += 1
        log.debug("iroh protocol error from client: %s", detail)
        self.close("protocol")

    def _unregister(self) -> None:
        self.service.unregister(self)
