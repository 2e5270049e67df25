"""The PROXY protocol (HAProxy's, versions 1 and 2): a balancer tells the server who the client is.

A TCP-mode balancer (HAProxy's `send-proxy-v2`, AWS NLB, many Kubernetes load balancers) opens its own
connection to the server, so the socket's peer address is the balancer's. With the PROXY protocol it
first writes one header naming the client's address, then the client's bytes unchanged. This module
reads and writes that header; it does no I/O.

Version 2 (binary), as HAProxy sends it:

    12 bytes  signature  0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A
     1 byte   version (high nibble, 2) | command (low nibble: 0 LOCAL, 1 PROXY)
     1 byte   family (high: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX) | transport (low: 0 UNSPEC, 1 STREAM, 2 DGRAM)
     2 bytes  length of what follows (big-endian)
     INET: source (4), destination (4), source port (2), destination port (2); INET6: 16, 16, 2, 2;
     UNIX: 108 + 108; then TLVs (type 1 byte, length 2 bytes, value) to the end.

Version 1 (text): `PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\\r\\n` (TCP6 likewise, or
`PROXY UNKNOWN ...\\r\\n`), at most 107 bytes. A LOCAL command (a balancer's own health check) and
UNSPEC/UNIX/UNKNOWN addresses carry no client: the server keeps the socket's address.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from burrow.wire.errors import WireError

SIGNATURE_V2 = b"\r\n\r\n\x00\r\nQUIT\n"
PREFIX_V1 = b"PROXY "
MAX_V1 = 107          # the whole v1 line, CRLF included (the specification's limit)
MAX_V2_PAYLOAD = 4096  # what we accept after the 16-byte v2 head; HAProxy's TLVs stay far below
_V2_HEAD = struct.Struct("!12sBBH")
_CMD_LOCAL, _CMD_PROXY = 0x0, 0x1
_AF_UNSPEC, _AF_INET, _AF_INET6, _AF_UNIX = 0x0, 0x1, 0x2, 0x3
_ADDR_LEN = {_AF_UNSPEC: 0, _AF_INET: 12, _AF_INET6: 36, _AF_UNIX: 216}


class ProxyProtocolError(WireError):
    """The connection did not start with a valid PROXY header. `reason`: missing, malformed, too_long."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


Address = tuple[str, int]


@dataclass(frozen=True)
class ProxyHeader:
    """One parsed header. `source` is the client (None: keep the socket's own address)."""

    version: int
    source: Address | None
    destination: Address | None
    local: bool = False  # the balancer's own connection (LOCAL command), not a client's
    tlvs: tuple[tuple[int, bytes], ...] = ()


def encode_v2(source: Address | None, destination: Address | None, *, local: bool = False,
              tlvs: tuple[tuple[int, bytes], ...] = ()) -> bytes:
    """A v2 header: PROXY over TCP from `source` to `destination`, or LOCAL (no addresses)."""
    if local or source is None or destination is None:
        body, fam, cmd = b"", 0x00, _CMD_LOCAL if local or source is None else _CMD_PROXY
    else:
        src, dst = ipaddress.ip_address(source[0]), ipaddress.ip_address(destination[0])
        if src.version != dst.version:
            raise ValueError("source and destination must be the same address family")
        fam = 0x11 if src.version == 4 else 0x21
        body, cmd = src.packed + dst.packed + struct.pack("!HH", source[1], destination[1]), _CMD_PROXY
    body += b"".join(struct.pack("!BH", t, len(v)) + v for t, v in tlvs)
    return _V2_HEAD.pack(SIGNATURE_V2, 0x20 | cmd, fam, len(body)) + body


def encode_v1(source: Address | None, destination: Address | None) -> bytes:
    """A v1 line; `PROXY UNKNOWN\\r\\n` without addresses."""
    if source is None or destination is None:
        return b"PROXY UNKNOWN\r\n"
    proto = "TCP4" if ipaddress.ip_address(source[0]).version == 4 else "TCP6"
    return f"PROXY {proto} {source[0]} {destination[0]} {source[1]} {destination[1]}\r\n".encode()


class HeaderReader:
    """Feed the first bytes of a connection; `feed` returns (header, bytes after it) or None (need more).

    Raises ProxyProtocolError as soon as the bytes cannot be a header (`missing` when they do not even
    start like one: a client that connected directly), or when a header is malformed or too long.
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> tuple[ProxyHeader, bytes] | None:
        buf = self._buf + data
        self._buf = buf
        n = min(len(buf), len(SIGNATURE_V2))
        if buf[:n] == SIGNATURE_V2[:n]:
            return self._v2(buf) if n == len(SIGNATURE_V2) else None
        n = min(len(buf), len(PREFIX_V1))
        if buf[:n] == PREFIX_V1[:n]:
            return self._v1(buf) if n == len(PREFIX_V1) else None
        raise ProxyProtocolError("missing", "the connection did not start with a PROXY protocol header")

    def _v2(self, buf: bytes) -> tuple[ProxyHeader, bytes] | None:
        if len(buf) < _V2_HEAD.size:
            return None
        _sig, ver_cmd, fam, length = _V2_HEAD.unpack_from(buf)
        if ver_cmd >> 4 != 2 or ver_cmd & 0xF not in (_CMD_LOCAL, _CMD_PROXY):
            raise ProxyProtocolError("malformed", f"PROXY v2: bad version/command byte 0x{ver_cmd:02x}")
        family, transport = fam >> 4, fam & 0xF
        if family not in _ADDR_LEN or transport > 2:
            raise ProxyProtocolError("malformed", f"PROXY v2: bad family/transport byte 0x{fam:02x}")
        if length > MAX_V2_PAYLOAD:
            raise ProxyProtocolError("too_long", f"PROXY v2: {length} bytes of addresses and TLVs")
        end = _V2_HEAD.size + length
        if len(buf) < end:
            return None
        body, rest = buf[_V2_HEAD.size:end], buf[end:]
        need = _ADDR_LEN[family]
        if len(body) < need:
            raise ProxyProtocolError("malformed", f"PROXY v2: {len(body)} bytes cannot hold the addresses")
        source = destination = None
        if family == _AF_INET:
            source = (str(ipaddress.IPv4Address(body[0:4])), int.from_bytes(body[8:10], "big"))
            destination = (str(ipaddress.IPv4Address(body[4:8])), int.from_bytes(body[10:12], "big"))
        elif family == _AF_INET6:
            source = (str(ipaddress.IPv6Address(body[0:16])), int.from_bytes(body[32:34], "big"))
            destination = (str(ipaddress.IPv6Address(body[16:32])), int.from_bytes(body[34:36], "big"))
        local = ver_cmd & 0xF == _CMD_LOCAL
        if local:
            source = destination = None
        self._buf = b""
        return ProxyHeader(2, source, destination, local, _tlvs(body[need:])), rest

    def _v1(self, buf: bytes) -> tuple[ProxyHeader, bytes] | None:
        end = buf.find(b"\r\n", 0, MAX_V1)
        if end < 0:
            if len(buf) >= MAX_V1:
                raise ProxyProtocolError("too_long", f"PROXY v1: no CRLF within {MAX_V1} bytes")
            return None
        line, rest = buf[:end], buf[end + 2:]
        self._buf = b""
        parts = line.split(b" ")
        if len(parts) >= 2 and parts[1] == b"UNKNOWN":
            return ProxyHeader(1, None, None), rest
        if len(parts) != 6 or parts[1] not in (b"TCP4", b"TCP6"):
            raise ProxyProtocolError("malformed", "PROXY v1: expected 'PROXY TCP4|TCP6 SRC DST SPORT DPORT'")
        version = 4 if parts[1] == b"TCP4" else 6
        try:
            src, dst = (ipaddress.ip_address(p.decode("ascii")) for p in parts[2:4])
            sport, dport = (_port(p) for p in parts[4:6])
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProxyProtocolError("malformed", f"PROXY v1: {exc}") from None
        if src.version != version or dst.version != version:
            raise ProxyProtocolError("malformed", f"PROXY v1: addresses are not IPv{version}")
        return ProxyHeader(1, (str(src), sport), (str(dst), dport)), rest


def _port(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 5 or (len(raw) > 1 and raw[:1] == b"0") or int(raw) > 65535:
        raise ValueError(f"bad port {raw[:8]!r}")
    return int(raw)


def _tlvs(data: bytes) -> tuple[tuple[int, bytes], ...]:
    out = []
    i = 0
    while i < len(data):
        if i + 3 > len(data):
            raise ProxyProtocolError("malformed", "PROXY v2: truncated TLV")
        kind, length = data[i], int.from_bytes(data[i + 1:i + 3], "big")
        if i + 3 + length > len(data):
            raise ProxyProtocolError("malformed", "PROXY v2: TLV runs past the header")
        out.append((kind, data[i + 3:i + 3 + length]))
        i += 3 + length
    return tuple(out)
