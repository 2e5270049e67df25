"""One link from this client to a messaging server, and the channels on it (the asyncio face).

The link handshake (initiator side) and the channel state machine are sans-IO (burrow.messaging.handshake
and client_link); this file owns the TCP stream, turns their events into futures and queues, and bounds
what waits: a channel holds at most `max_queued` unread messages before the link stops being read (the
server then stops reading the sender), and a close waits `close_timeout` for ChannelClosed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from burrow.messaging import keys
from burrow.messaging.client_link import (
    ChannelEnded,
    ChannelReady,
    ChannelRefused,
    ClientLink,
    IncomingChannel,
    Message,
)
from burrow.messaging.errors import ChannelError, HandshakeError, ProtocolError
from burrow.messaging.handshake import InitiatorHandshake

log = logging.getLogger(__name__)
READ_SIZE = 65536


class ChannelClosedError(Exception):
    """The channel is closed (by us, the remote, or because its link went away); `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"channel closed ({reason})")
        self.reason = reason


class ChannelRefusedError(Exception):
    """The server or the remote client refused to open the channel."""


class Channel:
    """A Noise KK channel to `remote` through one server. `recv()` returns whole messages in order."""

    def __init__(self, link: ServerLink, cid: int, remote: bytes, max_queued: int) -> None:
        self.link = link
        self.channel_id = cid
        self.remote = remote
        self.max_queued = max_queued
        self.closed_reason: str | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._ended = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    async def send(self, data: bytes) -> None:
        if self.closed_reason is not None:
            raise ChannelClosedError(self.closed_reason)
        try:
            self.link.machine.send(self.channel_id, data)
        except ChannelError as exc:
            raise ChannelClosedError(exc.reason) from exc
        await self.link.flush(drain=True)

    async def recv(self) -> bytes:
        """The next message; raises ChannelClosedError once the channel has ended and nothing is left."""
        item = await self._queue.get()
        self.link.read_budget_freed()
        if item is None:
            self._queue.put_nowait(None)  # later calls see the end too
            raise ChannelClosedError(self.closed_reason or "closed")
        return item

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.recv()
        except ChannelClosedError:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """CloseChannel, then wait for ChannelClosed (sent ourselves after `close_timeout`)."""
        if self.closed_reason is not None:
            return
        self.link.machine.close_channel(self.channel_id)
        await self.link.flush()
        try:
            await asyncio.wait_for(self._ended.wait(), self.link.close_timeout)
        except TimeoutError:
            ev = self.link.machine.close_timed_out(self.channel_id)
            if ev is not None:
                self.link.dispatch([ev])
            await self.link.flush()

    def _deliver(self, data: bytes) -> None:
        self._queue.put_nowait(data)

    def _end(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
            self._queue.put_nowait(None)
            self._ended.set()

    def unread(self) -> int:
        return self._queue.qsize()


class ServerLink:
    """A handshaken link to the server `server_key` at `address`; `on_incoming(channel)` gets new channels."""

    def __init__(self, local: keys.SecretKey, server_key: bytes, address: str,
                 on_incoming: Callable[[Channel], None], on_lost: Callable[[ServerLink], None],
                 accept: Callable[[bytes], bool] = lambda _k: True, max_queued: int = 1024,
                 close_timeout: float = 5.0) -> None:
        self.local = local
        self.server_key = server_key
        self.address = address
        self.on_incoming = on_incoming
        self.on_lost = on_lost
        self.machine = ClientLink(local, accept)
        self.max_queued = max_queued
        self.close_timeout = close_timeout
        self.channels: dict[int, Channel] = {}
        self.pending: dict[int, asyncio.Future] = {}
        self.alive = False
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self._can_read = asyncio.Event()
        self._can_read.set()

    async def connect(self, timeout: float = 10.0) -> None:
        """Dial and run the link handshake; raises OSError, TimeoutError or HandshakeError."""
        host, _, port = self.address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port), limit=1 << 20), timeout)
        hs = InitiatorHandshake(self.local, self.server_key)
        try:
            writer.write(hs.start())
            async with asyncio.timeout(timeout):
                while not hs.complete:
                    data = await reader.read(READ_SIZE)
                    if not data:
                        raise HandshakeError("server closed the link during the handshake", "eof")
                    out = hs.receive_data(data)
                    if out:
                        writer.write(out)
        except BaseException:
            writer.close()
            raise
        self._reader, self._writer = reader, writer
        self.alive = True
        if hs.rest:
            self.dispatch(self.machine.receive_data(hs.rest))
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        reason = "link_lost"
        try:
            while True:
                await self._can_read.wait()
                data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                self.dispatch(self.machine.receive_data(data))
                await self.flush()
        except ProtocolError as exc:
            log.warning("server %s broke the protocol: %s", self.server_key.hex()[:16], exc)
            reason = "protocol"
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.info("link to %s lost: %s", self.address, exc)
        finally:
            self._lost(reason)

    def _lost(self, reason: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.dispatch(self.machine.lost())
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ChannelRefusedError(f"link to the server lost ({reason})"))
        self.pending.clear()
        if self._writer is not None:
            self._writer.close()
        self.on_lost(self)

    def dispatch(self, events) -> None:
        for ev in events:
            t = type(ev)
            if t is Message:
                ch = self.channels.get(ev.channel_id)
                if ch is not None:
                    ch._deliver(ev.data)
                    if ch.unread() >= self.max_queued:
                        self._can_read.clear()  # stop reading until the application catches up
            elif t is ChannelReady:
                ch = self.channels[ev.channel_id] = Channel(self, ev.channel_id, ev.remote, self.max_queued)
                fut = self.pending.pop(ev.channel_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ch)
            elif t is IncomingChannel:
                ch = self.channels[ev.channel_id] = Channel(self, ev.channel_id, ev.remote, self.max_queued)
                self.on_incoming(ch)
            elif t is ChannelRefused:
                fut = self.pending.pop(ev.channel_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(ChannelRefusedError(f"channel refused ({ev.reason})"))
            elif t is ChannelEnded:
                ch = self.channels.pop(ev.channel_id, None)
                if ch is not None:
                    ch._end(ev.reason)

    def read_budget_freed(self) -> None:
        if not self._can_read.is_set() and all(c.unread() < self.max_queued for c in self.channels.values()):
            self._can_read.set()

    async def open(self, remote: bytes, timeout: float = 10.0) -> Channel:
        if not self.alive:
            raise ChannelRefusedError("link is closed")
        try:
            cid = self.machine.open_channel(remote)
        except ChannelError as exc:
            raise ChannelRefusedError(str(exc)) from exc
        fut = asyncio.get_running_loop().create_future()
        self.pending[cid] = fut
        await self.flush()
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.pending.pop(cid, None)
            self.machine.close_channel(cid)
            self.dispatch([e for e in [self.machine.close_timed_out(cid)] if e is not None])
            await self.flush()
            raise ChannelRefusedError("no answer to OpenChannel") from None

    async def flush(self, drain: bool = False) -> None:
        out = self.machine.data_to_send()
        if out and self._writer is not None and self.alive:
            self._writer.write(out)
        if drain and self._writer is not None and self.alive:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._lost("closed")
