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
- With `on_reply`, every reply goes to that callback instead (a pub/sub reader: no batches).

`LeanClient` wraps one such connection and opens a new one on the next call after a loss; the caller's
health checks (common/redis.py) decide when to try again, with their back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

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
    u = urlsplit(url)
    query = parse_qs(u.query)
    user, password = unquote(u.username or ""), unquote(u.password or "")
    password = password or query.get("password", [""])[0]
    if u.scheme == "unix":
        return Target(path=unquote(u.path), db=int(query.get("db", ["0"])[0]), username=user, password=password)
    if u.scheme != "redis":
        raise ValueError(f"the lean Redis connection does not speak {u.scheme}://")
    db = u.path.strip("/") or query.get("db", ["0"])[0]
    return Target(u.hostname or "127.0.0.1", u.port or 6379, "", int(db), user, password)


class _Batch:
    __slots__ = ("future", "left", "replies")

    def __init__(self, future: asyncio.Future, n: int) -> None:
        self.future, self.left, self.replies = future, n, []


class RespConnection(asyncio.Protocol):
    def __init__(self, on_reply: Callable[[Any], None] | None = None, max_in_flight: int = MAX_IN_FLIGHT,
                 timeout: float = COMMAND_TIMEOUT) -> None:
        self.on_reply = on_reply
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
                if self.on_reply is not None:
                    self.on_reply(reply)
                    continue
                batch = self.batches[0]
                batch.replies.append(reply)
                batch.left -= 1
                if not batch.left:
                    self.batches.popleft()
                    self.in_flight -= len(batch.replies)
                    if not batch.future.done():
                        batch.future.set_result(batch.replies)
                    if self.in_flight < self.max_in_flight:
                        self._room.set()
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked for
            self.close(ConnectionError(f"Redis protocol error: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail(ConnectionError(f"connection to Redis lost: {exc}" if exc else "connection to Redis closed"))

    # ---- use ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.lost.done()

    def send(self, *args: Any) -> None:
        """Write one command without waiting for its reply (pub/sub mode)."""
        if self.transport is None:
            raise ConnectionError("connection to Redis closed")
        self.transport.write(hiredis.pack_command(args))

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send `commands` in one write; their replies (ReplyError values for error replies), in order."""
        n = len(commands)
        if not n:
            return []
        while self.in_flight and self.in_flight + n > self.max_in_flight:
            self._room.clear()
            await self._wait(self._room.wait())
        if self.transport is None:
            raise ConnectionError("connection to Redis closed")
        future = self.loop.create_future()
        self.batches.append(_Batch(future, n))
        self.in_flight += n
        pack = hiredis.pack_command
        self.transport.write(b"".join([pack(tuple(c)) for c in commands]))
        return await self._wait(asyncio.shield(future))

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
        batches, self.batches = self.batches, deque()
        self.in_flight = 0
        self._room.set()
        for batch in batches:
            if not batch.future.done():
                batch.future.set_exception(exc)
                batch.future.exception()  # retrieved: a shielded batch whose waiter timed out logs nothing
        if not self.lost.done():
            self.lost.set_result(exc)


async def connect(url: str, on_reply: Callable[[Any], None] | None = None, *,
                  max_in_flight: int = MAX_IN_FLIGHT, timeout: float = COMMAND_TIMEOUT) -> RespConnection:
    """Open a connection to `url`, authenticate and select its database (before `on_reply` takes over)."""
    target = parse_url(url)
    loop = asyncio.get_running_loop()
    conn = RespConnection(None, max_in_flight, timeout)
    if target.path:
        opening = loop.create_unix_connection(lambda: conn, target.path)
    else:
        opening = loop.create_connection(lambda: conn, target.host, target.port)
    await asyncio.wait_for(opening, CONNECT_TIMEOUT)
    setup: list[tuple] = []
    if target.password:
        setup.append(("AUTH", target.username, target.password) if target.username else ("AUTH", target.password))
    if target.db:
        setup.append(("SELECT", target.db))
    try:
        for reply in await conn.execute(setup):
            if isinstance(reply, ReplyError):
                raise ConnectionError(f"Redis refused the connection setup: {reply}")
    except BaseException:
        conn.close()
        raise
    conn.on_reply = on_reply
    return conn


class LeanClient:
    """One pipelined connection to `url`, reopened on the first call after it was lost."""

    def __init__(self, url: str, max_in_flight: int = MAX_IN_FLIGHT, timeout: float = COMMAND_TIMEOUT) -> None:
        self.url, self.max_in_flight, self.timeout = url, max_in_flight, timeout
        self.conn: RespConnection | None = None
        self._opening: asyncio.Future | None = None

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        conn = self.conn
        if conn is None or conn.closed:
            conn = await self._open()
        return await conn.execute(commands)

    async def _open(self) -> RespConnection:
        if self._opening is None:  # callers that find the connection gone share one attempt
            self._opening = asyncio.ensure_future(connect(self.url, max_in_flight=self.max_in_flight,
                                                          timeout=self.timeout))
        opening = self._opening
        try:
            self.conn = await asyncio.shield(opening)
            return self.conn
        finally:
            if self._opening is opening and opening.done():
                self._opening = None

    def close(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
            with contextlib.suppress(BaseException):
                self._opening.exception()
            self._opening = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
