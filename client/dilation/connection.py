"""L3: the record codec and the keepalive of the selected connection.

in:  record plaintexts (decode), records to send (encode), clock readings (`Keepalive.tick(now)`),
     "we received something" / "we sent something" notes
out: records; keepalive actions (send a PING or an unprovoked PONG, declare the connection dead)
states (Keepalive): one per selected connection; dead is terminal.

Record layouts for dilation version "ged" (magic-wormhole 0.24), integers big-endian u32:
  KCM 0x00 | PING 0x01 id[4] | PONG 0x02 id[4] | OPEN 0x03 scid seq subprotocol-utf8
  DATA 0x04 scid seq payload | CLOSE 0x05 scid seq | ACK 0x06 seq
Version "1" (the language-agnostic Dilation specification) numbers PING=0x00 .. ACK=0x05, its KCM is an empty plaintext and OPEN
carries no subprotocol name.
Both versions: STOP 0x7f (burrow's "stop-v1" extension, sent only to a peer that offers it: this side stops
for good, do not reconnect).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import RecordError
from .versions import SUPPORTED_VERSIONS  # noqa: F401 - the versions these records are numbered for

_U32 = struct.Struct(">L")
_U32x2 = struct.Struct(">LL")
_B_U32x2 = struct.Struct(">BLL")


@dataclass(frozen=True, slots=True)
class KCM:
    pass


@dataclass(frozen=True, slots=True)
class Ping:
    ping_id: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    ping_id: bytes


@dataclass(frozen=True, slots=True)
class Open:
    scid: int
    seqnum: int
    subprotocol: str


# Not frozen, unlike the other records: one is built per 64 KiB on each side, and a frozen dataclass's
# __init__ costs three times as much. Nothing mutates a record once built.
@dataclass(slots=True)
class Data:
    scid: int
    seqnum: int
    data: bytes | memoryview  # inbound payloads of multi-message frames are read-only views


@dataclass(frozen=True, slots=True)
class Close:
    scid: int
    seqnum: int


@dataclass(frozen=True, slots=True)
class Ack:
    resp_seqnum: int


@dataclass(frozen=True, slots=True)
class Stop:
    pass


Record = KCM | Ping | Pong | Open | Data | Close | Ack | Stop
SEQUENCED = (Open, Data, Close)

# (PING, PONG, OPEN, DATA, CLOSE, ACK) tags per dilation version
_TAGS = {"ged": (1, 2, 3, 4, 5, 6), "1": (0, 1, 2, 3, 4, 5)}
STOP_TAG = 0x7F


class RecordCodec:
    def __init__(self, version: str = "ged"):
        if version not in _TAGS:
            raise ValueError(f"unknown dilation version {version!r}")
        self.version = version
        self.ping, self.pong, self.open, self.data, self.close, self.ack = _TAGS[version]
        self._named_open = version == "ged"

    def encode_data_header(self, scid: int, seqnum: int) -> bytes:
        return _B_U32x2.pack(self.data, scid, seqnum)

    def encode(self, r: Record) -> bytes:
        if isinstance(r, Data):
            return _B_U32x2.pack(self.data, r.scid, r.seqnum) + r.data
        if isinstance(r, Ack):
            return bytes([self.ack]) + _U32.pack(r.resp_seqnum)
        if isinstance(r, KCM):
            return b"\x00" if self.version == "ged" else b""
        if isinstance(r, Ping | Pong):
            if len(r.ping_id) != 4:
                raise ValueError("ping_id must be 4 bytes")
            return bytes([self.ping if isinstance(r, Ping) else self.pong]) + r.ping_id
        if isinstance(r, Open):
            name = r.subprotocol.encode("utf-8") if self._named_open else b""
            return _B_U32x2.pack(self.open, r.scid, r.seqnum) + name
        if isinstance(r, Close):
            return _B_U32x2.pack(self.close, r.scid, r.seqnum)
        if isinstance(r, Stop):
            return bytes([STOP_TAG])
        raise TypeError(f"not a record: {r!r}")

    def decode(self, p: bytes) -> Record:
        if not p:
            if self.version == "1":
                return KCM()
            raise RecordError("empty record")
        tag = p[0]
        if tag == self.data:
            if len(p) < 9:
                raise RecordError("short DATA record")
            _, scid, seq = _B_U32x2.unpack_from(p)
            return Data(scid, seq, memoryview(p)[9:])  # a view of the plaintext buffer: no copy
        if isinstance(p, memoryview):
            p = bytes(p)
        if tag == self.ack:
            if len(p) != 5:
                raise RecordError("bad ACK length")
            return Ack(_U32.unpack_from(p, 1)[0])
        if self.version == "ged" and tag == 0:
            if len(p) != 1:
                raise RecordError("bad KCM length")
            return KCM()
        if tag in (self.ping, self.pong):
            if len(p) != 5:
                raise RecordError("bad PING/PONG length")
            return Ping(p[1:5]) if tag == self.ping else Pong(p[1:5])
        if tag == self.open:
            if len(p) < 9:
                raise RecordError("short OPEN record")
            _, scid, seq = _B_U32x2.unpack_from(p)
            try:
                name = p[9:].decode("utf-8")
            except UnicodeDecodeError:
                raise RecordError("OPEN subprotocol is not UTF-8") from None
            return Open(scid, seq, name)
        if tag == self.close:
            if len(p) != 9:
                raise RecordError("bad CLOSE length")
            _, scid, seq = _B_U32x2.unpack_from(p)
            return Close(scid, seq)
        if tag == STOP_TAG:
            if len(p) != 1:
                raise RecordError("bad STOP length")
            return Stop()
        raise RecordError(f"unknown record type {tag}")


class Keepalive:
    """Liveness of the selected connection, driven by a clock the caller passes in.

    The Leader sends a PING every `interval` seconds and declares the connection dead when a whole
    interval passes after a PING with nothing at all received (magic-wormhole 0.24 waits for a PONG; any
    inbound record is at least as strong a sign of life). The Follower only answers PINGs; with the
    specification's version "1" it also sends an unprovoked zero-id PONG when it wrote nothing for an interval.
    """

    def __init__(self, *, leader: bool, interval: float, now: float, version: str = "ged"):
        self.leader = leader
        self.interval = interval
        self._unprovoked_pongs = version == "1"
        self._last_rx = now
        self._last_tx = now
        self._next_ping = now  # the Leader pings as soon as the connection is selected
        self._ping_counter = 0
        self.dead = False

    def received(self, now: float) -> None:
        self._last_rx = now

    def sent(self, now: float) -> None:
        self._last_tx = now

    def next_deadline(self) -> float:
        if self.leader:
            return self._next_ping
        return self._last_tx + self.interval

    def tick(self, now: float) -> list[Record | str]:
        """Returns records to send, or ["dead"] when the Leader gives up on the connection."""
        if self.dead:
            return []
        out: list[Record | str] = []
        if self.leader:
            if now >= self._next_ping:
                if self._ping_counter and now - self._last_rx >= 2 * self.interval:
                    self.dead = True
                    return ["dead"]
                self._ping_counter += 1
                out.append(Ping(_U32.pack(self._ping_counter & 0xFFFFFFFF)))
                self._next_ping = now + self.interval
                self._last_tx = now
        elif self._unprovoked_pongs and now - self._last_tx >= self.interval:
            out.append(Pong(b"\x00\x00\x00\x00"))
            self._last_tx = now
        return out
