"""Named limits of the mailbox protocol (the reference has none). 0 disables a count limit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_message_bytes: int = 1 << 20  # phase + body of one `add`
    max_messages_per_mailbox: int = 1000
    max_mailbox_bytes: int = 8 << 20  # message bodies one mailbox may hold
    max_stored_bytes: int = 1 << 30  # message bodies the whole server holds
    max_mailboxes_per_connection: int = 4  # claim + open + close of one flow touch 1
    max_mailboxes: int = 100_000  # whole server; beyond it new channels get "server is full"
    messages_per_second: float = 100.0  # per connection, token bucket
    burst_messages: float = 500.0

    @property
    def max_frame_bytes(self) -> int:
        # JSON framing around the body: the type, phase, id and escapes never need more than this
        return self.max_message_bytes + 65536
