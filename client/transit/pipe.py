"""The record pipe over the winning transit connection (asyncio BufferedProtocol, zero-copy reads).

After the handshake the connection's protocol is switched from the StreamReader used for negotiation to
_PipeProtocol: the kernel copies each record straight into its own bytearray (recv_into), frames queue
up to MAX_QUEUED_FRAMES before reading pauses (backpressure to the peer), and writes wait in drain()
while the transport is above its high-water mark.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import struct
from collections.abc import Callable

from ..errors import TransitError
from . import bulk
from . import protocol as P

WRITE_HIGH_WATER = 4 * 1024 * 1024  # bytes queued in the transport before drain() waits
CLOSE_TIMEOUT = 5.0  # seconds to wait for the peer to see our close
STALL_TIMEOUT = 120.0  # seconds a bulk send or receive waits on the socket before giving up
MAX_QUEUED_FRAMES = 16  # received frames waiting for the application before we stop reading


class _PipeProtocol(asyncio.BufferedProtocol):
    def __init__(self, max_record: int):
        self._max = max_record
        self._hdr = bytearray(4)
        self._frame: bytearray | None = None
        self._pos = 0
        self._frames: collections.deque[bytearray] = collections.deque()
        self._error: Exception | None = None
        self._eof = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.transport: asyncio.Transport | None = None
        self._paused = False
        self.closed = asyncio.get_running_loop().create_future()

    # reading
    def get_buffer(self, sizehint: int) -> memoryview:
        target = self._hdr if self._frame is None else self._frame
        return memoryview(target)[self._pos:]

    def buffer_updated(self, nbytes: int) -> None:
        self._pos += nbytes
        if self._frame is None:
            if self._pos == 4:
                length = int.from_bytes(self._hdr, "big")
                if length < 40 or length > self._max:
                    self._fail(TransitError(f"bad record length {length}"))
                    return
                self._frame, self._pos = bytearray(length), 0
        elif self._pos == len(self._frame):
            self._frames.append(self._frame)
            self._frame, self._pos = None, 0
            self._readable.set()
            if len(self._frames) >= MAX_QUEUED_FRAMES and self.transport is not None and not self._paused:
                self._paused = True
                self.transport.pause_reading()

    def feed(self, data: bytes) -> None:
        """Bytes the negotiation reader had already buffered."""
        view = memoryview(data)
        while view and self._error is None:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def take_buffered(self) -> bytes:
        """The bytes read but not yet taken, as they came off the wire (queued records, then a partial one)."""
        parts = []
        for frame in self._frames:
            parts += [len(frame).to_bytes(4, "big"), frame]
        if self._frame is None:
            parts.append(self._hdr[:self._pos])
        else:
            parts += [len(self._frame).to_bytes(4, "big"), self._frame[:self._pos]]
        self._frames.clear()
        self._frame, self._pos, self._paused = None, 0, False
        return b"".join(parts)

    def eof_received(self) -> bool:
        self._eof = True
        self._readable.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None and self._error is None:
            self._error = TransitError(f"transit connection lost: {exc}")
        self._readable.set()
        self._writable.set()
        if not self.closed.done():
            self.closed.set_result(None)

    def _fail(self, error: Exception) -> None:
        self._error = error
        self._readable.set()
        if self.transport is not None:
            self.transport.abort()

    async def next_frame(self) -> bytearray:
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise TransitError("the peer closed the transit connection")
            self._readable.clear()
            await self._readable.wait()
        frame = self._frames.popleft()
        if self._paused and len(self._frames) < MAX_QUEUED_FRAMES // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return frame

    # writing (flow control from the transport)
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        await self._writable.wait()
        if self._error is not None:
            raise self._error
        if self.transport is None or self.transport.is_closing():
            raise TransitError("transit connection lost")


def _set_stall_timeout(sock: socket.socket, seconds: float) -> None:
    """SO_SNDTIMEO and SO_RCVTIMEO: how long one blocking call may wait (0: for ever)."""
    tv = struct.pack("ll", int(seconds), 0)
    with contextlib.suppress(OSError):  # a socket already shut down
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


class RecordPipe:
    """An encrypted, ordered record stream over the winning TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: bytes, role: str,
                 description: str):
        enc, dec = P.record_keys(key, role)
        self._enc, self._dec = P.RecordEncoder(enc), P.RecordDecoder(dec)
        self.description = description
        transport = writer.transport
        self._transport = transport
        self._proto = _PipeProtocol(self._dec.max_record)
        self._proto.transport = transport
        leftover = bytes(reader._buffer)  # bytes after "go" that the negotiation reader already holds
        reader._buffer.clear()
        transport.set_protocol(self._proto)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if leftover:
            self._proto.feed(leftover)
        if reader.at_eof():
            self._proto.eof_received()
        with contextlib.suppress(Exception):
            transport.resume_reading()  # the StreamReader may have paused it

    # The split API (seal/write_frame, read_frame/open_frame) lets a caller run the crypto in a worker
    # thread (libsodium and hashlib release the GIL) while the event loop moves bytes. Frames must be
    # sealed and opened in order, one at a time: the nonces are counters.
    def seal(self, plaintext) -> bytearray:
        return self._enc.encode(plaintext)

    def write_frame(self, frame) -> None:
        if self._transport.is_closing():
            raise TransitError("transit connection lost")
        self._transport.write(frame)

    async def read_frame(self) -> bytearray:
        """The next record's body (nonce || ciphertext), not yet authenticated."""
        return await self._proto.next_frame()

    def open_frame(self, body) -> bytearray:
        return self._dec.decrypt(body)

    def write_record(self, plaintext) -> None:
        """Queue one record; call `await drain()` to respect backpressure."""
        self.write_frame(self._enc.encode(plaintext))

    async def drain(self) -> None:
        await self._proto.drain()

    async def send_record(self, plaintext) -> None:
        self.write_record(plaintext)
        await self.drain()

    async def receive_record(self) -> bytearray:
        return self.open_frame(await self.read_frame())

    # Bulk transfer: a file's records move in one worker thread on a duplicate of the socket, with
    # blocking calls (client/transit/bulk.py), while the event loop neither reads nor writes this connection.
    async def send_file(self, f, size: int, record_size: int, progress: Callable[[int], None]) -> None:
        """Send `size` bytes of the open file `f` as records of `record_size` plaintext bytes."""
        self._transport.set_write_buffer_limits(high=0)  # drain() now waits until nothing is queued
        try:
            await self.drain()
        finally:
            self._transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        await self._in_thread(lambda sock, report: bulk.send_file(sock, self._enc, f, size, record_size, report),
                              progress)

    async def receive_file(self, f, size: int, progress: Callable[[int], None], sha256: bool = True) -> str:
        """Write the next `size` plaintext bytes to the open file `f`; return their SHA-256 (hex; "" when
        `sha256` is false: not computed)."""
        if self._proto._error is not None:
            raise self._proto._error
        self._transport.pause_reading()
        prefix = self._proto.take_buffered()
        try:
            digest, rest = await self._in_thread(
                lambda sock, report: bulk.receive_file(sock, self._dec, f, size, prefix, report, sha256=sha256),
                progress)
        finally:
            with contextlib.suppress(Exception):
                self._transport.resume_reading()
        self._proto.feed(rest)
        return digest

    async def _in_thread(self, work, progress: Callable[[int], None]):
        if self._transport.is_closing():
            raise TransitError("transit connection lost")
        loop = asyncio.get_running_loop()
        sock = self._transport.get_extra_info("socket").dup()
        # Blocking calls cost the kernel less than non-blocking ones with poll() (Python's socket timeouts):
        # the descriptor (shared with the loop's socket) blocks while the thread has it, bounded by the
        # kernel's own send and receive timeouts, and is non-blocking again before the loop uses it.
        _set_stall_timeout(sock, STALL_TIMEOUT)
        sock.setblocking(True)

        def report(done: int) -> None:
            loop.call_soon_threadsafe(progress, done)

        job = asyncio.ensure_future(asyncio.to_thread(work, sock, report))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's blocked call
            await asyncio.gather(job, return_exceptions=True)
            raise
        finally:
            sock.setblocking(False)
            _set_stall_timeout(sock, 0)
            sock.close()

    async def close(self) -> None:
        """Flush what is queued, close, and wait (up to CLOSE_TIMEOUT) for the connection to end."""
        self._transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._proto.closed), CLOSE_TIMEOUT)
