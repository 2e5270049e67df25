"""The asyncio mailbox server: listener, per-tick group commit, timers, event log, admin HTTP.

Replies never leave before the state they depend on is committed. All outputs of the protocol core
go into one outbox; a single flusher task takes the outbox together with `core.take_changes()`,
commits those changes in one transaction on a worker thread, then writes the replies. While one
commit runs, the next tick's work piles up and is committed together: one fsync serves every message
that arrived meanwhile, which is where the speed over the reference comes from.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from burrow.common.admin import AdminServer
from burrow.common.events import EventLog
from burrow.common.limits import ConnectionCaps
from burrow.common.listen import tcp_listener

from . import messages as m
from .config import MailboxConfig
from .metrics import Metrics, MetricsSnapshot
from .protocol import Drop, MailboxCore, Output, Send, Session, Usage
from .store import Store
from .wsconn import WSConnection

log = logging.getLogger("mailbox_server")


class MailboxServer:
    def __init__(self, config: MailboxConfig) -> None:
        self.config = config
        self.core = MailboxCore(config.limits(), config.welcome(), allow_list=not config.disallow_list)
        self.frame_limit = config.limits().max_frame_bytes if config.max_message_bytes > 0 else None
        self.store: Store | None = None
        self.store_errors = 0
        self.events = EventLog(config.event_log, "mailbox", node=config.node_name, blur=config.blur_usage)
        self.caps = ConnectionCaps(config.max_connections, config.max_connections_per_ip)
        self.refusals: Counter[str] = Counter()
        self.metrics = Metrics(self.metrics_snapshot)
        self.conns: dict[Session, WSConnection] = {}
        self.port: int | None = None
        self.admin_port: int | None = None
        self.ready = False  # listener bound and state loaded, not shutting down
        self.store_ok = True  # the last commit succeeded
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._outbox: list[Output] = []
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mailbox-db")
        self._server: asyncio.AbstractServer | None = None
        self._admin: AdminServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._messages_at_stats = 0

    # ---- start / stop ------------------------------------------------------------------------
    async def start(self) -> int:
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self.store = await self.loop.run_in_executor(self._executor, Store, self.config.db,
                                                     self.config.db_fsync)
        apps = await self.loop.run_in_executor(self._executor, self.store.load)
        self.core.load(apps)
        self._usage(self.core.prune(time.time(), self.config.channel_expiry))
        self._server = await self._listen()
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.admin_port >= 0:
            self._admin = AdminServer(self.metrics.registry, ready=lambda: self.ready and self.store_ok,
                                      service="mailbox")
            self.admin_port = await self._admin.start(self.config.admin_host, self.config.admin_port)
        self._tasks = [asyncio.create_task(self._flusher()), asyncio.create_task(self._every(
            self.config.prune_interval, self._prune)), asyncio.create_task(self._every(
                self.config.stats_interval, self._stats)), asyncio.create_task(self._every(
                    max(1.0, min(self.config.ping_interval, self.config.idle_timeout) / 2), self._sweep))]
        self.ready = True
        log.info("mailbox server on port %s (%d mailboxes, %d nameplates loaded)", self.port,
                 self.core.mailbox_count, self.core.nameplate_count)
        return self.port

    async def _listen(self) -> asyncio.AbstractServer:
        def factory() -> WSConnection:
            return WSConnection(self)
        return await self.loop.create_server(factory, sock=tcp_listener(self.config.host, self.config.port))

    async def stop(self) -> None:
        self.ready = False
        if self._server is not None:
            self._server.close()
        for task in self._tasks[1:]:
            task.cancel()
        await self._drain()
        for conn in list(self.conns.values()):
            conn.drop("shutdown", "server shutting down", code=1001)
        for _ in range(20):  # give clients a moment to answer the close frame (bounded: 1 s)
            if not self.conns:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.conns.values()):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0)
        if self._tasks:
            self._tasks[0].cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._admin is not None:
            await self._admin.stop()
        if self.store is not None:
            await self.loop.run_in_executor(self._executor, self.store.close)
            self.store = None
        self._executor.shutdown(wait=True)
        self.events.close()

    async def _drain(self) -> None:
        for _ in range(3):
            await self._commit_and_deliver()

    # ---- connections (the ConnectionHost each WSConnection talks to) ---------------------------
    @property
    def max_write_buffer(self) -> int:
        return self.config.max_write_buffer

    @property
    def trust_x_real_ip(self) -> bool:
        return self.config.trust_x_real_ip

    def count_refusal(self, limit: str) -> None:
        self.refusals[limit] += 1

    def count_error(self, text: str) -> None:
        self.core.errors[text] += 1

    def connection_open(self, conn: WSConnection, you: dict[str, Any], cap_key: str) -> None:
        now = time.time()
        refused = self.caps.try_acquire(cap_key)
        session, out = self.core.connect(now, you)
        conn.session = session
        self.conns[session] = conn
        self.metrics.connections_total.inc()
        if refused is not None:
            self.refusals["connections_" + refused] += 1
            out[0].msg["welcome"]["error"] = m.TOO_MANY_CONNECTIONS
            out.append(Drop(session, "limit", m.TOO_MANY_CONNECTIONS))
        else:
            conn.cap_ip = cap_key
            if self.config.bind_deadline > 0:
                self.loop.call_later(self.config.bind_deadline, self._bind_deadline, session)
        self.enqueue(out)

    def _bind_deadline(self, session: Session) -> None:
        self.enqueue(self.core.bind_timed_out(session))

    def receive(self, conn: WSConnection, payload: bytes) -> None:
        self.enqueue(self.core.receive(conn.session, payload, time.time()))

    def connection_gone(self, conn: WSConnection) -> None:
        s = conn.session
        if s is None:
            return
        conn.session = None
        self.conns.pop(s, None)
        if conn.cap_ip is not None:
            self.caps.release(conn.cap_ip)
        now = time.time()
        self.core.disconnect(s, now)
        self.events.emit("connection", started=s.started, duration=max(0.0, now - s.started),
                         app_id=s.app.app_id if s.app else None, client_impl=s.client_impl,
                         client_version=s.client_version, messages_in=s.messages_in, errors=s.errors,
                         close_reason=conn.close_reason)

    # ---- output pipeline ---------------------------------------------------------------------
    def enqueue(self, out: list[Output]) -> None:
        if out:
            self._outbox.extend(out)
            self._wake.set()

    async def _flusher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._commit_and_deliver()

    async def _commit_and_deliver(self) -> None:
        async with self._flush_lock:  # the flusher and stop() must not interleave batches
            await self._commit_and_deliver_locked()

    async def _commit_and_deliver_locked(self) -> None:
        out, self._outbox = self._outbox, []
        changes = self.core.take_changes()
        if changes is not None and self.store is not None:
            t0 = time.perf_counter()
            try:
                await self.loop.run_in_executor(self._executor, self.store.apply, changes)
                self.store_ok = True
            except Exception:  # keep serving from memory; /readyz and the metric tell the operator
                self.store_errors += 1
                self.store_ok = False
                log.exception("database commit failed")
            self.metrics.commit_seconds.observe(time.perf_counter() - t0)
        if out:
            self._deliver(out)

    def _deliver(self, out: list[Output]) -> None:
        now = time.time()
        encoded: dict[int, bytes] = {}
        batches: dict[WSConnection, list[bytes]] = {}
        latency = self.metrics.latency
        for item in out:
            if type(item) is Send:
                conn = self.conns.get(item.session)
                if conn is None:
                    continue
                msg = item.msg
                data = encoded.get(id(msg))
                if data is None:
                    data = encoded[id(msg)] = m.encode(msg, now)
                batch = batches.get(conn)
                if batch is None:
                    batch = batches[conn] = []
                batch.append(data)
                if item.live:
                    latency.observe(now - msg["server_rx"])
            elif type(item) is Drop:
                conn = self.conns.get(item.session)
                if conn is not None:
                    pending = batches.pop(conn, None)
                    if pending:
                        conn.send_many(pending)
                    conn.drop(item.reason, item.text)
            elif type(item) is Usage:
                self.events.emit(item.event, **item.fields)
        for conn, batch in batches.items():
            conn.send_many(batch)

    def _usage(self, out: list[Output]) -> None:
        self.enqueue(out)

    def metrics_snapshot(self) -> MetricsSnapshot:
        core = self.core
        return MetricsSnapshot(
            connections=len(self.conns), mailboxes=core.mailbox_count, nameplates=core.nameplate_count,
            messages_total=core.messages_total, stored_bytes=core.stored_bytes, moods=dict(core.moods),
            errors=dict(core.errors), refusals=dict(core.refusals + self.refusals),
            commits=self.store.commits if self.store else 0, store_errors=self.store_errors)

    # ---- timers ------------------------------------------------------------------------------
    async def _every(self, period: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", fn.__name__)

    def _prune(self) -> None:
        self.enqueue(self.core.prune(time.time(), self.config.channel_expiry))

    def _stats(self) -> None:
        total = self.core.messages_total
        self.events.emit("stats", interval=float(self.config.stats_interval), connections=len(self.conns),
                         mailboxes=self.core.mailbox_count, nameplates=self.core.nameplate_count,
                         messages_interval=total - self._messages_at_stats)
        self._messages_at_stats = total

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.conns.values()):
            quiet = now - conn.last_rx
            if quiet > self.config.idle_timeout:
                conn.drop("timeout", "idle timeout")
            elif quiet > self.config.ping_interval:
                conn.ping()

