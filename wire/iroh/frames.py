"""iroh relay frames, sans-IO.

in:  one WebSocket binary message (bytes) per frame
out: frozen dataclasses with encode()/decode()

A frame is a QUIC varint frame type followed by its body; there is no length field because the
WebSocket message carries it. Handshake bodies (types 0-3) are postcard-serialised: fixed arrays are
raw bytes, byte strings and strings carry a LEB128 length. The layouts are those of the
iroh-relay crate that iroh 1.2 ships.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

from ..errors import WireError

KEY_LEN = 32
CHALLENGE_LEN = 16
SIGNATURE_LEN = 64
MAX_PACKET_SIZE = 64 * 1024        # largest datagram body a frame may carry
MAX_FRAME_SIZE = 1024 * 1024       # largest WebSocket message a client may send

SERVER_CHALLENGE = 0
CLIENT_AUTH = 1
SERVER_CONFIRMS_AUTH = 2
SERVER_DENIES_AUTH = 3
CLIENT_TO_RELAY_DATAGRAM = 4
CLIENT_TO_RELAY_DATAGRAM_BATCH = 5
RELAY_TO_CLIENT_DATAGRAM = 6
RELAY_TO_CLIENT_DATAGRAM_BATCH = 7
ENDPOINT_GONE = 8
PING = 9
PONG = 10
HEALTH = 11        # iroh-relay-v1 only
RESTARTING = 12
STATUS = 13        # iroh-relay-v2 only

STATUS_HEALTHY = 0
STATUS_SAME_ENDPOINT_ID_CONNECTED = 1
STATUS_RATE_LIMITED = 2


class IrohProtocolError(WireError):
    """A frame that does not follow the iroh relay protocol; the connection is closed."""

    reason = "iroh"


def read_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """QUIC variable-length integer (RFC 9000 16): returns (value, next position)."""
    if pos >= len(data):
        raise IrohProtocolError("empty frame")
    first = data[pos]
    length = 1 << (first >> 6)
    if pos + length > len(data):
        raise IrohProtocolError("truncated varint")
    value = first & 0x3F
    for b in data[pos + 1:pos + length]:
        value = (value << 8) | b
    return value, pos + length


def write_varint(value: int) -> bytes:
    if value < 1 << 6:
        return bytes([value])
    if value < 1 << 14:
        return struct.pack(">H", value | 0x4000)
    if value < 1 << 30:
        return struct.pack(">I", value | 0x8000_0000)
    return struct.pack(">Q", value | 0xC000_0000_0000_0000)


def read_leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise IrohProtocolError("truncated length")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise IrohProtocolError("length too long")


def write_leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@dataclass(frozen=True)
class ServerChallenge:
    challenge: bytes

    def encode(self) -> bytes:
        return bytes([SERVER_CHALLENGE]) + self.challenge


@dataclass(frozen=True)
class ClientAuth:
    public_key: bytes
    signature: bytes

    def encode(self) -> bytes:
        return (bytes([CLIENT_AUTH]) + self.public_key + write_leb128(len(self.signature))
                + self.signature)


@dataclass(frozen=True)
class ServerConfirmsAuth:
    def encode(self) -> bytes:
        return bytes([SERVER_CONFIRMS_AUTH])


@dataclass(frozen=True)
class ServerDeniesAuth:
    reason: str

    def encode(self) -> bytes:
        raw = self.reason.encode()
        return bytes([SERVER_DENIES_AUTH]) + write_leb128(len(raw)) + raw


@dataclass(frozen=True)
class Datagrams:
    """Types 4-7: one datagram, or a batch of equal-sized segments (the last may be shorter).

    `peer` is the destination when a client sends and the source when the relay delivers, so the
    relay forwards by swapping the id and copying the rest (`body`) byte for byte.
    """

    frame_type: int
    peer: bytes
    body: bytes  # ECN byte [+ u16 segment size] + datagram bytes

    @property
    def payload_len(self) -> int:
        batch = self.frame_type in (CLIENT_TO_RELAY_DATAGRAM_BATCH, RELAY_TO_CLIENT_DATAGRAM_BATCH)
        return len(self.body) - (3 if batch else 1)

    def delivered_from(self, source: bytes) -> Datagrams:
        kind = RELAY_TO_CLIENT_DATAGRAM if self.frame_type == CLIENT_TO_RELAY_DATAGRAM \
            else RELAY_TO_CLIENT_DATAGRAM_BATCH
        return Datagrams(kind, source, self.body)

    def encode(self) -> bytes:
        return bytes([self.frame_type]) + self.peer + self.body


@dataclass(frozen=True)
class EndpointGone:
    endpoint_id: bytes

    def encode(self) -> bytes:
        return bytes([ENDPOINT_GONE]) + self.endpoint_id


@dataclass(frozen=True)
class Ping:
    data: bytes

    def encode(self) -> bytes:
        return bytes([PING]) + self.data


@dataclass(frozen=True)
class Pong:
    data: bytes

    def encode(self) -> bytes:
        return bytes([PONG]) + self.data


@dataclass(frozen=True)
class Health:
    problem: str

    def encode(self) -> bytes:
        return bytes([HEALTH]) + self.problem.encode()


@dataclass(frozen=True)
class Restarting:
    reconnect_in_ms: int
    try_for_ms: int

    def encode(self) -> bytes:
        return struct.pack(">BII", RESTARTING, self.reconnect_in_ms, self.try_for_ms)


@dataclass(frozen=True)
class Status:
    code: int

    def encode(self) -> bytes:
        return bytes([STATUS, self.code])


@dataclass(frozen=True)
class KeyMaterialClientAuth:
    """The `x-iroh-relay-client-auth-v1` header login (TLS only): postcard {public_key [32],
    signature (LEB128 64 + 64 bytes), key_material_suffix [16]}, base64url without padding.

    The client signs the first 16 bytes of the TLS exporter value and sends the last 16, so a
    relay behind a TLS-terminating proxy sees a mismatch and falls back to the challenge.
    """

    public_key: bytes
    signature: bytes
    key_material_suffix: bytes

    def encode(self) -> bytes:
        return self.public_key + write_leb128(len(self.signature)) + self.signature + self.key_material_suffix

    def header_value(self) -> str:
        return base64.urlsafe_b64encode(self.encode()).rstrip(b"=").decode()

    @classmethod
    def decode(cls, raw: bytes) -> KeyMaterialClientAuth:
        if len(raw) < KEY_LEN + 1:
            raise IrohProtocolError("client auth header too short")
        n, pos = read_leb128(raw, KEY_LEN)
        if n != SIGNATURE_LEN or len(raw) != pos + n + CHALLENGE_LEN:
            raise IrohProtocolError("bad client auth header layout")
        return cls(raw[:KEY_LEN], raw[pos:pos + n], raw[pos + n:])

    @classmethod
    def from_header(cls, value: str) -> KeyMaterialClientAuth:
        text = value.strip()
        if len(text) > 256:
            raise IrohProtocolError("client auth header too long")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as exc:
            raise IrohProtocolError("client auth header is not base64url") from exc
        return cls.decode(raw)


Frame = (ServerChallenge | ClientAuth | ServerConfirmsAuth | ServerDeniesAuth | Datagrams | EndpointGone
         | Ping | Pong | Health | Restarting | Status)


def _exact(body: bytes, n: int, name: str) -> bytes:
    if len(body) != n:
        raise IrohProtocolError(f"{name} must be {n} bytes, got {len(body)}")
    return body


def decode(message: bytes) -> Frame:
    """Decode one WebSocket message. Unknown types and bad layouts raise IrohProtocolError."""
    if len(message) > MAX_FRAME_SIZE:
        raise IrohProtocolError("frame too large")
    kind, pos = read_varint(message)
    body = bytes(message[pos:])
    if kind in (CLIENT_TO_RELAY_DATAGRAM, RELAY_TO_CLIENT_DATAGRAM,
                CLIENT_TO_RELAY_DATAGRAM_BATCH, RELAY_TO_CLIENT_DATAGRAM_BATCH):
        batch = kind in (CLIENT_TO_RELAY_DATAGRAM_BATCH, RELAY_TO_CLIENT_DATAGRAM_BATCH)
        header = KEY_LEN + (3 if batch else 1)
        if len(body) < header:
            raise IrohProtocolError("datagram frame too short")
        if len(body) - KEY_LEN > MAX_PACKET_SIZE + 3:
            raise IrohProtocolError("datagram too large")
        return Datagrams(kind, body[:KEY_LEN], body[KEY_LEN:])
    if kind == PING:
        return Ping(_exact(body, 8, "ping"))
    if kind == PONG:
        return Pong(_exact(body, 8, "pong"))
    if kind == SERVER_CHALLENGE:
        return ServerChallenge(_exact(body, CHALLENGE_LEN, "challenge"))
    if kind == CLIENT_AUTH:
        if len(body) < KEY_LEN + 1:
            raise IrohProtocolError("client auth too short")
        sig_len, sig_pos = read_leb128(body, KEY_LEN)
        if sig_len != SIGNATURE_LEN or len(body) != sig_pos + sig_len:
            raise IrohProtocolError("client auth signature must be 64 bytes")
        return ClientAuth(body[:KEY_LEN], body[sig_pos:])
    if kind == SERVER_CONFIRMS_AUTH:
        return ServerConfirmsAuth()
    if kind == SERVER_DENIES_AUTH:
        n, p = read_leb128(body, 0)
        if len(body) != p + n:
            raise IrohProtocolError("bad denial reason length")
        return ServerDeniesAuth(_utf8(body[p:]))
    if kind == ENDPOINT_GONE:
        return EndpointGone(_exact(body, KEY_LEN, "endpoint id"))
    if kind == HEALTH:
        return Health(_utf8(body))
    if kind == RESTARTING:
        a, b = struct.unpack(">II", _exact(body, 8, "restarting"))
        return Restarting(a, b)
    if kind == STATUS:
        return Status(_exact(body, 1, "status")[0])
    raise IrohProtocolError(f"unknown frame type {kind}")


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise IrohProtocolError("text is not UTF-8") from exc
