"""One client connection: asyncio.Protocol + the `websockets` sans-IO ServerProtocol.

No task per connection: bytes in -> WebSocket frames -> the host's `receive`; replies come back
through `send_many`/`drop` once the state they depend on is stored. The connection knows its server only
through `ConnectionHost`, the few calls and settings it needs. WebSocket pings are
answered inside `websockets`; `GET /` answers like the reference ("Wormhole Relay"); only `/v1`
upgrades; everything else is 404.

Fast paths (wsfast.py): the usual upgrade request, whole in the first read, is answered here, and after
the handshake complete unfragmented masked text frames (nearly every client frame) are cut straight out
of the received bytes. Every other request and frame goes whole to `websockets`, which therefore always
stands at a frame boundary and answers pings, fragments, close frames and errors as it would on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing
from typing import TYPE_CHECKING, Any

from websockets.exceptions import PayloadTooBig
from websockets.frames import BINARY as OP_BINARY
from websockets.frames import CONT as OP_CONT
from websockets.frames import TEXT as OP_TEXT
from websockets.frames import apply_mask  # the C speedup when built
from websockets.http11 import Request
from websockets.protocol import CLOSED, OPEN, SERVER, Protocol
from websockets.server import ServerProtocol

from .wsfast import FIN_TEXT, FOREIGN, MORE, frame_at, quick_upgrade, switching

if TYPE_CHECKING:
    from .outputs import Session

log = logging.getLogger("mailbox_server")
HANDSHAKE_TIMEOUT = 10.0  # seconds to finish the HTTP upgrade
CLOSE_GRACE = 2.0  # seconds to wait for the client's close frame / TCP close after ours
SERVER_HEADER = "Burrow Mailbox"
_HEADERS = [bytes((0x81, n)) for n in range(126)]  # FIN + text, unmasked, payloads under 126 bytes


def address_of(peer: Any, headers: Any) -> tuple[dict[str, Any], str]:
    """(`your-address` for the welcome, the socket's IP) from X-Real-IP/X-Real-Port or the socket."""
    sock_ip = str(peer[0]) if peer else ""
    sock_port = int(peer[1]) if peer else 0
    if sock_ip.startswith("::ffff:"):
        sock_ip = sock_ip[7:]
    real = headers.get("X-Real-IP")
    if real:
        you: dict[str, Any] = {}
        port = headers.get("X-Real-Port", "")
        if port.isdigit() and int(port) < 65536:  # the reference crashes on a missing port; we omit it
            you["port"] = int(port)
        you["ipv6" if ":" in real else "ipv4"] = real.strip()[:64]
        return you, sock_ip
    return {"port": sock_port, ("ipv6" if ":" in sock_ip else "ipv4"): sock_ip}, sock_ip


class ConnectionHost(typing.Protocol):
    """What a connection needs from the server that accepted it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def frame_limit(self) -> int | None: ...  # largest WebSocket message accepted (None: no limit)
    @property
    def max_write_buffer(self) -> int: ...  # unread output (bytes) before the client is dropped
    @property
    def trust_x_real_ip(self) -> bool: ...  # count per-IP limits by X-Real-IP

    def connection_open(self, conn: WSConnection, you: dict[str, Any], cap_key: str) -> None:
        """The upgrade succeeded: `you` is the welcome's your-address, `cap_key` the per-IP limit's key."""

    def receive(self, conn: WSConnection, payload: bytes) -> None:
        """One complete WebSocket message from an open connection."""

    def connection_gone(self, conn: WSConnection) -> None:
        """The TCP connection closed (for any reason)."""

    def count_refusal(self, limit: str) -> None:
        """A limit refused something on this connection (`burrow_mailbox_refusals_total{limit}`)."""

    def count_error(self, text: str) -> None:
        """The connection was failed for a protocol error (`burrow_mailbox_errors_total{reason}`)."""


class WSConnection(asyncio.Protocol):
    def __init__(self, host: ConnectionHost) -> None:
        self.host = host
        self.transport: asyncio.Transport | None = None
        self.ws: Protocol = None  # type: ignore[assignment]  # made by the first bytes (see _first)
        self.session: Session | None = None
        self.ip = ""
        self.cap_ip: str | None = None  # key held in the connection caps
        self.last_rx = time.monotonic()
        self.last_tx = 0.0  # monotonic time of the last write (a draining server waits for quiet)
        self.close_reason = "client"
        self.fragments: list[bytes] = []
        # Frame fast path: on once the upgrade left websockets with no buffered bytes; `rx` holds the
        # start of an incomplete frame (at most one frame: bounded by the size limit).
        self.fresh = True  # no bytes received yet
        self.fast = False
        self.rx = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        # Output queued for one write: the 101 response until the welcome joins it, and a batch's frames
        # until its close frame joins them (each write is a send() syscall, the top cost per frame).
        self.out: list[bytes] = []

    # ---- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.timer = self.host.loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        self.last_rx = time.monotonic()
        if self.fast:
            if self.rx:  # the rest of an incomplete frame: appended in place, never copied per read
                self.rx += data
                data = self.rx
            self._receive_frames(data)
        elif self.fresh and self._first(data):
            return
        else:
            self._ws_receive(data)
        self.flush_ws()

    def _receive_frames(self, buf: bytes | bytearray) -> None:
        """The fast path: complete text frames go to the host here, in order with everything else, and
        websockets gets every other frame whole (or the rest of the stream once the connection is no
        longer open or a header is refused)."""
        self.rx = bytearray()
        ws = self.ws
        pos, n = 0, len(buf)
        limit = self.host.frame_limit
        while pos < n:
            size = ws.current_size  # bytes of a fragmented message so far (None: not in one)
            if ws.state is not OPEN:
                start = FOREIGN
            else:
                start, end = frame_at(buf, pos, limit if limit is None or size is None else limit - size)
            if start == MORE:
                rest = buf[pos:] if pos else buf
                self.rx = rest if type(rest) is bytearray else bytearray(rest)
                return
            if start == FOREIGN:
                self.fast = False
                self._ws_receive(buf[pos:] if pos else buf)
                return
            if buf[pos] == FIN_TEXT and size is None:
                if self.session is not None:
                    self.host.receive(self, apply_mask(buf[start:end], buf[start - 4:start]))
            else:
                self._ws_receive(buf[pos:end])
            pos = end

    def _ws_receive(self, data: bytes) -> None:
        """Hand bytes to websockets and act on what it parsed."""
        self.ws.receive_data(data)
        events = self.ws.events_received()
        for event in events:
            if isinstance(event, Request):
                # no frame bytes came with the request: safe to swap in a frame-only protocol
                self._handle_request(event, len(events) == 1 and data.endswith(b"\r\n\r\n"))
            elif self.session is not None:
                self._handle_frame(event)
        if self.ws.parser_exc is not None and self.close_reason == "client":
            # websockets failed the connection (oversized frame: 1009, bad framing/UTF-8: 1002/1007)
            too_big = isinstance(self.ws.parser_exc, PayloadTooBig)
            self.close_reason = "limit" if too_big else "protocol"
            if too_big:
                self.host.count_refusal("message_bytes")
            else:
                self.host.count_error("bad websocket frame")

    def eof_received(self) -> bool | None:
        if self.fresh:
            self._first(b"")
        if self.rx:  # an incomplete frame: websockets ends on it as it would have on its own
            self.fast = False
            self._ws_receive(bytes(self.rx))
            self.rx = bytearray()
        self.ws.receive_eof()
        self.flush_ws()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.clear()
        self.fast, self.rx = False, bytearray()
        if self.timer is not None:
            self.timer.cancel()
        self.host.connection_gone(self)

    # ---- handshake ---------------------------------------------------------------------------
    def _handshake_timeout(self) -> None:
        self.timer = None
        if self.session is None and self.transport is not None:
            self.transport.abort()

    def _first(self, data: bytes) -> bool:
        """The first bytes: the usual upgrade request, whole, is answered here as websockets would answer
        it (True); anything else starts websockets' handshake protocol (False)."""
        self.fresh = False
        headers = quick_upgrade(data)
        if headers is None:
            self.ws = ServerProtocol(max_size=self.host.frame_limit)
            return False
        self.out.append(switching(headers["sec-websocket-key"], SERVER_HEADER))
        self._frames_only()
        self._opened(headers)
        return True

    def _frames_only(self) -> None:
        # The handshake parser's generator frame keeps the whole Request (headers) alive for the
        # connection's life; a fresh frame-only protocol in OPEN state saves ~1.5 KiB per idle client.
        self.ws = Protocol(SERVER, state=OPEN, max_size=self.host.frame_limit)
        self.fast = True

    def _handle_request(self, request: Request, alone: bool) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/v1":
            response = self.ws.accept(request)
        elif path == "/" and "upgrade" not in request.headers.get("Connection", "").lower():
            response = self.ws.reject(200, "Wormhole Relay\n")
        else:
            response = self.ws.reject(404, "Not Found\n")
        response.headers["Server"] = SERVER_HEADER
        self.ws.send_response(response)
        if response.status_code != 101:
            return
        if alone and not self.ws.reader.buffer:  # only when no frame bytes came yet (clients wait for the 101)
            self.out.extend(self.ws.data_to_send())  # the 101 goes out with the welcome, in one write
            self._frames_only()
        self._opened(request.headers)

    def _opened(self, headers: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        you, self.ip = address_of(self.transport.get_extra_info("peername"), headers)
        key = self.ip
        if self.host.trust_x_real_ip and headers.get("X-Real-IP"):
            key = headers["X-Real-IP"].strip()
        self.host.connection_open(self, you, key)
        self.write_out()  # the 101, if the welcome did not take it along

    # ---- frames ------------------------------------------------------------------------------
    def _handle_frame(self, frame: Any) -> None:
        op = frame.opcode
        if op is OP_TEXT or op is OP_BINARY:
            if frame.fin:
                self.host.receive(self, frame.data)
            else:
                self.fragments = [frame.data]
        elif op is OP_CONT and self.fragments:
            self.fragments.append(frame.data)
            if frame.fin:
                payload, self.fragments = b"".join(self.fragments), []
                self.host.receive(self, payload)

    # ---- output ------------------------------------------------------------------------------
    def send_many(self, payloads: list[bytes]) -> None:
        """Write these messages (after anything queued) in one transport.write."""
        self.queue(payloads)
        self.write_out()

    def queue(self, payloads: list[bytes]) -> None:
        """Text frames, built here: websockets makes a Frame object per message, while a server's frame
        without extensions (none are negotiated) is a 2-10 byte header and the payload as is."""
        t = self.transport
        if self.ws.state is not OPEN or t is None or t.is_closing():
            return
        out = self.out
        out.extend(self.ws.data_to_send())  # what websockets queued first (a pong), in order
        for p in payloads:
            n = len(p)
            out.append(_HEADERS[n] if n < 126 else (b"\x81\x7e" + n.to_bytes(2, "big") if n < 65536
                                                    else b"\x81\x7f" + n.to_bytes(8, "big")))
            out.append(p)

    def write_out(self) -> None:
        """Write the queued output in one transport.write; drop a client whose unread output is too big."""
        if not self.out:
            return
        data = b"".join(self.out)
        self.out.clear()
        t = self.transport
        if not data or t is None or t.is_closing():
            return
        t.write(data)
        self.last_tx = time.monotonic()
        if t.get_write_buffer_size() > self.host.max_write_buffer:
            self.host.count_refusal("write_buffer")
            self.close_reason = "limit"
            t.abort()

    def flush_ws(self) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        chunks = self.ws.data_to_send()
        if chunks:
            eof = chunks[-1] == b""
            self.out.extend(chunks)  # behind the queued frames: a pong or close frame keeps its place
            self.write_out()
            if t.is_closing():
                return
            if eof or self.ws.state is CLOSED:
                t.close()
                return
        if self.ws.close_expected() and self.timer is None:
            self.timer = self.host.loop.call_later(CLOSE_GRACE, self._force_close)

    def drop(self, reason: str, text: str, code: int = 1008) -> None:
        """Close with a close frame (after what was already written), then the TCP connection."""
        if self.close_reason == "client":
            self.close_reason = reason
        if self.ws.state is OPEN:
            self.ws.send_close(code, text[:120])
        self.flush_ws()

    def _force_close(self) -> None:
        self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def ping(self) -> None:
        if self.ws.state is OPEN:
            self.ws.send_ping(b"")
            self.flush_ws()



