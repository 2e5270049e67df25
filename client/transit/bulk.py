"""A file's records over the transit socket in one worker thread, with blocking calls and no copies.

in: a socket (the pipe's, duplicated, with a stall timeout), the pipe's record encoder or decoder (their
nonce counters carry on), an open file, the byte count offered. out: send_file puts the file on the wire
as records; receive_file writes the records' plaintext to the file and returns its SHA-256 and any bytes
read past the last record.

Why a thread with blocking calls rather than the event loop: per record the loop costs a wake-up, a
hand-off to the crypto thread and back, and a copy into the transport's buffer (which asyncio then shifts
after every partial send). Here each byte is read from the file straight into its frame, sealed in place
and sent (sender), or received into one reusable buffer, opened in place, hashed and written from there
(receiver): the same calls, on the same buffers, as the cipher-only stream plus the hash and the file.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable

from ..errors import TransitError
from .protocol import FRAME_HEADER, RecordDecoder, RecordEncoder

RECV_BUFFER = 1024 * 1024  # bytes per receive buffer; grown to two frames when a peer's records are larger
REPORT_EVERY = 4 * 1024 * 1024  # bytes between progress reports

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
        sock.sendall(frame[:FRAME_HEADER + n])
        done += n
        if done - reported >= REPORT_EVERY:
            report(reported := done)
    report(done)


def receive_file(sock: socket.socket, decoder: RecordDecoder, f, size: int, prefix: bytes = b"",
                 report: Report = _quiet, buffer_size: int = RECV_BUFFER) -> tuple[str, bytes]:
    """Receive records until `size` plaintext bytes are written to `f`; return (sha256 hex, bytes past them).

    `prefix` holds bytes already read from the connection. Records of any size up to the decoder's limit
    are accepted, however the reads cut them.
    """
    hasher = hashlib.sha256()
    buf = bytearray(max(buffer_size, len(prefix)))
    view = memoryview(buf)
    view[:len(prefix)] = prefix
    start, end = 0, len(prefix)  # unconsumed bytes are buf[start:end]
    done = reported = 0
    while done < size:
        need = 4  # bytes buf[start:] must hold before the next record can be opened
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
            hasher.update(plaintext)
            _write_all(f, plaintext)
            start += need
            need = 4
            if done == size:
                break
        if done == size:
            break
        if done - reported >= REPORT_EVERY:
            report(reported := done)
        if len(buf) - start < need:  # the next record does not fit after `start`: move it to the front
            if need > len(buf):
                grown = bytearray(max(2 * need, len(buf)))
                grown[:end - start] = view[start:end]
                buf, view = grown, memoryview(grown)
            else:
                view[:end - start] = view[start:end]
            start, end = 0, end - start
        k = sock.recv_into(view[end:])
        if not k:
            raise TransitError(f"the peer closed the transit connection after {done} of {size} bytes")
        end += k
    report(done)
    return hasher.hexdigest(), bytes(view[start:end])


def _write_all(f, data: memoryview) -> None:
    while data:
        data = data[f.write(data):]
