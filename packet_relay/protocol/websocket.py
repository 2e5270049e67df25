"""RFC 6455 framing for DERP-over-WebSocket, sans-IO, both roles.

in:  raw bytes from the peer (any chunking)
out: the binary-message payload bytes as one byte stream (DERP frames are not aligned with WebSocket
     messages), plus control replies (Pong, Close) queued for the caller to send.
Clients mask what they send, servers must not; a server rejects unmasked client frames.
"""

from __future__ import annotations

import os
import struct

from .frames import ProtocolError

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_WS_FRAME = (1 << 20) + 1024


class WebSocketError(ProtocolError):
    reason = "websocket"


def _xor(data: bytes, mask: bytes) -> bytes:
    n = len(data)
    if not n:
        return b""
    full = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(full, "big")).to_bytes(n, "big")


def encode_frame(opcode: int, payload: bytes, *, mask: bool) -> bytes:
    n = len(payload)
    first = 0x80 | opcode
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack(">BB", first, mbit | n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", first, mbit | 126, n)
    else:
        head = struct.pack(">BBQ", first, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + _xor(payload, key)


class WebSocketStream:
    __slots__ = ("client", "max_frame", "_buf", "_out", "closed", "_in_binary")

    def __init__(self, *, client: bool, max_frame: int = MAX_WS_FRAME) -> None:
        self.client = client
        self.max_frame = max_frame
        self._buf = b""
        self._out: list[bytes] = []
        self.closed = False
        self._in_binary = False

    def wrap(self, data: bytes) -> bytes:
        """Stream bytes -> one binary message."""
        return encode_frame(OP_BINARY, data, mask=self.client)

    def close_frame(self, code: int = 1000) -> bytes:
        self.closed = True
        return encode_frame(OP_CLOSE, struct.pack(">H", code), mask=self.client)

    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def feed(self, data: bytes) -> bytes:
        """Returns the payload bytes of the binary messages completed so far."""
        buf = self._buf + data if self._buf else data
        pos, chunks = 0, []
        while not self.closed:
            if len(buf) - pos < 2:
                break
            b0, b1 = buf[pos], buf[pos + 1]
            opcode, masked, n = b0 & 0x0F, b1 & 0x80, b1 & 0x7F
            if b0 & 0x70:
                raise WebSocketError("reserved bits set (no extensions were negotiated)")
            if bool(masked) == self.client:
                raise WebSocketError("client frames must be masked, server frames must not")
            hlen = 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n = struct.unpack_from(">H", buf, pos + 2)[0]
                hlen = 4
            elif n == 127:
                if len(buf) - pos < 10:
                    break
                n = struct.unpack_from(">Q", buf, pos + 2)[0]
                hlen = 10
            if n > self.max_frame:
                raise WebSocketError(f"frame of {n} bytes exceeds {self.max_frame}")
            klen = 4 if masked else 0
            end = pos + hlen + klen + n
            if len(buf) < end:
                break
            payload = buf[pos + hlen + klen:end]
            if masked:
                payload = _xor(payload, buf[pos + hlen:pos + hlen + 4])
            pos = end
            self._handle(opcode, bool(b0 & 0x80), payload, chunks)
        self._buf = buf[pos:] if pos < len(buf) else b""
        return b"".join(chunks)

    def _handle(self, opcode: int, fin: bool, payload: bytes, chunks: list[bytes]) -> None:
        if opcode >= 0x8:
            if not fin or len(payload) > 125:
                raise WebSocketError("control frames must be final and at most 125 bytes")
            if opcode == OP_PING:
                self._out.append(encode_frame(OP_PONG, payload, mask=self.client))
            elif opcode == OP_CLOSE:
                if not self.closed:
                    self._out.append(self.close_frame())
                self.closed = True
            elif opcode != OP_PONG:
                raise WebSocketError(f"unknown control opcode {opcode:#x}")
            return
        if opcode == OP_BINARY:
            if self._in_binary:
                raise WebSocketError("new message inside a fragmented one")
        elif opcode == OP_CONT:
            if not self._in_binary:
                raise WebSocketError("continuation without a message")
        else:
            raise WebSocketError("DERP over WebSocket uses binary messages only")
        self._in_binary = not fin
        chunks.append(payload)
