"""STUN Binding (RFC 5389, with RFC 3489 "classic" clients), sans-IO.

in:  one UDP datagram (bytes) and, for the server side, the sender's address.
out: the answer datagram, or a `StunError` (the caller then stays silent and counts it).

Server side: `BindingRequest.decode` validates a request strictly (type, length, cookie, attribute
TLVs with padding, FINGERPRINT when present); `Responder.answer` is the precompiled hot path that
turns a valid request into a Binding success (XOR-MAPPED-ADDRESS for RFC 5389, MAPPED-ADDRESS for
RFC 3489 clients, SOFTWARE, FINGERPRINT) or a 420 error when the request carries
comprehension-required attributes we do not implement (for example RESPONSE-ADDRESS, which would
turn us into a reflector, or a CHANGE-REQUEST we cannot honour with a single address).
Client side: `build_binding_request` and `parse_binding_response` (used by `burrow relay-probe`).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from zlib import crc32

from .errors import WireError

MAGIC_COOKIE = 0x2112A442
FINGERPRINT_XOR = 0x5354554E
HEADER_SIZE = 20

BINDING_REQUEST = 0x0001
BINDING_SUCCESS = 0x0101
BINDING_ERROR = 0x0111

MAPPED_ADDRESS = 0x0001
CHANGE_REQUEST = 0x0003
USERNAME = 0x0006
MESSAGE_INTEGRITY = 0x0008
ERROR_CODE = 0x0009
UNKNOWN_ATTRIBUTES = 0x000A
REALM = 0x0014
NONCE = 0x0015
MESSAGE_INTEGRITY_SHA256 = 0x001C
USERHASH = 0x001E
XOR_MAPPED_ADDRESS = 0x0020
PRIORITY = 0x0024
USE_CANDIDATE = 0x0025
OLD_XOR_MAPPED_ADDRESS = 0x8020  # draft-era code point some old servers still send
SOFTWARE = 0x8022
FINGERPRINT = 0x8028

# Comprehension-required attributes a Binding request may carry that need no action from an
# unauthenticated server: credentials (we ask for none) and ICE connectivity-check fields.
_HARMLESS_REQUIRED = frozenset({USERNAME, MESSAGE_INTEGRITY, MESSAGE_INTEGRITY_SHA256, USERHASH,
                                REALM, NONCE, PRIORITY, USE_CANDIDATE})
CHANGE_IP_OR_PORT = 0x06
MAX_SOFTWARE_BYTES = 763  # RFC 5389 15.10: fewer than 128 characters
MAX_UNKNOWN_LISTED = 16   # bounds the size of a 420 answer (no amplification through it)
DEFAULT_SOFTWARE = "burrow"

_HEADER = struct.Struct("!HHI")
_FULL_HEADER = struct.Struct("!HHI12s")
_ATTR = struct.Struct("!HH")
_U32 = struct.Struct("!I")
_FINGERPRINT_HEAD = _ATTR.pack(FINGERPRINT, 4)
# XOR-MAPPED-ADDRESS for IPv4: type, length 8, reserved 0, family 1, x-port, x-address.
_XOR_V4 = struct.Struct("!HHBBHI")
_COOKIE_BYTES = _U32.pack(MAGIC_COOKIE)


class StunError(WireError):
    """Anything that makes a datagram unanswerable or a response unusable."""

    reason = "stun"


class NotStun(StunError):
    """The header is not a STUN header (too short, top bits set, length mismatch)."""


class NotBindingRequest(StunError):
    """A well-formed STUN header of another type (indication, response, other method)."""


class MalformedAttribute(StunError):
    """The attribute list is truncated, overruns the message, or has a bad value."""


class BadFingerprint(StunError):
    """FINGERPRINT is present but does not match, or is not the last attribute."""


class ErrorResponse(StunError):
    """Client side: the server answered with a Binding error response."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"STUN error {code}: {reason}")
        self.code = code
        self.reason = reason


def _pad(n: int) -> int:
    return (n + 3) & ~3


def _walk(data: bytes, start: int = HEADER_SIZE) -> list[tuple[int, int, int]]:
    """Validate the attribute TLVs and return (type, value offset, value length) per attribute.

    Attributes after MESSAGE-INTEGRITY are dropped (RFC 5389 15.4) except FINGERPRINT, which must be
    last and must match CRC-32 of everything before it XOR 0x5354554e.
    """
    end = len(data)
    attrs: list[tuple[int, int, int]] = []
    protected = False
    pos = start
    while pos < end:
        if pos + 4 > end:
            raise MalformedAttribute("truncated attribute header")
        atype, alen = _ATTR.unpack_from(data, pos)
        value = pos + 4
        nxt = value + _pad(alen)
        if nxt > end:
            raise MalformedAttribute(f"attribute 0x{atype:04x} overruns the message")
        if atype == FINGERPRINT:
            if alen != 4:
                raise MalformedAttribute("FINGERPRINT must be 4 bytes")
            if nxt != end:
                raise BadFingerprint("FINGERPRINT is not the last attribute")
            if crc32(data[:pos]) ^ FINGERPRINT_XOR != _U32.unpack_from(data, value)[0]:
                raise BadFingerprint("FINGERPRINT does not match")
            attrs.append((atype, value, alen))
        elif not protected:
            if atype == MESSAGE_INTEGRITY:
                if alen != 20:
                    raise MalformedAttribute("MESSAGE-INTEGRITY must be 20 bytes")
                protected = True
            elif atype == MESSAGE_INTEGRITY_SHA256:
                if alen < 16 or alen > 32 or alen & 3:
                    raise MalformedAttribute("MESSAGE-INTEGRITY-SHA256 must be 16 to 32 bytes")
                protected = True
            attrs.append((atype, value, alen))
        pos = nxt
    return attrs


def _header(data: bytes) -> tuple[int, bytes]:
    """Check the 20-byte header; return (message type, transaction id: 16 bytes if no cookie)."""
    if len(data) < HEADER_SIZE:
        raise NotStun("shorter than a STUN header")
    mtype, length, cookie = _HEADER.unpack_from(data)
    if mtype & 0xC000 or length & 3 or length + HEADER_SIZE != len(data):
        raise NotStun("not a STUN header")
    return mtype, bytes(data[8:20] if cookie == MAGIC_COOKIE else data[4:20])


def _software(data: bytes, value: int, alen: int) -> str:
    if alen > MAX_SOFTWARE_BYTES:
        raise MalformedAttribute("SOFTWARE is too long")
    try:
        return bytes(data[value:value + alen]).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedAttribute("SOFTWARE is not UTF-8") from None


def _check_txid(txid: bytes) -> None:
    if len(txid) not in (12, 16):
        raise ValueError("transaction id is 12 bytes (RFC 5389) or 16 bytes (RFC 3489)")


def _finish(mtype: int, txid: bytes, body: bytes, fingerprint: bool) -> bytes:
    """Prepend the header (cookie + 12-byte id, or a 16-byte classic id) and append FINGERPRINT."""
    classic = len(txid) == 16
    if fingerprint and not classic:
        head = _ATTR.pack(mtype, len(body) + 8) + _COOKIE_BYTES + txid
        msg = head + body
        return msg + _FINGERPRINT_HEAD + _U32.pack(crc32(msg) ^ FINGERPRINT_XOR)
    prefix = b"" if classic else _COOKIE_BYTES
    return _ATTR.pack(mtype, len(body)) + prefix + txid + body


def _software_attr(software: str | None, classic: bool = False) -> bytes:
    """SOFTWARE (RFC 3489's SERVER) attribute. RFC 3489 clients such as Debian's `stun` reject a
    value whose length is not a multiple of 4, so for them the text itself is padded with spaces."""
    if not software:
        return b""
    raw = software.encode("utf-8")
    if classic:
        raw += b" " * (_pad(len(raw)) - len(raw))
    if len(raw) > MAX_SOFTWARE_BYTES:
        raise ValueError("SOFTWARE is too long")
    return _ATTR.pack(SOFTWARE, len(raw)) + raw + b"\x00" * (_pad(len(raw)) - len(raw))


def _address_value(packed: bytes, port: int, txid: bytes | None) -> bytes:
    """MAPPED-ADDRESS value, or XOR-MAPPED-ADDRESS when the 12-byte txid is given."""
    family = 1 if len(packed) == 4 else 2
    if txid is None:
        return bytes((0, family)) + port.to_bytes(2, "big") + packed
    mask = (_COOKIE_BYTES + txid)[:len(packed)]
    xored = (int.from_bytes(packed, "big") ^ int.from_bytes(mask, "big")).to_bytes(len(packed), "big")
    return bytes((0, family)) + (port ^ (MAGIC_COOKIE >> 16)).to_bytes(2, "big") + xored


def _parse_address(data: bytes, value: int, alen: int, txid: bytes | None) -> tuple[str, int]:
    if alen < 4:
        raise MalformedAttribute("address attribute too short")
    family, port = data[value + 1], int.from_bytes(data[value + 2:value + 4], "big")
    size = {1: 4, 2: 16}.get(family)
    if size is None or alen != 4 + size:
        raise MalformedAttribute("bad address family or length")
    raw = bytes(data[value + 4:value + 4 + size])
    if txid is not None:
        port ^= MAGIC_COOKIE >> 16
        mask = (_COOKIE_BYTES + txid)[:size]
        raw = (int.from_bytes(raw, "big") ^ int.from_bytes(mask, "big")).to_bytes(size, "big")
    return socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, raw), port


def pack_ip(ip: str) -> bytes:
    """4 bytes for IPv4 (also for IPv4-mapped IPv6 from a dual-stack socket), 16 for IPv6."""
    if ":" not in ip:
        return socket.inet_pton(socket.AF_INET, ip)
    raw = socket.inet_pton(socket.AF_INET6, ip.partition("%")[0])
    if raw[:12] == b"\x00" * 10 + b"\xff\xff":
        return raw[12:]
    return raw


@dataclass(frozen=True, slots=True)
class BindingRequest:
    """A Binding request. `txid` has 12 bytes (RFC 5389) or 16 bytes (classic RFC 3489, no cookie)."""

    txid: bytes
    software: str | None = None
    fingerprint: bool = False
    # Decode only: comprehension-required attributes we do not implement (answered with 420).
    unknown: tuple[int, ...] = ()

    @property
    def classic(self) -> bool:
        return len(self.txid) == 16

    def encode(self) -> bytes:
        _check_txid(self.txid)
        return _finish(BINDING_REQUEST, self.txid, _software_attr(self.software), self.fingerprint)

    @classmethod
    def decode(cls, data: bytes) -> BindingRequest:
        mtype, txid = _header(data)
        if mtype != BINDING_REQUEST:
            raise NotBindingRequest(f"message type 0x{mtype:04x} is not a Binding request")
        if len(data) == HEADER_SIZE:  # the common case: no attributes at all
            return cls(txid)
        software = None
        fingerprint = False
        unknown: list[int] = []
        for atype, value, alen in _walk(data):
            if atype == FINGERPRINT:
                fingerprint = True
            elif atype == SOFTWARE:
                software = _software(data, value, alen)
            elif atype == CHANGE_REQUEST:
                if alen != 4:
                    raise MalformedAttribute("CHANGE-REQUEST must be 4 bytes")
                # Flags set ask for an answer from another address, which a one-address server
                # cannot give: say so (RFC 5780 7.2) instead of letting the client misread our answer.
                if data[value + 3] & CHANGE_IP_OR_PORT and atype not in unknown:
                    unknown.append(atype)
            elif atype < 0x8000 and atype not in _HARMLESS_REQUIRED and atype not in unknown:
                unknown.append(atype)
        return cls(txid, software, fingerprint, tuple(unknown[:MAX_UNKNOWN_LISTED]))


@dataclass(frozen=True, slots=True)
class BindingSuccess:
    """A Binding success response carrying the address the server saw."""

    txid: bytes
    ip: str
    port: int
    software: str | None = DEFAULT_SOFTWARE

    def encode(self) -> bytes:
        _check_txid(self.txid)
        return _success(self.txid, pack_ip(self.ip), self.port,
                        _software_attr(self.software, classic=len(self.txid) == 16))

    @classmethod
    def decode(cls, data: bytes, txid: bytes) -> BindingSuccess:
        mtype, got = _header(data)
        if got != txid:
            raise StunError("transaction id does not match the request")
        attrs = _walk(data)
        if mtype == BINDING_ERROR:
            raise _error_from(data, attrs)
        if mtype != BINDING_SUCCESS:
            raise NotStun(f"message type 0x{mtype:04x} is not a Binding response")
        found: dict[int, tuple[int, int]] = {}
        for atype, value, alen in attrs:
            found.setdefault(atype, (value, alen))
        software = _software(data, *found[SOFTWARE]) if SOFTWARE in found else None
        # RFC 5389 servers send XOR-MAPPED-ADDRESS (or the draft-era 0x8020); classic ones MAPPED-ADDRESS.
        order = (MAPPED_ADDRESS,) if len(txid) == 16 else (XOR_MAPPED_ADDRESS, OLD_XOR_MAPPED_ADDRESS,
                                                            MAPPED_ADDRESS)
        for atype in order:
            if atype in found:
                ip, port = _parse_address(data, *found[atype], None if atype == MAPPED_ADDRESS else txid)
                return cls(txid, ip, port, software)
        raise MalformedAttribute("response carries no mapped address")


@dataclass(frozen=True, slots=True)
class BindingErrorResponse:
    """A Binding error response; we only ever send 420 Unknown Attribute."""

    txid: bytes
    code: int
    reason: str
    unknown: tuple[int, ...] = ()
    software: str | None = DEFAULT_SOFTWARE

    def encode(self) -> bytes:
        _check_txid(self.txid)
        reason = self.reason.encode("utf-8")[:128]
        value = bytes((0, 0, self.code // 100, self.code % 100)) + reason
        body = _ATTR.pack(ERROR_CODE, len(value)) + value + b"\x00" * (_pad(len(value)) - len(value))
        if self.unknown:
            listed = list(self.unknown[:MAX_UNKNOWN_LISTED])
            if len(self.txid) == 16 and len(listed) % 2:
                listed.append(listed[-1])  # RFC 3489 11.2.11: repeat one to reach a multiple of 4
            value = struct.pack(f"!{len(listed)}H", *listed)
            body += _ATTR.pack(UNKNOWN_ATTRIBUTES, len(value)) + value
            body += b"\x00" * (_pad(len(value)) - len(value))
        body += _software_attr(self.software, classic=len(self.txid) == 16)
        return _finish(BINDING_ERROR, self.txid, body, fingerprint=True)


def _error_from(data: bytes, attrs: list[tuple[int, int, int]]) -> ErrorResponse:
    for atype, value, alen in attrs:
        if atype == ERROR_CODE and alen >= 4:
            code = (data[value + 2] & 7) * 100 + data[value + 3]
            reason = bytes(data[value + 4:value + alen]).decode("utf-8", "replace")
            return ErrorResponse(code, reason)
    return ErrorResponse(0, "error response without ERROR-CODE")


def _success(txid: bytes, packed: bytes, port: int, software_attr: bytes) -> bytes:
    """RFC 5389: XOR-MAPPED-ADDRESS, SOFTWARE, FINGERPRINT. Classic: MAPPED-ADDRESS, SOFTWARE."""
    if len(txid) == 16:
        mapped = _address_value(packed, port, None)
        return _finish(BINDING_SUCCESS, txid, _ATTR.pack(MAPPED_ADDRESS, len(mapped)) + mapped
                       + software_attr, fingerprint=False)
    if len(packed) == 4:
        body = _XOR_V4.pack(XOR_MAPPED_ADDRESS, 8, 0, 1, port ^ 0x2112,
                            int.from_bytes(packed, "big") ^ MAGIC_COOKIE)
    else:
        xored = _address_value(packed, port, txid)
        body = _ATTR.pack(XOR_MAPPED_ADDRESS, len(xored)) + xored
    msg = _FULL_HEADER.pack(BINDING_SUCCESS, len(body) + len(software_attr) + 8, MAGIC_COOKIE, txid) \
        + body + software_attr
    return msg + _FINGERPRINT_HEAD + _U32.pack(crc32(msg) ^ FINGERPRINT_XOR)


_BARE_BINDING = _ATTR.pack(BINDING_REQUEST, 0)


def parse_request(data: bytes) -> tuple[bytes, tuple[int, ...]]:
    """(txid, unknown comprehension-required attributes) of a valid Binding request, else StunError.

    Most clients send a bare 20-byte request; that case skips the general decoder.
    """
    if len(data) == HEADER_SIZE and data[:4] == _BARE_BINDING:
        return (data[8:20] if data[4:8] == _COOKIE_BYTES else data[4:20]), ()
    request = BindingRequest.decode(data)
    return request.txid, request.unknown


class Responder:
    """The server's hot path, with SOFTWARE precompiled once.

    `answer(txid, unknown, packed_ip, port)` takes what `parse_request` returned and the sender's
    address (`pack_ip`), and returns the datagram to send back: a Binding success, or a 420 error
    when the request carried comprehension-required attributes we do not implement.
    """

    def __init__(self, software: str | None = DEFAULT_SOFTWARE) -> None:
        self.software = software
        self._software_attr = _software_attr(software)
        self._classic_software_attr = _software_attr(software, classic=True)

    def answer(self, txid: bytes, unknown: tuple[int, ...], packed_ip: bytes, port: int) -> bytes:
        if unknown:
            return BindingErrorResponse(txid, 420, "Unknown Attribute", unknown, self.software).encode()
        if len(txid) == 16:
            return _success(txid, packed_ip, port, self._classic_software_attr)
        return _success(txid, packed_ip, port, self._software_attr)


def build_binding_request(txid: bytes, software: str | None = None) -> bytes:
    """An RFC 5389 Binding request with FINGERPRINT, for probes (12-byte txid)."""
    if len(txid) != 12:
        raise ValueError("transaction id must be 12 bytes")
    return BindingRequest(txid, software, fingerprint=True).encode()


def parse_binding_response(data: bytes, txid: bytes) -> tuple[str, int]:
    """The (ip, port) a Binding success reports; raises StunError (ErrorResponse for errors)."""
    response = BindingSuccess.decode(data, txid)
    return response.ip, response.port
