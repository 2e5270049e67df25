"""An asyncio DERP client: connect by URL, authenticate with a Curve25519 key, send and receive
packets by public key, over HTTP Upgrade or WebSocket, reconnecting with backoff.

    client = DerpClient("https://relay.example:8443", private_key, ca_file="relay.crt")
    await client.start()                  # returns once the first handshake is done
    await client.send(peer_key, b"hello")
    src, payload = await client.recv()
    await client.close()

PeerGone, PeerPresent, Health and Restarting frames land in `client.notices`. On Restarting the
client reconnects after the delay the server asked for; on a lost connection it retries with
exponential backoff (0.5 s doubling to `backoff_max`, with jitter) until closed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import ssl
import time
from urllib.parse import urlsplit

from burrow.wire.derp import frames as f
from burrow.wire.derp.connection import ClientConnection, Connected
from burrow.wire.derp.handshake import ClientInfoJSON, generate_private_key, public_key
from burrow.wire.errors import WireError
from burrow.wire.http import parse_head, websocket_accept
from burrow.wire.websocket import WebSocketStream

log = logging.getLogger(__name__)
MAX_RESPONSE_HEAD = 16 * 1024
READ_CHUNK = 64 * 1024


class DerpClientError(Exception):
    pass


def client_ssl_context(ca_file: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class _Link:
    """One live connection: stream, optional WebSocket framing, the sans-IO state machine."""

    def __init__(self, reader, writer, machine: ClientConnection, ws: WebSocketStream | None) -> None:
        self.reader, self.writer, self.machine, self.ws = reader, writer, machine, ws

    def write(self, data: bytes) -> None:
        if data:
            self.writer.write(self.ws.wrap(data) if self.ws is not None else data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class DerpClient:
    def __init__(self, url: str, private_key: bytes | None = None, *, ca_file: str | None = None,
                 insecure: bool = False, websocket: bool = False, server_key: bytes | None = None,
                 preferred: bool = True, reconnect: bool = True, connect_timeout: float = 10.0,
                 read_timeout: float = 120.0, ping_interval: float = 60.0, backoff_max: float = 30.0,
                 recv_queue: int = 4096, app_name: str = "burrow") -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http", "wss", "ws"):
            raise ValueError(f"relay URL must be https:// or http://, got {url!r}")
        self.tls = parts.scheme in ("https", "wss")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.path = parts.path if parts.path not in ("", "/") else "/derp"
        self.ssl_context = client_ssl_context(ca_file, insecure) if self.tls else None
        self.private_key = private_key or generate_private_key()
        self.public_key = public_key(self.private_key)
        self.websocket = websocket
        self.server_key = server_key
        self.preferred = preferred
        self.reconnect = reconnect
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.ping_interval = ping_interval
        self.backoff_max = backoff_max
        self.info = ClientInfoJSON(app_name=app_name)
        self.packets: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(recv_queue)
        self.notices: asyncio.Queue = asyncio.Queue(256)
        self.dropped = 0
        self.connects = 0
        self.server_info = None
        self._link: _Link | None = None
        self._connected = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task | None = None
        self._restart_delay: float | None = None
        self._pings: dict[bytes, asyncio.Future] = {}

    # ---- connection
    async def _open(self) -> _Link:
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl_context, server_hostname=self.host if self.tls else None,
            limit=READ_CHUNK)
        try:
            return await self._upgrade(reader, writer)
        except BaseException:
            writer.close()
            raise

    async def _upgrade(self, reader, writer) -> _Link:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        lines = [f"GET {self.path} HTTP/1.1", f"Host: {host}:{self.port}", "User-Agent: burrow-derp"]
        ws_key = None
        if self.websocket:
            ws_key = base64.b64encode(os.urandom(16)).decode()
            lines += ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {ws_key}",
                      "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: derp"]
        else:
            lines += ["Upgrade: DERP", "Connection: Upgrade"]
            if self.server_key is not None:
                lines.append("Derp-Fast-Start: 1")
        machine = ClientConnection(self.private_key, info=self.info,
                                   server_key=None if self.websocket else self.server_key)
        fast = self.server_key is not None and not self.websocket
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        ws = WebSocketStream(client=True) if self.websocket else None
        link = _Link(reader, writer, machine, ws)
        if fast:
            link.write(machine.data_to_send())  # ClientInfo right behind the request: no 101 comes
            return link
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_RESPONSE_HEAD:
            raise DerpClientError("response head too large")
        status_line, _, rest = head[:-4].partition(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or parts[1] != b"101":
            raise DerpClientError(f"relay refused the upgrade: {status_line.decode('latin-1')}")
        headers = parse_head(b"GET / HTTP/1.1\r\n" + rest).headers
        if ws_key is not None and headers.get("sec-websocket-accept") != websocket_accept(ws_key):
            raise DerpClientError("bad Sec-WebSocket-Accept")
        return link

    async def _handshake(self, link: _Link) -> None:
        while True:
            try:
                events = await self._read_events(link, self.connect_timeout)
            except WireError as exc:
                raise DerpClientError(str(exc)) from exc
            link.write(link.machine.data_to_send())
            for ev in events:
                if isinstance(ev, Connected):
                    self.server_key = ev.server_key
                    self.server_info = ev.info
                    if self.preferred:
                        link.write(f.NotePreferred(True).encode())
                    return

    async def _read_events(self, link: _Link, timeout: float) -> list:
        data = await asyncio.wait_for(link.reader.read(READ_CHUNK), timeout)
        if not data:
            raise ConnectionError("relay closed the connection")
        if link.ws is not None:
            data = link.ws.feed(data)
            link.writer.write(link.ws.data_to_send())
            if link.ws.closed:
                raise ConnectionError("relay closed the WebSocket")
        return link.machine.receive_data(data)

    async def connect(self) -> None:
        """One connection attempt with handshake; raises on failure."""
        link = await asyncio.wait_for(self._open(), self.connect_timeout)
        try:
            await self._handshake(link)
        except BaseException:
            link.close()
            raise
        self._link = link
        self.connects += 1
        self._connected.set()

    async def start(self) -> None:
        """Connect, then keep the connection (and reconnect) in the background."""
        await self.connect()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        backoff = 0.5
        while not self._closed:
            link = self._link
            if link is not None:
                try:
                    await self._pump(link)
                except (TimeoutError, ConnectionError, OSError, WireError) as exc:
                    log.info("relay connection lost: %s", exc)
                link.close()
                self._link = None
                self._connected.clear()
                for fut in self._pings.values():
                    if not fut.done():
                        fut.set_exception(ConnectionError("connection lost"))
                self._pings.clear()
            if self._closed or not self.reconnect:
                return
            if self._restart_delay is not None:
                delay, self._restart_delay = self._restart_delay, None
            else:
                delay = backoff * random.uniform(0.8, 1.2)
                backoff = min(backoff * 2, self.backoff_max)
            await asyncio.sleep(delay)
            try:
                await self.connect()
                backoff = 0.5
            except (TimeoutError, ConnectionError, OSError, WireError, DerpClientError) as exc:
                log.info("reconnect failed: %s", exc)

    async def _pump(self, link: _Link) -> None:
        last_rx = time.monotonic()
        while not self._closed:
            wait = self.ping_interval if self.ping_interval > 0 else self.read_timeout
            try:
                events = await self._read_events(link, min(wait, self.read_timeout))
            except TimeoutError:
                if time.monotonic() - last_rx >= self.read_timeout:
                    raise
                link.write(f.Ping(os.urandom(8)).encode())  # keep NATs and proxies awake
                continue
            last_rx = time.monotonic()
            link.write(link.machine.data_to_send())  # Pongs to server Pings
            for ev in events:
                t = type(ev)
                if t is f.RecvPacket:
                    try:
                        self.packets.put_nowait((ev.src, ev.payload))
                    except asyncio.QueueFull:
                        self.dropped += 1
                elif t is f.Pong:
                    fut = self._pings.pop(ev.data, None)
                    if fut is not None and not fut.done():
                        fut.set_result(time.monotonic())
                elif t is f.KeepAlive or t is f.Ping:
                    pass
                else:
                    if t is f.Restarting:
                        self._restart_delay = ev.reconnect_in_ms / 1000.0
                    with contextlib.suppress(asyncio.QueueFull):
                        self.notices.put_nowait(ev)
                    if t is f.Restarting:
                        return

    # ---- API
    async def wait_connected(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def send(self, dst: bytes, payload: bytes, timeout: float | None = 10.0) -> None:
        if self._link is None:
            await self.wait_connected(timeout)
        link = self._link
        link.write(link.machine.send_packet(dst, payload))
        await link.writer.drain()

    def send_nowait(self, dst: bytes, payload: bytes) -> None:
        """Queue without waiting for the socket (raises DerpClientError when not connected)."""
        if self._link is None:
            raise DerpClientError("not connected")
        self._link.write(self._link.machine.send_packet(dst, payload))

    async def drain(self) -> None:
        if self._link is not None:
            await self._link.writer.drain()

    async def recv(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        return await asyncio.wait_for(self.packets.get(), timeout)

    async def ping(self, timeout: float = 5.0) -> float:
        """Round trip to the relay itself (Ping/Pong), in seconds."""
        if self._link is None:
            await self.wait_connected(timeout)
        data = os.urandom(8)
        fut = asyncio.get_running_loop().create_future()
        self._pings[data] = fut
        t0 = time.monotonic()
        self._link.write(f.Ping(data).encode())
        t1 = await asyncio.wait_for(fut, timeout)
        return t1 - t0

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._link is not None:
            self._link.close()
            with contextlib.suppress(Exception):
                await self._link.writer.wait_closed()
            self._link = None
