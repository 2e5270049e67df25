"""Replicas on one host hand a client's socket to the partner's replica instead of hopping to it.

With `--handover-dir DIR` shared by replicas on one machine, each listens on the Unix socket
DIR/ADVERTISE_ADDRESS.sock. When a TCP side's partner waits on a replica whose socket is there, the
arriving replica sends it the hop line together with the client's socket descriptor (SCM_RIGHTS) and lets
go of the client: the holder pairs it like a client connected to it, so the pair costs one relay's two
connections and one process's splicing, not the three connections and two processes of a hop. The holder
answers `ok`, `no partner` (the arriving replica keeps its client and claims again) or a refusal, as on
the peer port. A socket that cannot be reached (a stale file of a stopped replica) falls back to the TCP
hop; WebSocket sides always hop (their framing lives in the process that accepted them).

Once the descriptor is sent, the arriving replica never reads or writes the client again: without an
answer (the holder died meanwhile, or took too long) it only closes its copy, and the client's
connection ends if the holder's copy is gone too.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from burrow.common.listen import accept_ready
from burrow.transit_relay.hop_pool import read_line
from burrow.transit_relay.interfaces import RelayHost
from burrow.transit_relay.protocol import NO_PARTNER, Conn, Phase
from burrow.transit_relay.tcp import TcpEndpoint

log = logging.getLogger("burrow.transit.handover")
CONNECT_TIMEOUT = 1.0  # seconds to reach the holder's Unix socket
REPLY_TIMEOUT = 5.0    # seconds for its answer
LINE_TIMEOUT = 5.0     # seconds an accepted handover may take to send its line and descriptor
MAX_READING = 1024     # accepted handovers whose line has not come yet (a replica sends it with its connect)
_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)
LEFT = b"left\n"  # what `send` returns when its side left before anything was sent (never on the wire)


def socket_path(directory: str, address: str) -> Path:
    """Where the replica advertising `address` listens for handovers."""
    return Path(directory) / (address.replace("/", "_") + ".sock")


class HandedEndpoint(TcpEndpoint):
    """A client handed over by another replica: until it pairs here, that replica still answers for it,
    so closing it unpaired sends nothing (this process only drops its copy of the socket); the reply it
    would have had (a refusal, `no partner`) goes to that replica instead."""

    reply: bytes | None = None

    def close(self, reply: bytes | None = None) -> None:
        if self.forwarder or self.stream:
            super().close(reply)
        else:
            self.reply = self.reply or reply
            super().close(None)


class Handover:
    """One replica's Unix socket for handovers, and the sending half."""

    def __init__(self, server: RelayHost, directory: str, max_line: int,
                 on_line: Callable[[socket.socket, bytes], bytes]) -> None:
        self.server = server
        self.directory = directory
        self.max_line = max_line
        self.on_line = on_line  # (client socket, hop line) -> the answer for the sending replica
        self.path: Path | None = None
        self._lsock: socket.socket | None = None
        self._reading: dict[socket.socket, asyncio.TimerHandle] = {}

    # -- receiving ------------------------------------------------------------------------
    def start(self, address: str) -> None:
        self.path = socket_path(self.directory, address)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a replica of this address that did not stop cleanly
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(str(self.path))
        lsock.listen(128)
        lsock.setblocking(False)
        self._lsock = lsock
        self.server.loop.add_reader(lsock.fileno(), self._accept)

    def stop(self) -> None:
        if self._lsock is not None:
            self.server.loop.remove_reader(self._lsock.fileno())
            self._lsock.close()
            self._lsock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for sock in list(self._reading):
            self._drop(sock)

    def _accept(self) -> None:
        for sock, _ in accept_ready(self._lsock, "handover"):
            if len(self._reading) >= MAX_READING:  # only connections that send nothing pile up here
                sock.close()
                continue
            self._reading[sock] = self.server.loop.call_later(LINE_TIMEOUT, self._drop, sock)
            self.server.loop.add_reader(sock.fileno(), self._readable, sock)
            self._readable(sock)  # the sender writes right after connecting: usually here already

    def _drop(self, sock: socket.socket) -> None:
        timer = self._reading.pop(sock, None)
        if timer is not None:
            timer.cancel()
            self.server.loop.remove_reader(sock.fileno())
        sock.close()

    def _readable(self, sock: socket.socket) -> None:
        """The line and the descriptor come in one message (one sendmsg of a few hundred bytes)."""
        try:
            data, ancillary, _flags, _ = sock.recvmsg(self.max_line, _FD_SPACE, socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        client = None
        if len(fds) == 1 and data.endswith(b"\n"):
            try:
                client = socket.socket(fileno=fds[0])
            except OSError:
                os.close(fds[0])
        else:
            for fd in fds:
                os.close(fd)
        if client is None or client.type != socket.SOCK_STREAM or client.family not in (socket.AF_INET,
                                                                                        socket.AF_INET6):
            answer = b"error: bad handover\n"
            if client is not None:
                client.close()
        else:
            client.setblocking(False)
            answer = self.on_line(client, data)
        with contextlib.suppress(OSError):
            sock.send(answer)
        self._drop(sock)

    # -- sending --------------------------------------------------------------------------
    async def send(self, conn: Conn, holder: str, line: bytes) -> bytes | None:
        """Hand `conn`'s client to `holder`: its answer (b"" if none came once the socket was sent; LEFT if
        `conn` left first), or None when nothing was sent (no socket of `holder` here, or not a TCP side):
        hop instead."""
        endpoint = conn.handle
        if type(endpoint) is not TcpEndpoint or endpoint.closed:
            return None
        path = socket_path(self.directory, holder)
        if not path.exists():
            return None
        loop = self.server.loop
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    await loop.sock_connect(sock, str(path))
            except (TimeoutError, OSError):
                return None
            if conn.phase is not Phase.PENDING or endpoint.closed:
                return LEFT
            loop.remove_reader(endpoint.fd)  # from here on the client's bytes are the holder's
            try:
                sock.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [endpoint.fd]))])
            except OSError:
                endpoint.start()
                return None
            try:
                async with asyncio.timeout(REPLY_TIMEOUT):
                    reply = await read_line(loop, sock, self.max_line)
            except (TimeoutError, OSError):
                reply = b""
        finally:
            sock.close()
        if reply == NO_PARTNER and conn.phase is Phase.PENDING and not endpoint.closed:
            endpoint.start()  # still ours: it waits here again
        return reply

    @staticmethod
    def release(endpoint: TcpEndpoint) -> None:
        """The holder took the client: drop this process's copy of its socket without a word."""
        endpoint.closed = True
        endpoint.sock.close()

