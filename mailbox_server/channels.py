"""The interface between the asyncio server and wherever channel state lives.

`local.LocalStore` keeps it in this process (answers at once, writes behind to SQLite); `store_redis.
RedisStore` keeps it in Redis for several replicas (answers after one round trip, fans messages out
through Redis). The server and the protocol core use only what is declared here.
"""

from __future__ import annotations

from typing import Protocol

from .ops import Delivery, Result
from .outputs import Request


class StoreHost(Protocol):
    """What a store calls back into: the server that owns the protocol core."""

    def answered(self, req: Request, result: Result) -> None:
        """`req` is done (possibly before `submit` returned); results of one connection come in order."""

    def delivered(self, d: Delivery) -> None:
        """A message was added to a mailbox that connections here are subscribed to."""

    def gone(self, app: str, mailbox: str) -> None:
        """A mailbox connections here are subscribed to was deleted elsewhere."""

    def active(self) -> frozenset[tuple[str, str]]:
        """(app, mailbox) pairs subscribed here (kept alive, never pruned)."""

    def unavailable(self, req: Request) -> None:
        """`req` cannot be answered (the store stayed unreachable); its connection must go."""


class ChannelStore(Protocol):
    # True when every answer arrives already durable (flush() has nothing to wait for): replies are then
    # written on the next turn of the event loop, without the flusher task.
    answers_durable: bool

    async def start(self, host: StoreHost) -> None:
        """Open (load, connect, subscribe); afterwards `submit` may be called."""

    def submit(self, req: Request) -> None:
        """Run `req.op`; the answer comes through `host.answered`."""

    async def flush(self) -> None:
        """Make every answered request durable; replies that depend on them leave after this returns."""

    def healthy(self) -> bool:
        """False while the state cannot be written (/readyz fails)."""

    def counts(self) -> tuple[int, int, int]:
        """Mailboxes, claimed nameplates and stored message body bytes (all replicas together)."""

    async def close(self) -> None:
        """Finish what was submitted where possible, then release everything."""
