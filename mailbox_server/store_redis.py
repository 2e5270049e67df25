"""Channel state in Redis, shared by every replica of the mailbox: the ChannelStore behind --redis-url.

Each request from the protocol core is one call of the script in redis_lua.py on its app's keys (one
hash tag per app, so a Redis Cluster keeps each call in one slot), sent in batches by redis_batch.py:
one round trip serves every connection that spoke meanwhile, and a reply (an ack included) leaves only
after Redis ran the script that it depends on. This module holds the store's API and life cycle, the
fan-out and the periodic tasks (stats, touch, prune).

Fan-out: a replica that opens a mailbox for a connection adds itself to the mailbox's subscriber set in
the same script, and the script of every `add` publishes the message on each other subscribed replica's
sharded channel `burrow:mailbox:{<app>}:bus:<replica>`; the adding replica hands it to the core from
the reply. For `redis://` and `unix://` outside a Cluster, scripts and subscriptions share one lean RESP3
connection (common/resp.py): Redis writes pushes and replies in the order it ran the scripts, and each
reply is handled as soon as it is parsed, so the core sees a mailbox's messages in number order whichever
replica added them. After a loss that connection reconnects (backing off), subscribes again and re-reads
the subscribed mailboxes, holding the pushes meanwhile. With TLS or a Cluster, redis-py runs the scripts
and a blocking reader per app (redis_bus.py) reads the channels; then the script publishes to every
subscribed replica, the adding one included, and the core takes each message from pub/sub alone.

Redis unreachable: `healthy()` is False (/readyz fails), requests that start an exchange (`allocate`,
`claim`, `list`) get the error "mailbox storage unavailable, try again later", the others wait for
Redis (retried with the same op id, so a script that ran but whose reply was lost is not run twice) up
to `wait` seconds; then the connection is closed so the client reconnects later.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram
from redis.exceptions import NoScriptError

from burrow.common.redis import COMMAND_TIMEOUT, UNAVAILABLE, Backoff, RedisLink, RedisMetrics
from burrow.common.resp import LeanClient, RespConnection, lean_capable

from . import messages as m
from .channels import StoreHost
from .limits import Limits
from .memory import new_mailbox_id
from .ops import Allocate, Claim, Delivery, ListNames, Prune, Result
from .outputs import Request
from .redis_batch import BatchSender, Job, packed
from .redis_bus import Bus
from .redis_lua import APPS, SCRIPT, SERVICE, app_prefix
from .redis_replies import reply_result, text

log = logging.getLogger("mailbox_server")
STATS_INTERVAL = 1.0  # seconds between refreshes of the totals (metrics, --max-mailboxes, --max-stored-bytes)
CLOSE_WAIT = 5.0  # seconds close() waits for each step of the shutdown
PRUNE_BATCH = 500  # mailboxes one prune call deletes at most
NEW_EXCHANGE = (ListNames, Allocate, Claim)
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)


class RedisStore(BatchSender):
    answers_durable = True  # an answer comes after Redis ran (and, with AOF always, logged) the script

    def __init__(self, url: str, limits: Limits, replica: str, registry: CollectorRegistry | None = None, *,
                 wait: float = 30.0, expiry: float = 660.0, rng: random.Random | None = None,
                 mailbox_id: Callable[[], str] = new_mailbox_id) -> None:
        self.limits, self.replica, self.wait, self.expiry = limits, replica, wait, expiry
        self.new_mailbox_id = mailbox_id
        self.link = RedisLink(url, RedisMetrics(registry, SERVICE, replica) if registry is not None else None)
        self.lean: LeanClient | None = None  # the hot path's connection, for redis:// and unix:// (no Cluster)
        self.lag = Histogram("burrow_mailbox_pubsub_lag_seconds", "from receiving an `add` (on any replica) to "
                             "reading it from Redis pub/sub here", ["replica"], buckets=LAG_BUCKETS,
                             registry=registry).labels(replica) if registry is not None else None
        self.host: StoreHost | None = None
        self.rng = rng or random.Random()
        self._queue: list[Job] = []
        self._waiting: list[Job] = []  # held until Redis answers again
        self._wake = asyncio.Event()  # the runner task has work: a batch that must wait for something
        self._busy = False  # a batch is out (one at a time, as submitted)
        self._kicked = False  # a _kick callback is scheduled
        self._stale = False  # the script must be loaded again before the next batch
        self._channels: dict[str, bytes] = {}  # app -> this replica's channel of it
        self._sha = ""
        self._buses: dict[str, Bus] = {}
        self._known_apps: set[str] = set()
        self._stats: dict[str, tuple[int, int, int]] = {}
        self._totals = (0, 0, 0)  # the sums of _stats (read for every request)
        self._tasks: list[asyncio.Task] = []
        self._channel_app: dict[bytes, str] = {}  # lean: every app channel subscribed so far -> its app
        self._subscribing: dict[bytes, asyncio.Future] = {}
        self._resyncing: dict[str, list[bytes]] = {}  # lean: pushes held while the app's mailboxes are re-read
        self._run_id = uuid.uuid4().hex[:10] + "."  # op ids stay unique across restarts of this replica
        self._op_numbers = itertools.count()

    # ---- life cycle --------------------------------------------------------------------------
    async def start(self, host: StoreHost) -> None:
        self.host = host
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self.link.start()
        if not self.link.cluster and lean_capable(self.link.url):
            self.lean = LeanClient(self.link.url, self._on_push, self._lean_connected)
            await self.link.timed(self.lean.connection())
        self._sha = await self.link.timed(self.link.client.script_load(SCRIPT))
        self.link.on_health_change(self._health_changed)
        await self._refresh_stats()
        touch = max(0.05, min(60.0, self.expiry / 3))
        self._tasks = [asyncio.create_task(self._runner(), name="mailbox-redis"),
                       asyncio.create_task(self._every(STATS_INTERVAL, self._refresh_stats)),
                       asyncio.create_task(self._every(touch, self._touch)),
                       asyncio.create_task(self._every(1.0, self._expire))]
        if self.lean is not None:
            self._tasks.append(asyncio.create_task(self._keep_lean(), name="mailbox-redis-lean"))

    async def close(self) -> None:
        for _ in range(50):  # what was submitted before the drain gets its answer (bounded: 5 s)
            if not self._queue or not self.link.healthy:
                break
            await asyncio.sleep(0.1)
        for t in self._tasks:
            t.cancel()
        for bus in self._buses.values():
            bus.task.cancel()
        # Every task gets CLOSE_WAIT seconds to finish its cleanup; one stuck in a socket call is left behind
        # rather than holding up the shutdown.
        pending = [*self._tasks, *(bus.task for bus in self._buses.values())]
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=CLOSE_WAIT)
            if stuck:
                log.warning("%d Redis task(s) did not stop within %s s", len(stuck), CLOSE_WAIT)
        if self.lean is not None:
            self.lean.close()
        try:
            await asyncio.wait_for(self.link.close(), CLOSE_WAIT)
        except TimeoutError:
            log.warning("closing the Redis connections took more than %s s", CLOSE_WAIT)

    def healthy(self) -> bool:
        return self.link.healthy

    def counts(self) -> tuple[int, int, int]:
        return self._totals

    async def flush(self) -> None:
        """Nothing to do: every answer arrives after Redis accepted the change."""

    # ---- requests ----------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        job = Job(req, f"{self._run_id}{next(self._op_numbers):x}", time.monotonic())
        if type(req.op) is Prune:
            self._tasks.append(asyncio.create_task(self._prune(job)))
            return
        if not self.link.healthy:
            if type(req.op) in NEW_EXCHANGE:
                self.host.answered(req, Result(error=m.STORE_UNAVAILABLE, refusal="store"))
            else:
                self._waiting.append(job)
            return
        self._queue.append(job)
        self._kick_soon()

    def _channel(self, app: str) -> bytes:
        channel = self._channels.get(app)
        if channel is None:
            channel = self._channels[app] = (app_prefix(app) + "bus:" + self.replica).encode()
        return channel

    # ---- Redis down and back -----------------------------------------------------------------
    def _health_changed(self, ok: bool) -> None:
        if ok and self._waiting:
            self._queue.extend(self._waiting)
            self._waiting = []
            self._wake.set()

    def _expire(self) -> None:
        if not self._waiting:
            return
        give_up = time.monotonic() - self.wait
        keep = []
        for j in self._waiting:
            if j.since < give_up:
                self.host.unavailable(j.req)
            else:
                keep.append(j)
        self._waiting = keep

    # ---- fan-out -----------------------------------------------------------------------------
    def _bus(self, app: str) -> Bus:
        bus = self._buses.get(app)
        if bus is None:
            bus = self._buses[app] = Bus(self, app_prefix(app) + "bus:" + self.replica, app)
        return bus

    def bus_message(self, app: str, data: bytes) -> None:
        if data[:1] == b"m":
            index, _, rest = data[1:].partition(b" ")
            size, _, rest = rest.partition(b" ")
            n = int(size)
            msg = json.loads(rest[n:])
            if self.lag is not None:
                self.lag.observe(max(0.0, time.time() - msg["server_rx"]))
            self.host.delivered(Delivery(app, rest[:n].decode(), int(index), msg))
        elif data[:1] == b"g":
            self.host.gone(app, data[1:].decode())

    async def resync(self, app: str) -> None:
        """After the reader lost Redis: every subscribed mailbox again (the core skips what it had)."""
        mailboxes = sorted((a, mb) for a, mb in self.host.active() if a == app)
        if not mailboxes:
            return
        pipe = self.link.client.pipeline(transaction=False)
        for command in _reread(mailboxes):
            pipe.execute_command(*command)
        self._redeliver(mailboxes, await self.link.timed(pipe.execute()))

    def _redeliver(self, mailboxes: list[tuple[str, str]], replies: list) -> None:
        """Hand the core every message of each re-read mailbox (or tell it the mailbox is gone)."""
        for i, (app, mb) in enumerate(mailboxes):
            if not replies[2 * i]:
                self.host.gone(app, mb)
                continue
            for index, raw in enumerate(replies[2 * i + 1]):
                self.host.delivered(Delivery(app, mb, index, json.loads(raw)))

    # ---- fan-out on the lean connection ----------------------------------------------------------
    def _on_push(self, push: list) -> None:
        kind = push[0]
        if kind == b"smessage":
            app = self._channel_app.get(push[1])
            if app is None:
                return
            held = self._resyncing.get(app)
            if held is not None:
                held.append(push[2])
                return
            try:
                self.bus_message(app, push[2])
            except Exception:  # one bad message must not cost the others their connection
                log.exception("pub/sub message for %s failed", app)
        elif kind == b"ssubscribe":
            waiter = self._subscribing.pop(push[1], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _subscribe(self, conn: RespConnection, apps) -> None:
        """Subscribe `conn` to this replica's channel of each app (once per connection), confirmed."""
        waiters = []
        for app in apps:
            channel = self._channel(app)
            if channel in conn.subscribed:
                continue
            self._channel_app[channel] = app
            waiter = self._subscribing.get(channel)
            if waiter is None:
                waiter = self._subscribing[channel] = asyncio.get_running_loop().create_future()
                conn.send("SSUBSCRIBE", channel)
            waiters.append((channel, waiter))
        if waiters:
            await asyncio.wait_for(asyncio.gather(*(w for _, w in waiters)), COMMAND_TIMEOUT)
            conn.subscribed.update(c for c, _ in waiters)

    async def _lean_connected(self, conn: RespConnection) -> None:
        """A new lean connection: subscribe to every channel again and re-read the mailboxes subscribed
        here (pushes that arrive meanwhile wait, so numbers reach the core in order)."""
        self._subscribing.clear()
        apps = sorted(set(self._channel_app.values()))
        if not apps:
            return
        held: dict[str, list[bytes]] = {app: [] for app in apps}
        self._resyncing.update(held)
        try:
            await self._subscribe(conn, apps)
            mailboxes = sorted(self.host.active())
            self._redeliver(mailboxes, await conn.execute(_reread(mailboxes)))
        finally:
            for app in apps:
                self._resyncing.pop(app, None)
            for app, pushes in held.items():
                for data in pushes:
                    self.bus_message(app, data)

    async def _keep_lean(self) -> None:
        """Reconnect the lean connection after a loss (backing off), so pushes flow even with no requests."""
        backoff = Backoff()
        while True:
            try:
                conn = await self.link.timed(self.lean.connection())
                backoff.reset()
                await conn.lost
                log.warning("lean Redis connection lost: %s", conn.lost.result())
            except asyncio.CancelledError:
                raise
            except UNAVAILABLE as exc:
                log.warning("lean Redis connection failed: %s", exc)
            except Exception:
                log.exception("lean Redis connection failed")
            await asyncio.sleep(backoff.next_delay())

    # ---- timers ------------------------------------------------------------------------------
    async def _every(self, period: float, fn) -> None:
        while True:
            await asyncio.sleep(period)
            if not self.link.healthy:
                continue
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except UNAVAILABLE as exc:
                log.warning("Redis task %s failed: %s", fn.__name__, exc)
            except Exception:
                log.exception("Redis task %s failed", fn.__name__)

    async def _refresh_stats(self) -> None:
        client = self.link.client
        apps = sorted(text(a) for a in await self.link.timed(client.smembers(APPS)))
        if not apps:
            self._stats, self._totals = {}, (0, 0, 0)
            return
        pipe = client.pipeline(transaction=False)
        for app in apps:
            pipe.hmget(app_prefix(app) + "stats", "m", "n", "b")
        rows = await self.link.timed(pipe.execute())
        self._stats = {app: tuple(int(x or 0) for x in row) for app, row in zip(apps, rows, strict=True)}
        values = list(self._stats.values())
        self._totals = tuple(sum(v[i] for v in values) for i in range(3))

    async def _touch(self) -> None:
        """Keep the mailboxes subscribed here from being pruned by any replica."""
        by_app: dict[str, list[str]] = defaultdict(list)
        for app, mb in self.host.active():
            by_app[app].append(mb)
        if not by_app:
            return
        pipe = self.link.client.pipeline(transaction=False)
        now = repr(time.time())
        for app, mailboxes in by_app.items():
            pipe.execute_command("EVALSHA", self._sha, 1, app_prefix(app), packed(
                ["touch", "", now, self.replica, "", "0", 0, 0, 0, 0, 0, 0, 0, 0, *mailboxes]))
        await self.link.timed(pipe.execute())

    async def _prune(self, job: Job) -> None:
        op: Prune = job.req.op
        res = Result()
        try:
            apps = sorted(text(a) for a in await self.link.timed(self.link.client.smembers(APPS)))
            for app in apps:
                active = [mb for a, mb in op.active if a == app]
                while True:
                    reply = await self.link.timed(self.link.client.evalsha(self._sha, 1, app_prefix(app), packed(
                        ["prune", "", repr(op.now), self.replica, job.opid, "0", 0, 0, 0, 0, 0, 0, 0, 0, op.expiry,
                         PRUNE_BATCH, *active])))
                    part = reply_result(op, reply, app)
                    res.usage += part.usage
                    res.gone += part.gone
                    if int(reply[4]) < PRUNE_BATCH:
                        break
        except UNAVAILABLE as exc:
            log.warning("prune skipped, Redis unavailable: %s", exc)
        except NoScriptError:
            self._sha = await self.link.timed(self.link.client.script_load(SCRIPT))
        self.host.answered(job.req, res)


def _reread(mailboxes: list[tuple[str, str]]) -> list[tuple]:
    """Per mailbox: does it exist, and its messages (for `_redeliver`)."""
    commands: list[tuple] = []
    for app, mb in mailboxes:
        prefix = app_prefix(app)
        commands += [("EXISTS", prefix + "mb:" + mb), ("LRANGE", prefix + "msgs:" + mb, 0, -1)]
    return commands
