"""The messaging server's own discovery entry: published at start, refreshed, emptied at shutdown.

Each write is the next iteration (sequence + 1) of the stored entry, signed with the server's key:
{"server": {"address": "host:port", "port": "", "available_connections": N}}. A failed write is logged
and counted; the next period tries again (the entry lives `--entry-ttl` on the discovery, longer than
the refresh period, so one failure does not drop the server from the list).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from burrow.client.messaging.discovery import DiscoveryClient, DiscoveryError, Publisher
from burrow.messaging import keys
from burrow.messaging.entry import Entry, ServerInfo

log = logging.getLogger(__name__)


class Registration:
    def __init__(self, url: str, key: keys.SecretKey, address: str, available: Callable[[], int],
                 refresh: float) -> None:
        self.discovery = DiscoveryClient(url, timeout=min(10.0, max(1.0, refresh / 2)))
        self.publisher = Publisher(self.discovery, key)
        self.key = key
        self.address = address
        self.available = available
        self.refresh = refresh
        self.writes = 0
        self.failures = 0
        self.registered = False
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.publish()  # a first failure is logged; the loop keeps trying
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def publish(self, room: int | None = None) -> bool:
        conns = self.available() if room is None else room
        port = self.address.rpartition(":")[2]

        def make(seq: int, ts: int) -> Entry:
            return Entry(self.key.public, seq, ts, server=ServerInfo(self.address, port, conns))

        try:
            await self.publisher.publish(make)
        except DiscoveryError as exc:
            self.failures += 1
            self.registered = False
            log.warning("discovery registration failed: %s", exc)
            return False
        self.writes += 1
        self.registered = True
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh)
            await self.publish()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.publish(room=0), 3.0)
        await self.discovery.close()

    def collect(self):
        c = CounterMetricFamily("burrow_relay_messaging_registrations", "Discovery entry writes, by result",
                                labels=["result"])
        c.add_metric(["ok"], self.writes)
        c.add_metric(["failed"], self.failures)
        yield c
        g = GaugeMetricFamily("burrow_relay_messaging_registered", "1 while the last discovery write succeeded")
        g.add_metric([], 1 if self.registered else 0)
        yield g
