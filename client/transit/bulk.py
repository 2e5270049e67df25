"""A file's records over the transit socket in one worker thread, with blocking calls and no copies.

in: a socket (the pipe's, duplicated, with a stall timeout), the pipe's record encoder or decoder (their
nonce counters carry on), an open file, the byte count offered. out: send_file puts the file on the wire
as records; receive_file writes the records' plaintext to the file and returns its SHA-256 (when asked
for) and any bytes read past the last record.

Why a thread with blocking calls rather than the event loop: per record the loop costs a wake-up, a
hand-off to the crypto thread and back, and a copy into the transport's buffer (which asyncio then shifts
after every partial send). Here each byte is read from the file straight into its frame, sealed in place
and sent (sender), or received into one reusable buffer, opened in place, hashed and written from there
(receiver): the same calls, on the same buffers, as the cipher-only stream plus the hash and the file.
"""

from __future__ import annotations

import hashlib
import queue
import socket
import threading
from collections.abc import Callable

from ..errors import TransitError
from .protocol import FRAME_HEADER, RecordDecoder, RecordEncoder

RECV_BUFFER = 1024 * 1024  # bytes per receive buffer; grown to two frames when a peer's records are larger
BUFFERS = 4  # receive buffers in use at once: one filling, the rest waiting to be hashed and written
REPORT_EVERY = 4 * 1024 * 1024  # bytes between progress reports
WRITE_STALL = 120.0  # seconds the receiving thread waits for the writer to free a buffer

Report = Callable[[int], None]


def _quiet(done: int) -> None:
    pass


def send_file(sock: socket.socket, encoder: RecordEncoder, f, size: int, record_size: int,
              report: Report = _quiet) -> None:
    """Read `size` bytes of `f` into records of `record_size` plaintext bytes, seal each in place, send."""
    frame = memoryview(bytearray(FRAME_HEADER + record_size))
    done = reported = 0
    while done < size:
        n = min(record_size, size - done)
        body = frame[FRAME_HEADER:FRAME_HEADER + n]
        got = 0
        while got < n:
            k = f.readinto(body[got:])
            if not k:
                raise TransitError(f"the file ended after {done + got} of {size} bytes (it changed while sending)")
            got += k
        encoder.seal_in_place(frame[:FRAME_HEADER + n])
        try:
            sock.sendall(frame[:FRAME_HEADER + n])
        except OSError as e:  # the socket's errors (timeouts included); the file's propagate as they are
            raise TransitError(f"transit connection lost: {e}") from e
        done += n
        if done - reported >= REPORT_EVERY:
            report(reported := done)
    report(done)


def receive_file(sock: socket.socket, decoder: RecordDecoder, f, size: int, prefix: bytes = b"",
                 report: Report = _quiet, buffer_size: int = RECV_BUFFER, sha256: bool = True) -> tuple[str, bytes]:
    """Receive records until `size` plaintext bytes are written to `f`; return (sha256 hex, bytes past them).

    `prefix` holds bytes already read from the connection. Records of any size up to the decoder's limit
    are accepted, however the reads cut them. This thread receives and opens; a second one hashes and
    writes, buffer by buffer, so the receiver's work spreads over two cores. With `sha256=False` nothing is
    hashed and the digest returned is "".
    """
    sink = _Sink(f, sha256)
    sink.start()
    try:
        rest = _receive(sock, decoder, sink, size, prefix, report, buffer_size)
    finally:
        sink.jobs.put(None)
        sink.join()
    if sink.error is not None:
        raise sink.error
    return (sink.hasher.hexdigest() if sink.hasher else ""), rest


def _receive(sock, decoder: RecordDecoder, sink: _Sink, size: int, prefix: bytes, report: Report,
             buffer_size: int) -> bytes:
    view = sink.buffer(max(buffer_size, len(prefix)))
    view[:len(prefix)] = prefix
    start, end = 0, len(prefix)  # unconsumed bytes are view[start:end]
    opened: list[memoryview] = []  # plaintexts in `view` not yet handed to the sink
    done = reported = 0
    frame = 0  # the longest record seen, with its length field
    while done < size:
        need = 4  # bytes view[start:] must hold before the next record can be opened
        while end - start >= 4:
            length = int.from_bytes(view[start:start + 4], "big")
            decoder.check_length(length)
            need = 4 + length
            if end - start < need:
                break
            plaintext = decoder.open_in_place(view[start + 4:start + need])
            done += len(plaintext)
            if done > size:
                raise TransitError("the sender sent more bytes than it offered")
            opened.append(plaintext)
            frame = max(frame, need)
            start += need
            need = 4
            if done == size:
                break
        if done == size:
            break
        if done - reported >= REPORT_EVERY:
            report(reported := done)
        # No room for the next record: hand this buffer over and go on in another, moving the part of a record
        # already read (nothing, as a rule: see `limit`).
        if len(view) - start < need or (start == end and len(view) - start < frame):
            fresh = sink.buffer(max(buffer_size, 2 * need))
            fresh[:end - start] = view[start:end]
            sink.put(view, opened)
            view, opened, start, end = fresh, [], 0, end - start
        # When another record as long as the longest seen would not fit after this one, read no further than
        # this one's end, so that the next buffer starts at a record's start and nothing is copied.
        limit = start + need if need > 4 and len(view) - start - need < frame else len(view)
        try:
            k = sock.recv_into(view[end:limit])
        except OSError as e:
            raise TransitError(f"transit connection lost: {e}") from e
        if not k:
            raise TransitError(f"the peer closed the transit connection after {done} of {size} bytes")
        end += k
    sink.put(view, opened)
    report(done)
    return bytes(view[start:end])


class _Sink(threading.Thread):
    """Hashes (if asked to) and writes opened records; lends the receiving thread at most BUFFERS buffers at a time."""

    def __init__(self, f, sha256: bool):
        super().__init__(name="burrow-write", daemon=True)
        self.hasher = hashlib.sha256() if sha256 else None
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._f = f
        self._free: queue.Queue[memoryview] = queue.Queue()
        self._lent = 0

    def buffer(self, size: int) -> memoryview:
        if self._lent >= BUFFERS:
            try:
                view = self._free.get(timeout=WRITE_STALL)
            except queue.Empty:
                raise TransitError("writing the file stalled") from None
            if len(view) >= size:
                return view
            self._lent -= 1
        if self.error is not None:
            raise self.error
        self._lent += 1
        return memoryview(bytearray(size))

    def put(self, view: memoryview, opened: list[memoryview]) -> None:
        if self.error is not None:
            raise self.error
        self.jobs.put((view, opened))

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            view, opened = job
            try:
                if self.error is None:
                    for plaintext in opened:
                        if self.hasher:
                            self.hasher.update(plaintext)
                        _write_all(self._f, plaintext)
            except BaseException as e:  # noqa: BLE001 - handed to the receiving thread, which raises it
                self.error = e
            self._free.put(view)


def _write_all(f, data: memoryview) -> None:
    while data:
        data = data[f.write(data):]
