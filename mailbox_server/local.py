"""The single-node store: `MemoryChannels` answers every request at once, SQLite keeps a copy on disk.

Writes are grouped: `flush()` takes everything that changed since the last flush (one event-loop tick,
plus whatever arrived while the previous commit ran) and commits it in one transaction on a worker
thread. The server sends replies only after that, so one fsync serves many messages yet nothing is
acknowledged before it is on disk.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor

from .channels import StoreHost
from .limits import Limits
from .memory import MemoryChannels
from .outputs import Request
from .store import Store

log = logging.getLogger("mailbox_server")


class LocalStore:
    answers_durable = False  # replies wait for the grouped commit (flush)

    def __init__(self, path: str, fsync: bool, limits: Limits, rng: random.Random | None = None,
                 commit_seconds=None) -> None:
        self.path, self.fsync = path, fsync
        self.channels = MemoryChannels(limits, rng)
        self.db: Store | None = None
        self.host: StoreHost | None = None
        self.commit_seconds = commit_seconds  # histogram (observe) or None
        self.commits = 0
        self.errors = 0
        self.ok = True  # the last commit succeeded
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mailbox-db")

    async def start(self, host: StoreHost) -> None:
        self.host = host
        loop = asyncio.get_running_loop()
        self.db = await loop.run_in_executor(self._executor, Store, self.path, self.fsync)
        apps = await loop.run_in_executor(self._executor, self.db.load)
        self.channels.load(apps)

    def submit(self, req: Request) -> None:
        self.host.answered(req, self.channels.apply(req.op))

    async def flush(self) -> None:
        changes = self.channels.take_changes()
        if changes is None or self.db is None:
            return
        t0 = time.perf_counter()
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.db.apply, changes)
            self.commits += 1
            self.ok = True
        except Exception:  # keep serving from memory; /readyz and the metric tell the operator
            self.errors += 1
            self.ok = False
            log.exception("database commit failed")
        if self.commit_seconds is not None:
            self.commit_seconds.observe(time.perf_counter() - t0)

    def healthy(self) -> bool:
        return self.ok

    def counts(self) -> tuple[int, int, int]:
        return self.channels.counts()

    async def close(self) -> None:
        if self.db is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.db.close)
            self.db = None
        self._executor.shutdown(wait=True)
