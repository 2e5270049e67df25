"""L2: one connection attempt (relay answer, prologue, Noise handshake, KCM) and the Leader's choice.

in:  bytes from a TCP connection (Attempt.feed), candidate attempts and clock readings (Selector)
out: bytes to write; events Viable (a Leader's attempt got the Follower's KCM), Selected (a Follower's attempt
     got the Leader's KCM), and, once selected, decoded records
states (Attempt): relay -> prologue -> handshake -> kcm -> (Leader: viable) -> selected; failed is terminal.

The Leader is the Noise initiator. The Follower answers handshake message 1 with message 2 and sends its KCM at
once; the Leader treats an attempt whose KCM arrived as a candidate, picks one, sends its own KCM on it and
drops the rest. The Leader gives direct candidates a head start: a relayed candidate is only chosen once
`relay_head_start` seconds have passed since the generation began, or when no direct attempt is still alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from .connection import KCM, Data, Record, RecordCodec
from .errors import ProtocolError
from .framing import (
    DEFAULT_MAX_FRAME,
    Frame,
    Framer,
    PrologueOK,
    RelayOK,
    frame,
    prologues,
    relay_handshake,
)
from .noise import NoiseSession


@dataclass(frozen=True, slots=True)
class Viable:
    pass


@dataclass(frozen=True, slots=True)
class Selected:
    pass


class Attempt:
    def __init__(self, dilation_key: bytes, *, leader: bool, side: str, via_relay: bool, direct: bool,
                 description: str, codec: RecordCodec, max_frame: int = DEFAULT_MAX_FRAME, quic: bool = False):
        self.leader = leader
        self.direct = direct
        self.quic = quic  # a QUIC stream on a punched UDP path (disco_link.py), not a TCP connection
        self.description = description
        self.codec = codec
        self._side = side
        self._key = dilation_key
        self._via_relay = via_relay
        self.via_relay = via_relay  # through the transit relay (what an upgrade may replace)
        self._send_prologue, expected = prologues(leader)
        self._framer = Framer(expected, via_relay=via_relay, max_frame=max_frame)
        self._noise = NoiseSession(dilation_key, leader=leader)
        self.state = "relay" if via_relay else "prologue"

    def start(self) -> bytes:
        """Bytes to write as soon as TCP is connected."""
        if self._via_relay:
            return relay_handshake(self._key, self._side)
        return self._send_prologue

    def fail(self) -> None:
        self.state = "failed"

    def select(self) -> bytes:
        """Leader: this attempt won; returns its KCM frame."""
        assert self.leader and self.state == "viable"
        self.state = "selected"
        return self.encrypt(KCM())

    def encrypt(self, record: Record) -> bytes:
        return frame(self._noise.encrypt(self.codec.encode(record)))

    def seal(self, records: list[Record], out: bytearray | None = None) -> bytearray | memoryview:
        """The frames of `records` back to back, ready for one write (in `out` if it is large enough); DATA
        payloads are encrypted straight into them."""
        header, encode = self.codec.encode_data_header, self.codec.encode
        return self._noise.seal_frames([
            (header(r.scid, r.seqnum), r.data) if type(r) is Data else (encode(r), b"") for r in records], out)

    def feed(self, data: bytes) -> tuple[bytes, list[Viable | Selected | Record]]:
        """Returns (bytes to write, events/records). Raises ProtocolError: drop the connection."""
        if self.state == "failed":
            return b"", []
        out = bytearray()
        events: list[Viable | Selected | Record] = []
        try:
            tokens = self._framer.feed(data)
            if self.state == "selected":  # the bulk path: every token is a record frame
                decode, decrypt = self.codec.decode, self._noise.decrypt
                return b"", [decode(decrypt(t.payload)) for t in tokens]
            for token in tokens:
                if self.state == "selected":
                    events.append(self.codec.decode(self._noise.decrypt(token.payload)))
                else:
                    self._step(token, out, events)
        except ProtocolError:
            self.state = "failed"
            raise
        return bytes(out), events

    def _step(self, token: RelayOK | PrologueOK | Frame, out: bytearray, events: list) -> None:
        st = self.state
        if isinstance(token, RelayOK):
            out += self._send_prologue
            self.state = "prologue"
        elif isinstance(token, PrologueOK):
            self.state = "handshake"
            if self.leader:
                out += frame(self._noise.leader_hello())
        elif st == "handshake":
            if self.leader:
                self._noise.leader_finish(bytes(token.payload))
            else:
                out += frame(self._noise.follower_answer(bytes(token.payload)))
                out += self.encrypt(KCM())
            self.state = "kcm"
        elif st == "kcm":
            rec = self.codec.decode(self._noise.decrypt(token.payload))
            if not isinstance(rec, KCM):
                raise ProtocolError(f"expected KCM, got {type(rec).__name__}")
            if self.leader:
                self.state = "viable"
                events.append(Viable())
            else:
                self.state = "selected"
                events.append(Selected())
        else:
            raise ProtocolError(f"unexpected frame in state {st}")


PRIORITY_STEP = 0.5  # seconds between dialling one direct priority level and the next lower one


def dial_delays(direct: list[tuple[str, int, float]], relays: list[tuple[str, int]], *, direct_possible: bool,
                relay_delay: float, priority_step: float = PRIORITY_STEP) -> list[tuple[float, str, int, bool]]:
    """When to dial each hint: (delay, host, port, via_relay). The highest direct priority goes at once,
    each lower level `priority_step` later; relays wait `relay_delay` while a direct path is possible."""
    levels = sorted({p for _, _, p in direct}, reverse=True)
    plan = [(levels.index(p) * priority_step, h, port, False) for h, port, p in direct]
    late = relay_delay if (direct or direct_possible) else 0.0
    plan += [(late, h, port, True) for h, port in relays]
    return plan


QUIC_GRACE = 2.0  # seconds past the head start a QUIC candidate leaves a relayed TCP dial that is still alive


class Selector:
    """The Leader's choice among viable attempts of one generation.

    `prefer_quic`: a probe measured the punched UDP path faster than the relay (UpgradePolicy), so a QUIC
    candidate beats a relayed TCP one in this generation, which waits `quic_grace` past the head start for it;
    direct TCP still wins at once."""

    def __init__(self, *, now: float, relay_head_start: float = 2.0, quic_grace: float = QUIC_GRACE,
                 prefer_quic: bool = False):
        self._began = now
        self.relay_head_start = relay_head_start
        self.quic_grace = quic_grace
        self.prefer_quic = prefer_quic
        self._waiting: list[Attempt] = []
        self.chosen: Attempt | None = None

    def candidate(self, a: Attempt, now: float, direct_alive: bool, tcp_alive: bool = True,
                  relay_alive: bool = True) -> Attempt | None:
        if self.chosen is not None:
            return None
        self._waiting.append(a)
        return self.tick(now, direct_alive, tcp_alive, relay_alive)

    def tick(self, now: float, direct_alive: bool, tcp_alive: bool = True, relay_alive: bool = True) -> Attempt | None:
        """Direct TCP at once; relayed TCP after the head start (or when no direct TCP is left). QUIC over a
        punched UDP path (TCP moves bytes faster here, docs/dilation.md): when no TCP attempt is left, or once
        the head start is over and no relayed TCP attempt is alive, or `quic_grace` later whatever TCP is
        still dialling (a dial into a NAT that drops it waits out its whole connect timeout)."""
        if self.chosen is not None:
            return None
        self._waiting = [a for a in self._waiting if a.state == "viable"]
        tcp = [a for a in self._waiting if not a.quic]
        quic = [a for a in self._waiting if a.quic]
        for a in tcp:
            if a.direct:
                self.chosen = a
                return a
        late = not direct_alive or now - self._began >= self.relay_head_start
        if quic and self.prefer_quic and late:
            self.chosen = quic[0]
            return self.chosen
        if self.prefer_quic and now - self._began < self.relay_head_start + self.quic_grace:
            late = False  # the relay waits for the measured-faster QUIC candidate a grace longer
        if tcp and late:
            self.chosen = tcp[0]
            return self.chosen
        if quic and (not tcp_alive or (now - self._began >= self.relay_head_start and (
                not relay_alive or now - self._began >= self.relay_head_start + self.quic_grace))):
            self.chosen = quic[0]
            return self.chosen
        return None

    def deadline(self) -> float | None:
        """When tick() should be called again (a candidate is waiting out the head start; the Connector looks
        again every RECONSIDER_EVERY while one waits past it)."""
        if self.chosen is None and self._waiting:
            return self._began + self.relay_head_start
        return None

    @property
    def waiting(self) -> bool:
        return self.chosen is None and bool(self._waiting)


UPGRADE_INTERVAL = 30.0  # seconds between the Leader's looks for a direct path while it runs over the relay
UPGRADE_PROBES = 20  # looks per connection over the relay: the search is bounded
UPGRADE_MOVES = 3  # generations started by upgrades per dilation: a path that keeps failing cannot flap forever
QUIC_MARGIN = 1.25  # a QUIC path must be measured this much faster than the current path to replace it


class UpgradePolicy:
    """The Leader's rule for leaving the transit relay mid-transfer (burrow peers that list upgrade-v1).

    While the selected connection is relayed, look for a better path every `interval` seconds, at most
    `probes` times per relayed connection. A direct TCP path that connects replaces the relay at once (kernel
    TCP without the relay's extra hop is never the slower one). A QUIC path replaces it only when its probe
    rate is `quic_margin` times the relay's observed rate: Python QUIC moves far fewer bytes per CPU second
    than kernel TCP, so a direct UDP path can be slower than a TCP relay. Each move starts a new generation;
    at most `moves` per dilation."""

    def __init__(self, *, interval: float = UPGRADE_INTERVAL, probes: int = UPGRADE_PROBES,
                 moves: int = UPGRADE_MOVES, quic_margin: float = QUIC_MARGIN):
        self.interval, self.probes, self.moves, self.quic_margin = interval, probes, moves, quic_margin
        self._next: float | None = None
        self._left = 0
        self.moved = 0

    def connected(self, now: float, *, relayed: bool) -> None:
        """A generation's connection was selected: arm the probe schedule only when it is relayed."""
        self._next = now + self.interval if relayed and self.moved < self.moves else None
        self._left = self.probes

    def lost(self) -> None:
        self._next = None

    def due(self, now: float) -> bool:
        """True when a probe should run now (the schedule advances)."""
        if self._next is None or now < self._next or self._left <= 0:
            return False
        self._left -= 1
        self._next = now + self.interval if self._left > 0 else None
        return True

    def next_probe(self) -> float | None:
        return self._next

    def better(self, *, quic: bool, candidate_rate: float | None = None, current_rate: float | None = None) -> bool:
        """Whether the candidate that answered a probe replaces the relay (and counts a move if so).
        Rates are bytes per second; a QUIC candidate without a measured rate, or a relay whose rate is not
        known, keeps the relay."""
        if self.moved >= self.moves:
            return False
        if quic:
            if not candidate_rate or not current_rate or candidate_rate < self.quic_margin * current_rate:
                return False
        self.moved += 1
        self._next = None
        return True
