"""SubchannelReader: the bulk fast path and StreamReader's own methods see the same byte stream."""

import asyncio

import pytest

from burrow.client.dilation.stream import SubchannelReader


class FlowLog:
    """The one call a reader makes on the Dilation core: pause/resume the connection for this subchannel."""

    def __init__(self):
        self.calls = []

    def reader_paused(self, scid, paused):
        self.calls.append((scid, paused))


async def test_mixed_reads_return_the_stream_in_order():
    r = SubchannelReader(FlowLog(), 3, limit=1 << 20)
    payload = memoryview(bytearray(b"line one\nline two\n" + bytes(range(256)) * 40 + b"tail"))
    r.feed_data(payload[:5])  # pieces as DATA records deliver them: views and bytes mixed
    r.feed_data(bytes(payload[5:30]))
    r.feed_data(payload[30:])
    r.feed_eof()
    assert await r.readline() == b"line one\n"
    assert await r.read(4) == b"line"
    assert await r.readexactly(5) == b" two\n"
    got = b""
    while chunk := await r.read(1000):
        assert isinstance(chunk, bytes) and len(chunk) <= 1000
        got += chunk
    assert got == bytes(range(256)) * 40 + b"tail"
    assert r.at_eof()


async def test_read_returns_up_to_n_of_what_is_queued_like_streamreader():
    r = SubchannelReader(FlowLog(), 1, limit=1 << 20)
    r.feed_data(b"a" * 10)
    r.feed_data(memoryview(b"b" * 10))
    r.feed_data(b"c" * 10)
    assert await r.read(15) == b"a" * 10 + b"b" * 5  # across payloads, cut inside one
    assert await r.read(3) == b"bbb"
    assert await r.read(100) == b"bb" + b"c" * 10
    assert not r.at_eof()


async def test_waiting_readers_wake_on_data_and_on_eof():
    r = SubchannelReader(FlowLog(), 1, limit=1 << 20)
    pending = asyncio.ensure_future(r.readexactly(6))
    await asyncio.sleep(0)
    r.feed_data(b"abc")
    await asyncio.sleep(0)
    assert not pending.done()
    r.feed_data(memoryview(b"defgh"))
    assert await pending == b"abcdef"
    fast = asyncio.ensure_future(r.read(10))
    assert await fast == b"gh"
    waiting = asyncio.ensure_future(r.read(10))
    await asyncio.sleep(0)
    r.feed_eof()
    assert await waiting == b""
    with pytest.raises(asyncio.IncompleteReadError):
        await r.readexactly(1)


async def test_connection_paused_above_twice_the_limit_and_resumed_when_drained():
    flow = FlowLog()
    r = SubchannelReader(flow, 5, limit=100)
    for _ in range(3):
        r.feed_data(b"x" * 70)  # 210 > 2 * 100 after the third payload
    assert flow.calls == [(5, True)]
    assert await r.read(70) == b"x" * 70  # 140 held: still above the limit
    assert flow.calls == [(5, True)]
    assert await r.read(70) == b"x" * 70  # 70 held
    assert flow.calls == [(5, True), (5, False)]
