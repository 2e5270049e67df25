"""Which UDP path to a peer works, and how fast: the Disco ping schedule and path choice, sans-IO.

in:  the peer's candidate endpoints, pings heard from it, pongs (TxID, source), and the time `now`
out: pings to send (endpoint, TxID), the preferred path (a direct endpoint or the relay), the next deadline

While punching (at start, on CallMeMaybe, on new candidates, and when the current path's ping goes
unanswered) every unconfirmed candidate is pinged each `punch_interval` for `punch_for` seconds; the
peer does the same towards us, so the two NATs open for each other. A pong whose TxID matches a ping we
sent to the endpoint it came from confirms that endpoint with the round trip as its latency. Confirmed
paths are re-pinged every `reping_interval` (Tailscale: about a minute); a path whose last pong is older
than `path_expiry` no longer counts. The preferred path is the confirmed endpoint with the lowest
latency, kept until another one is faster by `switch_margin`; with none, the relay.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Endpoint = tuple[str, int]

RELAY = "relay"
DIRECT = "direct"


@dataclass(frozen=True)
class Path:
    kind: str                       # DIRECT or RELAY
    endpoint: Endpoint | None = None
    latency: float | None = None    # seconds, the last pong's round trip


@dataclass
class _Candidate:
    endpoint: Endpoint
    last_ping: float | None = None
    last_pong: float | None = None
    latency: float | None = None
    answered: bool = False          # the last ping sent got its pong
    ping_now: bool = False          # the peer just pinged us from here: its NAT is open towards us now
    pending: dict[bytes, float] = field(default_factory=dict)  # TxID -> sent at


class PathSelector:
    def __init__(self, *, reping_interval: float = 60.0, punch_interval: float = 0.5,
                 punch_for: float = 10.0, ping_timeout: float = 5.0, path_expiry: float | None = None,
                 switch_margin: float = 0.1, max_candidates: int = 16, max_pending: int = 8,
                 new_txid: Callable[[], bytes] = lambda: os.urandom(12)) -> None:
        self.reping_interval = reping_interval
        self.punch_interval = punch_interval
        self.punch_for = punch_for
        self.ping_timeout = ping_timeout
        # one lost re-ping is retried at the punch pace before the path lapses
        self.path_expiry = reping_interval + 2 * ping_timeout if path_expiry is None else path_expiry
        self.switch_margin = switch_margin
        self.max_candidates = max_candidates
        self.max_pending = max_pending
        self.new_txid = new_txid
        self._candidates: dict[Endpoint, _Candidate] = {}
        self._by_txid: dict[bytes, _Candidate] = {}
        self._punch_until = float("-inf")
        self._best: _Candidate | None = None
        self.stats = {"pings": 0, "pongs": 0, "stray_pongs": 0, "lost_pings": 0, "dropped_candidates": 0}

    def knows(self, endpoint: Endpoint) -> bool:
        return endpoint in self._candidates

    # ---- inputs
    def add_candidates(self, endpoints: Iterable[Endpoint], now: float) -> None:
        """The peer's endpoints (its hints, a CallMeMaybe); punching (re)starts."""
        for ep in endpoints:
            self._add(ep)
        self.start_punch(now)

    def note_ping_from(self, endpoint: Endpoint, now: float) -> None:
        """The peer pinged us from `endpoint`: a candidate too (its NAT's mapping towards us), pinged
        back at once while unconfirmed."""
        cand = self._add(endpoint)
        if cand is not None and cand.endpoint not in self._confirmed(now):
            cand.ping_now = True
            self.start_punch(now)

    def start_punch(self, now: float) -> None:
        self._punch_until = max(self._punch_until, now + self.punch_for)

    def on_pong(self, tx_id: bytes, src: Endpoint, now: float) -> float | None:
        """Match a pong; returns its round trip, or None when it answers no ping of ours sent to `src`."""
        cand = self._by_txid.get(tx_id)
        if cand is None or cand.endpoint != src:
            self.stats["stray_pongs"] += 1
            return None
        del self._by_txid[tx_id]
        sent = cand.pending.pop(tx_id)
        rtt = max(0.0, now - sent)
        cand.latency, cand.last_pong, cand.answered = rtt, now, True
        self.stats["pongs"] += 1
        return rtt

    # ---- outputs
    def pings_due(self, now: float) -> list[tuple[Endpoint, bytes]]:
        """The pings to send now (recorded as sent at `now`)."""
        self._expire(now)
        out = []
        for cand in self._candidates.values():
            if now >= self._due(cand):
                tx = self.new_txid()
                cand.pending[tx] = now
                self._by_txid[tx] = cand
                cand.last_ping, cand.answered, cand.ping_now = now, False, False
                if len(cand.pending) > self.max_pending:
                    oldest = next(iter(cand.pending))
                    del cand.pending[oldest]
                    self._by_txid.pop(oldest, None)
                out.append((cand.endpoint, tx))
        self.stats["pings"] += len(out)
        return out

    def next_deadline(self, now: float) -> float:
        """When `pings_due` (or expiry) next has something to do."""
        times = [self._due(c) for c in self._candidates.values()]
        times += [sent + self.ping_timeout for c in self._candidates.values() for sent in c.pending.values()]
        times += [c.last_pong + self.path_expiry for c in self._candidates.values() if c.last_pong is not None]
        return max(now, min(times, default=now + self.reping_interval))

    def path(self, now: float) -> Path:
        """The preferred path: the best confirmed endpoint, else the relay."""
        live = self._confirmed(now)
        best = self._best if self._best is not None and self._best.endpoint in live else None
        for cand in live.values():
            if best is None or cand.latency < best.latency * (1 - self.switch_margin):
                best = cand
        self._best = best
        if best is None:
            return Path(RELAY)
        return Path(DIRECT, best.endpoint, best.latency)

    def punching(self, now: float) -> bool:
        return now < self._punch_until

    def candidates(self) -> list[Endpoint]:
        return list(self._candidates)

    # ---- internals
    def _add(self, endpoint: Endpoint) -> _Candidate | None:
        endpoint = (str(endpoint[0]), int(endpoint[1]))
        cand = self._candidates.get(endpoint)
        if cand is None:
            if len(self._candidates) >= self.max_candidates:
                self.stats["dropped_candidates"] += 1
                return None
            cand = self._candidates[endpoint] = _Candidate(endpoint)
        return cand

    def _confirmed(self, now: float) -> dict[Endpoint, _Candidate]:
        return {ep: c for ep, c in self._candidates.items()
                if c.last_pong is not None and now - c.last_pong <= self.path_expiry}

    def _due(self, cand: _Candidate) -> float:
        if cand.last_ping is None or cand.ping_now:
            return float("-inf")
        if cand.answered:
            return cand.last_ping + self.reping_interval
        pace = self.punch_interval if cand.last_ping < self._punch_until else self.reping_interval
        return cand.last_ping + pace

    def _expire(self, now: float) -> None:
        """Forget pings past their timeout; an unanswered ping on a live path (re)starts punching."""
        live = self._confirmed(now)
        for cand in self._candidates.values():
            for tx, sent in list(cand.pending.items()):
                if now - sent >= self.ping_timeout:
                    del cand.pending[tx]
                    self._by_txid.pop(tx, None)
                    self.stats["lost_pings"] += 1
                    if cand.endpoint in live and not cand.answered:
                        self.start_punch(now)
