"""The runtime's side of the subchannel stream objects (stream.py): their table, listeners and flow control.

in:  L5 events from the Mux (a subchannel opened, accepted, ended), the stream objects' calls (write, close,
     stop reading, pause/resume reading, wait until writable)
out: (reader, writer) pairs, for open() and for each listener's queue; DATA records to the selected
     connection; pause/resume of its reading while any reader holds too much

`SubchannelIO` is a part of runtime.Dilation, kept here so each file holds one concern: it uses the
runtime's Mux, L4 queue and selected connection, and calls its `_send_now` and `_deliver`.
"""

from __future__ import annotations

import asyncio
import logging

from burrow.client.dilation.l2protocol import L2Protocol
from burrow.client.dilation.reliable import Outbound
from burrow.client.dilation.stream import SubchannelReader, SubchannelWriter
from burrow.client.dilation.subchannel import Mux

log = logging.getLogger(__name__)


class SubchannelIO:
    """Reader/writer pairs by subchannel id, the listeners' queues, and what the stream objects call."""

    # the runtime's, set in Dilation.__init__
    max_record_payload: int
    mux: Mux | None
    outbound: Outbound
    connection: L2Protocol | None  # the selected connection
    counters: dict[str, int]
    _reader_limit: int
    _readers: dict[int, SubchannelReader]
    _writers: dict[int, SubchannelWriter]
    _listeners: dict[str, asyncio.Queue]  # subprotocol -> accepted (reader, writer) pairs
    _paused_readers: set[int]  # readers holding more than twice their limit: the connection does not read
    _writable: asyncio.Event  # writers may write (L4 has room and the socket is below its high-water mark)

    def _make_pair(self, scid: int, subprotocol: str) -> tuple[SubchannelReader, SubchannelWriter]:
        reader = SubchannelReader(self, scid, limit=self._reader_limit)
        writer = SubchannelWriter(self, scid, subprotocol)
        self._readers[scid] = reader
        self._writers[scid] = writer
        return reader, writer

    def _accepted(self, scid: int, subprotocol: str) -> None:
        if scid not in self._readers:
            self._make_pair(scid, subprotocol)
        q = self._listeners.get(subprotocol)
        if q is None:
            return
        if q.full():  # the app is not accepting: refuse rather than buffer without bound
            log.warning("listener for %r has %d unaccepted subchannels; refusing one", subprotocol, q.qsize())
            self.counters["ignored"] += 1
            self._readers[scid].feed_eof()
            self.subchannel_close(scid)
            return
        q.put_nowait((self._readers[scid], self._writers[scid]))

    def _finished(self, scid: int) -> None:
        self._paused_readers.discard(scid)
        w = self._writers.pop(scid, None)
        self._readers.pop(scid, None)
        if w is not None:
            w._finished()
        self._maybe_resume_reading()

    def subchannel_write(self, scid: int, data: bytes) -> None:
        """Queue app bytes as DATA records (L4 keeps them until acknowledged) and send them if connected."""
        step = self.max_record_payload
        if len(data) <= step:
            chunks = [data]
        else:  # views of the (immutable) bytes: L4 keeps them until acknowledged, nothing is copied
            view = memoryview(data)
            chunks = [view[i : i + step] for i in range(0, len(data), step)]
        records = [self.mux.write(scid, chunk) for chunk in chunks]
        p = self.connection
        if p is not None and not p.closed:
            p.write_records(records)
        if self.outbound.full:
            self._writable.clear()

    def subchannel_close(self, scid: int) -> None:
        rec, events = self.mux.close(scid)
        if rec is not None:
            self._send_now(rec)
        for ev in events:
            self._deliver(ev)

    def subchannel_stop_reading(self, scid: int) -> None:
        """writer.close(): the reader gets EOF now; later DATA for it finds no reader and is dropped (still
        acknowledged, so the peer is never stuck)."""
        reader = self._readers.pop(scid, None)
        if reader is not None and not reader._eof:
            reader.feed_eof()
        if scid in self._paused_readers:
            self._paused_readers.discard(scid)
            self._maybe_resume_reading()

    def reader_paused(self, scid: int, paused: bool) -> None:
        if paused:
            if not self._paused_readers and self.connection is not None:
                self.connection.transport.pause_reading()
            self._paused_readers.add(scid)
        else:
            self._paused_readers.discard(scid)
            self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        if not self._paused_readers and self.connection is not None and not self.connection.closed:
            self.connection.transport.resume_reading()

    async def wait_writable(self) -> None:
        # Event.set() wakes every waiting writer; the first one to write may fill the connection again, so
        # each re-checks instead of piling its write on top
        while not self._writable.is_set():
            await self._writable.wait()
