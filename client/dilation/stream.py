"""Subchannel stream objects: an asyncio.StreamReader and a StreamWriter-like writer.

The reader is a real asyncio.StreamReader whose "transport" is the subchannel: when its buffer passes twice
its limit it asks the Dilation core to pause the L2 connection, and resumes it once drained. The writer
queues DATA records; `drain()` waits while the connection is full (see aio.py).
"""

from __future__ import annotations

import asyncio

from .errors import SubchannelClosed


class _ReadControl:
    """What asyncio.StreamReader calls on its transport for flow control."""

    def __init__(self, core, scid: int):
        self._core, self._scid = core, scid

    def pause_reading(self) -> None:
        self._core.reader_paused(self._scid, True)

    def resume_reading(self) -> None:
        self._core.reader_paused(self._scid, False)


class SubchannelReader(asyncio.StreamReader):
    def __init__(self, core, scid: int, *, limit: int):
        super().__init__(limit=limit)
        self.scid = scid
        self.set_transport(_ReadControl(core, scid))


class SubchannelWriter:
    def __init__(self, core, scid: int, subprotocol: str):
        self._core = core
        self.scid = scid
        self.subprotocol = subprotocol
        self._closing = False
        self._done = asyncio.get_running_loop().create_future()

    # StreamWriter-like surface
    def write(self, data: bytes) -> None:
        if self._closing:
            raise SubchannelClosed("write after close")
        if data:
            self._core.subchannel_write(self.scid, bytes(data))

    def writelines(self, data) -> None:
        self.write(b"".join(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """Half-close: the peer's reader sees EOF after everything written so far."""
        if not self._closing:
            self._closing = True
            self._core.subchannel_close(self.scid)

    def close(self) -> None:
        self.write_eof()

    def is_closing(self) -> bool:
        return self._closing

    async def drain(self) -> None:
        await self._core.wait_writable()

    async def wait_closed(self) -> None:
        """Returns when both directions are closed (the peer closed too)."""
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
