"""Bulk record streaming (client/transit/bulk.py) over a real socket pair, and through RecordPipe."""

import asyncio
import contextlib
import errno
import hashlib
import io
import os
import socket
import threading

import pytest

from burrow.client.errors import TransitError
from burrow.client.transit import bulk
from burrow.client.transit.aio import Transit
from burrow.client.transit.protocol import RecordDecoder, RecordEncoder, TransitProtocolError

pytestmark = pytest.mark.timeout(60)
KEY = bytes(range(32))


def records(data: bytes, record_size: int) -> bytes:
    """What any sender puts on the wire: the records of `data`, framed."""
    enc = RecordEncoder(KEY)
    return b"".join(bytes(enc.encode(data[i:i + record_size])) for i in range(0, len(data), record_size))


def receive(wire: bytes, size: int, *, piece: int | None = None, prefix_len: int = 0, buffer_size=bulk.RECV_BUFFER):
    """Receive `wire` (after its first prefix_len bytes, given as the prefix), written `piece` bytes at a time."""
    a, b = socket.socketpair()
    b.settimeout(10)
    step = piece or len(wire) or 1

    def write():
        with a:
            for i in range(prefix_len, len(wire), step):
                a.sendall(wire[i:i + step])

    writer = threading.Thread(target=write)
    writer.start()
    out, seen = io.BytesIO(), []
    try:
        digest, rest = bulk.receive_file(b, RecordDecoder(KEY), out, size, wire[:prefix_len], seen.append,
                                         buffer_size)
    finally:
        b.close()
        writer.join()
    return out.getvalue(), digest, rest, seen


@pytest.mark.parametrize("size", [0, 1, 1000, 256 * 1024, 3 * 256 * 1024 + 5])
def test_send_file_then_receive_file(size):
    data = os.urandom(size)
    a, b = socket.socketpair()
    a.settimeout(10)
    sent = []
    sender = threading.Thread(target=bulk.send_file, args=(a, RecordEncoder(KEY), io.BytesIO(data), size, 256 * 1024,
                                                             sent.append))
    sender.start()
    b.settimeout(10)
    out = io.BytesIO()
    digest, rest = bulk.receive_file(b, RecordDecoder(KEY), out, size)
    sender.join()
    a.close()
    b.close()
    assert out.getvalue() == data and digest == hashlib.sha256(data).hexdigest() and rest == b""
    assert sent[-1] == size


@pytest.mark.parametrize("record_size", [16 * 1024, 64 * 1024, 1000])  # magic-wormhole 0.24, larger, odd
def test_records_of_other_senders_split_across_reads(record_size):
    data = os.urandom(200_000)
    got, digest, _, seen = receive(records(data, record_size), len(data), piece=4099, buffer_size=10_000)
    assert got == data and digest == hashlib.sha256(data).hexdigest() and seen[-1] == len(data)


def test_record_larger_than_the_buffer_grows_it():
    data = os.urandom(300_000)
    got, _, _, _ = receive(records(data, 100_000), len(data), buffer_size=4096)
    assert got == data


def test_bytes_already_read_and_bytes_past_the_last_record():
    data = os.urandom(50_000)
    wire = records(data, 7000) + b"\x00\x00\x00\x2cnext"
    got, _, rest, _ = receive(wire, len(data), prefix_len=7010)  # a record and a half already read
    assert got == data and rest == b"\x00\x00\x00\x2cnext"


def test_corrupted_record_is_a_clear_error():
    wire = bytearray(records(os.urandom(20_000), 5000))
    wire[3 * (4 + 40 + 5000) - 1] ^= 1  # last byte of the third record
    with pytest.raises(TransitProtocolError, match="failed to authenticate"):
        receive(bytes(wire), 20_000)


def test_replayed_record_is_refused():
    wire = records(os.urandom(10_000), 5000)
    first = wire[:4 + 40 + 5000]
    with pytest.raises(TransitProtocolError, match="bad record nonce"):
        receive(first + first, 10_000)


@pytest.mark.parametrize("length", [39, 64 * 1024 * 1024 + 1])
def test_bad_record_length_is_refused(length):
    with pytest.raises(TransitProtocolError, match=f"bad record length {length}"):
        receive(length.to_bytes(4, "big") + bytes(100), 1000)


def test_more_than_offered_is_refused():
    with pytest.raises(TransitError, match="more bytes than it offered"):
        receive(records(os.urandom(10_000), 6000), 8000)


def test_peer_closing_early_is_an_error():
    wire = records(os.urandom(10_000), 4000)
    with pytest.raises(TransitError, match="closed the transit connection after 8000 of 10000"):
        receive(wire[:-10], 10_000)


def test_full_disk_stops_the_receiver_with_the_write_error():
    a, b = socket.socketpair()
    b.settimeout(10)
    wire = records(os.urandom(3_000_000), 256 * 1024)
    writer = threading.Thread(target=_send_until_closed, args=(a, wire))
    writer.start()
    try:
        with open("/dev/full", "wb", buffering=0) as full, pytest.raises(OSError) as e:
            bulk.receive_file(b, RecordDecoder(KEY), full, 3_000_000, buffer_size=300_000)
        assert e.value.errno == errno.ENOSPC
    finally:
        b.close()
        writer.join()
        a.close()


def _send_until_closed(s: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        s.sendall(data)


def test_stalled_peer_is_an_error():
    a, b = socket.socketpair()
    b.settimeout(0.2)
    with a, b, pytest.raises(TransitError, match="transit connection lost: timed out"):
        bulk.receive_file(b, RecordDecoder(KEY), io.BytesIO(), 10)


def test_file_shorter_than_offered_is_an_error():
    a, b = socket.socketpair()
    with a, b, pytest.raises(TransitError, match="ended after 10 of 20 bytes"):
        bulk.send_file(a, RecordEncoder(KEY), io.BytesIO(bytes(10)), 20, 8)


async def test_pipe_receive_file_takes_over_records_already_queued(tmp_path):
    """Records the event loop already read (and one it is halfway through) are not lost to the thread."""
    ps, pr = await pipes()
    data = os.urandom(600_000)
    frames = b"".join(bytes(ps.seal(data[i:i + 100_000])) for i in range(0, 400_000, 100_000))
    half = len(frames) - 50_000
    ps.write_frame(frames[:half])  # three records and half of the fourth, read by the event loop
    for _ in range(1000):
        if len(pr._proto._frames) == 3 and pr._proto._pos > 0:
            break
        await asyncio.sleep(0.01)
    assert len(pr._proto._frames) == 3 and pr._proto._pos > 0
    src = tmp_path / "src"
    src.write_bytes(data[400_000:])
    out = tmp_path / "out"
    with open(src, "rb") as fs, open(out, "wb") as fr:
        receiving = asyncio.ensure_future(pr.receive_file(fr, len(data), lambda n: None))
        await asyncio.sleep(0.1)  # the thread has the socket now; the rest of the fourth record is its to read
        ps.write_frame(frames[half:])
        await ps.send_file(fs, 200_000, 64 * 1024, lambda n: None)
        digest = await receiving
    assert out.read_bytes() == data and digest == hashlib.sha256(data).hexdigest()
    for p in (ps, pr):  # the threads' blocking calls are over: the loop's socket is non-blocking again
        assert not os.get_blocking(p._transport.get_extra_info("socket").fileno())
    await pr.send_record(b"ack")  # the pipe still works both ways afterwards
    assert await ps.receive_record() == b"ack"
    await ps.close()
    await pr.close()


async def pipes():
    """A direct sender/receiver RecordPipe pair on 127.0.0.1."""
    s, r = Transit("sender"), Transit("receiver")
    hs, hr = await s.get_hints(), await r.get_hints()
    s.add_peer_hints(hr)
    r.add_peer_hints(hs)
    s.set_key(KEY)
    r.set_key(KEY)
    try:
        return await asyncio.gather(s.connect(20), r.connect(20))
    finally:
        await s.close()
        await r.close()


async def test_cancelled_receive_stops_its_thread(tmp_path):
    ps, pr = await pipes()
    with open(tmp_path / "out", "wb") as fr:
        receiving = asyncio.ensure_future(pr.receive_file(fr, 10_000_000, lambda n: None))
        await ps.send_record(bytes(1000))
        await asyncio.sleep(0.2)
        receiving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(receiving, 10)  # returns only once the worker thread has stopped
    assert not [t for t in threading.enumerate() if t.name == "burrow-write"]
    await ps.close()
    await pr.close()


async def test_receiver_gone_mid_file_is_a_transit_error(tmp_path):
    ps, pr = await pipes()
    src = tmp_path / "src"
    src.write_bytes(bytes(64 * 1024 * 1024))
    await pr.close()
    with open(src, "rb") as fs, pytest.raises(TransitError, match="transit connection lost"):
        await ps.send_file(fs, 64 * 1024 * 1024, 256 * 1024, lambda n: None)
    await ps.close()


def test_receive_without_sha256_writes_the_same_bytes_and_no_digest():
    """Records of changing sizes (the longest first, then shorter, then longer again) across small buffers:
    the reads that stop at a buffer's last record must not lose or reorder a byte."""
    enc, sizes = RecordEncoder(KEY), [50_000, 1000, 7, 30_000, 90_000, 3, 60_000] * 5
    data = os.urandom(sum(sizes))
    wire, at = b"", 0
    for n in sizes:
        wire += bytes(enc.encode(data[at:at + n]))
        at += n
    a, b = socket.socketpair()
    b.settimeout(10)
    writer = threading.Thread(target=lambda: (a.sendall(wire), a.close()))
    writer.start()
    out = io.BytesIO()
    try:
        digest, rest = bulk.receive_file(b, RecordDecoder(KEY), out, len(data), buffer_size=100_000, sha256=False)
    finally:
        b.close()
        writer.join()
    assert out.getvalue() == data and digest == "" and rest == b""
