"""Channel state in Redis, shared by every replica of the mailbox: the ChannelStore behind --redis-url.

Each request from the protocol core is one call of the script in redis_lua.py on its app's keys (one
hash tag per app, so a Redis Cluster keeps each call in one slot). Requests that arrive while a batch is
out are sent together as the next pipeline: one round trip serves every connection that spoke meanwhile,
and a reply (an ack included) leaves only after Redis ran the script that it depends on.

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
import hashlib
import itertools
import json
import logging
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from redis.exceptions import NoScriptError, ResponseError

from burrow.common.redis import COMMAND_TIMEOUT, UNAVAILABLE, Backoff, RedisLink, RedisMetrics, key
from burrow.common.resp import LeanClient, ReplyError, RespConnection, lean_capable

from . import messages as m
from .channels import StoreHost
from .limits import Limits
from .memory import new_mailbox_id
from .ops import Add, Allocate, Claim, Close, Delivery, ListNames, Open, Prune, Release, Result
from .outputs import Request
from .redis_bus import Bus
from .redis_lua import SCRIPT
from .state import Mailbox, MailboxSide, Nameplate, NameplateSide, mailbox_usage, nameplate_usage

log = logging.getLogger("mailbox_server")
SERVICE = "mailbox"
APPS = key(SERVICE, "apps")  # every app id seen, for pruning and the totals behind the global limits
STATS_INTERVAL = 1.0  # seconds between refreshes of the totals (metrics, --max-mailboxes, --max-stored-bytes)
CLOSE_WAIT = 5.0  # seconds close() waits for each step of the shutdown
PRUNE_BATCH = 500  # mailboxes one prune call deletes at most
FUSE_MAX = 32  # consecutive ops of one app run by one script call at most (bounds the time Redis is busy with it)
NEW_EXCHANGE = (ListNames, Allocate, Claim)
OPS = {ListNames: "list", Allocate: "allocate", Claim: "claim", Release: "release", Open: "open", Add: "add",
       Close: "close"}
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)


def app_prefix(app: str) -> str:
    """`burrow:mailbox:{<app>}:`; an app id with braces (or a very long one) is tagged by its hash."""
    tag = app if len(app) <= 200 and "{" not in app and "}" not in app else "h" + hashlib.sha1(app.encode()).hexdigest()
    return key(SERVICE, tag, "")


@dataclass(eq=False)
class Job:
    req: Request
    opid: str
    since: float  # monotonic time of the first attempt
    retry: bool = False  # an earlier attempt may have run: answer from the recorded reply if there is one
    msg: dict | None = None  # add: the message, delivered here from the script's reply (lean connection)


class RedisStore:
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

    def _kick_soon(self) -> None:
        """Send the queue on the next turn of the loop, once every read of this one has added to it."""
        if not self._kicked:
            self._kicked = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kicked = False
        self._send()

    def _send(self) -> None:
        """Send what was submitted since the last batch. On the lean connection, when it is up and nothing
        has to be waited for, the batch is written from here and answered in the read that parses its
        replies, which then has the next one sent: no task wakes per batch (at a client's pace that wake-up
        is a large part of a request's cost). Anything else goes through the runner task."""
        if self._busy or not self._queue:
            return  # the batch out sends these once it is answered
        conn = self.lean.conn if self.lean is not None else None
        if conn is None or conn.closed or self._stale:
            self._wake.set()
            return
        jobs = self._queue
        for j in jobs:
            if type(j.req.op) is Open and self._channel(j.req.op.app) not in conn.subscribed:
                self._wake.set()  # the runner subscribes first
                return
        new_apps = {j.req.op.app for j in jobs} - self._known_apps
        groups = _fused(jobs)
        commands = self._commands(groups, new_apps)
        if not conn.has_room(len(commands)):
            self._wake.set()
            return
        self._queue = []
        self._busy = True
        start = time.perf_counter()

        def done(replies) -> None:
            self._busy = False
            if isinstance(replies, BaseException):  # lost or late: the runner reconnects, or holds them
                for j in jobs:
                    j.retry = True
                self._queue[:0] = jobs
                self._wake.set()
                return
            self._known_apps |= new_apps
            if self.link.metrics is not None:
                self.link.metrics.roundtrip.observe(time.perf_counter() - start)
            try:
                again = self._answer(groups, replies[len(new_apps):])
            except Exception:
                log.exception("Redis batch failed")
                self._hold(jobs)
                again = []
            if again:  # the runner loads the script again first
                for j in again:
                    j.retry = True
                self._queue[:0] = again
                self._stale = True
                self._wake.set()
            elif self._queue:
                self._kick_soon()  # not at once: other reads of this turn may still add to the batch

        conn.submit(commands, done)

    def _channel(self, app: str) -> bytes:
        channel = self._channels.get(app)
        if channel is None:
            channel = self._channels[app] = (app_prefix(app) + "bus:" + self.replica).encode()
        return channel

    async def _runner(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._busy:
                continue  # the batch out sends the next one once it is answered
            jobs, self._queue = self._queue, []
            if jobs:
                self._busy = True
                try:
                    await self._run(jobs)
                except Exception:
                    log.exception("Redis batch failed")
                    self._hold(jobs)
                finally:
                    self._busy = False
                if self._queue and not self._wake.is_set():
                    self._send()

    async def _execute(self, commands: list[tuple]) -> list:
        """One pipelined round trip; error replies come back as exception values, in their places."""
        if self.lean is not None:
            return await self.link.timed(self.lean.execute(commands))
        pipe = self.link.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return await self.link.timed(pipe.execute(raise_on_error=False))

    async def _run(self, jobs: list[Job]) -> None:
        if self._stale:
            self._sha = await self.link.timed(self.link.client.script_load(SCRIPT))
            self._stale = False
        new_apps = {j.req.op.app for j in jobs} - self._known_apps
        if self.lean is not None:
            again = await self._run_lean(jobs, new_apps)
        else:
            again = await self._run_pipeline(jobs, new_apps)
        if again:
            self._sha = await self.link.timed(self.link.client.script_load(SCRIPT))
            for j in again:
                j.retry = True
            self._queue[:0] = again
            self._wake.set()

    def _commands(self, groups: list[list[Job]], new_apps: set[str]) -> list[tuple]:
        """One script call per group: a group of several ops sends an array of their arguments."""
        commands = [("SADD", APPS, app) for app in new_apps]
        for g in groups:
            args = self._args(g[0]) if len(g) == 1 else [self._args(j) for j in g]
            commands.append(("EVALSHA", self._sha, 1, app_prefix(g[0].req.op.app), _packed(args)))
        return commands

    async def _run_pipeline(self, jobs: list[Job], new_apps: set[str]) -> list[Job]:
        """redis-py (TLS, Cluster): messages, this replica's own included, come through the Bus readers."""
        for app in {j.req.op.app for j in jobs if type(j.req.op) is Open}:
            if not await self._bus(app).wait_ready():
                self._hold([j for j in jobs if j.req.op.app == app])
                jobs = [j for j in jobs if j.req.op.app != app]
        groups = _fused(jobs)
        pipe = self.link.client.pipeline(transaction=False)
        for command in self._commands(groups, new_apps):
            pipe.execute_command(*command)
        try:
            replies = await self.link.timed(pipe.execute(raise_on_error=False))
        except UNAVAILABLE:
            self._hold(jobs)
            return []
        self._known_apps |= new_apps
        return self._answer(groups, replies[len(new_apps):])

    async def _run_lean(self, jobs: list[Job], new_apps: set[str]) -> list[Job]:
        """One write on the lean connection; the replies are answered the moment they are parsed, so a
        message this replica added reaches its local subscribers in order with those pushed from others."""
        finished = asyncio.get_running_loop().create_future()
        groups = _fused(jobs)

        def done(replies) -> None:
            if finished.done():
                return
            if isinstance(replies, BaseException):
                finished.set_exception(replies)
                return
            self._known_apps |= new_apps
            try:
                finished.set_result(self._answer(groups, replies[len(new_apps):]))
            except Exception as exc:
                finished.set_exception(exc)

        try:
            conn = self.lean.conn
            if conn is None or conn.closed:
                conn = await self.link.timed(self.lean.connection())
            opening = {j.req.op.app for j in jobs if type(j.req.op) is Open}
            if opening:
                await self.link.timed(self._subscribe(conn, opening))
            commands = self._commands(groups, new_apps)
            if not conn.has_room(len(commands)):
                await self.link.timed(conn.wait_room(len(commands)))
            conn.submit(commands, done)
            return await self.link.timed(finished)
        except UNAVAILABLE:
            self._hold(jobs)
            return []

    def _answer(self, groups: list[list[Job]], replies: list) -> list[Job]:
        """Answer each job from its script's reply; the jobs to run again once the script is loaded."""
        again = []
        pairs: list[tuple[Job, Any]] = []
        for g, reply in zip(groups, replies, strict=True):
            if len(g) == 1 or isinstance(reply, Exception):  # a failed call failed every op in it
                pairs += [(j, reply) for j in g]
            else:
                pairs += zip(g, reply, strict=True)
        for j, reply in pairs:
            if type(reply) is list:  # the usual case first: an op's reply, no error checks to run
                self.host.answered(j.req, self._result(j.req.op, reply, msg=j.msg))
            elif _noscript(reply):  # Redis restarted without its script cache
                again.append(j)
            elif isinstance(reply, (ResponseError, ReplyError)):
                log.error("mailbox script failed: %s", reply)
                self.host.answered(j.req, Result(error=m.STORE_UNAVAILABLE, refusal="store"))
            elif isinstance(reply, Exception):
                self._hold([j])
            else:
                self.host.answered(j.req, self._result(j.req.op, reply, msg=j.msg))
        return again

    def _args(self, job: Job) -> list:
        op = job.req.op
        lim = self.limits
        mailboxes, _, stored = self.counts()
        own = self._stats.get(op.app, (0, 0, 0))
        touched = sorted(getattr(op, "touched", ()))
        args = [OPS[type(op)], op.side, repr(op.now), self.replica, job.opid, "1" if job.retry else "0",
                lim.max_messages_per_mailbox, lim.max_mailbox_bytes, lim.max_stored_bytes, lim.max_mailboxes,
                max(0, mailboxes - own[0]), max(0, stored - own[2]), getattr(op, "max_touched", 0),
                len(touched), *touched]
        kind = type(op)
        if kind is Allocate:
            args += [self.rng.randrange(1 << 31), self.new_mailbox_id()]
        elif kind is Claim:
            args += [op.name, self.new_mailbox_id()]
        elif kind is Release:
            args.append(op.name)
        elif kind is Open:
            args.append(op.mailbox)
        elif kind is Add:
            msg = job.msg = m.message(op.side, op.phase, op.body, op.now, op.msg_id)
            # with the lean connection this replica delivers its own message from the reply: not published here
            args += [op.mailbox, m.to_json(msg), len(op.body) + len(op.phase),
                     len(op.body), self.replica if self.lean is not None else ""]
        elif kind is Close:
            args += [op.mailbox, op.mood or "", "1" if op.subscribed else "0"]
        return args

    def _result(self, op, reply: list, app: str = "", msg: dict | None = None) -> Result:
        app = app or op.app
        err, refusal, fatal, reached, value, usage, gone = [x.decode() if type(x) is bytes else _text(x)
                                                            for x in reply[:7]]
        extra = reply[7:]
        res = Result(touched=reached or None)
        if err:
            res.error, res.refusal, res.fatal = getattr(m, err), refusal or None, fatal == "1"
        kind = type(op)
        if kind is ListNames:
            res.value = sorted(_text(x) for x in extra)
        elif kind is Allocate or kind is Claim:
            res.value = value
        elif kind is Open and not err:
            res.replay = [json.loads(x) for x in extra]
        elif kind is Add and not err:
            res.value = int(value)  # the new message's number
            if self.lean is not None and msg is not None:  # to subscribers here; other replicas get it pushed
                res.delivery = Delivery(app, op.mailbox, res.value, msg)
        if usage:
            res.usage = [_usage(app, rec, op.now) for rec in json.loads(usage)]
        if gone:
            res.gone = [(app, mailbox) for mailbox in json.loads(gone)]
        return res

    # ---- Redis down and back -----------------------------------------------------------------
    def _hold(self, jobs: list[Job]) -> None:
        for j in jobs:
            j.retry = True
        self._waiting.extend(jobs)

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
        apps = sorted(_text(a) for a in await self.link.timed(client.smembers(APPS)))
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
            pipe.execute_command("EVALSHA", self._sha, 1, app_prefix(app), _packed(
                ["touch", "", now, self.replica, "", "0", 0, 0, 0, 0, 0, 0, 0, 0, *mailboxes]))
        await self.link.timed(pipe.execute())

    async def _prune(self, job: Job) -> None:
        op: Prune = job.req.op
        res = Result()
        try:
            apps = sorted(_text(a) for a in await self.link.timed(self.link.client.smembers(APPS)))
            for app in apps:
                active = [mb for a, mb in op.active if a == app]
                while True:
                    reply = await self.link.timed(self.link.client.evalsha(self._sha, 1, app_prefix(app), _packed(
                        ["prune", "", repr(op.now), self.replica, job.opid, "0", 0, 0, 0, 0, 0, 0, 0, 0, op.expiry,
                         PRUNE_BATCH, *active])))
                    part = self._result(op, reply, app)
                    res.usage += part.usage
                    res.gone += part.gone
                    if int(reply[4]) < PRUNE_BATCH:
                        break
        except UNAVAILABLE as exc:
            log.warning("prune skipped, Redis unavailable: %s", exc)
        except NoScriptError:
            self._sha = await self.link.timed(self.link.client.script_load(SCRIPT))
        self.host.answered(job.req, res)


_compact = json.JSONEncoder(separators=(",", ":")).encode


def _fused(jobs: list[Job]) -> list[list[Job]]:
    """Runs of consecutive jobs of one app (one key slot), at most FUSE_MAX long: each is one script call,
    in the submitted order, so every op still sees the ones before it."""
    groups: list[list[Job]] = []
    for j in jobs:
        if groups and len(groups[-1]) < FUSE_MAX and groups[-1][0].req.op.app == j.req.op.app:
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


def _packed(args: list) -> str:
    """The script's arguments as one JSON array (ASCII): one argument for redis-py to encode, not twenty."""
    return _compact(args)


def _reread(mailboxes: list[tuple[str, str]]) -> list[tuple]:
    """Per mailbox: does it exist, and its messages (for `_redeliver`)."""
    commands: list[tuple] = []
    for app, mb in mailboxes:
        prefix = app_prefix(app)
        commands += [("EXISTS", prefix + "mb:" + mb), ("LRANGE", prefix + "msgs:" + mb, 0, -1)]
    return commands


def _noscript(reply) -> bool:
    return isinstance(reply, NoScriptError) or (isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"))


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def _usage(app: str, rec: dict, now: float) -> tuple[str, dict]:
    """A usage event from the raw sides a script returned, with the single node's mood rules."""
    if rec["k"] == "nameplate":
        sides = {s: NameplateSide(v[0] == "1", float(v.split("|")[1])) for s, v in rec["sides"].items()}
        return "nameplate", {"app_id": app, **nameplate_usage(Nameplate("", "", sides), now, rec["pruned"])}
    mb = Mailbox("", rec["fn"] == "1", now, body_bytes=int(rec["b"]))
    for s, v in rec["sides"].items():
        opened, added, mood = v.split("|", 2)
        mb.sides[s] = MailboxSide(opened == "1", float(added), mood or None)
    return "mailbox", {"app_id": app, **mailbox_usage(mb, now, rec["pruned"], int(rec["n"]))}
