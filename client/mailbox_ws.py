"""The mailbox's WebSocket, client side: a thin asyncio adapter over wire/websocket.py and wire/http.py.

    ws = await open_mailbox("wss://relay.example/v1", ssl_context=None, max_size=MAX, timeout=30)
    await ws.send(text); text = await ws.recv(); await ws.close()

in:  a ws:// or wss:// URL (TLS with SNI, the system's CAs or the caller's ssl.SSLContext).
out: a MailboxSocket: whole text messages in order; `recv()`/`send()` raise ConnectionClosed (an
     OSError) once the connection is gone, with the close code (1009: a message over `max_size`).
A reader task answers Pings, sends one after PING_INTERVAL of silence and drops the connection when
nothing arrives for PING_TIMEOUT after it; it keeps at most MAX_QUEUE messages (then reads no more until
`recv()` takes one). A handshake the server refuses (not 101, wrong Sec-WebSocket-Accept) is an
UpgradeRefused naming what the server said.

When a proxy applies to the URL (HTTPS_PROXY, HTTP_PROXY, ... as `websockets.connect` reads them), or the
URL carries a user name, `open_mailbox` uses `websockets.connect` instead, imported only then: the
direct path never loads `websockets`, whose import costs tens of ms of a short transfer's start-up.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import os
import ssl
import sys
from urllib.parse import urlsplit

from burrow.wire.errors import WireError
from burrow.wire.http import parse_response_head, websocket_accept, websocket_request
from burrow.wire.websocket import OP_PING, OP_TEXT, WebSocketError, WebSocketStream, encode_frame

from .errors import ServerConnectionError
from .version import __version__

PING_INTERVAL = 30.0  # seconds of silence before we send a Ping
PING_TIMEOUT = 60.0  # seconds after that Ping before the connection counts as lost
CLOSE_TIMEOUT = 10.0  # seconds to wait for the server's answer to our Close
SEND_TIMEOUT = 60.0  # seconds a send may wait for the socket to drain
MAX_QUEUE = 16  # received messages kept before the reader stops reading
MAX_RESPONSE_HEAD = 16 * 1024  # bytes of the server's upgrade answer
READ_CHUNK = 64 * 1024
USER_AGENT = f"burrow/{__version__}"


class ConnectionClosed(ConnectionError):
    """The mailbox connection is gone; `code` is the WebSocket close code (1006: no Close frame)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(f"{why} (close code {code})")
        self.code = code


class UpgradeRefused(ServerConnectionError):
    """The server answered the WebSocket upgrade, but not as a WebSocket server does."""


class MailboxSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ws: WebSocketStream) -> None:
        self._reader, self._writer, self._ws = reader, writer, ws
        self._inbox: collections.deque[str | bytes] = collections.deque()
        self._arrived = asyncio.Event()  # a message, or the end
        self._room = asyncio.Event()  # recv() made room in a full inbox
        self._closing = False
        self._error: ConnectionClosed | None = None
        self._task = asyncio.create_task(self._read_loop(), name="mailbox-ws-reader")

    @property
    def close_code(self) -> int | None:
        """The close code once the connection is gone (the server's, or ours when we closed it)."""
        return self._error.code if self._error is not None else None

    async def recv(self) -> str | bytes:
        while not self._inbox:
            if self._error is not None:
                raise self._error
            self._arrived.clear()
            await self._arrived.wait()
        self._room.set()
        return self._inbox.popleft()

    async def send(self, text: str) -> None:
        if self._error is not None or self._closing:
            raise self._error or ConnectionClosed(1000, "the mailbox connection is closing")
        self._writer.write(encode_frame(OP_TEXT, text.encode(), mask=True))
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await self._writer.drain()
        except TimeoutError:
            self._abort(ConnectionClosed(1006, f"the server read nothing for {SEND_TIMEOUT:g} s"))
            raise self._error from None

    async def close(self, code: int = 1000) -> None:
        """Send Close, wait (at most CLOSE_TIMEOUT) for the server's answer, drop the connection."""
        if self._error is None and not self._closing:
            self._closing = True
            with contextlib.suppress(OSError):
                self._writer.write(self._ws.close_frame(code))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(self._task)
            self._error = ConnectionClosed(code, "closed by us")
        self._abort(ConnectionClosed(code, "closed by us"))
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _abort(self, error: ConnectionClosed) -> None:
        if self._error is None:
            self._error = error
        self._task.cancel()
        self._writer.close()
        self._arrived.set()

    async def _read_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                while len(self._inbox) >= MAX_QUEUE:
                    self._room.clear()
                    await self._room.wait()
                data = await self._read()
                if not data:
                    raise ConnectionClosed(1006, "the server closed the connection")
                try:
                    messages = ws.feed_messages(data)
                except WebSocketError as e:
                    self._writer.write(ws.close_frame(e.close_code))  # tell the server why
                    await self._until_eof()
                    raise ConnectionClosed(e.close_code, f"bad data from the server: {e}") from None
                self._writer.write(ws.data_to_send())  # Pong, our answer to its Close
                if messages:
                    self._inbox.extend(messages)
                    self._arrived.set()
                if ws.closed:  # its Close (answered above), or its answer to ours
                    code = ws.close_code if ws.close_code is not None else 1006
                    raise ConnectionClosed(code, "closed by the server" if not self._closing else "closed")
        except ConnectionClosed as e:
            self._error = self._error or e
        except (OSError, TimeoutError) as e:
            self._error = self._error or ConnectionClosed(1006, str(e) or type(e).__name__)
        finally:
            self._writer.close()
            self._arrived.set()

    async def _until_eof(self) -> None:
        """Discard what still comes until the server hangs up (at most CLOSE_TIMEOUT): closing with
        unread bytes would reset the connection and could lose our Close frame on the way."""
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                while await self._reader.read(READ_CHUNK):
                    pass

    async def _read(self) -> bytes:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PING_INTERVAL):
                return await self._reader.read(READ_CHUNK)
        self._writer.write(encode_frame(OP_PING, os.urandom(4), mask=True))
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                return await self._reader.read(READ_CHUNK)
        except TimeoutError:
            raise ConnectionClosed(1006, f"no answer to a Ping within {PING_TIMEOUT:g} s") from None


def proxy_for(url: str) -> str | None:
    """The proxy `websockets.connect` would use for `url`, or None.

    On Linux and BSDs proxies come only from the environment, so without a `*_proxy` variable this costs
    no import; elsewhere (and with one set) websockets' own rule decides (NO_PROXY included).
    """
    if sys.platform not in ("darwin", "win32") and not any(
            v and k.lower().endswith("_proxy") and k.lower() != "no_proxy" for k, v in os.environ.items()):
        return None
    from websockets.proxy import get_proxy
    from websockets.uri import parse_uri

    return get_proxy(parse_uri(url))


async def open_mailbox(url: str, *, ssl_context: ssl.SSLContext | None, max_size: int, timeout: float):
    """A connection to the mailbox at `url`: a MailboxSocket, or a websockets connection through a proxy."""
    if urlsplit(url).username is not None or proxy_for(url) is not None:
        import websockets

        return await websockets.connect(url, max_size=max_size, ping_interval=PING_INTERVAL,
                                        ping_timeout=PING_TIMEOUT, open_timeout=timeout,
                                        **({"ssl": ssl_context} if ssl_context is not None else {}))
    async with asyncio.timeout(timeout):
        return await connect(url, ssl_context=ssl_context, max_size=max_size)


async def connect(url: str, *, ssl_context: ssl.SSLContext | None = None, max_size: int) -> MailboxSocket:
    """Open TCP (+TLS), upgrade to a WebSocket; the caller bounds the time."""
    parts = urlsplit(url)
    tls = parts.scheme == "wss"
    try:
        host, port = parts.hostname, parts.port or (443 if tls else 80)
    except ValueError:  # a port out of range
        host = None
    if parts.scheme not in ("ws", "wss") or not host:
        raise ServerConnectionError(f"{url!r} is not a ws:// or wss:// URL")
    reader, writer = await asyncio.open_connection(
        host, port, limit=READ_CHUNK, ssl=(ssl_context or ssl.create_default_context()) if tls else None,
        server_hostname=host if tls else None)
    try:
        await _upgrade(url, reader, writer, host, port, tls, parts.path or "/", parts.query)
    except BaseException:
        writer.close()
        raise
    return MailboxSocket(reader, writer, WebSocketStream(client=True, text=True, max_frame=max_size,
                                                         max_message=max_size))


async def _upgrade(url: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str,
                   port: int, tls: bool, path: str, query: str) -> None:
    name = f"[{host}]" if ":" in host else host
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(websocket_request(name if port == (443 if tls else 80) else f"{name}:{port}",
                                   f"{path}?{query}" if query else path, key, {"User-Agent": USER_AGENT}))
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        raise ConnectionResetError("the server closed the connection before answering the upgrade") from None
    except asyncio.LimitOverrunError:
        raise UpgradeRefused(f"the server at {url} sent an answer head over {READ_CHUNK} bytes") from None
    if len(head) > MAX_RESPONSE_HEAD:
        raise UpgradeRefused(f"the server at {url} sent an answer head over {MAX_RESPONSE_HEAD} bytes")
    try:
        answer = parse_response_head(head[:-4])
    except WireError as e:
        raise UpgradeRefused(f"the server at {url} does not speak HTTP/1.1: {e}") from None
    said = f"HTTP {answer.status} {answer.reason}".rstrip()
    if answer.status != 101:
        raise UpgradeRefused(f"the server at {url} refused the WebSocket upgrade: {said}")
    if "websocket" not in answer.tokens("upgrade") or "upgrade" not in answer.tokens("connection"):
        raise UpgradeRefused(f"the server at {url} answered {said} without Upgrade: websocket")
    if answer.header("sec-websocket-accept") != websocket_accept(key):
        raise UpgradeRefused(f"the server at {url} answered {said} with a wrong Sec-WebSocket-Accept "
                             f"({answer.header('sec-websocket-accept') or 'none'})")
    for offered_none in ("sec-websocket-extensions", "sec-websocket-protocol"):
        if answer.header(offered_none):
            raise UpgradeRefused(f"the server at {url} chose {offered_none} {answer.header(offered_none)!r}, "
                                 "which we did not offer")
