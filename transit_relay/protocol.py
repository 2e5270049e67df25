"""The transit relay's wire format and pairing state machine, sans-IO.

in:  connection opened (ip, transport), handshake bytes or a whole WebSocket message, data that
     arrives before `ok`, connection lost, pair finished, clock ticks (`now` is always an argument).
out: actions for the adapter: `Pair` (send `ok\\n` to both and start forwarding), `Close` (send an
     optional reply line, then close), `Record` (one event-log line), `Waiting` / `Unwaited` (a
     connection starts / stops waiting for a partner: a cluster registers it where other replicas see it).
Across replicas (transit_relay/cluster.py): a side that arrives on one replica while its partner waits on
another is joined by a hop connection. On the partner's replica the hop is an ordinary connection that
must pair at once (`hop_in`); on the arriving side's replica the pair with the hop is a `hop` pair
(`hop_out`): its bytes are moved there too, but its one session line is written by the partner's replica.
states per connection: handshake -> pending -> paired -> closed (any state may go straight to closed).

Facts follow magic-wormhole-transit-relay 0.5.0 (see docs/transit.md): both handshakes, the 1024-byte
line limit, same side never pairs, the other waiting connections of a token are dropped as redundant
when a pair forms, and the moods `empty`, `errory`, `impatient`, `lonely`, `redundant`, `happy`.
"""

from __future__ import annotations

import enum
import re
from collections import OrderedDict
from dataclasses import dataclass, field

from burrow.common.limits import ConnectionCaps

MAX_HANDSHAKE_LINE = 1024  # bytes before the newline, as the reference's LineReceiver.MAX_LENGTH
OK = b"ok\n"
BAD_HANDSHAKE = b"bad handshake\n"
IMPATIENT = b"impatient\n"

_NEW = re.compile(rb"^please relay (\w{64}) for side (\w{16})$")
_OLD = re.compile(rb"^please relay (\w{64})$")


class ProtocolError(Exception):
    """A client broke the transit relay protocol; the connection is closed, the machine is terminal."""


class BadHandshake(ProtocolError):
    """The first line (or first WebSocket message) is not a `please relay` handshake."""


class HandshakeTooLong(ProtocolError):
    """More than MAX_HANDSHAKE_LINE bytes arrived without a newline."""


@dataclass(frozen=True)
class Handshake:
    """`please relay TOKEN [for side SIDE]`: TOKEN is 64 and SIDE 16 word characters (ASCII)."""

    token: bytes
    side: bytes | None = None

    def encode(self) -> bytes:
        if self.side is None:
            return b"please relay " + self.token + b"\n"
        return b"please relay " + self.token + b" for side " + self.side + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> Handshake:
        """Parse one line (without or with its trailing `\\n`: `$` allows one, like the reference)."""
        m = _NEW.search(line)
        if m:
            return cls(m.group(1), m.group(2))
        m = _OLD.search(line)
        if m:
            return cls(m.group(1), None)
        raise BadHandshake("not a 'please relay' line")

    def pairs_with(self, other: Handshake) -> bool:
        """Same token, and the sides differ unless either is a legacy (side-less) handshake."""
        return self.token == other.token and (self.side is None or other.side is None
                                              or self.side != other.side)


class LineReader:
    """Collects the TCP handshake line. `feed` returns (Handshake, bytes after the line) or None."""

    def __init__(self, limit: int = MAX_HANDSHAKE_LINE) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> tuple[Handshake, bytes] | None:
        self._buf += data
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > self.limit:
                raise HandshakeTooLong(f"no newline within {self.limit} bytes")
            return None
        if end > self.limit:
            raise HandshakeTooLong(f"no newline within {self.limit} bytes")
        line, rest = bytes(self._buf[:end]), bytes(self._buf[end + 1:])
        self._buf.clear()
        return Handshake.decode(line), rest


class Mood(enum.StrEnum):
    HAPPY = "happy"          # a pair relayed at least one byte; one line per pair
    JILTED = "jilted"        # a pair formed and ended without relaying a single byte
    LONELY = "lonely"        # handshake ok, closed or timed out before a partner came
    ERRORY = "errory"        # bad handshake, text WebSocket frame, or refused by a limit
    REDUNDANT = "redundant"  # dropped because another connection with its token paired
    IMPATIENT = "impatient"  # sent data before `ok`
    EMPTY = "empty"          # closed (or timed out) before a complete handshake


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    PENDING = "pending"
    PAIRED = "paired"
    CLOSED = "closed"


@dataclass(eq=False)
class Conn:
    """One client connection. `handle` is the adapter's object (socket wrapper, WebSocket...)."""

    id: int
    ip: str
    transport: str  # "tcp" or "websocket"
    started: float
    handle: object = None
    phase: Phase = Phase.HANDSHAKE
    handshake: Handshake | None = None
    since: float = 0.0  # when it entered its current phase
    reader: LineReader = field(default_factory=LineReader)
    pair: PairState | None = None


@dataclass(eq=False)
class PairState:
    """Two paired connections. The forwarders add to the byte counters directly (hot path)."""

    first: Conn
    second: Conn
    paired_at: float
    waited: float = 0.0  # seconds the first side waited after its handshake (the pairing-wait histogram)
    bytes_from_first: int = 0
    bytes_from_second: int = 0
    last_total: int = 0
    last_active: float = 0.0
    finished: bool = False
    hop: bool = False  # joined to a partner on another replica: that replica writes the session line

    @property
    def total(self) -> int:
        return self.bytes_from_first + self.bytes_from_second


@dataclass(frozen=True)
class Pair:
    """Action: send `ok\\n` to both and start forwarding. `first` arrived first."""

    state: PairState


@dataclass(frozen=True)
class Close:
    """Action: send `reply` (if any), then close the connection."""

    conn: Conn
    reply: bytes | None = None


@dataclass(frozen=True)
class Record:
    """Action: write one `transit`/`session` line with these fields."""

    fields: dict


@dataclass(frozen=True)
class Waiting:
    """Action: `conn` waits for a partner (a cluster registers its token)."""

    conn: Conn


@dataclass(frozen=True)
class Unwaited:
    """Action: `conn` no longer waits (paired, closed, or joined to another replica)."""

    conn: Conn


@dataclass(frozen=True)
class Limits:
    handshake_timeout: float = 30.0
    pending_timeout: float = 600.0
    idle_timeout: float = 0.0  # 0 = off
    max_pending: int = 0       # 0 = unlimited
    max_pairs: int = 0
    max_connections: int = 0
    max_per_ip: int = 0


NO_PARTNER = b"no partner\n"  # to a hop whose waiting side is gone
HOP_IP = "(hop)"  # the address of a hop pair's far end: not a client, never counted against limits


def refusal_line(reason: str) -> bytes:
    return f"error: relay is full ({reason})\n".encode()


class Relay:
    """All pairing state of one relay process. Every method returns a list of actions."""

    def __init__(self, limits: Limits, announce: bool = False) -> None:
        self.limits = limits
        self.announce = announce  # emit Waiting / Unwaited (a cluster needs them)
        self.caps = ConnectionCaps(limits.max_connections, limits.max_per_ip)
        self._next_id = 0
        self.handshaking: OrderedDict[int, Conn] = OrderedDict()  # oldest first
        self.pending: OrderedDict[int, Conn] = OrderedDict()      # oldest first
        self.by_token: dict[bytes, list[Conn]] = {}
        self.pairs: set[PairState] = set()
        # counters read by the metrics collector and the stats event
        self.moods: dict[str, int] = {m.value: 0 for m in Mood}
        self.refusals: dict[str, int] = {}
        self.timeouts: dict[str, int] = {"handshake": 0, "pending": 0, "idle": 0}
        self.bytes_finished = 0
        self.hop_bytes_finished = 0  # moved by hop pairs (their sessions are counted on the other replica)

    # -- connection lifecycle -------------------------------------------------------------
    def open(self, ip: str, transport: str, now: float, handle: object = None) -> Conn | str:
        """Admit a new connection, or return the refusal reason (`total` / `per_ip`)."""
        reason = self.caps.try_acquire(ip)
        if reason is not None:
            self._refuse(reason)
            return reason
        self._next_id += 1
        conn = Conn(self._next_id, ip, transport, now, handle, since=now)
        self.handshaking[conn.id] = conn
        return conn

    def receive(self, conn: Conn, data: bytes, now: float) -> list:
        """TCP bytes before pairing: the handshake line, or impatient data while pending."""
        if conn.phase is Phase.HANDSHAKE:
            try:
                got = conn.reader.feed(data)
            except HandshakeTooLong:
                return self._close(conn, Mood.EMPTY, now)  # the reference closes silently
            except BadHandshake:
                return self._close(conn, Mood.ERRORY, now, BAD_HANDSHAKE)
            if got is None:
                return []
            handshake, rest = got
            if rest:  # data before `ok`, even in the handshake's own segment
                return self._close(conn, Mood.IMPATIENT, now, IMPATIENT)
            return self._register(conn, handshake, now)
        if conn.phase is Phase.PENDING and data:
            return self._close(conn, Mood.IMPATIENT, now, IMPATIENT)
        return []

    def message(self, conn: Conn, payload: bytes, now: float) -> list:
        """A whole binary WebSocket message before pairing: the first must be the handshake."""
        if conn.phase is Phase.HANDSHAKE:
            try:
                handshake = Handshake.decode(payload)
            except BadHandshake:
                return self._close(conn, Mood.ERRORY, now, BAD_HANDSHAKE)
            return self._register(conn, handshake, now)
        if conn.phase is Phase.PENDING:
            return self._close(conn, Mood.IMPATIENT, now, IMPATIENT)
        return []

    def protocol_error(self, conn: Conn, now: float) -> list:
        """The transport saw a violation (e.g. a text WebSocket frame)."""
        if conn.phase in (Phase.HANDSHAKE, Phase.PENDING):
            return self._close(conn, Mood.ERRORY, now)
        return []

    def lost(self, conn: Conn, now: float) -> list:
        """The client went away before pairing (paired connections end through `finish`)."""
        if conn.phase is Phase.HANDSHAKE:
            return self._close(conn, Mood.EMPTY, now, quiet=True)
        if conn.phase is Phase.PENDING:
            return self._close(conn, Mood.LONELY, now, quiet=True)
        return []

    def finish(self, pair: PairState, now: float) -> list:
        """Both directions of a pair are done and both connections closed: one line per pair."""
        if pair.finished:
            return []
        pair.finished = True
        self.pairs.discard(pair)
        for c in (pair.first, pair.second):
            c.phase = Phase.CLOSED
            if c.ip is not HOP_IP:
                self.caps.release(c.ip)
        if pair.hop:
            self.hop_bytes_finished += pair.total
            return []
        self.bytes_finished += pair.total
        mood = Mood.HAPPY if pair.total else Mood.JILTED
        self.moods[mood] += 1
        a, b = pair.first.transport, pair.second.transport
        return [Record({
            "started": pair.first.started, "duration": max(0.0, now - pair.first.started),
            "waiting_time": max(0.0, pair.paired_at - pair.first.started), "mood": mood.value,
            "transport": a if a == b else "mixed",
            "bytes_from_first": pair.bytes_from_first, "bytes_from_second": pair.bytes_from_second,
            "total_bytes": pair.total,
        })]

    # -- timers ---------------------------------------------------------------------------
    def tick(self, now: float) -> list:
        """Expire handshakes, unpaired waits and (if enabled) idle pairs."""
        out: list = []
        lim = self.limits
        while self.handshaking:
            conn = next(iter(self.handshaking.values()))
            if now - conn.since < lim.handshake_timeout:
                break
            self.timeouts["handshake"] += 1
            out += self._close(conn, Mood.EMPTY, now)
        while self.pending:
            conn = next(iter(self.pending.values()))
            if now - conn.since < lim.pending_timeout:
                break
            self.timeouts["pending"] += 1
            out += self._close(conn, Mood.LONELY, now)
        if lim.idle_timeout > 0:
            for pair in list(self.pairs):
                if pair.hop:  # the partner's replica times it out
                    continue
                total = pair.total
                if total != pair.last_total:
                    pair.last_total, pair.last_active = total, now
                elif now - pair.last_active >= lim.idle_timeout:
                    self.timeouts["idle"] += 1
                    out.append(Close(pair.first))
                    out.append(Close(pair.second))
        return out

    def shutdown(self, now: float, pairs: bool = True) -> list:
        """Server stopping: close every connection not yet paired and, with `pairs`, every pair too
        (pairs then end through `finish` as usual). A draining server closes the pairs later."""
        out: list = []
        for conn in list(self.handshaking.values()):
            out += self._close(conn, Mood.EMPTY, now)
        for conn in list(self.pending.values()):
            out += self._close(conn, Mood.LONELY, now)
        if pairs:
            for pair in list(self.pairs):
                out += [Close(pair.first), Close(pair.second)]
        return out

    def bytes_relayed(self) -> int:
        return self.bytes_finished + sum(p.total for p in self.pairs if not p.hop)

    # -- across replicas (cluster.py) -------------------------------------------------------
    def hop_in(self, conn: Conn, handshake: Handshake, now: float) -> list:
        """A hop from another replica (opened with `open` under its client's address) for a side
        waiting here: it pairs at once, or is closed with NO_PARTNER and no session line (the
        client stays with the other replica)."""
        self.handshaking.pop(conn.id, None)
        conn.handshake = handshake
        if self._partner(handshake) is None:
            conn.phase = Phase.CLOSED
            self.caps.release(conn.ip)
            return [Close(conn, NO_PARTNER)]
        return self._register(conn, handshake, now)

    def hop_out(self, conn: Conn, handle: object, now: float) -> list:
        """`conn`, waiting here, is joined through a hop (`handle`) to its partner on another replica."""
        if conn.phase is not Phase.PENDING:
            return []
        out = self._unpend(conn)
        for other in list(self.by_token.get(conn.handshake.token, [])):
            out += self._close(other, Mood.REDUNDANT, now)
        self._next_id += 1
        hop = Conn(self._next_id, HOP_IP, "tcp", now, handle, phase=Phase.PAIRED, since=now)
        pair = PairState(hop, conn, paired_at=now, last_active=now, hop=True)
        hop.pair = conn.pair = pair
        conn.phase, conn.since = Phase.PAIRED, now
        self.pairs.add(pair)
        return [Pair(pair)] + out

    def hand_over(self, conn: Conn, now: float) -> list:
        """`conn`, waiting here, was handed to its partner's replica (same host), which relays it and
        writes its session line: it leaves without one; other connections of its token here are redundant."""
        if conn.phase is not Phase.PENDING:
            return []
        out = self._unpend(conn)
        conn.phase = Phase.CLOSED
        self.caps.release(conn.ip)
        for other in list(self.by_token.get(conn.handshake.token, [])):
            out += self._close(other, Mood.REDUNDANT, now)
        return out

    # -- internals ------------------------------------------------------------------------
    def _refuse(self, reason: str) -> None:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def _register(self, conn: Conn, handshake: Handshake, now: float) -> list:
        self.handshaking.pop(conn.id, None)
        conn.handshake = handshake
        partner = self._partner(handshake)
        if partner is None:
            if self.limits.max_pending and len(self.pending) >= self.limits.max_pending:
                self._refuse("pending")
                return self._close(conn, Mood.ERRORY, now, refusal_line("pending"))
            conn.phase, conn.since = Phase.PENDING, now
            self.pending[conn.id] = conn
            self.by_token.setdefault(handshake.token, []).append(conn)
            return [Waiting(conn)] if self.announce else []
        if self.limits.max_pairs and len(self.pairs) >= self.limits.max_pairs:
            self._refuse("pairs")
            return self._close(conn, Mood.ERRORY, now, refusal_line("pairs"))
        out: list = self._unpend(partner)
        for other in list(self.by_token.get(handshake.token, [])):
            out += self._close(other, Mood.REDUNDANT, now)
        pair = PairState(partner, conn, paired_at=now, waited=max(0.0, now - partner.since), last_active=now)
        for c in (partner, conn):
            c.phase, c.since, c.pair = Phase.PAIRED, now, pair
        self.pairs.add(pair)
        return [Pair(pair)] + out

    def _partner(self, handshake: Handshake) -> Conn | None:
        waiting = self.by_token.get(handshake.token, [])
        return next((c for c in waiting if c.handshake and c.handshake.pairs_with(handshake)), None)

    def _unpend(self, conn: Conn) -> list:
        if self.pending.pop(conn.id, None) is None:
            return []
        if conn.handshake is not None:
            waiting = self.by_token.get(conn.handshake.token)
            if waiting is not None:
                if conn in waiting:
                    waiting.remove(conn)
                if not waiting:
                    del self.by_token[conn.handshake.token]
        return [Unwaited(conn)] if self.announce else []

    def _close(self, conn: Conn, mood: Mood, now: float, reply: bytes | None = None,
               quiet: bool = False) -> list:
        """End an unpaired connection: one line with its mood; `quiet` when the client already left."""
        if conn.phase in (Phase.CLOSED, Phase.PAIRED):
            return []
        self.handshaking.pop(conn.id, None)
        left = self._unpend(conn)
        conn.phase = Phase.CLOSED
        self.caps.release(conn.ip)
        self.moods[mood] += 1
        record = Record({
            "started": conn.started, "duration": max(0.0, now - conn.started), "waiting_time": None,
            "mood": mood.value, "transport": conn.transport,
            "bytes_from_first": 0, "bytes_from_second": 0, "total_bytes": 0,
        })
        return left + ([record] if quiet else [Close(conn, reply), record])
