"""Subchannel stream objects: an asyncio.StreamReader and a StreamWriter-like writer.

The reader is a real asyncio.StreamReader whose "transport" is the subchannel: when what it holds passes
twice its limit it asks the Dilation runtime to pause the L2 connection, and resumes it once drained. The writer
queues DATA records; `drain()` waits while the connection is full (see aio.py) and, every FAIR_SHARE bytes,
lets the other subchannels' writers take a turn.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .errors import SubchannelClosed


class _ReadControl:
    """What asyncio.StreamReader calls on its transport for flow control."""

    def __init__(self, runtime, scid: int):
        self._runtime, self._scid = runtime, scid

    def pause_reading(self) -> None:
        self._runtime.reader_paused(self._scid, True)

    def resume_reading(self) -> None:
        self._runtime.reader_paused(self._scid, False)


class SubchannelReader(asyncio.StreamReader):
    """StreamReader with a fast path for bulk reads: DATA payloads queue as they arrived and `read(n)` joins
    up to n bytes of them into the bytes it returns (one copy) instead of appending every payload to the
    StreamReader's bytearray and slicing it out again. readexactly/readuntil/readline first move the queue
    into that bytearray and then behave exactly as StreamReader's."""

    def __init__(self, runtime, scid: int, *, limit: int):
        super().__init__(limit=limit)
        self.scid = scid
        self._chunks: deque = deque()
        self._queued = 0  # bytes in _chunks
        self.set_transport(_ReadControl(runtime, scid))

    def feed_data(self, data) -> None:
        assert not self._eof, "feed_data after feed_eof"
        if not data:
            return
        self._chunks.append(data)
        self._queued += len(data)
        self._wakeup_waiter()
        if not self._paused and self._queued + len(self._buffer) > 2 * self._limit:
            self._paused = True
            self._transport.pause_reading()

    def _maybe_resume_transport(self) -> None:
        if self._paused and self._queued + len(self._buffer) <= self._limit:
            self._paused = False
            self._transport.resume_reading()

    def _take_chunks(self) -> None:
        """Slow path: move the queued payloads into StreamReader's own buffer."""
        while self._chunks:
            self._buffer.extend(self._chunks.popleft())
        self._queued = 0

    async def _wait_for_data(self, func_name: str) -> None:
        await super()._wait_for_data(func_name)
        self._take_chunks()  # StreamReader's own loops look only at its buffer

    def at_eof(self) -> bool:
        return self._eof and not self._buffer and not self._chunks

    async def read(self, n: int = -1) -> bytes:
        if self._exception is not None:
            raise self._exception
        if n > 0 and not self._buffer:
            if not self._chunks and not self._eof:
                await super()._wait_for_data("read")  # not ours: keep what arrives queued
            if self._chunks:
                data = self._take_up_to(n)
                self._maybe_resume_transport()
                return data
        self._take_chunks()
        return await super().read(n)

    def _take_up_to(self, n: int) -> bytes:
        """Up to n queued bytes (as StreamReader.read gives), copied once into the bytes returned."""
        chunks, parts, size = self._chunks, [], 0
        while chunks and size < n:
            chunk = chunks.popleft()
            if size + len(chunk) > n:
                chunks.appendleft(chunk[n - size :])
                chunk = chunk[: n - size]
            parts.append(chunk)
            size += len(chunk)
        self._queued -= size
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    async def readexactly(self, n: int) -> bytes:
        self._take_chunks()
        return await super().readexactly(n)

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        self._take_chunks()
        return await super().readuntil(separator)


# Bytes a writer may write before its drain() lets other subchannels' writers run. While the connection has
# room, drain() has nothing to wait for and never suspends, so without this one bulk subchannel would send all
# it has before any other got a turn.
FAIR_SHARE = 1024 * 1024


class SubchannelWriter:
    def __init__(self, runtime, scid: int, subprotocol: str):
        self._runtime = runtime
        self.scid = scid
        self.subprotocol = subprotocol
        self._closing = False
        self._since_yield = 0  # bytes written since drain() last gave other writers a turn
        self._done = asyncio.get_running_loop().create_future()

    # StreamWriter-like surface
    def write(self, data: bytes) -> None:
        if self._closing:
            raise SubchannelClosed("write after close")
        if data:
            self._runtime.subchannel_write(self.scid, bytes(data))
            self._since_yield += len(data)

    def writelines(self, data) -> None:
        self.write(b"".join(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """Half-close, as StreamWriter.write_eof(): the peer's reader sees EOF after everything written so
        far; our reader keeps reading until the peer closes its side."""
        if not self._closing:
            self._closing = True
            self._runtime.subchannel_close(self.scid)

    def close(self) -> None:
        """Close both directions, as StreamWriter.close(): write_eof(), and our reader ends here (what it
        already holds stays readable, anything the peer sends later is dropped)."""
        self.write_eof()
        self._runtime.subchannel_stop_reading(self.scid)

    def is_closing(self) -> bool:
        return self._closing

    async def drain(self) -> None:
        if self._since_yield >= FAIR_SHARE:
            self._since_yield = 0
            await asyncio.sleep(0)  # to the back of the ready queue: writers take turns
        await self._runtime.wait_writable()

    async def wait_closed(self) -> None:
        """Returns when the subchannel is closed in both directions: after our close() or write_eof(), once
        the peer closed its side too (magic-wormhole answers a close at once, burrow when its app closes)."""
        await self._done

    def get_extra_info(self, name: str, default=None):
        return {"subprotocol": self.subprotocol, "scid": self.scid}.get(name, default)

    def _finished(self) -> None:
        self._closing = True
        if not self._done.done():
            self._done.set_result(None)


class SubchannelListener:
    def __init__(self, subprotocol: str, queue: asyncio.Queue):
        self.subprotocol = subprotocol
        self._q = queue

    async def accept(self) -> tuple[SubchannelReader, SubchannelWriter]:
        return await self._q.get()

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self.accept()
