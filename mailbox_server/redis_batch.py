"""The Redis store's batch sender: the core's requests become script calls, pipelined a batch at a time.

Requests that arrive while a batch is out are sent together as the next pipeline: one round trip serves
every connection that spoke meanwhile, and a reply (an ack included) leaves only after Redis ran the script
that it depends on. Consecutive ops of one app go in one script call (`_fused`). On the lean connection a
batch is written from a loop callback and answered in the read that parses its replies; with redis-py (TLS,
Cluster), or when something must be waited for first (a subscription, room on the connection, the script
loaded again), the runner task sends it. Replies are read by redis_replies.py.

`BatchSender` is a part of `store_redis.RedisStore`, kept here so each file holds one concern: it uses the
store's connection (`link`, `lean`), its host, its queues and the fan-out's `_channel`, `_bus` and
`_subscribe`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from burrow.common.redis import UNAVAILABLE, RedisLink
from burrow.common.resp import LeanClient, ReplyError

from . import messages as m
from .channels import StoreHost
from .limits import Limits
from .ops import Add, Allocate, Claim, Close, ListNames, Open, Release, Result
from .outputs import Request
from .redis_lua import APPS, SCRIPT, app_prefix
from .redis_replies import is_noscript, reply_result

log = logging.getLogger("mailbox_server")
FUSE_MAX = 32  # consecutive ops of one app run by one script call at most (bounds the time Redis is busy with it)
OPS = {ListNames: "list", Allocate: "allocate", Claim: "claim", Release: "release", Open: "open", Add: "add",
       Close: "close"}


@dataclass(eq=False)
class Job:
    """One request of the core on its way to Redis (answered once, however often it is sent)."""

    req: Request
    opid: str
    since: float  # monotonic time of the first attempt
    retry: bool = False  # an earlier attempt may have run: answer from the recorded reply if there is one
    msg: dict | None = None  # add: the message, delivered here from the script's reply (lean connection)


class BatchSender:
    """Sends the store's queued jobs as pipelined script calls and answers each from its reply."""

    # the store's, set in RedisStore.__init__ and start()
    limits: Limits
    replica: str
    rng: random.Random
    new_mailbox_id: Callable[[], str]
    link: RedisLink
    lean: LeanClient | None
    host: StoreHost | None
    _loop: asyncio.AbstractEventLoop
    _queue: list[Job]  # submitted, not yet sent
    _waiting: list[Job]  # held until Redis answers again
    _wake: asyncio.Event  # the runner task has work
    _busy: bool  # a batch is out (one at a time, as submitted)
    _kicked: bool  # a _kick callback is scheduled
    _stale: bool  # the script must be loaded again before the next batch
    _sha: str
    _known_apps: set[str]  # apps already added to APPS
    _stats: dict[str, tuple[int, int, int]]  # per app: mailboxes, nameplates, stored bytes

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
            commands.append(("EVALSHA", self._sha, 1, app_prefix(g[0].req.op.app), packed(args)))
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
        deliver = self.lean is not None  # the lean connection: this replica delivers its own adds
        pairs: list[tuple[Job, Any]] = []
        for g, reply in zip(groups, replies, strict=True):
            if len(g) == 1 or isinstance(reply, Exception):  # a failed call failed every op in it
                pairs += [(j, reply) for j in g]
            else:
                pairs += zip(g, reply, strict=True)
        for j, reply in pairs:
            if type(reply) is list:  # the usual case first: an op's reply, no error checks to run
                self.host.answered(j.req, reply_result(j.req.op, reply, msg=j.msg, deliver=deliver))
            elif is_noscript(reply):  # Redis restarted without its script cache
                again.append(j)
            elif isinstance(reply, (ResponseError, ReplyError)):
                log.error("mailbox script failed: %s", reply)
                self.host.answered(j.req, Result(error=m.STORE_UNAVAILABLE, refusal="store"))
            elif isinstance(reply, Exception):
                self._hold([j])
            else:
                self.host.answered(j.req, reply_result(j.req.op, reply, msg=j.msg, deliver=deliver))
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

    def _hold(self, jobs: list[Job]) -> None:
        """Keep `jobs` until Redis answers again (the store sends them then, or gives up after `wait`)."""
        for j in jobs:
            j.retry = True
        self._waiting.extend(jobs)


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


def packed(args: list) -> str:
    """The script's arguments as one JSON array (ASCII): one argument for redis-py to encode, not twenty."""
    return _compact(args)
