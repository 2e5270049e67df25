"""DERP v2 frames, sans-IO.

in:  bytes in arbitrary chunks (FrameDecoder) or one (type, payload) pair (decode_frame)
out: frozen dataclasses (NamedTuples for the per-packet SendPacket and ForwardPacket) with
     encode()/decode()

A frame is `type:u8 | len:u32 big-endian | payload[len]`; the length excludes the 5-byte header.
Layouts follow Tailscale's derp/derp.go, the protocol's definition (frame types and their byte layouts).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import WireError

FRAME_HEADER_LEN = 5
KEY_LEN = 32
NONCE_LEN = 24
MAGIC = "DERP🔑".encode()  # 44 45 52 50 f0 9f 94 91
PROTOCOL_VERSION = 2
MAX_PACKET_SIZE = 64 << 10           # largest packet payload, keys excluded
MAX_CLIENT_INFO_LEN = 256 << 10      # what the server reads for ClientInfo
MAX_CLIENT_FRAME_LEN = 1 << 20       # the client rejects bigger frames
MAX_PING_LEN = 1000

SERVER_KEY = 0x01
CLIENT_INFO = 0x02
SERVER_INFO = 0x03
SEND_PACKET = 0x04
RECV_PACKET = 0x05
KEEP_ALIVE = 0x06
NOTE_PREFERRED = 0x07
PEER_GONE = 0x08
PEER_PRESENT = 0x09
FORWARD_PACKET = 0x0A
WATCH_CONNS = 0x10
CLOSE_PEER = 0x11
PING = 0x12
PONG = 0x13
HEALTH = 0x14
RESTARTING = 0x15

PEER_GONE_DISCONNECTED = 0x00
PEER_GONE_NOT_HERE = 0x01

PRESENT_IS_REGULAR = 0x01
PRESENT_IS_MESH_PEER = 0x02
PRESENT_IS_PROBER = 0x04
PRESENT_NOT_IDEAL = 0x08

# burrow extensions for the relay mesh, sent only between burrow relays (derper skips unknown frame
# types and treats these flag and reason values like any other): iroh endpoints cross the mesh too.
FORWARD_IROH = 0x40          # mesh -> relay: src id, dst id, iroh datagram frame type, its body
PRESENT_IS_IROH = 0x80       # PeerPresent flag: the key is an iroh endpoint id (Ed25519), not a DERP key
PEER_GONE_IROH = 0x80        # PeerGone reason: that iroh endpoint left
# mesh -> relay: dst key, u32 count, then that many complete RecvPacket frames for dst (one read's packets).
# Sent only to a relay whose ServerInfo announces it (burrowForwardBatch); others get ForwardPacket.
FORWARD_BATCH = 0x41
FORWARD_BATCH_MAX = 256 * 1024  # bytes of RecvPacket frames in one ForwardBatch

_HEADER = struct.Struct(">BI")
_U32X2 = struct.Struct(">II")


class ProtocolError(WireError):
    """Input that does not follow DERP; the connection that sent it is closed."""

    reason = "protocol"


class FrameTooLarge(ProtocolError):
    reason = "frame_too_large"


class MalformedFrame(ProtocolError):
    reason = "malformed"


class HandshakeError(ProtocolError):
    reason = "handshake"


def header(ftype: int, length: int) -> bytes:
    return _HEADER.pack(ftype, length)


def _frame(ftype: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return _HEADER.pack(ftype, len(body)) + body


def _key(value: bytes, what: str) -> bytes:
    if len(value) != KEY_LEN:
        raise MalformedFrame(f"{what}: key must be {KEY_LEN} bytes, got {len(value)}")
    return bytes(value)


@dataclass(frozen=True, slots=True)
class ServerKey:
    key: bytes
    extra: bytes = b""  # reserved for future use; kept so decode/encode round-trips

    def encode(self) -> bytes:
        return _frame(SERVER_KEY, MAGIC, self.key, self.extra)

    @classmethod
    def decode(cls, payload: bytes) -> ServerKey:
        if len(payload) < len(MAGIC) + KEY_LEN or payload[:8] != MAGIC:
            raise HandshakeError("ServerKey: bad magic or too short")
        return cls(bytes(payload[8:40]), bytes(payload[40:]))


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Client public key, then nonce + NaCl box of the JSON (see handshake.py)."""

    key: bytes
    sealed: bytes  # 24-byte nonce followed by the box

    def encode(self) -> bytes:
        return _frame(CLIENT_INFO, self.key, self.sealed)

    @classmethod
    def decode(cls, payload: bytes) -> ClientInfo:
        if len(payload) < KEY_LEN + NONCE_LEN:
            raise HandshakeError("ClientInfo: shorter than key + nonce")
        return cls(bytes(payload[:KEY_LEN]), bytes(payload[KEY_LEN:]))


@dataclass(frozen=True, slots=True)
class ServerInfo:
    sealed: bytes  # 24-byte nonce followed by the box

    def encode(self) -> bytes:
        return _frame(SERVER_INFO, self.sealed)

    @classmethod
    def decode(cls, payload: bytes) -> ServerInfo:
        if len(payload) < NONCE_LEN:
            raise HandshakeError("ServerInfo: shorter than a nonce")
        return cls(bytes(payload))


class SendPacket(NamedTuple):
    """A NamedTuple, not a dataclass: one is built per relayed packet, and a tuple is the cheapest."""

    dst: bytes
    payload: bytes

    def encode(self) -> bytes:
        return _frame(SEND_PACKET, self.dst, self.payload)

    @classmethod
    def decode(cls, payload: bytes) -> SendPacket:
        if len(payload) < KEY_LEN:
            raise MalformedFrame("SendPacket: shorter than a key")
        if len(payload) - KEY_LEN > MAX_PACKET_SIZE:
            raise FrameTooLarge("SendPacket: packet larger than 64 KiB")
        return cls(bytes(payload[:KEY_LEN]), bytes(payload[KEY_LEN:]))


@dataclass(frozen=True, slots=True)
class RecvPacket:
    src: bytes
    payload: bytes

    def encode(self) -> bytes:
        return _frame(RECV_PACKET, self.src, self.payload)

    @classmethod
    def decode(cls, payload: bytes) -> RecvPacket:
        if len(payload) < KEY_LEN:
            raise MalformedFrame("RecvPacket: shorter than a key")
        return cls(bytes(payload[:KEY_LEN]), bytes(payload[KEY_LEN:]))


@dataclass(frozen=True, slots=True)
class KeepAlive:
    def encode(self) -> bytes:
        return _frame(KEEP_ALIVE)

    @classmethod
    def decode(cls, payload: bytes) -> KeepAlive:
        return cls()  # derper ignores any body


@dataclass(frozen=True, slots=True)
class NotePreferred:
    preferred: bool

    def encode(self) -> bytes:
        return _frame(NOTE_PREFERRED, b"\x01" if self.preferred else b"\x00")

    @classmethod
    def decode(cls, payload: bytes) -> NotePreferred:
        if len(payload) != 1:
            raise MalformedFrame("NotePreferred: body must be exactly 1 byte")
        return cls(payload[0] != 0)


@dataclass(frozen=True, slots=True)
class PeerGone:
    key: bytes
    reason: int = PEER_GONE_DISCONNECTED

    def encode(self) -> bytes:
        return _frame(PEER_GONE, self.key, bytes([self.reason]))

    @classmethod
    def decode(cls, payload: bytes) -> PeerGone:
        if len(payload) < KEY_LEN:
            raise MalformedFrame("PeerGone: shorter than a key")
        reason = payload[KEY_LEN] if len(payload) > KEY_LEN else PEER_GONE_DISCONNECTED
        return cls(bytes(payload[:KEY_LEN]), reason)


@dataclass(frozen=True, slots=True)
class PeerPresent:
    key: bytes
    ip: bytes = bytes(16)  # IPv6 or v4-mapped; all zero when the server withholds addresses
    port: int = 0
    flags: int = 0

    def encode(self) -> bytes:
        return _frame(PEER_PRESENT, self.key, self.ip, struct.pack(">HB", self.port, self.flags))

    @classmethod
    def decode(cls, payload: bytes) -> PeerPresent:
        if len(payload) < KEY_LEN:
            raise MalformedFrame("PeerPresent: shorter than a key")
        key = bytes(payload[:KEY_LEN])
        if len(payload) < KEY_LEN + 18:  # older servers send the key alone
            return cls(key)
        port = struct.unpack_from(">H", payload, KEY_LEN + 16)[0]
        flags = payload[KEY_LEN + 18] if len(payload) > KEY_LEN + 18 else 0
        return cls(key, bytes(payload[KEY_LEN:KEY_LEN + 16]), port, flags)


class ForwardPacket(NamedTuple):
    """A NamedTuple like SendPacket: one per packet a peer relay forwards."""

    src: bytes
    dst: bytes
    payload: bytes

    def encode(self) -> bytes:
        return _frame(FORWARD_PACKET, self.src, self.dst, self.payload)

    @classmethod
    def decode(cls, payload: bytes) -> ForwardPacket:
        if len(payload) < 2 * KEY_LEN:
            raise MalformedFrame("ForwardPacket: shorter than two keys")
        if len(payload) - 2 * KEY_LEN > MAX_PACKET_SIZE:
            raise FrameTooLarge("ForwardPacket: packet larger than 64 KiB")
        return cls(bytes(payload[:32]), bytes(payload[32:64]), bytes(payload[64:]))


@dataclass(frozen=True, slots=True)
class WatchConns:
    def encode(self) -> bytes:
        return _frame(WATCH_CONNS)

    @classmethod
    def decode(cls, payload: bytes) -> WatchConns:
        if payload:
            raise MalformedFrame("WatchConns: body must be empty")
        return cls()


@dataclass(frozen=True, slots=True)
class ClosePeer:
    key: bytes

    def encode(self) -> bytes:
        return _frame(CLOSE_PEER, self.key)

    @classmethod
    def decode(cls, payload: bytes) -> ClosePeer:
        if len(payload) != KEY_LEN:
            raise MalformedFrame("ClosePeer: body must be one key")
        return cls(bytes(payload))


@dataclass(frozen=True, slots=True)
class Ping:
    data: bytes  # 8 bytes; the server accepts 8..1000 and echoes the first 8

    def encode(self) -> bytes:
        return _frame(PING, self.data)

    @classmethod
    def decode(cls, payload: bytes) -> Ping:
        if not 8 <= len(payload) <= MAX_PING_LEN:
            raise MalformedFrame("Ping: body must be 8..1000 bytes")
        return cls(bytes(payload[:8]))


@dataclass(frozen=True, slots=True)
class Pong:
    data: bytes

    def encode(self) -> bytes:
        return _frame(PONG, self.data)

    @classmethod
    def decode(cls, payload: bytes) -> Pong:
        if len(payload) < 8:
            raise MalformedFrame("Pong: body shorter than 8 bytes")
        return cls(bytes(payload[:8]))


@dataclass(frozen=True, slots=True)
class Health:
    problem: str  # empty means healthy

    def encode(self) -> bytes:
        return _frame(HEALTH, self.problem.encode())

    @classmethod
    def decode(cls, payload: bytes) -> Health:
        return cls(bytes(payload).decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Restarting:
    reconnect_in_ms: int
    try_for_ms: int

    def encode(self) -> bytes:
        return _frame(RESTARTING, _U32X2.pack(self.reconnect_in_ms, self.try_for_ms))

    @classmethod
    def decode(cls, payload: bytes) -> Restarting:
        if len(payload) < 8:
            raise MalformedFrame("Restarting: body shorter than 8 bytes")
        return cls(*_U32X2.unpack_from(payload))


@dataclass(frozen=True, slots=True)
class UnknownFrame:
    ftype: int
    payload: bytes

    def encode(self) -> bytes:
        return _frame(self.ftype, self.payload)


@dataclass(frozen=True, slots=True)
class ForwardIroh:
    """An iroh datagram frame crossing the mesh: `kind` is the client's frame type (single datagram or
    batch) and `body` its body after the destination (ECN [+ segment size] + data), unchanged."""

    src: bytes
    dst: bytes
    kind: int
    body: bytes

    def encode(self) -> bytes:
        return _frame(FORWARD_IROH, self.src, self.dst, bytes([self.kind]), self.body)

    @classmethod
    def decode(cls, payload: bytes) -> ForwardIroh:
        if len(payload) < 2 * KEY_LEN + 2:
            raise MalformedFrame("ForwardIroh: shorter than two keys, a type and ECN")
        if len(payload) - 2 * KEY_LEN - 1 > MAX_PACKET_SIZE + 3:  # ECN and segment size, then data
            raise FrameTooLarge("ForwardIroh: datagrams larger than 64 KiB")
        return cls(bytes(payload[:32]), bytes(payload[32:64]), payload[64], bytes(payload[65:]))


FRAME_TYPES: dict[int, type] = {
    SERVER_KEY: ServerKey, CLIENT_INFO: ClientInfo, SERVER_INFO: ServerInfo,
    SEND_PACKET: SendPacket, RECV_PACKET: RecvPacket, KEEP_ALIVE: KeepAlive,
    NOTE_PREFERRED: NotePreferred, PEER_GONE: PeerGone, PEER_PRESENT: PeerPresent,
    FORWARD_PACKET: ForwardPacket, WATCH_CONNS: WatchConns, CLOSE_PEER: ClosePeer,
    PING: Ping, PONG: Pong, HEALTH: Health, RESTARTING: Restarting, FORWARD_IROH: ForwardIroh,
}


def decode_frame(ftype: int, payload: bytes):
    """One frame body -> its dataclass; unknown types come back as UnknownFrame."""
    cls = FRAME_TYPES.get(ftype)
    if cls is None:
        return UnknownFrame(ftype, bytes(payload))
    return cls.decode(payload)


class FrameDecoder:
    """Incremental splitter: feed() arbitrary chunks, then next_raw() until it returns None.

    `max_frame_len` bounds the one frame being buffered; a bigger length field is an error at
    once, before its body arrives. The limit can change between frames (ClientInfo vs. steady state).
    """

    __slots__ = ("max_frame_len", "_buf", "_pos")

    def __init__(self, max_frame_len: int) -> None:
        self.max_frame_len = max_frame_len
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def consume_to(self, pos: int) -> None:
        """The caller parsed the buffer in place (ServerConnection's hot path) up to `pos`."""
        if pos >= len(self._buf):
            self._buf = bytearray()  # drop the capacity too: idle connections stay small
            self._pos = 0
        else:
            self._pos = pos

    def next_raw(self) -> tuple[int, bytes] | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_HEADER_LEN:
            return None
        ftype, length = _HEADER.unpack_from(buf, pos)
        if length > self.max_frame_len:
            raise FrameTooLarge(f"frame type {ftype:#x} of {length} bytes exceeds {self.max_frame_len}")
        end = pos + FRAME_HEADER_LEN + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:  # one copy (a bytearray slice would be a second)
            payload = bytes(view[pos + FRAME_HEADER_LEN:end])
        if end == len(buf):
            self._buf = bytearray()  # drop the capacity too: idle connections stay small
            self._pos = 0
        else:
            self._pos = end
        return ftype, payload

    def next_frame(self):
        raw = self.next_raw()
        return None if raw is None else decode_frame(*raw)


def forward_batches(dst: bytes, frames: list) -> list[bytes]:
    """RecvPacket frames for `dst` as ForwardBatch frames (see forward_batch_runs)."""
    return [b"".join((forward_batch_head(dst, stop - start, size), *frames[start:stop]))
            for start, stop, size in forward_batch_runs(frames)]


def forward_batch_runs(frames: list) -> list[tuple[int, int, int]]:
    """(start, stop, bytes) of each ForwardBatch the frames go in: at most FORWARD_BATCH_MAX bytes of frames
    each (a frame bigger than that goes alone)."""
    runs: list[tuple[int, int, int]] = []
    start = size = 0
    for i, frame in enumerate(frames):
        if i > start and size + len(frame) > FORWARD_BATCH_MAX:
            runs.append((start, i, size))
            start, size = i, 0
        size += len(frame)
    if frames:
        runs.append((start, len(frames), size))
    return runs


def forward_batch_head(dst: bytes, count: int, size: int) -> bytes:
    """A ForwardBatch frame up to its `count` RecvPacket frames of `size` bytes (which follow unchanged)."""
    return _HEADER.pack(FORWARD_BATCH, KEY_LEN + 4 + size) + dst + count.to_bytes(4, "big")


def check_forward_batch(buf, start: int, end: int, count: int) -> int:
    """The payload bytes of the `count` RecvPacket frames in buf[start:end]; raises MalformedFrame unless they
    are exactly that many whole RecvPacket frames."""
    unpack, pos, payload = _HEADER.unpack_from, start, 0
    if count == 0:
        raise MalformedFrame("ForwardBatch: no frames")
    for _ in range(count):
        if end - pos < FRAME_HEADER_LEN + KEY_LEN:
            raise MalformedFrame("ForwardBatch: fewer frames than its count")
        ftype, length = unpack(buf, pos)
        if ftype != RECV_PACKET or length < KEY_LEN:
            raise MalformedFrame("ForwardBatch: holds a frame that is not a RecvPacket")
        pos += FRAME_HEADER_LEN + length
        payload += length - KEY_LEN
    if pos != end:
        raise MalformedFrame("ForwardBatch: length does not match its frames")
    return payload


def split_frames(data: bytes) -> list[bytes]:
    """Whole DERP frames laid end to end (a checked ForwardBatch's body) -> one bytes per frame."""
    unpack, pos, n, out = _HEADER.unpack_from, 0, len(data), []
    while pos < n:
        end = pos + FRAME_HEADER_LEN + unpack(data, pos)[1]
        out.append(data[pos:end])
        pos = end
    return out
