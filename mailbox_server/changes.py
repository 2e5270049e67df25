"""`Changes`: the rows one grouped transaction writes, snapshotted from the in-memory state.

The state's owner produces them (`take_changes()`), the SQLite store applies them; neither the protocol
nor the store needs the other to describe a batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Changes:
    """Rows to write in one transaction, snapshotted on the event loop."""
    purge_messages: list[tuple[str, str]] = field(default_factory=list)
    delete_mailboxes: list[tuple[str, str]] = field(default_factory=list)
    put_mailboxes: list[tuple[str, str, int, float, dict[str, Any]]] = field(default_factory=list)
    add_messages: list[tuple[Any, ...]] = field(default_factory=list)
    delete_nameplates: list[tuple[str, str]] = field(default_factory=list)
    put_nameplates: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)
