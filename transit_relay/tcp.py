"""One TCP client of the transit relay: reads its handshake, then belongs to a pump.

Plain non-blocking sockets watched with loop.add_reader (no Protocol objects, no task per connection).
Once paired, TCP<->TCP pairs are moved by forwarding.TcpPairForwarder; a TCP side paired with a
WebSocket is pumped by websocket.StreamPair through `pump_to` and `write`.
"""

from __future__ import annotations

import contextlib
import socket

from burrow.transit_relay.forwarding import TcpPairForwarder
from burrow.transit_relay.interfaces import ByteCounts, Endpoint, RelayHost, Stream
from burrow.transit_relay.protocol import OK, Conn

_HANDSHAKE_READ = 4096


class TcpEndpoint:
    """One TCP client: reads its handshake, then belongs to a forwarder (or a StreamPair)."""

    transport = "tcp"

    def __init__(self, server: RelayHost, sock: socket.socket, conn: Conn) -> None:
        self.server = server
        self.loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.conn = conn
        self.forwarder: TcpPairForwarder | None = None
        self.stream: Stream | None = None  # websocket.StreamPair when paired with a WebSocket
        self.closed = False

    def start(self) -> None:
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data = self.sock.recv(_HANDSHAKE_READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        now = self.server.clock()
        if not data:
            actions = self.server.relay.lost(self.conn, now)
            self._drop()
        else:
            actions = self.server.relay.receive(self.conn, data, now)
        self.server.dispatch(actions)

    def take_over(self) -> None:
        """Paired: stop handshake reading and send `ok` (the socket buffer is empty, so it fits)."""
        self.loop.remove_reader(self.fd)
        with contextlib.suppress(OSError):
            self.sock.send(OK)

    def close(self, reply: bytes | None = None) -> None:
        if self.forwarder is not None:
            self.forwarder.abort()
        elif self.stream is not None:
            self.stream.abort()
        elif not self.closed:
            if reply:
                with contextlib.suppress(OSError):
                    self.sock.send(reply)
            self._drop()

    def _drop(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.fd)
            self.sock.close()

    # -- used by websocket.StreamPair (TCP side of a mixed pair) --------------------------
    async def pump_to(self, partner: Endpoint, counts: ByteCounts, first: bool) -> None:
        bufsize = min(self.server.config.buffer_size, 262144)  # each recv allocates a fresh bytes object
        while True:
            data = await self.loop.sock_recv(self.sock, bufsize)
            if not data:
                return
            await partner.write(data)
            if first:
                counts.bytes_from_first += len(data)
            else:
                counts.bytes_from_second += len(data)

    async def write(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)

    def shut(self) -> None:
        """Wake any pending recv/send on this socket without closing the fd under them."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close_socket(self) -> None:
        self.closed = True
        self.sock.close()
