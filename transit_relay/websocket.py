"""WebSocket transit on its own port, pairable with TCP clients (as the reference's `--websocket`).

Every message must be binary. The first message is the whole handshake (a trailing newline is
optional); replies are binary messages `ok\\n`, `bad handshake\\n`, `impatient\\n`. Relayed data goes
out as one binary message per chunk read from the partner; boundaries carry no meaning.

Pairs with a WebSocket side are relayed in user space by `StreamPair`: the WebSocket side's handler
loop forwards its messages, a task forwards from a TCP side. WebSocket has no half-close, so when
one direction ends both connections are closed. Backpressure: websockets' bounded receive queue
(`max_queue`) and write buffer (`write_limit`) plus awaiting every write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import cast

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from burrow.common.listen import tcp_listener
from burrow.common.proxy_protocol import ProxyPolicy, gate_connection
from burrow.transit_relay.interfaces import Endpoint, RelayHost, Stream, TcpSide
from burrow.transit_relay.protocol import OK, Conn, PairState, Phase

log = logging.getLogger("burrow.transit.websocket")
_FULL = 1013  # "try again later"


class WsEndpoint:
    transport = "websocket"

    def __init__(self, server: RelayHost, ws: ServerConnection, conn: Conn) -> None:
        self.server = server
        self.ws = ws
        self.conn = conn
        self.stream: Stream | None = None
        self._ok: asyncio.Task | None = None
        self._closing: asyncio.Task | None = None

    async def run(self) -> None:
        relay, server, conn = self.server.relay, self.server, self.conn
        try:
            while conn.phase is not Phase.CLOSED:
                msg = await self.ws.recv()
                if isinstance(msg, str):  # the reference aborts on text frames
                    if self.stream is not None:
                        break
                    server.dispatch(relay.protocol_error(conn, server.clock()))
                elif self.stream is not None:
                    await self.stream.forward(self, msg)
                else:
                    server.dispatch(relay.message(conn, msg, server.clock()))
        except (ConnectionClosed, OSError):
            pass
        finally:
            if self.stream is not None:
                self.stream.direction_ended()
            else:
                server.dispatch(relay.lost(conn, server.clock()))
            if self._closing is None:
                self._closing = asyncio.ensure_future(self._close_with(None))
            with contextlib.suppress(Exception):
                await self._closing
            if self.stream is not None:
                self.stream.part_done()

    def close(self, reply: bytes | None = None) -> None:
        if self.stream is not None:
            self.stream.abort()
        elif self._closing is None:
            self._closing = asyncio.ensure_future(self._close_with(reply))

    async def _close_with(self, reply: bytes | None) -> None:
        with contextlib.suppress(ConnectionClosed, OSError):
            if reply:
                await self.ws.send(reply)
            await self.ws.close(1000)

    # -- pair side ------------------------------------------------------------------------
    def take_over(self) -> None:
        self._ok = asyncio.ensure_future(self.ws.send(OK))

    async def write(self, data: bytes) -> None:
        if self._ok is not None:
            ok, self._ok = self._ok, None
            await ok
        await self.ws.send(data)

    def shut(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_with(None))


class StreamPair:
    """A pair with at least one WebSocket side. Two directions; when one ends, both sides close."""

    def __init__(self, server: RelayHost, pair: PairState, a: Endpoint, b: Endpoint) -> None:
        self.server = server
        self.pair = pair
        self.a, self.b = a, b
        self.parts = 2
        self.ending = False
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        for ep in (self.a, self.b):
            ep.stream = self
            ep.take_over()
        for ep, partner, first in ((self.a, self.b, True), (self.b, self.a, False)):
            if ep.transport == "tcp":
                self.tasks.append(asyncio.ensure_future(self._tcp_direction(ep, partner, first)))

    async def _tcp_direction(self, ep: Endpoint, partner: Endpoint, first: bool) -> None:
        try:
            await cast(TcpSide, ep).pump_to(partner, self.pair, first)
        except (ConnectionClosed, OSError, asyncio.CancelledError):
            pass
        finally:
            self.direction_ended()
            self.part_done()

    async def forward(self, ep: Endpoint, msg: bytes) -> None:
        partner = self.b if ep is self.a else self.a
        await partner.write(msg)
        if ep is self.a:
            self.pair.bytes_from_first += len(msg)
        else:
            self.pair.bytes_from_second += len(msg)

    def direction_ended(self) -> None:
        """No half-close over WebSocket: the first direction to end closes both connections."""
        if self.ending:
            return
        self.ending = True
        for ep in (self.a, self.b):
            ep.shut()

    def abort(self) -> None:
        self.direction_ended()

    def part_done(self) -> None:
        self.parts -= 1
        if self.parts == 0:
            for ep in (self.a, self.b):
                if ep.transport == "tcp":
                    cast(TcpSide, ep).close_socket()
            self.server.pair_done(self.pair, self)


class WebSocketListener:
    def __init__(self, server: RelayHost, proxy: ProxyPolicy | None = None) -> None:
        self.server = server
        self.proxy = proxy  # --proxy-protocol: each connection is gated until its header is read
        self._ws_server = None

    async def start(self, host: str, port: int) -> int:
        cfg = self.server.config
        self._ws_server = await serve(
            self._handler, sock=tcp_listener(host, port), compression=None, ping_interval=None,
            open_timeout=cfg.handshake_timeout, max_size=cfg.websocket_max_message,
            max_queue=cfg.websocket_max_queue, write_limit=cfg.buffer_size, server_header=None,
            create_connection=gate_connection(ServerConnection, self.proxy))
        return self._ws_server.sockets[0].getsockname()[1]

    def stop_accepting(self) -> None:
        """Close the listening socket and keep the connections (a draining relay)."""
        if self._ws_server is not None:
            self._ws_server.close(close_connections=False)

    async def stop(self) -> None:
        if self._ws_server is not None:
            self._ws_server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ws_server.wait_closed(), 5)

    async def _handler(self, ws: ServerConnection) -> None:
        ip = ws.remote_address[0] if ws.remote_address else "?"
        conn = self.server.relay.open(ip, "websocket", self.server.clock())
        if isinstance(conn, str):
            await ws.close(_FULL, f"relay is full ({conn})")
            return
        endpoint = WsEndpoint(self.server, ws, conn)
        conn.handle = endpoint
        await endpoint.run()
