"""NAT-PMP (RFC 6886), sans-IO: the two requests a client sends to its gateway on UDP 5351 and their answers.

in:  the bytes of one datagram from the gateway
out: `ExternalAddress(epoch, ip)` or `PortMapping(protocol, epoch, internal_port, external_port, lifetime)`,
     or `NatPmpError` (a result code other than success, or a datagram that is not a NAT-PMP answer)

Requests: `external_address_request()` (version 0, opcode 0) and `map_request(protocol, internal_port,
suggested_external_port, lifetime)` (opcode 1 UDP / 2 TCP; lifetime 0 deletes the mapping). Answers carry
opcode + 128. The client retransmits at 250 ms, doubling (RFC 6886 3.1); `RETRY_DELAYS` bounds it.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

PORT = 5351
VERSION = 0
OP_EXTERNAL_ADDRESS, OP_MAP_UDP, OP_MAP_TCP = 0, 1, 2
RESPONSE_BIT = 128
RETRY_DELAYS = (0.25, 0.5, 1.0)  # seconds waited after each send before the next (RFC: 250 ms doubling)

RESULTS = {0: "success", 1: "unsupported version", 2: "not authorized or refused", 3: "network failure",
           4: "out of resources", 5: "unsupported opcode"}

_ADDR_ANSWER = struct.Struct("!BBHI4s")  # version, op, result, epoch, external IPv4
_MAP_ANSWER = struct.Struct("!BBHIHHI")  # version, op, result, epoch, internal, external, lifetime
_MAP_REQUEST = struct.Struct("!BBHHHI")  # version, op, reserved, internal, suggested external, lifetime


class NatPmpError(Exception):
    """The gateway refused (result code) or sent something that is not a NAT-PMP answer."""

    def __init__(self, message: str, result: int | None = None):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class ExternalAddress:
    epoch: int  # seconds since the gateway's mapping table started
    ip: str


@dataclass(frozen=True)
class PortMapping:
    protocol: str  # "udp" | "tcp"
    epoch: int
    internal_port: int
    external_port: int
    lifetime: int  # seconds granted; 0 = deleted


def external_address_request() -> bytes:
    return bytes((VERSION, OP_EXTERNAL_ADDRESS))


def map_request(protocol: str, internal_port: int, suggested_external_port: int = 0, lifetime: int = 7200) -> bytes:
    op = {"udp": OP_MAP_UDP, "tcp": OP_MAP_TCP}[protocol]
    if not 0 < internal_port < 65536 or not 0 <= suggested_external_port < 65536 or not 0 <= lifetime < 2**32:
        raise ValueError("port or lifetime out of range")
    return _MAP_REQUEST.pack(VERSION, op, 0, internal_port, suggested_external_port, lifetime)


def _check(data: bytes, op: int, size: int) -> None:
    if len(data) < 4 or data[0] != VERSION:
        raise NatPmpError("not a NAT-PMP answer")
    if data[1] != op | RESPONSE_BIT:
        raise NatPmpError(f"answer to opcode {data[1] & 0x7F}, expected {op}")
    result = struct.unpack_from("!H", data, 2)[0]
    if result:
        raise NatPmpError(f"gateway said {RESULTS.get(result, f'result {result}')}", result)
    if len(data) < size:
        raise NatPmpError(f"answer of {len(data)} bytes, expected {size}")


def parse_external_address(data: bytes) -> ExternalAddress:
    _check(data, OP_EXTERNAL_ADDRESS, _ADDR_ANSWER.size)
    _v, _op, _r, epoch, ip = _ADDR_ANSWER.unpack_from(data)
    return ExternalAddress(epoch, socket.inet_ntoa(ip))


def parse_map(data: bytes, protocol: str) -> PortMapping:
    op = {"udp": OP_MAP_UDP, "tcp": OP_MAP_TCP}[protocol]
    _check(data, op, _MAP_ANSWER.size)
    _v, _op, _r, epoch, internal, external, lifetime = _MAP_ANSWER.unpack_from(data)
    return PortMapping(protocol, epoch, internal, external, lifetime)
