"""The single-node channel state: apps, nameplates, mailboxes and their messages, held in memory.

`memory.py` changes it, `store.py` persists it (write-behind, one transaction per event-loop tick, committed before any reply
leaves), and loads it back at start-up. The usage summaries follow the reference's `result` rules so
the event log's moods mean what operators of the reference are used to.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class NameplateSide:
    claimed: bool
    added: float


@dataclass(slots=True)
class Nameplate:
    name: str
    mailbox_id: str
    sides: dict[str, NameplateSide] = field(default_factory=dict)


@dataclass(slots=True)
class MailboxSide:
    opened: bool
    added: float
    mood: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    side: str
    phase: str
    body: str
    server_rx: float
    msg_id: Any


@dataclass(slots=True, eq=False)
class Mailbox:
    id: str
    for_nameplate: bool
    updated: float
    sides: dict[str, MailboxSide] = field(default_factory=dict)
    messages: list[StoredMessage] = field(default_factory=list)
    body_bytes: int = 0
    persisted: int = 0  # messages[:persisted] are already in the database


@dataclass(slots=True)
class App:
    app_id: str
    nameplates: dict[str, Nameplate] = field(default_factory=dict)
    mailboxes: dict[str, Mailbox] = field(default_factory=dict)
    # count of canonical numeric nameplate names by digit length, for fast allocation
    by_length: dict[int, int] = field(default_factory=dict)

    def add_nameplate(self, np: Nameplate) -> None:
        self.nameplates[np.name] = np
        if _canonical(np.name):
            self.by_length[len(np.name)] = self.by_length.get(len(np.name), 0) + 1

    def free_nameplate(self, rng: random.Random) -> str | None:
        """A free id from the shortest range with room (1-9, 10-99, 100-999), else random up to 999999."""
        names = self.nameplates
        for size in (1, 2, 3):
            lo, hi = 10 ** (size - 1), 10 ** size
            free = (hi - lo) - self.by_length.get(size, 0)
            if free <= 0:
                continue
            if free * 4 >= hi - lo:  # plenty free: a few random probes find one
                while True:
                    name = str(rng.randrange(lo, hi))
                    if name not in names:
                        return name
            return rng.choice([str(i) for i in range(lo, hi) if str(i) not in names])
        for _ in range(1000):
            name = str(rng.randrange(1000, 1000 * 1000))
            if name not in names:
                return name
        return None

    def remove_nameplate(self, name: str) -> Nameplate | None:
        np = self.nameplates.pop(name, None)
        if np is not None and _canonical(name):
            self.by_length[len(name)] -= 1
        return np


def _canonical(name: str) -> bool:
    return name.isdigit() and name.isascii() and not name.startswith("0")


def nameplate_usage(np: Nameplate, now: float, pruned: bool) -> dict[str, Any]:
    times = sorted(s.added for s in np.sides.values()) or [now]
    n = len(np.sides)
    mood = "lonely" if n <= 1 else "happy"
    if pruned:
        mood = "pruney"
    if n > 2:
        mood = "crowded"
    return {"started": times[0], "duration": max(0.0, now - times[0]),
            "waiting_time": times[1] - times[0] if len(times) > 1 else None, "mood": mood}


def mailbox_usage(mb: Mailbox, now: float, pruned: bool, messages: int | None = None) -> dict[str, Any]:
    """The `mailbox` event of a deleted mailbox; `messages` counts them when `mb.messages` is not loaded."""
    times = sorted(s.added for s in mb.sides.values()) or [now]
    n = len(mb.sides)
    mood = "quiet" if n == 0 else "lonely" if n == 1 else "happy"
    moods = {s.mood for s in mb.sides.values() if s.mood}
    for m in ("lonely", "errory", "scary"):  # later checks win, as in the reference
        if m in moods:
            mood = m
    if pruned:
        mood = "pruney"
    if n > 2:
        mood = "crowded"
    return {"started": times[0], "duration": max(0.0, now - times[0]),
            "waiting_time": times[1] - times[0] if len(times) > 1 else None, "mood": mood,
            "for_nameplate": mb.for_nameplate, "sides": n,
            "messages": len(mb.messages) if messages is None else messages,
            "bytes": mb.body_bytes}
