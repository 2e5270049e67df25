"""PCP (RFC 6887), sans-IO: the ANNOUNCE and MAP requests a client sends to its gateway on UDP 5351, and
the answers. netcheck sends ANNOUNCE to learn whether the gateway speaks PCP; mappings use NAT-PMP
(natpmp.py), which PCP servers on home routers (miniupnpd) answer as well.

in:  the bytes of one datagram from the gateway
out: `Answer(opcode, result, lifetime, epoch, body)` and, for MAP, `MapAnswer`; or `PcpError` (a result
     code other than success, or a datagram that is not a PCP answer)

Request header: version 2 | R=0,opcode | reserved 16 | lifetime 32 | client IP 128 (IPv4 as ::ffff:a.b.c.d).
Answer header:  version 2 | R=1,opcode | reserved 8 | result 8 | lifetime 32 | epoch 32 | reserved 96.
MAP body: nonce 96 | protocol 8 | reserved 24 | internal port 16 | external port 16 | external IP 128.
A NAT-PMP-only gateway answers a PCP request with NAT-PMP's "unsupported version" (version 0).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

PORT = 5351
VERSION = 2
OP_ANNOUNCE, OP_MAP = 0, 1
RESPONSE_BIT = 0x80
PROTOCOLS = {"tcp": 6, "udp": 17}

RESULTS = {0: "success", 1: "unsupported version", 2: "not authorized", 3: "malformed request",
           4: "unsupported opcode", 5: "unsupported option", 6: "malformed option", 7: "network failure",
           8: "no resources", 9: "unsupported protocol", 10: "user exceeded quota",
           11: "cannot provide external", 12: "address mismatch", 13: "excessive remote peers"}

_REQUEST = struct.Struct("!BBHI16s")  # 24 bytes
_ANSWER = struct.Struct("!BBBBII12x")  # 24 bytes
_MAP = struct.Struct("!12sB3xHH16s")  # 36 bytes


class PcpError(Exception):
    """The gateway refused (result code) or sent something that is not a PCP answer."""

    def __init__(self, message: str, result: int | None = None):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class Answer:
    opcode: int
    result: int
    lifetime: int
    epoch: int
    body: bytes


@dataclass(frozen=True)
class MapAnswer:
    nonce: bytes
    protocol: str
    internal_port: int
    external_port: int
    external_ip: str
    lifetime: int
    epoch: int


def _ip16(ip: str) -> bytes:
    addr = ipaddress.ip_address(ip)
    return (ipaddress.IPv6Address(f"::ffff:{addr}") if addr.version == 4 else addr).packed


def _ip_str(raw: bytes) -> str:
    addr = ipaddress.IPv6Address(raw)
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)


def announce_request(client_ip: str) -> bytes:
    return _REQUEST.pack(VERSION, OP_ANNOUNCE, 0, 0, _ip16(client_ip))


def map_request(nonce: bytes, protocol: str, internal_port: int, client_ip: str, *, lifetime: int = 7200,
                suggested_port: int = 0, suggested_ip: str = "0.0.0.0") -> bytes:
    if len(nonce) != 12:
        raise ValueError("the MAP nonce is 12 bytes")
    if not 0 < internal_port < 65536 or not 0 <= suggested_port < 65536 or not 0 <= lifetime < 2**32:
        raise ValueError("port or lifetime out of range")
    head = _REQUEST.pack(VERSION, OP_MAP, 0, lifetime, _ip16(client_ip))
    return head + _MAP.pack(nonce, PROTOCOLS[protocol], internal_port, suggested_port, _ip16(suggested_ip))


def parse_answer(data: bytes, opcode: int) -> Answer:
    if len(data) < 2 or data[0] != VERSION:
        raise PcpError("not a PCP answer" + (" (NAT-PMP only)" if data[:1] == b"\0" else ""))
    if data[1] != opcode | RESPONSE_BIT:
        raise PcpError(f"answer to opcode {data[1] & 0x7F}, expected {opcode}")
    if len(data) < _ANSWER.size or len(data) % 4:
        raise PcpError(f"answer of {len(data)} bytes")
    _v, _op, _r, result, lifetime, epoch = _ANSWER.unpack_from(data)
    if result:
        raise PcpError(f"gateway said {RESULTS.get(result, f'result {result}')}", result)
    return Answer(opcode, result, lifetime, epoch, bytes(data[_ANSWER.size:]))


def parse_map(data: bytes, nonce: bytes) -> MapAnswer:
    a = parse_answer(data, OP_MAP)
    if len(a.body) < _MAP.size:
        raise PcpError(f"MAP answer body of {len(a.body)} bytes, expected {_MAP.size}")
    got_nonce, proto, internal, external, ip = _MAP.unpack_from(a.body)
    if got_nonce != nonce:
        raise PcpError("MAP answer for another request (nonce)")
    names = {v: k for k, v in PROTOCOLS.items()}
    return MapAnswer(got_nonce, names.get(proto, str(proto)), internal, external, _ip_str(ip), a.lifetime, a.epoch)
