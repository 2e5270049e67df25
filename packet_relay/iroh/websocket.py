"""RFC 6455 server side for iroh, sans-IO: whole binary messages, because one message is one frame.

in:  raw bytes from the client in any chunking
out: complete binary messages (in order), plus Pong/Close replies queued for `data_to_send()`

Unlike DERP-over-WebSocket (packet_relay/protocol/websocket.py, a byte stream), iroh needs the message
boundaries. Clients must mask, so every datagram is unmasked on the hot path: that uses the C
`apply_mask` shipped with the `websockets` package (~40x faster than pure Python) when present.
Errors are the relay's WebSocketError (a ProtocolError), so the adapter counts them like DERP's.
"""

from __future__ import annotations

import struct

from ..protocol.websocket import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    WebSocketError,
    _xor,
    encode_frame,
)
from .frames import MAX_FRAME_SIZE

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - the pure-Python fallback is the relay's own
    apply_mask = _xor

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


def binary_header(n: int) -> bytes:
    """Unmasked (server-to-client) header of one final binary frame of `n` payload bytes."""
    if n < 126:
        return bytes((0x80 | OP_BINARY, n))
    if n < 1 << 16:
        return struct.pack(">BBH", 0x80 | OP_BINARY, 126, n)
    return struct.pack(">BBQ", 0x80 | OP_BINARY, 127, n)


def wrap(message: bytes) -> bytes:
    return binary_header(len(message)) + message


class MessageStream:
    __slots__ = ("_buf", "_out", "_parts", "_size", "closed")

    def __init__(self) -> None:
        self._buf = b""
        self._out: list[bytes] = []
        self._parts: list[bytes] = []   # a fragmented message being collected
        self._size = 0
        self.closed = False

    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def close_frame(self, code: int = 1000) -> bytes:
        self.closed = True
        return encode_frame(OP_CLOSE, _U16.pack(code), mask=False)

    def wrap(self, data: bytes) -> bytes:
        return wrap(data)

    def feed_messages(self, data: bytes) -> list[bytes]:
        """Bytes in -> the binary messages they completed."""
        buf = self._buf + data if self._buf else data
        end_of_buf = len(buf)
        pos = 0
        out: list[bytes] = []
        while not self.closed and end_of_buf - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b0 & 0x70:
                raise WebSocketError("reserved bits set (no extensions were negotiated)")
            if not b1 & 0x80:
                raise WebSocketError("client frames must be masked")
            n, head = b1 & 0x7F, pos + 2
            if n == 126:
                if end_of_buf - pos < 4:
                    break
                n, head = _U16.unpack_from(buf, head)[0], head + 2
            elif n == 127:
                if end_of_buf - pos < 10:
                    break
                n, head = _U64.unpack_from(buf, head)[0], head + 8
            if n > MAX_FRAME_SIZE:
                raise WebSocketError(f"frame of {n} bytes exceeds {MAX_FRAME_SIZE}")
            end = head + 4 + n
            if end > end_of_buf:
                break
            payload = apply_mask(buf[head + 4:end], buf[head:head + 4]) if n else b""
            pos = end
            if b0 == 0x80 | OP_BINARY and not self._parts:
                out.append(payload)  # the usual case: one final, unfragmented binary frame
            else:
                self._frame(b0 & 0x0F, bool(b0 & 0x80), payload, out)
        self._buf = buf[pos:] if pos < end_of_buf else b""
        return out

    def _frame(self, opcode: int, fin: bool, payload: bytes, out: list[bytes]) -> None:
        if opcode >= 0x8:
            if not fin or len(payload) > 125:
                raise WebSocketError("control frames must be final and at most 125 bytes")
            if opcode == OP_PING:
                self._out.append(encode_frame(OP_PONG, payload, mask=False))
            elif opcode == OP_CLOSE:
                if not self.closed:
                    self._out.append(self.close_frame())
                self.closed = True
            elif opcode != OP_PONG:
                raise WebSocketError(f"unknown control opcode {opcode:#x}")
            return
        if opcode == OP_BINARY:
            if self._parts:
                raise WebSocketError("new message inside a fragmented one")
        elif opcode == OP_CONT:
            if not self._parts:
                raise WebSocketError("continuation without a message")
        else:
            raise WebSocketError("the iroh relay protocol uses binary messages only")
        self._size += len(payload)
        if self._size > MAX_FRAME_SIZE:
            raise WebSocketError(f"message larger than {MAX_FRAME_SIZE} bytes")
        self._parts.append(payload)
        if fin:
            out.append(b"".join(self._parts))
            self._parts, self._size = [], 0
