"""A lean pipelined Redis connection for hot paths: an asyncio Protocol, hiredis to pack and parse.

redis-py's asyncio client spends far more CPU per command than Redis does running it (a connection
pool checkout, a coroutine chain and a response callback per command). This connection writes each
batch of commands with one `write` and matches replies to batches first-in first-out as they come, with
many batches in flight on one socket. It speaks RESP2 to one server over `redis://` or `unix://` (no TLS,
no Cluster: those keep redis-py).

- `execute(commands)` sends a batch and returns its replies in order; a Redis error reply comes back as a
  `ReplyError` value (not raised), so one failed command does not hide the others.
- In-flight commands are bounded (`max_in_flight`): a batch waits for room before it is written.
- A batch that gets no complete answer within `timeout` seconds closes the connection (the replies left
  on it can no longer be matched) and raises TimeoutError; a lost connection fails every batch in flight
  with ConnectionError. Both are OSErrors, so callers' "Redis unavailable" handling catches them.
- The connection speaks RESP3 (HELLO 3), so it can subscribe and still run commands: pub/sub messages
  arrive as pushes for `on_push`, in the order Redis wrote them between the replies. A message published
  before a script ran is therefore seen before that script's reply, which keeps a mailbox's messages in
  order whether they come from this replica's own replies or from another replica.
- `submit(commands, done)` calls `done` synchronously as soon as the batch's last reply is parsed (before
  any later push); `execute` is the awaitable form.

`LeanClient` wraps one such connection and opens a new one on the next call after a loss; the caller's
health checks (common/redis.py) decide when to try again, with their back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import hiredis
from redis.connection import parse_url as redis_parse_url

CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 5.0
MAX_IN_FLIGHT = 4096  # commands written and not yet answered, per connection
MAX_READ_BUFFER = 64 << 20  # bytes of one unfinished reply hiredis may hold


class ReplyError(Exception):
    """An error reply from Redis (e.g. NOSCRIPT, a script error)."""


def lean_capable(url: str) -> bool:
    """Whether `url` is one the lean connection speaks (plain TCP or a Unix socket)."""
    return urlsplit(url).scheme in ("redis", "unix")


@dataclass(frozen=True)
class Target:
    host: str = "127.0.0.1"
    port: int = 6379
    path: str = ""  # a Unix socket instead of host:port
    db: int = 0
    username: str = ""
    password: str = ""


def parse_url(url: str) -> Target:
    """The connection settings of a redis:// or unix:// URL, read as redis-py reads them."""
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "unix"):
        raise ValueError(f"the lean Redis connection does not speak {scheme}://")
    kw = redis_parse_url(url)
    return Target(kw.get("host") or "127.0.0.1", kw.get("port") or 6379, kw.get("path", ""),
                  int(kw.get("db") or 0), kw.get("username") or "", kw.get("password") or "")


class _Batch:
    __slots__ = ("done", "left", "replies", "sent")

    def __init__(self, done: Callable[[list[Any] | BaseException], None], n: int, sent: float) -> None:
        self.done, self.left, self.replies, self.sent = done, n, [], sent


class RespConnection(asyncio.Protocol):
    def __init__(self, on_push: Callable[[list[Any]], None] | None = None, max_in_flight: int = MAX_IN_FLIGHT,
                 timeout: float = COMMAND_TIMEOUT) -> None:
        self.on_push = on_push
        self.max_in_flight, self.timeout = max_in_flight, timeout
        self.reader = hiredis.Reader(replyError=ReplyError)
        self.reader.setmaxbuf(MAX_READ_BUFFER)
        self.transport: asyncio.Transport | None = None
        self.batches: deque[_Batch] = deque()
        self.in_flight = 0
        self.loop = asyncio.get_running_loop()
        self.lost: asyncio.Future = self.loop.create_future()  # done once the connection is gone
        self._room = asyncio.Event()
        self._room.set()
        self._watchdog: asyncio.TimerHandle | None = None
        self.subscribed: set[bytes] = set()  # channels this connection subscribed to (kept by the caller)

    # ---- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        try:
            while True:
                reply = reader.gets()
                if reply is False:
                    return
                if type(reply) is hiredis.PushNotification:  # RESP3 pub/sub: in stream order with replies
                    if self.on_push is not None:
                        self.on_push(reply)
                    continue
                batch = self.batches[0]
                batch.replies.append(reply)
                batch.left -= 1
                if not batch.left:
                    self.batches.popleft()
                    self.in_flight -= len(batch.replies)
                    if self.in_flight < self.max_in_flight:
                        self._room.set()
                    batch.done(batch.replies)  # before any later reply or push is looked at
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked for
            self.close(ConnectionError(f"Redis protocol error: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail(ConnectionError(f"connection to Redis lost: {exc}" if exc else "connection to Redis closed"))

    # ---- use ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.lost.done()

    def has_room(self, n: int) -> bool:
        return not self.in_flight or self.in_flight + n <= self.max_in_flight

    async def wait_room(self, n: int) -> None:
        """Wait until `n` more commands fit in flight (at most `timeout` seconds)."""
        while not self.has_room(n) and not self.closed:
            self._room.clear()
            await self._wait(self._room.wait())

    def send(self, *args: Any) -> None:
        """Write one command whose answer is a push (SSUBSCRIBE on a RESP3 connection)."""
        if self.transport is None:
            raise ConnectionError("connection to Redis closed")
        self.transport.write(hiredis.pack_command(args))

    def submit(self, commands: Sequence[Sequence[Any]], done: Callable[[list[Any] | BaseException], None]) -> None:
        """Send `commands` in one write; `done(replies)` runs as soon as the last reply is parsed (before
        anything after it), or `done(exc)` once the connection is lost or the batch timed out. Call after
        `wait_room`: the bound is checked here and a full connection raises."""
        n = len(commands)
        if self.transport is None:
            raise ConnectionError("connection to Redis closed")
        if not self.has_room(n):
            raise BufferError(f"more than {self.max_in_flight} Redis commands in flight")
        self.batches.append(_Batch(done, n, self.loop.time()))
        self.in_flight += n
        pack = hiredis.pack_command
        self.transport.write(b"".join([pack(tuple(c)) for c in commands]))
        if self._watchdog is None:
            self._watchdog = self.loop.call_later(self.timeout, self._check)

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send `commands`; their replies (ReplyError values for error replies), in order."""
        if not commands:
            return []
        await self.wait_room(len(commands))
        future = self.loop.create_future()

        def done(result) -> None:
            if not future.done():
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

        self.submit(commands, done)
        return await future

    def _check(self) -> None:
        """The oldest batch must be answered within `timeout`; else the connection is of no more use."""
        self._watchdog = None
        if not self.batches:
            return
        late = self.loop.time() - self.batches[0].sent
        if late >= self.timeout:
            self.close(TimeoutError(f"Redis did not answer within {self.timeout} s"))
        else:
            self._watchdog = self.loop.call_later(self.timeout - late, self._check)

    async def _wait(self, awaitable) -> Any:
        try:
            return await asyncio.wait_for(awaitable, self.timeout)
        except TimeoutError:
            self.close(TimeoutError(f"Redis did not answer within {self.timeout} s"))
            raise

    def close(self, exc: BaseException | None = None) -> None:
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        self._fail(exc or ConnectionError("connection to Redis closed"))

    def _fail(self, exc: BaseException) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        batches, self.batches = self.batches, deque()
        self.in_flight = 0
        self._room.set()
        for batch in batches:
            batch.done(exc)
        if not self.lost.done():
            self.lost.set_result(exc)


async def connect(url: str, on_push: Callable[[list[Any]], None] | None = None, *,
                  max_in_flight: int = MAX_IN_FLIGHT, timeout: float = COMMAND_TIMEOUT) -> RespConnection:
    """Open a RESP3 connection to `url` (HELLO 3, authenticated) and select its database."""
    target = parse_url(url)
    loop = asyncio.get_running_loop()
    conn = RespConnection(on_push, max_in_flight, timeout)
    if target.path:
        opening = loop.create_unix_connection(lambda: conn, target.path)
    else:
        opening = loop.create_connection(lambda: conn, target.host, target.port)
    await asyncio.wait_for(opening, CONNECT_TIMEOUT)
    hello: tuple = ("HELLO", 3)
    if target.password:
        hello += ("AUTH", target.username or "default", target.password)
    setup = [hello] + ([("SELECT", target.db)] if target.db else [])
    try:
        for reply in await conn.execute(setup):
            if isinstance(reply, ReplyError):
                raise ConnectionError(f"Redis refused the connection setup: {reply}")
    except BaseException:
        conn.close()
        raise
    return conn


class LeanClient:
    """One pipelined RESP3 connection to `url`, reopened on the first use after it was lost.

    `on_push` receives pub/sub pushes; `on_connect(conn)` runs on every new connection before anyone
    else uses it (to subscribe again, for instance).
    """

    def __init__(self, url: str, on_push: Callable[[list[Any]], None] | None = None,
                 on_connect: Callable[[RespConnection], Awaitable[None]] | None = None, *,
                 max_in_flight: int = MAX_IN_FLIGHT, timeout: float = COMMAND_TIMEOUT) -> None:
        self.url, self.on_push, self.on_connect = url, on_push, on_connect
        self.max_in_flight, self.timeout = max_in_flight, timeout
        self.conn: RespConnection | None = None
        self._opening: asyncio.Future | None = None

    async def connection(self) -> RespConnection:
        conn = self.conn
        if conn is None or conn.closed:
            conn = await self._open()
        return conn

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        return await (await self.connection()).execute(commands)

    async def _open(self) -> RespConnection:
        if self._opening is None:  # callers that find the connection gone share one attempt
            self._opening = asyncio.ensure_future(self._connect())
        opening = self._opening
        try:
            return await asyncio.shield(opening)
        finally:
            if self._opening is opening and opening.done():
                self._opening = None

    async def _connect(self) -> RespConnection:
        conn = await connect(self.url, self.on_push, max_in_flight=self.max_in_flight, timeout=self.timeout)
        try:
            if self.on_connect is not None:
                await self.on_connect(conn)
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return conn

    def close(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
            with contextlib.suppress(BaseException):
                self._opening.exception()
            self._opening = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
