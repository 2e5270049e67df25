"""L2 byte framing: relay handshake, prologues, 4-byte length frames.

in:  bytes from one TCP connection (`feed`)
out: tokens RelayOK / PrologueOK / Frame(payload); bytes to send (`relay_handshake`, `prologue`, `frame`)
states: want_relay (only for relay hints) -> want_prologue -> want_frame; any error is terminal.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

from .errors import FramingError

PROLOGUE_LEADER = b"Magic-Wormhole Dilation Handshake v1 Leader\n\n"
PROLOGUE_FOLLOWER = b"Magic-Wormhole Dilation Handshake v1 Follower\n\n"
RELAY_OK = b"ok\n"
# A frame is one Noise handshake message or one record (possibly many Noise messages, see noise.py).
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
_LEN = struct.Struct(">L")


def hkdf(ikm: bytes, length: int, info: bytes) -> bytes:
    """RFC 5869 HKDF-SHA256 with no salt (the key schedule of magic-wormhole)."""
    prk = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def relay_handshake(dilation_key: bytes, side: str) -> bytes:
    """The sided `please relay` line, token derived from the dilation key (not the transit key)."""
    token = hkdf(dilation_key, 32, b"transit_relay_token").hex()
    return f"please relay {token} for side {side}\n".encode("ascii")


def prologues(leader: bool) -> tuple[bytes, bytes]:
    """(what we send, what we expect)."""
    if leader:
        return PROLOGUE_LEADER, PROLOGUE_FOLLOWER
    return PROLOGUE_FOLLOWER, PROLOGUE_LEADER


def frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class RelayOK:
    pass


@dataclass(frozen=True, slots=True)
class PrologueOK:
    pass


@dataclass(slots=True)  # not frozen: one per record, and frozen construction costs 3x (see connection.Data)
class Frame:
    payload: bytes  # or a read-only memoryview of the received bytes (compare with bytes(...))


class Framer:
    """Parses the inbound byte stream of one L2 connection."""

    def __init__(self, expected_prologue: bytes, *, via_relay: bool, max_frame: int = DEFAULT_MAX_FRAME):
        self._expected = expected_prologue
        self._state = "want_relay" if via_relay else "want_prologue"
        self._max_frame = max_frame
        self._buf = bytearray()  # relay answer / prologue bytes so far
        self._partial = bytearray()  # an incomplete frame (header included): its full length once known
        self._filled = 0  # bytes of _partial received so far (once it has its full length)

    @property
    def state(self) -> str:
        return self._state

    def feed(self, data: bytes) -> list[RelayOK | PrologueOK | Frame]:
        if self._state == "failed":
            raise FramingError("framer already failed")
        try:
            if self._state == "want_frame":
                return self._frames(data)
            return self._literals(data)
        except FramingError:
            self._state = "failed"
            raise

    def _literals(self, data: bytes) -> list[RelayOK | PrologueOK | Frame]:
        self._buf += data
        out: list[RelayOK | PrologueOK | Frame] = []
        if self._state == "want_relay":
            if not self._expect(RELAY_OK, "relay answer"):
                return out
            out.append(RelayOK())
            self._state = "want_prologue"
        if not self._expect(self._expected, "prologue"):
            return out
        out.append(PrologueOK())
        self._state = "want_frame"
        rest, self._buf = bytes(self._buf), bytearray()
        return out + self._frames(rest) if rest else out

    def _expect(self, literal: bytes, what: str) -> bool:
        have = bytes(self._buf[: len(literal)])
        if not literal.startswith(have):
            raise FramingError(f"bad {what}: {have[:80]!r}")
        if len(have) < len(literal):
            return False
        del self._buf[: len(literal)]
        return True

    def _length(self, buf, pos: int) -> int:
        (length,) = _LEN.unpack_from(buf, pos)
        if length > self._max_frame:
            raise FramingError(f"frame of {length} bytes exceeds limit {self._max_frame}")
        return length

    def _frames(self, data) -> list[RelayOK | PrologueOK | Frame]:
        """Whole frames are zero-copy views of `data` (valid only until the caller reuses that buffer);
        a frame split across reads is copied once, into a buffer allocated at its full length."""
        out: list[RelayOK | PrologueOK | Frame] = []
        view = memoryview(data)
        pos, end = 0, len(data)
        p = self._partial
        if p:
            if len(p) < 4:  # the length itself was split
                take = min(4 - len(p), end)
                p += view[:take]
                pos = take
                if len(p) < 4:
                    return out
                full = bytearray(4 + self._length(p, 0))
                full[:4] = p
                self._partial, self._filled, p = full, 4, full
            take = min(len(p) - self._filled, end - pos)
            # through a memoryview: a bytearray slice assignment from a non-bytearray copies twice
            memoryview(p)[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled < len(p):
                return out
            out.append(Frame(memoryview(p)[4:]))
            self._partial = bytearray()  # the view keeps the finished one alive, unmodified
        while end - pos >= 4:
            length = self._length(data, pos)
            if end - pos - 4 < length:
                break
            out.append(Frame(view[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if pos < end:
            if end - pos >= 4:
                self._partial = bytearray(4 + self._length(data, pos))
                self._filled = end - pos
                memoryview(self._partial)[: self._filled] = view[pos:]
            else:
                self._partial = bytearray(view[pos:])  # not even the length yet
        return out
