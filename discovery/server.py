"""DiscoveryServer: the HTTP API, the store, the admin port, the stats event line, graceful stop."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from burrow.common.admin import AdminServer
from burrow.common.events import EventLog
from burrow.common.listen import tcp_listener
from burrow.common.redis import UNAVAILABLE

from .api import DiscoveryAPI
from .config import DiscoveryConfig
from .stats import DiscoveryStats, make_registry
from .store import MemoryStore

log = logging.getLogger("discovery")


class DiscoveryServer:
    def __init__(self, config: DiscoveryConfig, clock=time.time) -> None:
        self.config = config
        self.clock = clock
        self.stats = DiscoveryStats()
        self.registry = make_registry(self.stats)
        self.store = None
        self.events = EventLog(config.event_log, "discovery", config.node_name)
        self.port = self.admin_port = 0
        self.ready = False
        self._runner: web.AppRunner | None = None
        self._admin: AdminServer | None = None
        self._stats_task: asyncio.Task | None = None
        self._last_stats = time.monotonic()

    async def _open_store(self):
        if self.config.redis_url:
            from .store_redis import RedisStore

            store = RedisStore(self.config.redis_url, self.config.entry_ttl, self.registry)
            await store.start()
            return store
        return MemoryStore(self.config.entry_ttl)

    async def start(self) -> None:
        cfg = self.config
        self.store = await self._open_store()
        app = web.Application(client_max_size=cfg.max_body_bytes + 1024)
        DiscoveryAPI(self.store, self.stats, cfg, self.clock).routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = tcp_listener(cfg.host, cfg.port)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._admin = AdminServer(self.registry, ready=self._is_ready, service="discovery")
        self.admin_port = await self._admin.start(cfg.admin_host, cfg.admin_port)
        self._stats_task = asyncio.get_running_loop().create_task(self._stats_loop())
        self.ready = True
        log.info("discovery up: http %s admin %s store %s", self.port, self.admin_port,
                 "redis" if cfg.redis_url else "memory")

    def _is_ready(self) -> bool:
        return self.ready and self.store is not None and self.store.healthy()

    async def stop(self) -> None:
        self.ready = False  # /readyz fails first, so a balancer stops sending new requests
        if self._runner is not None:
            await self._runner.cleanup()  # lets requests in progress finish
        if self._stats_task is not None:
            self._stats_task.cancel()
        if self._admin is not None:
            await self._admin.stop()
        await self._emit_stats()
        if self.store is not None:
            await self.store.close()
        self.events.close()

    async def _count(self) -> None:
        try:
            self.stats.entries, self.stats.servers = await self.store.counts(self.clock())
        except UNAVAILABLE as exc:  # a store outage must not stop the stats loop
            log.warning("counting entries failed: %s", exc)

    async def _emit_stats(self) -> None:
        if self.store is None:
            return
        await self._count()
        now = time.monotonic()
        self.events.emit("stats", interval=float(now - self._last_stats), **self.stats.interval())
        self._last_stats = now

    async def _stats_loop(self) -> None:
        self._last_stats = time.monotonic()
        while True:
            await asyncio.sleep(min(self.config.stats_interval, 15.0))
            await self._count()
            if time.monotonic() - self._last_stats >= self.config.stats_interval:
                await self._emit_stats()
