"""A tiny driver for the sans-IO core and its single-node store: feed literal JSON text, read back what
each client would get."""

from __future__ import annotations

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

    def bound(self, name: str, appid: str = "app", side: str | None = None) -> Session:
        s, _ = self.connect(name)
        self.send(s, type="bind", appid=appid, side=side or name, id="b")
        return s
