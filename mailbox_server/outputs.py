"""What the protocol core emits (`Send`, `Drop`, `Usage`, `Request`) and the per-connection `Session`."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .ops import Op, Prune


@dataclass(frozen=True, slots=True)
class Send:
    session: Session
    msg: dict[str, Any]
    live: bool = False  # a freshly added message (for the delivery-latency metric), not a replay


@dataclass(frozen=True, slots=True)
class Drop:
    """Close this connection (after the sends before it). reason: a `close_reason` of the event log."""
    session: Session
    reason: str
    text: str
    code: int = 1008  # WebSocket close code


@dataclass(frozen=True, slots=True)
class Usage:
    """A finished mailbox or nameplate: `event` is "mailbox" or "nameplate" (see docs/events.md)."""
    event: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Request:
    """Run `op` on the channel store and hand the result to `MailboxCore.complete(request, result)`.

    `session` is None for store-wide work (pruning)."""
    session: Session | None
    op: Op | Prune


Output = Send | Drop | Usage | Request


@dataclass(slots=True, eq=False)
class Session:
    """One WebSocket connection's protocol state."""
    started: float
    app: str | None = None
    side: str | None = None
    client_impl: str | None = None
    client_version: str | None = None
    did_allocate: bool = False
    did_claim: bool = False
    nameplate: str | None = None
    did_release: bool = False
    subscribed: str | None = None  # mailbox id while subscribed (open ... close)
    next_index: int = 0  # number of the next message of that mailbox this connection should get
    mailbox_id: str | None = None
    did_close: bool = False
    touched: set[str] = field(default_factory=set)  # mailbox ids this connection reached
    messages_in: int = 0
    errors: int = 0
    closed: bool = False
    bucket_tokens: float = 0.0
    bucket_stamp: float = 0.0
    pending: Any = None  # the store operation in flight (protocol.Pending); frames wait behind it
    queued: deque[tuple[bytes | str, float]] = field(default_factory=deque)
    queued_bytes: int = 0
    held: list[Send] = field(default_factory=list)  # deliveries that arrived while an operation was in flight
