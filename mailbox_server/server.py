"""The asyncio mailbox server: listener, channel store, output pipeline, timers, event log, admin HTTP.

Replies never leave before the state they depend on is stored. The protocol core's requests go to the
channel store (`local.LocalStore`: this process and SQLite; `store_redis.RedisStore`: Redis, shared by
replicas); its answers come back through `answered`, and every output lands in one outbox. A single
flusher task asks the store to make what it answered durable (one grouped SQLite commit) and then
writes the outbox; Redis answers arrive already accepted, so there one callback on the next turn of the
event loop writes it.

On SIGTERM the server drains: /readyz fails, the listener closes, requests in flight finish, every client
is asked to reconnect once its connection is quiet (close code 1012, which magic-wormhole answers by
reconnecting, through a load balancer to another replica), and the process exits once they are gone or after --drain-timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter
from typing import Any

from burrow.common.admin import AdminServer
from burrow.common.events import EventLog
from burrow.common.limits import ConnectionCaps
from burrow.common.listen import tcp_listener
from burrow.common.proxy_protocol import gate_factory, proxy_policy

from . import messages as m
from .channels import ChannelStore
from .config import MailboxConfig
from .local import LocalStore
from .metrics import Metrics, MetricsSnapshot
from .ops import Delivery, Result
from .protocol import Drop, MailboxCore, Output, Request, Send, Session, Usage
from .wsconn import WSConnection

log = logging.getLogger("mailbox_server")
RECONNECT = 1012  # "service restart": clients reconnect (magic-wormhole does on any close once connected)
TRY_LATER = 1013  # "try again later": the store stayed unreachable


class MailboxServer:
    def __init__(self, config: MailboxConfig) -> None:
        self.config = config
        self.replica = config.replica_id or f"{config.node_name or socket.gethostname()}-{os.getpid()}"
        self.core = MailboxCore(config.limits(), config.welcome(), allow_list=not config.disallow_list)
        self.frame_limit = config.limits().max_frame_bytes if config.max_message_bytes > 0 else None
        self.events = EventLog(config.event_log, "mailbox", node=config.node_name, blur=config.blur_usage)
        self.caps = ConnectionCaps(config.max_connections, config.max_connections_per_ip)
        self.refusals: Counter[str] = Counter()
        self.metrics = Metrics(self.metrics_snapshot, self.replica)
        self.store: ChannelStore = self._make_store()
        self.conns: dict[Session, WSConnection] = {}
        self.port: int | None = None
        self.admin_port: int | None = None
        self.ready = False  # listener bound and state loaded, not shutting down
        self.draining = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._outbox: list[Output] = []
        self._wake = asyncio.Event()
        self._soon = False  # a _deliver_soon callback is scheduled
        self._flush_lock = asyncio.Lock()
        self._server: asyncio.AbstractServer | None = None
        self._admin: AdminServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._messages_at_stats = 0

    def _make_store(self) -> ChannelStore:
        cfg = self.config
        if cfg.redis_url:
            from .store_redis import RedisStore  # redis-py loads only when asked for

            return RedisStore(cfg.redis_url, cfg.limits(), self.replica, self.metrics.registry,
                              wait=cfg.redis_wait, expiry=cfg.channel_expiry)
        return LocalStore(cfg.db, cfg.db_fsync, cfg.limits(), commit_seconds=self.metrics.commit_seconds)

    # ---- start / stop ------------------------------------------------------------------------
    async def start(self) -> int:
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        await self.store.start(self)
        self._handle([self.core.prune(time.time(), self.config.channel_expiry)])
        self._server = await self._listen()
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.admin_port >= 0:
            self._admin = AdminServer(self.metrics.registry, ready=lambda: self.ready and self.store.healthy(),
                                      service="mailbox")
            self.admin_port = await self._admin.start(self.config.admin_host, self.config.admin_port)
        self._tasks = [asyncio.create_task(self._flusher()), asyncio.create_task(self._every(
            self.config.prune_interval, self._prune)), asyncio.create_task(self._every(
                self.config.stats_interval, self._stats)), asyncio.create_task(self._every(
                    max(1.0, min(self.config.ping_interval, self.config.idle_timeout) / 2), self._sweep))]
        self.ready = True
        mailboxes, nameplates, _ = self.store.counts()
        log.info("mailbox server %s on port %s (%s, %s event loop; %d mailboxes, %d nameplates)", self.replica,
                 self.port, "redis" if self.config.redis_url else "sqlite", type(self.loop).__module__.split(".")[0],
                 mailboxes, nameplates)
        return self.port

    async def _listen(self) -> asyncio.AbstractServer:
        def factory() -> WSConnection:
            return WSConnection(self)
        gated = gate_factory(factory, proxy_policy("mailbox", self.config.proxy_protocol, self.metrics.registry))
        return await self.loop.create_server(gated, sock=tcp_listener(self.config.host, self.config.port))

    async def stop(self) -> None:
        """Drain: refuse new work, finish requests in flight, ask clients to reconnect, then exit."""
        self.ready = False
        self.draining = True
        if self._server is not None:
            self._server.close()
        for task in self._tasks[1:]:
            task.cancel()
        deadline = time.monotonic() + max(0.0, self.config.drain_timeout)
        while any(s.pending is not None for s in self.conns) and time.monotonic() < deadline:
            await self._drain()
            await asyncio.sleep(0.01)
        await self._drain()
        await self._ask_to_reconnect(time.monotonic() + max(0.0, self.config.drain_timeout) / 2)
        while self.conns and time.monotonic() < deadline:
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
        await self.store.close()
        self.events.close()

    async def _ask_to_reconnect(self, latest: float) -> None:
        """Close each client with 1012 once its connection has been quiet for --drain-quiet, everyone by
        `latest`. A client that was just sent a message (a peer's, fanned out from another replica) is
        likely answering it, and some clients (magic-wormhole 0.24) fail instead of reconnecting when
        that answer meets the close frame."""
        quiet = max(0.0, self.config.drain_quiet)
        asked: set[WSConnection] = set()
        while True:
            now = time.monotonic()
            for conn in list(self.conns.values()):
                if conn not in asked and (now >= latest or now - max(conn.last_rx, conn.last_tx) >= quiet):
                    asked.add(conn)
                    conn.drop("shutdown", "server restarting, reconnect", code=RECONNECT)
            if now >= latest or all(conn in asked for conn in self.conns.values()):
                return
            await asyncio.sleep(min(0.05, quiet))

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
        elif self.draining:  # its handshake finished after the drain began: send it to another replica now
            out.append(Drop(session, "shutdown", "server restarting, reconnect", RECONNECT))
        else:
            conn.cap_ip = cap_key
            if self.config.bind_deadline > 0:
                self.loop.call_later(self.config.bind_deadline, self._bind_deadline, session)
        # The welcome depends on no stored state: sent now, it joins the 101 response in one write.
        self._deliver(out)

    def _bind_deadline(self, session: Session) -> None:
        self._handle(self.core.bind_timed_out(session))

    def receive(self, conn: WSConnection, payload: bytes) -> None:
        if self.draining:
            return  # unacknowledged: the client sends it again after reconnecting
        self._handle(self.core.receive(conn.session, payload, time.time()))

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
                         app_id=s.app, client_impl=s.client_impl, client_version=s.client_version,
                         messages_in=s.messages_in, errors=s.errors, close_reason=conn.close_reason)

    # ---- the channel store's callbacks (StoreHost) -------------------------------------------
    def answered(self, req: Request, result: Result) -> None:
        self._handle(self.core.complete(req, result))

    def delivered(self, d: Delivery) -> None:
        self._handle(self.core.deliver(d))

    def gone(self, app: str, mailbox: str) -> None:
        self.core.mailbox_gone(app, mailbox)

    def active(self) -> frozenset[tuple[str, str]]:
        return self.core.active()

    def unavailable(self, req: Request) -> None:
        if req.session is not None:
            self._handle([Drop(req.session, "store", "storage unavailable, reconnect later", TRY_LATER)])

    # ---- output pipeline ---------------------------------------------------------------------
    def _handle(self, out: list[Output]) -> None:
        if not out:
            return
        for item in out:
            if type(item) is Request:
                self.store.submit(item)
            else:
                self._outbox.append(item)
        if not self.store.answers_durable:
            self._wake.set()
        elif self._outbox and not self._soon:  # one callback per turn of the loop writes all of it, cheaper than a task's wake-up
            self._soon = True
            self.loop.call_soon(self._deliver_soon)

    def _deliver_soon(self) -> None:
        self._soon = False
        if self._outbox and not self._flush_lock.locked():
            out, self._outbox = self._outbox, []
            self._deliver(out)
        elif self._outbox:
            self._wake.set()

    async def _flusher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._commit_and_deliver()

    async def _commit_and_deliver(self) -> None:
        async with self._flush_lock:  # the flusher and stop() must not interleave batches
            out, self._outbox = self._outbox, []
            await self.store.flush()
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
                        conn.queue(pending)  # written with the close frame
                    conn.drop(item.reason, item.text, item.code)
            elif type(item) is Usage:
                self.events.emit(item.event, **item.fields)
        for conn, batch in batches.items():
            conn.send_many(batch)

    def metrics_snapshot(self) -> MetricsSnapshot:
        core = self.core
        mailboxes, nameplates, stored = self.store.counts()
        return MetricsSnapshot(
            connections=len(self.conns), mailboxes=mailboxes, nameplates=nameplates,
            messages_total=core.messages_total, stored_bytes=stored, moods=dict(core.moods),
            errors=dict(core.errors), refusals=dict(core.refusals + self.refusals),
            commits=getattr(self.store, "commits", 0), store_errors=getattr(self.store, "errors", 0))

    # ---- timers ------------------------------------------------------------------------------
    async def _every(self, period: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", fn.__name__)

    def _prune(self) -> None:
        self._handle([self.core.prune(time.time(), self.config.channel_expiry)])

    def _stats(self) -> None:
        total = self.core.messages_total
        mailboxes, nameplates, _ = self.store.counts()
        self.events.emit("stats", interval=float(self.config.stats_interval), connections=len(self.conns),
                         mailboxes=mailboxes, nameplates=nameplates,
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
