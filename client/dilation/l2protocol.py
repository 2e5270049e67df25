"""asyncio L2: one connection carrying one Attempt (selection.py), read and written through pooled buffers.

in:  bytes from a TCP socket, or from a QUIC stream (quic_path.py); records to seal and write
out: the Attempt's handshake bytes and events to its generation's transport.Connector (Viable, Selected);
     once selected, every record to the runtime (on_records), and the connection's pause, resume and loss
states: handshaking (at most HANDSHAKE_TIMEOUT from connect to KCM) -> selected | lost

transport.py races a generation's attempts; this module is what one connection does with its bytes, the
hot path of a dilated transfer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from typing import TYPE_CHECKING

from .errors import ProtocolError
from .selection import Attempt, Selected, Viable

if TYPE_CHECKING:
    from .transport import Connector

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 30.0  # seconds from TCP connect to KCM
# bytes queued in the asyncio transport before writers pause (they resume at a quarter of it): room for one
# batch of sealed records while the socket drains the last, yet small, as Python 3.11's transport memmoves its
# whole bytearray buffer after every partial send
WRITE_HIGH_WATER = 1024 * 1024
READ_SIZE = 1024 * 1024  # bytes per recv() on a dilation connection
# records sealed into one buffer per transport write: a 1 MiB app write is 16 full DATA records and a small
# tail, and all 17 go out in one send instead of a second send for the tail
SEAL_BATCH = 17
WRITE_SIZE = 1088 * 1024  # a batch of full DATA records fits; a larger batch gets a buffer of its own
SPARE_BUFFERS = 4  # buffers each pool keeps for reuse
# reference counts tell when a buffer is unused only on CPython with the GIL (free-threaded builds defer them)
_REFCOUNTED = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()


class BufferPool:
    """Fixed-size buffers, each reused only once nothing but the pool refers to it (on CPython every memoryview
    family holds one reference to its buffer; elsewhere every take is a new buffer). Records are opened in place
    in receive buffers and their payloads reach subchannel readers as views, and on Python 3.12+ a transport
    may keep a view of the part of a write the socket did not take: both keep their buffer out of reuse.
    Reuse spares a zero-filled allocation per read and per write."""

    def __init__(self, size: int):
        self.size = size
        # The first entry is a sentinel nothing else ever refers to: its count, read in the same loop in the
        # same way, is what an unused buffer shows on this interpreter (versions differ in what they count).
        self._buffers: list[bytearray] = [bytearray()]

    def take(self) -> bytearray:
        if _REFCOUNTED:
            idle = -1
            for buf in self._buffers:
                refs = sys.getrefcount(buf)
                if idle < 0:
                    idle = refs
                elif refs == idle:
                    return buf
        buf = bytearray(self.size)  # every buffer is still in use: a new one (older busy ones leave the pool)
        self._buffers = [self._buffers[0], *self._buffers[1:][-(SPARE_BUFFERS - 1):], buf]
        return buf


class L2Protocol(asyncio.BufferedProtocol):
    """One TCP connection carrying one Attempt; after selection its records go to the runtime.

    Reads land in pooled buffers: the framer hands out views of one and records are opened in place there.
    Writes are sealed into pooled buffers, SEAL_BATCH records per transport write."""

    def __init__(self, connector: Connector, attempt: Attempt):
        self.connector = connector
        self.attempt = attempt
        self.transport: asyncio.Transport | None = None
        self._reads, self._writes = BufferPool(READ_SIZE), BufferPool(WRITE_SIZE)
        self._rbuf: memoryview | None = None
        self.runtime = None  # set when selected
        self.closed = False
        self._timeout: asyncio.TimerHandle | None = None
        self.moved = 0  # bytes read and written (the relay's observed rate, for UpgradePolicy)

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.connector.stopped:  # a late inbound connection for a finished generation
            transport.abort()
            return
        with contextlib.suppress(Exception):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        transport.write(self.attempt.start())
        self._timeout = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT, self.drop)
        self.connector.attempts.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        self._rbuf = memoryview(self._reads.take())
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        view, self._rbuf = self._rbuf, None  # only the views that records keep may hold the buffer now
        self.data_received(view[:nbytes])

    def data_received(self, data) -> None:
        self.moved += len(data)
        try:
            out, events = self.attempt.feed(data)
        except ProtocolError as e:
            log.debug("dropping %s: %s", self.attempt.description, e)
            self.drop()
            return
        if out:
            self.transport.write(out)
        if self.runtime is not None:
            if events:
                self.runtime.on_records(self, events)
            return
        for i, ev in enumerate(events):
            if isinstance(ev, Viable):
                self.connector.viable(self)
            elif isinstance(ev, Selected):
                self.connector.follower_selected(self)
                if self.runtime is not None and events[i + 1 :]:
                    self.runtime.on_records(self, events[i + 1 :])
                return

    def write_records(self, records: list) -> None:
        """Seal records into frames and write them, SEAL_BATCH per buffer: one syscall each when the socket has
        room, and a bounded buffer however large the app's write was."""
        for i in range(0, len(records), SEAL_BATCH):
            sealed = self.attempt.seal(records[i : i + SEAL_BATCH], self._writes.take())
            self.moved += len(sealed)
            self.transport.write(sealed)

    def selected(self, runtime) -> None:
        self.runtime = runtime
        if self._timeout:
            self._timeout.cancel()

    def pause_writing(self) -> None:
        if self.runtime is not None:
            self.runtime.transport_paused(self, True)

    def resume_writing(self) -> None:
        if self.runtime is not None:
            self.runtime.transport_paused(self, False)

    def drop(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._timeout:
            self._timeout.cancel()
        self.attempt.fail()
        self.connector.attempts.discard(self)
        if self.runtime is not None:
            log.info("dilation connection %s lost: %r", self.attempt.description, exc)
            self.runtime.on_connection_lost(self)
        else:
            if not self.connector.stopped and self.connector.winner is None:
                self.connector.failures.append(f"{self.attempt.description.replace('tcp:', '')} (closed)")
            if self.connector.leader:  # one attempt fewer: a waiting candidate may be the choice now
                self.connector._reconsider()
            self.connector.check_no_path()
