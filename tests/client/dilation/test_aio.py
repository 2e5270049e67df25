"""burrow <-> burrow Dilation through a real mailbox and transit relay on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from burrow.client.dilation.aio import DILATION_VERSIONS, dilate
from burrow.client.dilation.errors import (
    DilationError,
    DilationTimeout,
    OldPeerCannotDilate,
    SubchannelClosed,
)
from burrow.client.wormhole import Wormhole
from harness.dilation import CuttingProxy, send_blob, sink_blob

pytestmark = pytest.mark.timeout(120)


async def pair(wormhole_servers, *, listen=True, transit=None, sides=(None, None), **kw):
    transit = transit or wormhole_servers.transit_helper
    a = Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True)
    b = Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True)
    await a.open()
    await b.open()
    a.allocate_code()
    b.set_code(await a.get_code())
    statuses = ([], [])
    da, db = await asyncio.gather(*(
        w.dilate(listen=listen, listen_addresses=["127.0.0.1"], side=side, on_status=st.append, **kw)
        for w, side, st in zip((a, b), sides, statuses, strict=True)))
    await asyncio.wait_for(asyncio.gather(da.when_connected(), db.when_connected()), 30)
    if listen:  # the relay may carry the first bytes (relay-first); the tests start once the direct path took over
        async with asyncio.timeout(30):
            while not all((d.status.path or "").startswith("direct") for d in (da, db)):
                await asyncio.sleep(0.02)

    async def close():
        await asyncio.gather(da.close(), db.close())
        await asyncio.gather(a.close(), b.close(), return_exceptions=True)

    return da, db, statuses, close


@pytest.mark.parametrize("listen", [True, False], ids=["direct", "relay-only"])
async def test_bulk_both_directions_and_status(wormhole_servers, listen):
    da, db, (sa, sb), close = await pair(wormhole_servers, listen=listen, sides=("f" * 16, "0" * 16))
    assert da.leader is True and db.leader is False
    la, lb = da.listen("blob"), db.listen("blob")

    async def accept_and_sink(listener):
        r, w = await listener.accept()
        return await sink_blob(r, w)

    (r1, w1), (r2, w2) = await asyncio.gather(da.open("blob"), db.open("blob"))
    assert w1.scid % 2 == 1 and w2.scid % 2 == 0  # Leader odd, Follower even
    results = await asyncio.gather(send_blob(r1, w1, 20_000_000), send_blob(r2, w2, 20_000_000),
                                   accept_and_sink(la), accept_and_sink(lb))
    (mine1, ans1), (mine2, ans2) = results[0], results[1]
    assert mine1 == ans1 and mine2 == ans2
    states = [s.state for s in sa]
    assert states[:3] == ["wanting", "connecting", "connected"]
    paths = [s.path for s in sa if s.state == "connected"]
    assert paths[-1].startswith("direct" if listen else "relay")  # direct at once, or relay first, then direct
    await close()
    assert sa[-1].state == "stopped"


async def test_eight_parallel_subchannels_and_close_semantics(wormhole_servers):
    da, db, _, close = await pair(wormhole_servers)
    listener = db.listen("many")
    payloads = [os.urandom(300_000 + i) for i in range(8)]

    async def sender(p):
        r, w = await da.open("many")
        w.write(p)
        await w.drain()
        w.write_eof()
        with pytest.raises(SubchannelClosed):
            w.write(b"after close")
        reply = await r.read()  # the peer writes after our half-close, then closes
        await w.wait_closed()
        return reply

    async def receiver():
        r, w = await listener.accept()
        data = await r.read()  # EOF arrives only after every byte written before close
        w.write(hashlib.sha256(data).digest())
        w.close()
        return data

    replies, got = await asyncio.gather(asyncio.gather(*(sender(p) for p in payloads)),
                                        asyncio.gather(*(receiver() for _ in payloads)))
    assert sorted(got) == sorted(payloads)
    assert sorted(replies) == sorted(hashlib.sha256(p).digest() for p in payloads)
    assert not da.mux.channels and not db.mux.channels
    await close()


async def test_bulk_subchannels_take_turns(wormhole_servers):
    # Writers that never have to wait (the connection has room) still take turns: when the first of four bulk
    # subchannels has delivered everything, each other one has delivered at least half of its data. Before
    # drain() yielded, the first ran to completion while the others sat at their first megabyte.
    da, db, _, close = await pair(wormhole_servers, listen=False)
    listener = db.listen("bulk")
    size, block = 32 << 20, os.urandom(1 << 20)
    delivered: dict[int, int] = {}
    when_first_done: list[dict[int, int]] = []

    async def sender():
        _, w = await da.open("bulk")
        for _ in range(size // len(block)):
            w.write(block)
            await w.drain()
        w.close()

    async def receiver():
        r, w = await listener.accept()
        scid = w.get_extra_info("scid")
        delivered[scid] = 0
        while chunk := await r.read(1 << 20):
            delivered[scid] += len(chunk)
        if not when_first_done:
            when_first_done.append(dict(delivered))
        w.close()

    await asyncio.gather(*(sender() for _ in range(4)), *(receiver() for _ in range(4)))
    assert sorted(delivered.values()) == [size] * 4
    snapshot = when_first_done[0]
    assert len(snapshot) == 4 and min(snapshot.values()) >= size // 2, snapshot
    await close()


async def test_acks_are_cumulative_and_pending_ones_go_out_on_close(wormhole_servers):
    # The delay is out of reach, so only bytes trigger an ACK: at most one per 2 MiB delivered.
    da, db, _, close = await pair(wormhole_servers, listen=False, ack_every_bytes=2 * 1024 * 1024, ack_delay=3600.0)
    listener = db.listen("acks")

    async def sink():
        r, w = await listener.accept()
        return await sink_blob(r, w)

    size = 24 * 1024 * 1024 + 1000
    (mine, answer), (got, digest) = await asyncio.gather(
        send_blob(*await da.open("acks"), size), sink())
    assert got == size and mine == answer == digest
    assert 1 <= db.counters["acks_out"] <= size // (2 * 1024 * 1024)  # once per read, it was 24 or more
    assert len(da.outbound) > 0  # the tail is delivered but waits for its ACK
    await close()  # while each side waits in flush(), it sends its own pending ACKs
    assert len(da.outbound) == 0 and len(db.outbound) == 0


async def test_open_before_listen_is_queued_and_slow_reader_pauses_connection(wormhole_servers):
    da, db, _, close = await pair(wormhole_servers, reader_limit=64 * 1024, max_unacked_bytes=1 << 20)
    r, w = await da.open("late")
    data = os.urandom(8 << 20)
    w.write(data)
    w.write_eof()
    await asyncio.sleep(0.3)
    listener = db.listen("late")  # the OPEN waited for us
    rr, ww = await listener.accept()
    # the unread reader pauses the connection, so the sender's window fills up and stays bounded
    for _ in range(400):
        if db._paused_readers and da.outbound.full:
            break
        await asyncio.sleep(0.05)
    assert db._paused_readers and da.outbound.full
    # bounded: twice the limit, plus what one socket read (1 MiB) and one split record can carry
    assert len(rr._buffer) <= 2 * 64 * 1024 + 1024 * 1024 + 256 * 1024
    got = bytearray()
    while chunk := await rr.read(100_000):
        got += chunk
        await asyncio.sleep(0)
    assert bytes(got) == data
    ww.close()
    await w.wait_closed()
    await close()


@pytest.mark.slow
async def test_200mb_relay_with_connection_cut_every_2s(wormhole_servers):
    proxy = CuttingProxy(wormhole_servers.transit_port, cut_after=2.0, max_rate=50e6)  # >= 4 s: >= 2 cuts
    await proxy.start()
    da, db, (sa, _), close = await pair(wormhole_servers, listen=False, transit=proxy.location, ping_interval=5.0)
    listener = db.listen("bulk")
    r, w = await da.open("bulk")

    async def accept():
        rr, ww = await listener.accept()
        return await sink_blob(rr, ww)

    (mine, answered), (n, digest) = await asyncio.wait_for(
        asyncio.gather(send_blob(r, w, 200_000_000), accept()), 100)
    assert n == 200_000_000 and mine == answered == digest
    assert proxy.cuts >= 1
    assert sum(1 for s in sa if s.state == "connected") >= 2  # it really reconnected
    assert da.counters["resent"] + db.counters["resent"] > 0  # and re-sent what was not acknowledged
    await close()
    await proxy.stop()


async def test_seed_version_1_between_burrow_clients(wormhole_servers):
    """Offered second: used only when the peer lists just "1". Names are not on the wire in "1", so the
    acceptor listens for the empty subprotocol; the Follower sends unprovoked PONGs."""
    a = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, dilation=True,
                 versions_extra={"can-dilate": ["1"]})  # a narrower offer: dilate() negotiates just that
    b = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, dilation=True)
    await a.open()
    await b.open()
    a.allocate_code()
    b.set_code(await a.get_code())
    da, db = await asyncio.gather(dilate(a, listen_addresses=["127.0.0.1"], ping_interval=0.2),
                                  dilate(b, listen_addresses=["127.0.0.1"], ping_interval=0.2))
    await asyncio.gather(da.when_connected(), db.when_connected())
    assert da.codec.version == db.codec.version == "1"
    listener = db.listen("")
    r, w = await da.open("named-but-not-sent")
    w.write(b"over version 1")
    w.write_eof()
    rr, ww = await listener.accept()
    assert await rr.read() == b"over version 1"
    ww.close()
    await w.wait_closed()
    await asyncio.sleep(0.5)  # a few keepalive intervals: PINGs from the Leader, PONGs from the Follower
    assert da.connection is not None and db.connection is not None  # nobody declared the link dead
    await asyncio.gather(da.close(), db.close())
    await asyncio.gather(a.close(), b.close(), return_exceptions=True)


async def test_leader_keepalive_detects_a_silent_connection(wormhole_servers):
    from harness.dilation import FreezingProxy

    proxy = FreezingProxy(wormhole_servers.transit_port)
    await proxy.start()
    try:
        da, db, (sa, sb), close = await pair(wormhole_servers, listen=False, transit=proxy.location,
                                             sides=("f" * 16, "0" * 16), ping_interval=0.3)
        listener = db.listen("chat")
        r, w = await da.open("chat")
        w.write(b"before")
        rr, ww = await listener.accept()
        assert await rr.readexactly(6) == b"before"
        proxy.freeze()  # no FIN, no RST: only the missing PONGs tell
        w.write(b"during")
        assert await asyncio.wait_for(rr.readexactly(6), 20) == b"during"  # re-sent on the new connection
        assert [s.state for s in sa].count("connected") >= 2
        assert "reconnecting" in [s.state for s in sb]
        w.close()
        ww.close()
        await close()
    finally:
        await proxy.stop()


async def test_one_opt_in_dilation_true_equals_the_versions_fields(wormhole_servers):
    plain = Wormhole(wormhole_servers.relay_url)
    offered = Wormhole(wormhole_servers.relay_url, dilation=True)
    spelled = Wormhole(wormhole_servers.relay_url, versions_extra=DILATION_VERSIONS)
    assert "can-dilate" not in plain.our_versions
    assert offered.our_versions == spelled.our_versions
    assert offered.our_versions["can-dilate"] == DILATION_VERSIONS["can-dilate"]
    with pytest.raises(DilationError, match="dilation=True"):  # at once: nothing was sent or awaited
        await plain.dilate()
    with pytest.raises(DilationError, match="differs"):
        await offered.dilate(versions=("1",))


async def test_dilate_timeout_and_a_peer_that_cannot_dilate(wormhole_servers):
    a = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, dilation=True)
    await a.open()
    a.allocate_code()
    code = await a.get_code()
    with pytest.raises(DilationTimeout, match="within 0.3 s") as caught:  # nobody holds the other end yet
        await a.dilate(timeout=0.3)
    assert isinstance(caught.value, TimeoutError)
    b = Wormhole(wormhole_servers.relay_url)  # offers no Dilation
    await b.open()
    b.set_code(code)
    with pytest.raises(OldPeerCannotDilate):
        await a.dilate(timeout=30)
    await asyncio.gather(a.close(), b.close(), return_exceptions=True)


async def test_close_closes_both_directions_write_eof_only_ours(wormhole_servers):
    da, db, _, close = await pair(wormhole_servers)
    listener = db.listen("req")

    # write_eof(): a half-close, as asyncio's StreamWriter: we still read the answer
    r1, w1 = await da.open("req")
    w1.write(b"question")
    w1.write_eof()
    assert w1.is_closing()
    rr1, ww1 = await listener.accept()
    assert await rr1.read() == b"question"
    ww1.write(b"answer")
    ww1.write_eof()
    assert await r1.read() == b"answer"
    await asyncio.wait_for(w1.wait_closed(), 10)

    # close(): both directions, as asyncio's StreamWriter: our reader ends at once, later data is dropped
    r2, w2 = await da.open("req")
    w2.write(b"bye")
    w2.close()
    assert await asyncio.wait_for(r2.read(), 1) == b""
    with pytest.raises(SubchannelClosed):
        w2.write(b"after close")
    rr2, ww2 = await listener.accept()
    assert await rr2.read() == b"bye"  # the peer sees EOF after what we wrote
    ww2.write(b"too late" * 100_000)  # the peer may still write; it is acknowledged and dropped
    await ww2.drain()
    ww2.close()
    await asyncio.wait_for(w2.wait_closed(), 10)
    assert r2.at_eof()
    assert await da.flush(10) and await db.flush(10)  # nothing stuck unacknowledged
    assert not da.mux.channels and not db.mux.channels
    await close()


@pytest.mark.parametrize("listen", [True, False], ids=["direct", "relay-only"])
async def test_peer_close_is_stopped_not_reconnecting(wormhole_servers, listen):
    da, db, (_sa, sb), close = await pair(wormhole_servers, listen=listen)
    listener = db.listen("x")
    r, w = await da.open("x")
    w.write(b"before")
    rr, ww = await listener.accept()
    assert await rr.readexactly(6) == b"before"
    seen, connections = len(sb), db.counters["connections"]
    await da.close()
    await asyncio.wait_for(db.when_stopped(), 10)
    assert [s.state for s in sb[seen:]] == ["stopped"]  # the peer left for good: no "reconnecting" first
    assert await asyncio.wait_for(rr.read(), 5) == b""  # its subchannels end
    with pytest.raises(SubchannelClosed):
        ww.write(b"to nobody")
    await asyncio.wait_for(ww.wait_closed(), 5)
    await asyncio.sleep(0.5)  # nothing reconnects behind our back
    await db.close()
    assert [s.state for s in sb[seen:]] == ["stopped"]
    assert db.counters["connections"] == connections
    await close()


async def test_no_path_events_mirror_each_other_when_nothing_can_connect(wormhole_servers):
    """A dead relay and no listeners: each side reports `no-path` with what it tried and its hint counts, the two
    reports mirror each other (what one sent, the other saw), and Dilation itself keeps its state."""
    from harness.ports import free_port

    dead = f"tcp:127.0.0.1:{free_port()}"
    a = Wormhole(wormhole_servers.relay_url, transit_helper=dead, dilation=True)
    b = Wormhole(wormhole_servers.relay_url, transit_helper=dead, dilation=True)
    await a.open()
    await b.open()
    try:
        a.allocate_code()
        b.set_code(await a.get_code())
        seen: tuple[list, list] = ([], [])
        da, db = await asyncio.gather(*(w.dilate(listen=False, on_status=st.append) for w, st in zip((a, b), seen,
                                                                                                     strict=True)))

        def mirrored() -> bool:
            last = [[s for s in st if s.state == "no-path"][-1:] for st in seen]
            return all(last) and last[0][0].hints == last[1][0].hints[::-1]

        async with asyncio.timeout(30):
            while not mirrored():
                await asyncio.sleep(0.05)
        for st in seen:
            report = [s for s in st if s.state == "no-path"][-1]
            assert report.reason == f"relay {dead[4:]} (connection refused)" and report.hints == (1, 1)
        assert da.status.state == db.status.state == "connecting"
        await asyncio.gather(da.close(timeout=1), db.close(timeout=1))
    finally:
        await asyncio.gather(a.close(), b.close(), return_exceptions=True)
