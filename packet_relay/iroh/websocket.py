"""RFC 6455 server side for iroh: whole binary messages, because one message is one iroh frame.

Reuses the relay's WebSocket frame parser (packet_relay/protocol/websocket.py: masking rules, control
frames, size limit) and only keeps the message boundaries that DERP-over-WebSocket ignores.
in:  raw bytes in any chunking; out: complete binary messages, plus Pong/Close replies to send.
"""

from __future__ import annotations

import struct

from ..protocol.websocket import OP_BINARY, WebSocketError, WebSocketStream
from .frames import MAX_FRAME_SIZE


def binary_header(n: int) -> bytes:
    """Unmasked (server-to-client) header of one final binary frame of `n` payload bytes."""
    if n < 126:
        return bytes((0x80 | OP_BINARY, n))
    if n < 1 << 16:
        return struct.pack(">BBH", 0x80 | OP_BINARY, 126, n)
    return struct.pack(">BBQ", 0x80 | OP_BINARY, 127, n)


def wrap(message: bytes) -> bytes:
    return binary_header(len(message)) + message


class MessageStream(WebSocketStream):
    __slots__ = ("_parts", "_size", "messages")

    def __init__(self) -> None:
        super().__init__(client=False, max_frame=MAX_FRAME_SIZE)
        self._parts: list[bytes] = []
        self._size = 0
        self.messages: list[bytes] = []

    def feed_messages(self, data: bytes) -> list[bytes]:
        """Bytes in -> the binary messages they completed (in order)."""
        self.feed(data)
        out, self.messages = self.messages, []
        return out

    def _handle(self, opcode: int, fin: bool, payload: bytes, chunks: list[bytes]) -> None:
        data: list[bytes] = []
        super()._handle(opcode, fin, payload, data)  # validates; appends only for data frames
        if not data:
            return
        if fin and not self._parts:
            self.messages.append(payload)  # the usual case: an unfragmented message
            return
        self._size += len(payload)
        if self._size > MAX_FRAME_SIZE:
            raise WebSocketError(f"message larger than {MAX_FRAME_SIZE} bytes")
        self._parts.append(payload)
        if fin:
            self.messages.append(b"".join(self._parts))
            self._parts, self._size = [], 0

    def wrap(self, data: bytes) -> bytes:
        return wrap(data)
