"""What the protocol core emits (`Send`, `Drop`, `Usage`) and the per-connection `Session` state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .state import App, Mailbox


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


@dataclass(frozen=True, slots=True)
class Usage:
    """A finished mailbox or nameplate: `event` is "mailbox" or "nameplate" (see docs/events.md)."""
    event: str
    fields: dict[str, Any]


Output = Send | Drop | Usage


@dataclass(slots=True, eq=False)
class Session:
    """One WebSocket connection's protocol state."""
    started: float
    app: App | None = None
    side: str | None = None
    client_impl: str | None = None
    client_version: str | None = None
    did_allocate: bool = False
    did_claim: bool = False
    nameplate: str | None = None
    did_release: bool = False
    mailbox: Mailbox | None = None  # set while subscribed (open ... close)
    mailbox_id: str | None = None
    did_close: bool = False
    touched: set[str] = field(default_factory=set)  # mailbox ids this connection reached
    messages_in: int = 0
    errors: int = 0
    closed: bool = False
    bucket_tokens: float = 0.0
    bucket_stamp: float = 0.0
