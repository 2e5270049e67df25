"""RFC 6455 framing, sans-IO, both roles: DERP-over-WebSocket (a byte stream), iroh (messages) and the
mailbox client (text messages).

in:  raw bytes from the peer (any chunking)
out: `feed()`: the binary-message payload bytes as one byte stream (DERP frames are not aligned with
     WebSocket messages); `feed_messages()`: the complete messages, boundaries kept (iroh: one binary
     message is one relay frame; with `text=True` text messages come out as `str`, binary ones as
     bytes). Control replies (Pong, Close) are queued for `data_to_send()`; the peer's close code is
     `close_code`.
Clients mask what they send, servers must not; a server rejects unmasked client frames. A server unmasks
every client frame on its hot path, with the C `apply_mask` that ships with `websockets`, imported when
the first server-side stream is made: a client never loads `websockets` (its import costs tens of ms at
start-up), and masks what it sends in pure Python below MASK_IN_PYTHON bytes.
"""

from __future__ import annotations

import os
import struct

from .errors import WireError

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_WS_FRAME = (1 << 20) + 1024
MAX_MESSAGE = 1 << 20   # MessageStream's default: iroh's largest message (iroh.frames.MAX_FRAME_SIZE)
MASK_IN_PYTHON = 4096   # bytes: smaller client frames are masked without loading the C apply_mask
CLOSE_PROTOCOL_ERROR, CLOSE_INVALID_DATA, CLOSE_TOO_BIG = 1002, 1007, 1009
_FINAL_BINARY = 0x80 | OP_BINARY
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class WebSocketError(WireError):
    reason = "websocket"
    close_code = CLOSE_PROTOCOL_ERROR  # what to send the peer in our Close frame


class MessageTooBig(WebSocketError):
    close_code = CLOSE_TOO_BIG


class InvalidText(WebSocketError):
    close_code = CLOSE_INVALID_DATA


_c_mask = None  # websockets' apply_mask, once a server-side stream or a large client frame needed it


def _load_c_mask():
    global _c_mask
    if _c_mask is None:
        from websockets.frames import apply_mask  # the C speedup when built, else websockets' Python one

        _c_mask = apply_mask
    return _c_mask


def _mask(data: bytes, key: bytes) -> bytes:
    if len(data) >= MASK_IN_PYTHON or _c_mask is not None:
        return (_c_mask or _load_c_mask())(data, key)
    return py_mask(data, key)


def py_mask(data: bytes, key: bytes) -> bytes:
    """RFC 6455 masking as one big-integer XOR: a few microseconds for a mailbox message, no import."""
    n = len(data)
    keys = (key * ((n >> 2) + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(keys, "little")).to_bytes(n, "little")


def _header(first: int, mbit: int, n: int) -> bytes:
    if n < 126:
        return bytes((first, mbit | n))
    if n < 1 << 16:
        return struct.pack(">BBH", first, mbit | 126, n)
    return struct.pack(">BBQ", first, mbit | 127, n)


def encode_frame(opcode: int, payload: bytes, *, mask: bool) -> bytes:
    if not mask:
        return _header(0x80 | opcode, 0, len(payload)) + payload
    key = os.urandom(4)
    return _header(0x80 | opcode, 0x80, len(payload)) + key + _mask(payload, key)


def binary_header(n: int) -> bytes:
    """Unmasked (server-to-client) header of one final binary frame of `n` payload bytes."""
    return _header(_FINAL_BINARY, 0, n)


def wrap(message: bytes) -> bytes:
    """One server-to-client binary message."""
    return _header(_FINAL_BINARY, 0, len(message)) + message


class WebSocketStream:
    """One side of a WebSocket; `max_message` bounds a reassembled message in `feed_messages()`;
    `text=True` also takes text messages (the mailbox protocol's)."""

    __slots__ = ("client", "text", "max_frame", "max_message", "_buf", "_out", "_parts", "_size",
                 "_in_message", "_opcode", "closed", "close_code")

    def __init__(self, *, client: bool, max_frame: int = MAX_WS_FRAME, max_message: int | None = None,
                 text: bool = False) -> None:
        self.client = client
        self.text = text
        self.max_frame = max_frame
        self.max_message = max_frame if max_message is None else max_message
        self._buf = b""
        self._out: list[bytes] = []
        self._parts: list[bytes] = []   # a fragmented message being collected (message mode)
        self._size = 0
        self._in_message = False        # between the first and the final frame of a fragmented message
        self._opcode = OP_BINARY        # the opcode of the message being collected
        self.closed = False
        self.close_code: int | None = None  # the peer's, once its Close frame arrived (1005: none given)
        if not client:
            _load_c_mask()

    def wrap(self, data: bytes) -> bytes:
        """Bytes -> one binary message."""
        return encode_frame(OP_BINARY, data, mask=self.client)

    def close_frame(self, code: int = 1000) -> bytes:
        self.closed = True
        return encode_frame(OP_CLOSE, _U16.pack(code), mask=self.client)

    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def feed(self, data: bytes) -> bytes:
        """Returns the payload bytes of the binary messages received so far, as one stream."""
        return b"".join(self._parse(data, False))

    def feed_messages(self, data: bytes) -> list[bytes | str]:
        """Bytes in -> the messages they completed (binary: bytes; text, with `text=True`: str)."""
        return self._parse(data, True)

    def _parse(self, data: bytes, whole: bool) -> list:
        buf = self._buf + data if self._buf else data
        end_of_buf = len(buf)
        pos = 0
        out: list[bytes] = []
        client = self.client
        while not self.closed and end_of_buf - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b0 & 0x70:
                raise WebSocketError("reserved bits set (no extensions were negotiated)")
            masked = b1 & 0x80
            if bool(masked) == client:
                raise WebSocketError("client frames must be masked, server frames must not")
            n, head = b1 & 0x7F, pos + 2
            if n == 126:
                if end_of_buf - pos < 4:
                    break
                n, head = _U16.unpack_from(buf, head)[0], head + 2
            elif n == 127:
                if end_of_buf - pos < 10:
                    break
                n, head = _U64.unpack_from(buf, head)[0], head + 8
            if n > self.max_frame:
                raise MessageTooBig(f"frame of {n} bytes exceeds {self.max_frame}")
            start = head + 4 if masked else head
            end = start + n
            if end > end_of_buf:
                break
            payload = buf[start:end]
            if masked and n:
                payload = _c_mask(payload, buf[head:start])
            pos = end
            if b0 == _FINAL_BINARY and not self._in_message:
                out.append(payload)  # the usual case: one final, unfragmented binary frame
            else:
                self._frame(b0 & 0x0F, bool(b0 & 0x80), payload, out, whole)
        self._buf = buf[pos:] if pos < end_of_buf else b""
        return out

    def _frame(self, opcode: int, fin: bool, payload: bytes, out: list, whole: bool) -> None:
        if opcode >= 0x8:
            if not fin or len(payload) > 125:
                raise WebSocketError("control frames must be final and at most 125 bytes")
            if opcode == OP_PING:
                self._out.append(encode_frame(OP_PONG, payload, mask=self.client))
            elif opcode == OP_CLOSE:
                if len(payload) == 1:
                    raise WebSocketError("close frame with a one-byte payload")
                self.close_code = _U16.unpack_from(payload)[0] if payload else 1005
                if not self.closed:  # echo its code, as peers usually do, when it is one that may be sent
                    code = self.close_code
                    sendable = 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999
                    self._out.append(self.close_frame(code if sendable else 1000))
                self.closed = True
            elif opcode != OP_PONG:
                raise WebSocketError(f"unknown control opcode {opcode:#x}")
            return
        if opcode == OP_BINARY or (opcode == OP_TEXT and self.text):
            if self._in_message:
                raise WebSocketError("new message inside a fragmented one")
            self._opcode = opcode
        elif opcode == OP_CONT:
            if not self._in_message:
                raise WebSocketError("continuation without a message")
        elif opcode == OP_TEXT:
            raise WebSocketError("binary messages only (DERP and iroh send no text)")
        else:
            raise WebSocketError(f"unknown data opcode {opcode:#x}")
        self._in_message = not fin
        if not whole:
            out.append(payload)  # a byte stream: message boundaries do not matter
            return
        self._size += len(payload)
        if self._size > self.max_message:
            raise MessageTooBig(f"message larger than {self.max_message} bytes")
        self._parts.append(payload)
        if fin:
            message = b"".join(self._parts)
            self._parts, self._size = [], 0
            if self._opcode == OP_TEXT:
                try:
                    message = message.decode()
                except UnicodeDecodeError as exc:
                    raise InvalidText("text message is not UTF-8") from exc
            out.append(message)


class MessageStream(WebSocketStream):
    """The server side of a message protocol (iroh): whole binary messages of at most `max_size`."""

    __slots__ = ()

    def __init__(self, max_size: int = MAX_MESSAGE) -> None:
        super().__init__(client=False, max_frame=max_size, max_message=max_size)
