"""How a service talks to Redis: connect from `--redis-url`, watch health, back off on loss.

(Hot paths that would spend more CPU in redis-py than Redis spends running them use the lean pipelined
connection of common/resp.py beside this link; its health still comes from here.)

URLs: `redis://[user:pass@]host:port/db`, `rediss://...` (TLS; `?ssl_ca_certs=FILE` for a private CA),
`unix:///path/to/redis.sock?db=0`. A Redis Cluster is recognised by asking the node it is given
(`cluster_enabled:1` in INFO), so the same `redis://` URL of any one master works for a cluster.

Keys: every key a service writes is `burrow:<service>:{<tag>}:<rest>` (see `key()`). Redis Cluster hashes
only the part inside `{...}`, so keys that one atomic operation (MULTI, a Lua script) touches share a tag
and land in one slot.

Health: a background task PINGs every `ping_interval` seconds; `healthy` turns False on the first
failure and True again on the next success. While Redis is down the task retries with exponential
back-off and jitter (`Backoff`), never in a tight loop. Every command's round trip through `timed()`
and every PING is recorded in `burrow_<service>_redis_roundtrip_seconds`; `burrow_<service>_redis_up`
is 1 while healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from redis import asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterDownError, MasterDownError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("burrow.redis")
T = TypeVar("T")

CONNECT_TIMEOUT = 5.0      # seconds to open a connection
COMMAND_TIMEOUT = 5.0      # seconds a command may take before it counts as a failure
PING_INTERVAL = 1.0        # seconds between health PINGs while healthy
BACKOFF_BASE = 0.1         # first retry delay (seconds) after a failure
BACKOFF_CAP = 5.0          # longest delay between retries (seconds)
ROUNDTRIP_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)

# What a caller catches to tell "Redis is unavailable" from a bug: connection loss and timeouts (redis-py's
# and the OS's), a cluster without a serving node, a replica or loading server refusing writes. A script
# error or a wrong key type is a bug: it stays a ResponseError and never marks the link unhealthy.
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError, ReadOnlyError,
               MasterDownError, OSError)


def key(service: str, tag: str, *rest: str) -> str:
    """`burrow:<service>:{<tag>}:<rest...>`; keys with the same tag share a cluster slot."""
    if "{" in tag or "}" in tag:
        raise ValueError(f"a hash tag may not contain braces: {tag!r}")
    return ":".join(["burrow", service, "{" + tag + "}", *rest])


class Backoff:
    """Exponential back-off with full jitter: 0..min(cap, base * 2**n) seconds; reset() after a success."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP,
                 rand: Callable[[], float] = random.random) -> None:
        self.base, self.cap, self.rand = base, cap, rand
        self.failures = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2 ** self.failures))
        self.failures += 1
        return max(self.base / 2, ceiling * self.rand())

    def reset(self) -> None:
        self.failures = 0


class RedisMetrics:
    """The Redis series of one service, registered in that service's registry."""

    def __init__(self, registry: CollectorRegistry, service: str, replica: str = "") -> None:
        labels = ["replica"]
        self.replica = replica
        self.up = Gauge(f"burrow_{service}_redis_up", "1 while Redis answers, else 0", labels,
                        registry=registry).labels(replica)
        self.roundtrip = Histogram(f"burrow_{service}_redis_roundtrip_seconds",
                                   "round-trip time of commands to Redis (seconds)", labels,
                                   buckets=ROUNDTRIP_BUCKETS, registry=registry).labels(replica)
        self.failures = Counter(f"burrow_{service}_redis_failures_total",
                                "commands or PINGs to Redis that failed (connection, timeout, refused)",
                                labels, registry=registry).labels(replica)


def _client_from_url(url: str, cluster: bool) -> Any:
    opts: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": COMMAND_TIMEOUT,
                            "health_check_interval": 30}
    if cluster:
        return RedisCluster.from_url(url, **opts)
    return aioredis.Redis.from_url(url, **opts)


async def _is_cluster(url: str) -> bool:
    """Ask the node behind `url` whether it runs in cluster mode."""
    probe = _client_from_url(url, cluster=False)
    try:
        info = await probe.info("cluster")
        return bool(info.get("cluster_enabled"))
    finally:
        await probe.aclose()


class RedisLink:
    """A service's connection to Redis: the redis-py client, its health, and its metrics.

    `await link.start()` connects (retrying with back-off until `connect_deadline` if given) and starts the
    health task; `link.client` is a `redis.asyncio.Redis` or `RedisCluster`; `link.healthy` says whether
    the last PING or command worked; `await link.close()` stops everything.
    """

    def __init__(self, url: str, metrics: RedisMetrics | None = None, *,
                 ping_interval: float = PING_INTERVAL, backoff: Backoff | None = None) -> None:
        self.url = url
        self.metrics = metrics
        self.ping_interval = ping_interval
        self.backoff = backoff or Backoff()
        self.client: Any = None
        self.cluster = False
        self.healthy = False
        self.last_error = ""
        self._on_change: list[Callable[[bool], None]] = []
        self._task: asyncio.Task | None = None

    def on_health_change(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(healthy)` whenever Redis goes down or comes back."""
        self._on_change.append(callback)

    async def start(self, connect_deadline: float | None = 30.0) -> None:
        """Connect; retry with back-off until `connect_deadline` seconds have passed (None: forever)."""
        give_up = None if connect_deadline is None else time.monotonic() + connect_deadline
        while True:
            try:
                self.cluster = await _is_cluster(self.url)
                self.client = _client_from_url(self.url, self.cluster)
                await self._ping()
                break
            except UNAVAILABLE as exc:
                self._failed(exc)
                if self.client is not None:
                    with contextlib.suppress(Exception):
                        await self.client.aclose()
                    self.client = None
                if give_up is not None and time.monotonic() >= give_up:
                    raise ConnectionError(f"cannot reach Redis at {redacted(self.url)}: {self.last_error}") from exc
                await asyncio.sleep(self.backoff.next_delay())
        self._task = asyncio.create_task(self._watch(), name="redis-health")

    async def close(self, wait: float = COMMAND_TIMEOUT) -> None:
        """Stop the health checks and close the connections; each step gets `wait` seconds at most."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=wait)
            self._task = None
        if self.client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.aclose(), wait)
            self.client = None

    async def timed(self, call: Awaitable[T]) -> T:
        """Await one Redis call, recording its round trip and marking the link unhealthy if it fails."""
        start = time.perf_counter()
        try:
            result = await call
        except UNAVAILABLE as exc:
            self._failed(exc)
            raise
        if self.metrics is not None:
            self.metrics.roundtrip.observe(time.perf_counter() - start)
        return result

    async def _ping(self) -> None:
        start = time.perf_counter()
        await asyncio.wait_for(self.client.ping(), COMMAND_TIMEOUT)
        if self.metrics is not None:
            self.metrics.roundtrip.observe(time.perf_counter() - start)
        self._set_healthy(True)
        self.backoff.reset()

    async def _watch(self) -> None:
        while True:
            try:
                await self._ping()
                delay = self.ping_interval
            except UNAVAILABLE as exc:
                self._failed(exc)
                delay = self.backoff.next_delay()
            await asyncio.sleep(delay)

    def _failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self.metrics is not None:
            self.metrics.failures.inc()
        self._set_healthy(False)

    def _set_healthy(self, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.up.set(1 if ok else 0)
        if ok != self.healthy:
            self.healthy = ok
            if ok:
                log.info("Redis at %s is reachable", redacted(self.url))
            else:
                log.warning("Redis at %s is unavailable: %s", redacted(self.url), self.last_error)
            for callback in self._on_change:
                callback(ok)


def redacted(url: str) -> str:
    """The URL without its password, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user + ':***' if user else '***'}@{host}"
