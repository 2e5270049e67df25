"""A tiny driver for the sans-IO core and its single-node store: feed literal JSON text, read back what
each client would get."""

from __future__ import annotations

import asyncio
import json
import random
from itertools import count
from typing import Any

from burrow.mailbox_server.limits import Limits
from burrow.mailbox_server.memory import MemoryChannels
from burrow.mailbox_server.protocol import Drop, MailboxCore, Request, Send, Session, Usage


class Harness:
    def __init__(self, limits: Limits | None = None, welcome: dict[str, Any] | None = None,
                 allow_list: bool = True, seed: int = 1) -> None:
        ids = count(1)
        self.core = MailboxCore(limits or Limits(), welcome or {}, allow_list=allow_list)
        self.store = MemoryChannels(limits or Limits(), rng=random.Random(seed), mailbox_id=lambda: f"mb{next(ids)}")
        self.names: dict[Session, str] = {}
        self.usage: list[Usage] = []
        self.dropped: dict[str, str] = {}
        self.now = 1000.0

    def run(self, out: list[Any]) -> list[Any]:
        """Answer the core's requests from the store, as the server does; the other outputs in order."""
        done: list[Any] = []
        for o in out:
            if isinstance(o, Request):
                done += self.run(self.core.complete(o, self.store.apply(o.op)))
            else:
                done.append(o)
        return done

    def connect(self, name: str) -> tuple[Session, list[dict[str, Any]]]:
        s, out = self.core.connect(self.now, {"port": 1234, "ipv4": "127.0.0.1"})
        self.names[s] = name
        return s, [o.msg for o in out]

    def feed(self, s: Session, text: str | bytes) -> dict[str, list[dict[str, Any]]]:
        """Send one frame; returns {client name: [messages it receives]} (JSON round-tripped)."""
        self.now += 1.0
        return self.collect(self.core.receive(s, text, self.now))

    def send(self, s: Session, **msg: Any) -> dict[str, list[dict[str, Any]]]:
        return self.feed(s, json.dumps(msg))

    def prune(self, now: float, expiry: float) -> list[Usage]:
        return [o for o in self.run([self.core.prune(now, expiry)]) if isinstance(o, Usage)]

    def collect(self, out: list[Any]) -> dict[str, list[dict[str, Any]]]:
        got: dict[str, list[dict[str, Any]]] = {}
        for o in self.run(out):
            if isinstance(o, Send):
                got.setdefault(self.names[o.session], []).append(json.loads(json.dumps(o.msg)))
            elif isinstance(o, Drop):
                self.dropped[self.names[o.session]] = o.reason
            elif isinstance(o, Usage):
                self.usage.append(o)
        return got

    def counts(self) -> tuple[int, int, int]:
        """Mailboxes, nameplates and stored body bytes in the store."""
        return self.store.counts()

    def bound(self, name: str, appid: str = "app", side: str | None = None) -> Session:
        s, _ = self.connect(name)
        self.send(s, type="bind", appid=appid, side=side or name, id="b")
        return s


class RedisHarness(Harness):
    """The same driver with the Redis store (a replica named `replica`) on a redis-server the test started.

    Each frame is settled before `feed` returns: requests answered, and every message added delivered
    through pub/sub to the subscribers on this replica."""

    def __init__(self, url: str, limits: Limits | None = None, welcome: dict[str, Any] | None = None,
                 allow_list: bool = True, seed: int = 1, replica: str = "r1", ids: Any = None) -> None:
        from burrow.mailbox_server.store_redis import RedisStore

        super().__init__(limits, welcome, allow_list, seed)
        ids = ids or count(1)
        self.loop = asyncio.new_event_loop()
        self.store = RedisStore(url, limits or Limits(), replica, rng=random.Random(seed),
                                mailbox_id=lambda: f"mb{next(ids)}")
        self._out: list[Any] = []
        self._outstanding = 0
        self._expected: list[tuple[str, str, int]] = []  # (app, mailbox, number) still to be delivered here
        self.loop.run_until_complete(self.store.start(self))

    def counts(self) -> tuple[int, int, int]:
        self.loop.run_until_complete(self.store._refresh_stats())
        return self.store.counts()

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()

    # the StoreHost the store calls back into
    def answered(self, req: Request, result: Any) -> None:
        self._outstanding -= 1
        if type(req.op).__name__ == "Add" and result.error is None:
            self._expected.append((req.op.app, req.op.mailbox, result.value))
        self._emit(self.core.complete(req, result))

    def delivered(self, d: Any) -> None:
        self._emit(self.core.deliver(d))

    def gone(self, app: str, mailbox: str) -> None:
        self.core.mailbox_gone(app, mailbox)

    def active(self) -> frozenset[tuple[str, str]]:
        return self.core.active()

    def unavailable(self, req: Request) -> None:
        raise AssertionError(f"Redis unavailable for {req.op}")

    def _emit(self, out: list[Any]) -> None:
        for o in out:
            if isinstance(o, Request):
                self._outstanding += 1
                self.store.submit(o)
            else:
                self._out.append(o)

    def _settled(self) -> bool:
        if self._outstanding:
            return False
        for app, mailbox, index in self._expected:
            for s in self.core.subscribers.get((app, mailbox), ()):
                if s.subscribed == mailbox and s.next_index <= index:
                    return False
        return True

    async def _settle(self) -> None:
        for _ in range(5000):  # bounded: 5 s
            if self._settled():
                break
            await asyncio.sleep(0.001)
        else:
            raise AssertionError("the Redis store did not answer within 5 s")
        self._expected.clear()

    def run(self, out: list[Any]) -> list[Any]:
        async def settle() -> None:  # submitted inside the loop: a prune runs as a task of the store
            self._emit(out)
            await self._settle()

        self.loop.run_until_complete(settle())
        done, self._out = self._out, []
        return done
