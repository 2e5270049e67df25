"""The operations the protocol core asks of the channel store, and what comes back.

The core decides everything that concerns one connection (parsing, bind, the once-per-connection rules,
rates); what concerns channels that several connections share (nameplates, mailboxes, messages, their
limits) is one `Op` for the store, answered by one `Result`. The single-node store (`memory.py`, written
behind to SQLite) answers at once; the Redis store answers after one atomic script. Both follow the
same rules, so the core cannot tell them apart.

Messages of a mailbox are numbered from 0 in the order they were added. A store reports each new message
once as a `Delivery`; the core hands it to every subscribed connection that has not seen that number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Op:
    app: str
    side: str
    now: float


@dataclass(frozen=True, slots=True)
class ListNames(Op):
    """Names of the app's nameplates, sorted."""


@dataclass(frozen=True, slots=True)
class Allocate(Op):
    """Pick a free nameplate and claim it for `side` (which also opens its new mailbox)."""
    touched: frozenset[str]  # mailbox ids this connection already reached
    max_touched: int  # 0: no limit


@dataclass(frozen=True, slots=True)
class Claim(Op):
    name: str
    touched: frozenset[str]
    max_touched: int


@dataclass(frozen=True, slots=True)
class Release(Op):
    name: str


@dataclass(frozen=True, slots=True)
class Open(Op):
    """Open `mailbox` for `side` and return its stored messages (the connection then subscribes)."""
    mailbox: str
    touched: frozenset[str]
    max_touched: int


@dataclass(frozen=True, slots=True)
class Add(Op):
    mailbox: str
    phase: str
    body: str
    msg_id: Any


@dataclass(frozen=True, slots=True)
class Close(Op):
    mailbox: str
    mood: str | None
    subscribed: bool  # False: the connection never opened it, so close opens it first (as the reference)
    touched: frozenset[str]
    max_touched: int


@dataclass(frozen=True, slots=True)
class Prune:
    """Delete channels idle for `expiry` seconds; `active` (app, mailbox) pairs count as used now."""
    now: float
    expiry: float
    active: frozenset[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Delivery:
    """Message number `index` of (`app`, `mailbox`), as the wire `message` dict (without server_tx)."""
    app: str
    mailbox: str
    index: int
    msg: dict[str, Any]


@dataclass(slots=True)
class Result:
    error: str | None = None  # `error` text for the client
    fatal: bool = False  # the connection closes after the error
    refusal: str | None = None  # the limit that refused (burrow_mailbox_refusals_total{limit})
    value: Any = None  # nameplate (allocate), mailbox id (claim), names (list)
    touched: str | None = None  # mailbox id the connection reached (also set with some errors)
    replay: list[dict[str, Any]] = field(default_factory=list)  # open: stored messages, numbered from 0
    delivery: Delivery | None = None  # add, for stores that fan out in the result
    usage: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (event, fields) of finished channels
    gone: list[tuple[str, str]] = field(default_factory=list)  # (app, mailbox) deleted


def refused(error: str, refusal: str | None = None, fatal: bool = False) -> Result:
    return Result(error=error, refusal=refusal, fatal=fatal)
