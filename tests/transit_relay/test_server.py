"""The relay on 127.0.0.1: real sockets, real WebSocket clients, the event log and the admin port."""

import asyncio
import hashlib
import os
import socket

import aiohttp
import pytest
import websockets

from burrow.common.events import validate
from tests.transit_relay.conftest import PUMPS, TOKEN, connect, hs, read_events, wait_for

OTHER = b"fedcba9876543210" * 4


async def paired(srv, first=b"a", second=b"b", token=TOKEN):
    r1, w1 = await connect(srv)
    w1.write(hs(first, token))
    await w1.drain()
    await wait_for(lambda: len(srv.relay.pending) >= 1)
    r2, w2 = await connect(srv)
    w2.write(hs(second, token))
    assert await r1.readexactly(3) == b"ok\n"
    assert await r2.readexactly(3) == b"ok\n"
    return (r1, w1), (r2, w2)


@pytest.mark.parametrize("pump", PUMPS)
async def test_tcp_pair_relays_both_ways_and_logs_one_happy_line(make_server, pump):
    srv = await make_server(**PUMPS[pump], pipe_size=65536, buffer_size=65536)
    (r1, w1), (r2, w2) = await paired(srv)
    payload = os.urandom(3_000_000)
    w1.write(payload)
    got = await r2.readexactly(len(payload))
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    w2.write(b"thanks")
    assert await r1.readexactly(6) == b"thanks"
    w1.close()
    w2.close()
    await wait_for(lambda: read_events(srv.config.event_log))
    (line,) = read_events(srv.config.event_log)
    validate("transit", "session", {k: v for k, v in line.items() if k not in ("v", "ts", "service",
                                                                               "event", "node")})
    assert line["mood"] == "happy" and line["transport"] == "tcp"
    assert (line["bytes_from_first"], line["bytes_from_second"], line["total_bytes"]) == \
        (3_000_000, 6, 3_000_006)


@pytest.mark.parametrize("pump", PUMPS)
async def test_half_close_is_passed_through(make_server, pump):
    srv = await make_server(**PUMPS[pump])
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(b"request")
    w1.write_eof()  # A is done sending but still reading
    assert await r2.readexactly(7) == b"request"
    assert await r2.read() == b""  # B sees A's EOF...
    w2.write(b"late answer" * 1000)  # ...and can still answer
    await w2.drain()
    assert await r1.readexactly(11000) == b"late answer" * 1000
    assert srv.relay.pairs  # the pair lives until both directions are done
    w2.write_eof()
    assert await r1.read() == b""
    await wait_for(lambda: not srv.relay.pairs)
    assert read_events(srv.config.event_log)[0]["total_bytes"] == 11007


@pytest.mark.parametrize("pump", PUMPS)
async def test_reset_on_one_side_closes_the_other(make_server, pump):
    server = await make_server(**PUMPS[pump])
    (r1, w1), (r2, w2) = await paired(server)
    sock = w1.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    w1.transport.abort()
    assert await asyncio.wait_for(r2.read(), 5) == b""
    await wait_for(lambda: not server.relay.pairs)


async def test_bad_handshake_reply(server):
    r, w = await connect(server)
    w.write(b"please relay " + TOKEN + b"\r\n")
    assert await r.read() == b"bad handshake\n"
    await wait_for(lambda: read_events(server.config.event_log))
    assert read_events(server.config.event_log)[0]["mood"] == "errory"


async def test_impatient_reply(server):
    r, w = await connect(server)
    w.write(hs(b"a") + b"too soon")
    assert await r.read() == b"impatient\n"
    r, w = await connect(server)
    w.write(hs(b"a"))
    await wait_for(lambda: server.relay.pending)
    w.write(b"x")
    assert await r.read() == b"impatient\n"


async def test_overlong_line_closes_silently(server):
    r, w = await connect(server)
    w.write(b"please relay " + b"x" * 2000)
    assert await r.read() == b""
    await wait_for(lambda: read_events(server.config.event_log))
    assert read_events(server.config.event_log)[0]["mood"] == "empty"


async def test_redundant_connection_gets_plain_eof(server):
    r1, w1 = await connect(server)
    r2, w2 = await connect(server)
    w1.write(hs(b"a"))
    w2.write(hs(b"a"))
    await wait_for(lambda: len(server.relay.pending) == 2)
    r3, w3 = await connect(server)
    w3.write(hs(b"b"))
    assert await r3.readexactly(3) == b"ok\n"
    first = await asyncio.wait_for(r1.read(3), 5)
    second = await asyncio.wait_for(r2.read(3), 5)
    assert sorted([first, second]) == [b"", b"ok\n"]
    await wait_for(lambda: read_events(server.config.event_log))
    assert [e["mood"] for e in read_events(server.config.event_log)] == ["redundant"]


# -- limits, one test each -------------------------------------------------------------------------
async def test_handshake_deadline(make_server):
    srv = await make_server(handshake_timeout=0.2)
    r, w = await connect(srv)
    w.write(b"please rel")
    assert await asyncio.wait_for(r.read(), 5) == b""
    assert srv.relay.timeouts["handshake"] == 1
    assert read_events(srv.config.event_log)[0]["mood"] == "empty"


async def test_unpaired_wait_limit(make_server):
    srv = await make_server(pending_timeout=0.2)
    r, w = await connect(srv)
    w.write(hs(b"a"))
    assert await asyncio.wait_for(r.read(), 5) == b""
    assert srv.relay.timeouts["pending"] == 1
    assert read_events(srv.config.event_log)[0]["mood"] == "lonely"


@pytest.mark.parametrize("pump", PUMPS)
async def test_idle_timeout_on_paired_connections(make_server, pump):
    srv = await make_server(**PUMPS[pump], idle_timeout=0.3)
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(b"ping")
    assert await r2.readexactly(4) == b"ping"
    assert await asyncio.wait_for(r1.read(), 5) == b""
    assert await asyncio.wait_for(r2.read(), 5) == b""
    assert srv.relay.timeouts["idle"] == 1
    await wait_for(lambda: read_events(srv.config.event_log))
    assert read_events(srv.config.event_log)[0]["mood"] == "happy"


async def test_max_pending(make_server):
    srv = await make_server(max_pending=1)
    _r1, w1 = await connect(srv)
    w1.write(hs(b"a"))
    await wait_for(lambda: srv.relay.pending)
    r2, w2 = await connect(srv)
    w2.write(hs(b"a", OTHER))
    assert await r2.read() == b"error: relay is full (pending)\n"
    assert srv.relay.refusals == {"pending": 1}


async def test_max_pairs(make_server):
    srv = await make_server(max_pairs=1)
    keep = await paired(srv)  # (unreferenced streams would be closed by the garbage collector)
    _r1, w1 = await connect(srv)
    w1.write(hs(b"a", OTHER))
    await wait_for(lambda: srv.relay.pending)
    r2, w2 = await connect(srv)
    w2.write(hs(b"b", OTHER))
    assert await r2.read() == b"error: relay is full (pairs)\n"
    assert srv.relay.refusals == {"pairs": 1} and len(srv.relay.pairs) == 1
    del keep


async def test_per_ip_cap(make_server):
    srv = await make_server(max_connections_per_ip=2)
    held = [await connect(srv) for _ in range(2)]
    await wait_for(lambda: len(srv.relay.handshaking) == 2)
    r, w = await connect(srv)
    assert await r.read() == b"error: relay is full (per_ip)\n"
    async with websockets.connect(f"ws://127.0.0.1:{srv.websocket_port}/") as ws:
        with pytest.raises(websockets.ConnectionClosed) as info:
            await ws.recv()
        assert info.value.rcvd.code == 1013
    assert srv.relay.refusals == {"per_ip": 2}
    held[0][1].close()
    await wait_for(lambda: len(srv.relay.handshaking) == 1)
    r, w = await connect(srv)  # a freed slot is usable again
    w.write(hs(b"a"))
    await wait_for(lambda: srv.relay.pending)


async def test_max_connections(make_server):
    srv = await make_server(max_connections=1, max_connections_per_ip=0)
    await connect(srv)
    r, w = await connect(srv)
    assert await r.read() == b"error: relay is full (total)\n"


# -- WebSocket --------------------------------------------------------------------------------------
async def test_tcp_and_websocket_pair(server):
    async with websockets.connect(f"ws://127.0.0.1:{server.websocket_port}/", max_size=None) as ws:
        await ws.send(hs(b"w")[:-1])  # newline optional on WebSocket
        await wait_for(lambda: server.relay.pending)
        r, w = await connect(server)
        w.write(hs(b"t"))
        assert await r.readexactly(3) == b"ok\n"
        assert await ws.recv() == b"ok\n"
        await ws.send(b"from ws")
        await ws.send(b" two frames")
        assert await r.readexactly(18) == b"from ws two frames"  # boundaries are not kept
        blob = os.urandom(2_000_000)
        w.write(blob)
        got = b""
        while len(got) < len(blob):
            got += await ws.recv()
        assert got == blob
        w.close()  # no half-close over WebSocket: closing TCP closes the WebSocket
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    await wait_for(lambda: read_events(server.config.event_log))
    (line,) = read_events(server.config.event_log)
    assert line["mood"] == "happy" and line["transport"] == "mixed"
    assert (line["bytes_from_first"], line["bytes_from_second"]) == (18, 2_000_000)


async def test_websocket_pair_with_websocket(server):
    url = f"ws://127.0.0.1:{server.websocket_port}/any/path"
    async with websockets.connect(url) as a, websockets.connect(url) as b:
        await a.send(hs())
        await b.send(hs())
        assert await a.recv() == b"ok\n" and await b.recv() == b"ok\n"
        await a.send(b"hi")
        assert await b.recv() == b"hi"
    await wait_for(lambda: read_events(server.config.event_log))
    assert read_events(server.config.event_log)[0]["transport"] == "websocket"


async def test_websocket_errors(server):
    url = f"ws://127.0.0.1:{server.websocket_port}/"
    async with websockets.connect(url) as ws:
        await ws.send(b"please relay " + TOKEN[:10])
        assert await ws.recv() == b"bad handshake\n"
        with pytest.raises(websockets.ConnectionClosedOK):
            await ws.recv()
    async with websockets.connect(url) as ws:
        await ws.send("please relay " + TOKEN.decode())  # text frames are not allowed
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
    async with websockets.connect(url) as ws:
        await ws.send(hs(b"a"))
        await wait_for(lambda: server.relay.pending)
        await ws.send(b"early")
        assert await ws.recv() == b"impatient\n"
    await wait_for(lambda: len(read_events(server.config.event_log)) == 3)
    assert [e["mood"] for e in read_events(server.config.event_log)] == ["errory", "errory", "impatient"]


# -- admin and stats -------------------------------------------------------------------------------
async def test_metrics_health_and_stats(make_server):
    srv = await make_server(stats_interval=0.2)
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(b"x" * 1000)
    await r2.readexactly(1000)
    base = f"http://127.0.0.1:{srv.admin_port}"
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz"):
            async with http.get(base + path) as resp:
                assert resp.status == 200
        async with http.get(base + "/metrics") as resp:
            text = await resp.text()
    assert "burrow_transit_active_pairs 1.0" in text
    assert "burrow_transit_relayed_bytes_total 1000.0" in text
    assert 'burrow_transit_refusals_total{limit="per_ip"} 0.0' in text
    await wait_for(lambda: read_events(srv.config.event_log, "stats"), timeout=5)
    stats = read_events(srv.config.event_log, "stats")
    assert stats[0]["active_pairs"] == 1 and sum(s["bytes_interval"] for s in stats) == 1000
    await srv.stop()
    w1.close()
    w2.close()


async def test_blur_usage_rounds_sizes(make_server):
    srv = await make_server(blur_usage=3600)
    (r1, w1), (r2, w2) = await paired(srv)
    w1.write(b"y" * 12345)
    await r2.readexactly(12345)
    w1.close()
    w2.close()
    await wait_for(lambda: read_events(srv.config.event_log))
    line = read_events(srv.config.event_log)[0]
    assert line["total_bytes"] == 20000 and line["started"] % 3600 == 0


async def test_websocket_handshake_deadline_and_lonely_timeout(make_server):
    srv = await make_server(handshake_timeout=0.2, pending_timeout=0.3)
    url = f"ws://127.0.0.1:{srv.websocket_port}/"
    async with websockets.connect(url) as silent, websockets.connect(url) as waiting:
        await waiting.send(hs(b"a"))
        for ws in (silent, waiting):
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
    assert srv.relay.timeouts["handshake"] == 1 and srv.relay.timeouts["pending"] == 1
    await wait_for(lambda: len(read_events(srv.config.event_log)) == 2)
    assert sorted(e["mood"] for e in read_events(srv.config.event_log)) == ["empty", "lonely"]


async def test_drain_keeps_pairs_and_sends_the_rest_away(make_server):
    srv = await make_server(drain_timeout=10.0)
    (r1, w1), (r2, w2) = await paired(srv)
    lonely_r, lonely_w = await connect(srv)
    lonely_w.write(hs(b"c", OTHER))
    await lonely_w.drain()
    await wait_for(lambda: len(srv.relay.pending) == 1)
    port = srv.port
    stopping = asyncio.create_task(srv.stop())
    assert await asyncio.wait_for(lonely_r.read(), 5) == b""  # the side waiting for a partner is closed
    with pytest.raises(OSError):  # nothing new is accepted
        await asyncio.open_connection("127.0.0.1", port)
    payload = os.urandom(500_000)  # the pair still relays, both ways
    w1.write(payload)
    assert await r2.readexactly(len(payload)) == payload
    w2.write(b"done")
    assert await r1.readexactly(4) == b"done"
    assert not stopping.done()
    w1.close()
    w2.close()
    await asyncio.wait_for(stopping, 5)  # the last pair ended: the drain is over well before 10 s


async def test_drain_finishes_handshakes_already_accepted(make_server):
    """Without a cluster: a connection accepted before SIGTERM may still send its handshake and pair
    with the side waiting for it; then the drain ends with that pair, in one `drain` line."""
    srv = await make_server(drain_timeout=10.0)
    waiting_r, waiting_w = await connect(srv)
    waiting_w.write(hs(b"a"))
    late_r, late_w = await connect(srv)
    await wait_for(lambda: len(srv.relay.pending) == 1 and len(srv.relay.handshaking) == 1)
    stopping = asyncio.create_task(srv.stop())
    await asyncio.sleep(0.2)  # the drain has begun: the listener is closed
    late_w.write(hs(b"b"))
    assert await asyncio.wait_for(waiting_r.readexactly(3), 5) == b"ok\n"
    assert await asyncio.wait_for(late_r.readexactly(3), 5) == b"ok\n"
    waiting_w.write(b"ping")
    assert await late_r.readexactly(4) == b"ping"
    waiting_w.close()
    late_w.close()
    await asyncio.wait_for(stopping, 5)
    drains = read_events(srv.config.event_log, "drain")
    assert [(d["waiting"], d["pairs"], d["ended"]) for d in drains] == [(1, 0, "done")]
    assert [s["mood"] for s in read_events(srv.config.event_log)] == ["happy"]
