"""QUIC Address Discovery (QAD), as iroh relays serve it: the wire facts both ends speak, sans-IO.

A client opens a QUIC connection with ALPN `/iroh-qad/0` to the relay's QAD port; the relay reports the
address it sees the client's packets come from in an OBSERVED_ADDRESS frame (the address-discovery
extension of QUIC, draft-seemann-quic-address-discovery, as in n0's QUIC stacks that iroh uses). Which side
reports is negotiated with one transport parameter whose value is the sender's role. Its id moved between
drafts: iroh 1.x (noq) sends 0x9f81a176, iroh 0.90 to 0.9x (iroh-quinn) sent 0x9f81a174, and each ignores
the other's. We send both and read either (the newer one when a peer sends both).

    OBSERVED_ADDRESS frame: type varint (0x9f81a6 IPv4, 0x9f81a7 IPv6) | sequence number varint |
                            address (4 or 16 bytes) | port (u16, big-endian)
A receiver keeps the report with the highest sequence number (reports may be re-sent or reordered).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum

from .errors import WireError
from .iroh.frames import read_varint, write_varint

ALPN = "/iroh-qad/0"
DEFAULT_PORT = 7842  # iroh's DEFAULT_RELAY_QUIC_PORT
TRANSPORT_PARAMETER = 0x9F81A176         # noq, iroh 1.x
LEGACY_TRANSPORT_PARAMETER = 0x9F81A174  # iroh-quinn, iroh 0.90 to 0.9x
OBSERVED_IPV4 = 0x9F81A6
OBSERVED_IPV6 = 0x9F81A7
FRAME_TYPES = (OBSERVED_IPV4, OBSERVED_IPV6)


class Role(IntEnum):
    """The transport parameter's value: what the endpoint that sends it does."""

    PROVIDES = 0   # reports the peer's address, wants none
    RECEIVES = 1   # wants reports, sends none
    BOTH = 2

    def reports_to(self, peer: Role | None) -> bool:
        return self in (Role.PROVIDES, Role.BOTH) and peer in (Role.RECEIVES, Role.BOTH)


class QadError(WireError):
    """A malformed QAD transport parameter or OBSERVED_ADDRESS frame."""

    reason = "qad"


@dataclass(frozen=True)
class Observed:
    """One OBSERVED_ADDRESS report."""

    seq: int
    host: str
    port: int


def encode_parameter(role: Role) -> bytes:
    """The transport parameter under both ids, as appended to the others: id, length, value (varints)."""
    value = write_varint(int(role))
    return b"".join(write_varint(ident) + write_varint(len(value)) + value
                    for ident in (TRANSPORT_PARAMETER, LEGACY_TRANSPORT_PARAMETER))


def find_role(parameters: bytes) -> Role | None:
    """The peer's role from its encoded transport parameters; None when it did not offer QAD."""
    roles: dict[int, Role] = {}
    pos = 0
    try:
        while pos < len(parameters):
            ident, pos = read_varint(parameters, pos)
            length, pos = read_varint(parameters, pos)
            if pos + length > len(parameters):
                raise QadError("transport parameters truncated")
            if ident in (TRANSPORT_PARAMETER, LEGACY_TRANSPORT_PARAMETER):
                value, end = read_varint(parameters, pos)
                if end != pos + length:
                    raise QadError("address discovery parameter has trailing bytes")
                try:
                    roles[ident] = Role(value)
                except ValueError:
                    raise QadError(f"address discovery role {value} is not 0, 1 or 2") from None
            pos += length
    except WireError as exc:
        raise QadError(str(exc)) from None
    return roles.get(TRANSPORT_PARAMETER, roles.get(LEGACY_TRANSPORT_PARAMETER))


def observed_body(seq: int, host: str, port: int) -> tuple[int, bytes]:
    """(frame type, the frame after its type) for one report. An IPv4-mapped IPv6 address (a dual-stack
    socket's view of an IPv4 client) is reported as the IPv4 address it is."""
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    kind = OBSERVED_IPV4 if ip.version == 4 else OBSERVED_IPV6
    return kind, write_varint(seq) + ip.packed + struct.pack(">H", port)


def encode_observed(seq: int, host: str, port: int) -> bytes:
    """One OBSERVED_ADDRESS frame, type included."""
    kind, body = observed_body(seq, host, port)
    return write_varint(kind) + body


def parse_observed(frame_type: int, body: bytes, pos: int = 0) -> tuple[Observed, int]:
    """The frame whose type varint has been read, from `body[pos:]`; returns it and the next position."""
    if frame_type not in FRAME_TYPES:
        raise QadError(f"frame type {frame_type:#x} is not OBSERVED_ADDRESS")
    try:
        seq, pos = read_varint(body, pos)
    except WireError:
        raise QadError("OBSERVED_ADDRESS sequence number truncated") from None
    size = 4 if frame_type == OBSERVED_IPV4 else 16
    if pos + size + 2 > len(body):
        raise QadError("OBSERVED_ADDRESS frame truncated")
    packed = bytes(body[pos:pos + size])
    (port,) = struct.unpack_from(">H", body, pos + size)
    host = str(ipaddress.IPv4Address(packed) if size == 4 else ipaddress.IPv6Address(packed))
    return Observed(seq, host, port), pos + size + 2
