"""Pump threads (--splice-threads): which pairs get them, and that every way a pair ends stops them."""

import asyncio
import hashlib
import os
import threading

from tests.transit_relay.conftest import TOKEN, read_events, wait_for
from tests.transit_relay.test_server import OTHER, paired


def pump_threads() -> int:
    return sum(t.name == "transit-pump" for t in threading.enumerate())


async def test_pairs_beyond_the_limit_are_moved_from_the_event_loop(make_server):
    srv = await make_server(splice_threads=1)
    before = pump_threads()
    (r1, w1), (r2, w2) = await paired(srv, token=TOKEN)
    (r3, w3), (r4, w4) = await paired(srv, token=OTHER)
    assert srv.threaded_pairs == 1
    assert pump_threads() - before == 2  # one per direction of the first pair only
    payload = os.urandom(2_000_000)
    for w, r in ((w1, r2), (w3, r4)):
        w.write(payload)
        got = await r.readexactly(len(payload))
        assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    for w in (w1, w2, w3, w4):
        w.close()
    await wait_for(lambda: not srv.relay.pairs)
    assert srv.threaded_pairs == 0
    await wait_for(lambda: pump_threads() == before)
    (r5, w5), (r6, w6) = await paired(srv, token=TOKEN)  # the freed slot is used again
    assert srv.threaded_pairs == 1
    w5.write(b"again")
    assert await r6.readexactly(5) == b"again"
    w5.close()
    w6.close()
    await wait_for(lambda: srv.threaded_pairs == 0)


async def test_stopping_the_server_ends_a_busy_threaded_pair_and_logs_it(make_server):
    srv = await make_server()
    before = pump_threads()
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(os.urandom(8 << 20))  # more than the socket buffers hold: a pump blocks writing to B
    await r2.readexactly(1 << 20)
    await srv.stop()
    assert not srv.forwarders and srv.threaded_pairs == 0
    assert pump_threads() == before
    (line,) = read_events(srv.config.event_log)
    assert line["mood"] == "happy" and line["bytes_from_first"] >= 1 << 20
    assert await asyncio.wait_for(r1.read(), 5) == b""
    w1.close()
    w2.close()
