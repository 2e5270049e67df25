"""Pump threads (--splice-threads): which pairs get them and when, and that every way a pair ends stops them."""

import asyncio
import hashlib
import os
import threading

from tests.transit_relay.conftest import TOKEN, hs, read_events, wait_for
from tests.transit_relay.test_server import OTHER, paired


def pump_threads() -> int:
    return sum(t.name == "transit-pump" for t in threading.enumerate())


async def relayed(w, r, size: int) -> None:
    payload = os.urandom(size)
    w.write(payload)
    got = await r.readexactly(size)
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()


async def test_a_pair_gets_pump_threads_once_it_has_moved_enough(make_server):
    srv = await make_server(splice_threads_after=8 << 20)
    before = pump_threads()
    (r1, w1), (r2, w2) = await paired(srv)
    await relayed(w1, r2, 3_000_000)  # a short transfer stays on the event loop
    await relayed(w2, r1, 1000)
    assert srv.threaded_pairs == 0 and pump_threads() == before
    await relayed(w1, r2, 12_000_000)  # past the threshold: both directions move to threads mid-stream
    assert srv.threaded_pairs == 1 and pump_threads() - before == 2
    await relayed(w2, r1, 1000)
    await relayed(w1, r2, 1000)
    w1.close()
    w2.close()
    await wait_for(lambda: not srv.relay.pairs and pump_threads() == before)
    assert srv.threaded_pairs == 0
    (line,) = read_events(srv.config.event_log)
    assert (line["bytes_from_first"], line["bytes_from_second"]) == (15_001_000, 2000)


async def test_pairs_beyond_the_limit_are_moved_from_the_event_loop(make_server):
    srv = await make_server(splice_threads=1, splice_threads_after=0)
    before = pump_threads()
    (r1, w1), (r2, w2) = await paired(srv, token=TOKEN)
    (r3, w3), (r4, w4) = await paired(srv, token=OTHER)
    await relayed(w1, r2, 2_000_000)
    await relayed(w3, r4, 2_000_000)
    assert srv.threaded_pairs == 1
    assert pump_threads() - before == 2  # one per direction of the first pair only
    for w in (w1, w2, w3, w4):
        w.close()
    await wait_for(lambda: not srv.relay.pairs)
    assert srv.threaded_pairs == 0
    await wait_for(lambda: pump_threads() == before)
    (r5, w5), (r6, w6) = await paired(srv, token=TOKEN)  # the freed slot is used again
    await relayed(w5, r6, 5)
    assert srv.threaded_pairs == 1
    w5.close()
    w6.close()
    await wait_for(lambda: srv.threaded_pairs == 0)


async def test_stopping_the_server_ends_a_busy_threaded_pair_and_logs_it(make_server):
    srv = await make_server(splice_threads_after=0)
    before = pump_threads()
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(os.urandom(8 << 20))  # more than the socket buffers hold: a pump blocks writing to B
    await r2.readexactly(1 << 20)
    assert srv.threaded_pairs == 1
    await srv.stop()
    assert not srv.forwarders and srv.threaded_pairs == 0
    assert pump_threads() == before
    (line,) = read_events(srv.config.event_log)
    assert line["mood"] == "happy" and line["bytes_from_first"] >= 1 << 20
    rest = await asyncio.wait_for(r2.read(), 5)  # B's connection ends (A's may fail its pending write)
    assert (1 << 20) + len(rest) == line["bytes_from_first"]
    w1.close()
    w2.close()


async def test_both_replicas_of_a_hop_move_the_pair_by_pump_threads(cluster):
    from tests.transit_relay.test_cluster import both_ways, sessions, tcp_side, token

    r0, r1 = await cluster(2, splice_threads_after=0)
    for n in range(3):
        a_r, a_w = await tcp_side(r0, hs(b"a", token(n)))
        await wait_for(lambda n=n: token(n) in r0.relay.by_token)
        await asyncio.sleep(0.02)  # the claim is in Redis
        b_r, b_w = await tcp_side(r1, hs(b"b", token(n)))
        for r in (a_r, b_r):
            assert await asyncio.wait_for(r.readexactly(3), 10) == b"ok\n"
        a_w.write(b"x")
        assert await asyncio.wait_for(b_r.readexactly(1), 10) == b"x"
        assert r0.threaded_pairs == 1 and r1.threaded_pairs == 1  # client<->hop on each replica
        await both_ways(a_r, a_w, b_r, b_w, n)  # half-close crosses both replicas' pump threads
        await wait_for(lambda: r0.threaded_pairs == 0 and r1.threaded_pairs == 0)
    await wait_for(lambda: len(sessions(r0)) == 3)
    assert sessions(r1) == []
    assert all(e["mood"] == "happy" and e["total_bytes"] >= 500_001 for e in sessions(r0))
