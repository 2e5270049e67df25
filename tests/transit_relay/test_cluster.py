"""Transit replicas pairing across each other through Redis and hops (transit_relay/cluster.py).

Real redis-server; replicas run in this process (each its own TransitServer with its own listeners),
so a test can see where each side waits. Clients connect to different replicas on purpose.
"""

from __future__ import annotations

import asyncio
import hashlib
import os

import aiohttp
from websockets.asyncio.client import connect as ws_connect

from burrow.common.redis import key
from burrow.transit_relay.cluster import hop_line, parse_hop
from burrow.transit_relay.protocol import Handshake
from burrow.transit_relay.server import TransitServer
from tests.transit_relay.conftest import CLUSTER_SECRET as SECRET
from tests.transit_relay.conftest import hs, read_events, wait_for

TIMEOUT = 10.0


def token(n: int) -> bytes:
    return hashlib.sha256(b"cluster %d" % n).hexdigest().encode()


async def tcp_side(server: TransitServer, line: bytes):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", server.port), TIMEOUT)
    writer.write(line)
    return reader, writer


async def both_ways(a_r, a_w, b_r, b_w, n: int) -> None:
    """Random bytes each way, each direction half-closed in turn (the half-close crosses the relays); closes both."""
    up, down = os.urandom(300_000 + n), os.urandom(200_000 + n)
    a_w.write(up)
    b_w.write(down)
    a_w.write_eof()
    assert await asyncio.wait_for(b_r.readexactly(len(up)), TIMEOUT) == up
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
    b_w.write_eof()
    assert await asyncio.wait_for(a_r.readexactly(len(down)), TIMEOUT) == down
    assert await asyncio.wait_for(a_r.read(), TIMEOUT) == b""
    a_w.close()
    b_w.close()


async def websocket_and_tcp(ws, r, w) -> None:
    """A WebSocket side and a TCP side of one pair: both told `ok`, then one message each way."""
    assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(r.readexactly(3), TIMEOUT) == b"ok\n"
    await ws.send(b"from the websocket side")
    assert await asyncio.wait_for(r.readexactly(23), TIMEOUT) == b"from the websocket side"
    w.write(b"from the tcp side")
    assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"from the tcp side"


def sessions(server: TransitServer) -> list[dict]:
    return read_events(server.config.event_log)


async def test_sides_on_two_replicas_pair_through_a_hop(cluster):
    r0, r1 = await cluster(2)
    for n in range(20):
        legacy = n % 2 == 1
        a_r, a_w = await tcp_side(r0, hs(None if legacy else b"a", token(n)))
        await wait_for(lambda n=n: token(n) in r0.relay.by_token)
        await asyncio.sleep(0.02)  # the claim is in Redis
        b_r, b_w = await tcp_side(r1, hs(None if legacy else b"b", token(n)))
        assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
        await both_ways(a_r, a_w, b_r, b_w, n)
    await wait_for(lambda: len(sessions(r0)) == 20)
    await asyncio.sleep(0.2)
    # one session line per pair, on the replica where the first side waited; none on the other
    assert [e["mood"] for e in sessions(r0)] == ["happy"] * 20
    assert sessions(r1) == []
    assert all(e["total_bytes"] >= 500_000 for e in sessions(r0))
    assert r1.registry.get_sample_value("burrow_transit_cluster_hops_out_total", {"result": "paired"}) == 20
    assert r0.registry.get_sample_value("burrow_transit_cluster_hops_in_total", {"result": "paired"}) == 20
    assert r1.relay.caps.total == 0 and r0.relay.caps.total == 0 and not r0.relay.pairs and not r1.relay.pairs


async def test_websocket_side_meets_a_tcp_side_on_another_replica(cluster):
    r0, r1 = await cluster(2)
    a_r, a_w = await tcp_side(r0, hs(b"a", token(1)))
    await wait_for(lambda: token(1) in r0.relay.by_token)
    await asyncio.sleep(0.02)
    async with ws_connect(f"ws://127.0.0.1:{r1.websocket_port}") as ws:
        await ws.send(hs(b"b", token(1)))
        await websocket_and_tcp(ws, a_r, a_w)
    assert await asyncio.wait_for(a_r.read(), TIMEOUT) == b""  # the WebSocket side ended: A is told
    a_w.close()
    await wait_for(lambda: sessions(r0))
    assert [(e["mood"], e["transport"]) for e in sessions(r0)] == [("happy", "mixed")]
    assert sessions(r1) == []
    # the other way round: the WebSocket side waits, the TCP side arrives on another replica
    async with ws_connect(f"ws://127.0.0.1:{r0.websocket_port}") as ws:
        await ws.send(hs(b"a", token(11)))
        await wait_for(lambda: token(11) in r0.relay.by_token)
        await asyncio.sleep(0.02)
        b_r, b_w = await tcp_side(r1, hs(b"b", token(11)))
        assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
        b_w.write(b"tcp to ws")
        assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"tcp to ws"
        await ws.send(b"ws to tcp")
        assert await asyncio.wait_for(b_r.readexactly(9), TIMEOUT) == b"ws to tcp"
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
    b_w.close()
    await wait_for(lambda: len(sessions(r0)) == 2)
    assert sessions(r0)[1]["transport"] == "mixed" and sessions(r1) == []


async def test_redundant_connections_first_pair_wins(cluster):
    r0, r1, r2 = await cluster(3)
    # side a waits with two connections on r0; side b arrives on r1, then a late copy on r2
    a1 = await tcp_side(r0, hs(b"a", token(2)))
    a2 = await tcp_side(r0, hs(b"a", token(2)))
    await wait_for(lambda: len(r0.relay.by_token.get(token(2), [])) == 2)
    await asyncio.sleep(0.02)
    b1 = await tcp_side(r1, hs(b"b", token(2)))
    assert await asyncio.wait_for(b1[0].readexactly(3), TIMEOUT) == b"ok\n"
    oks = [await asyncio.wait_for(r.read(3), TIMEOUT) for r, _ in (a1, a2)]
    assert sorted(oks) == [b"", b"ok\n"]  # one wins, the other is dropped as redundant
    await asyncio.sleep(0.1)
    b2 = await tcp_side(r2, hs(b"b", token(2)))  # nobody waits any more: it waits on r2
    await wait_for(lambda: token(2) in r2.relay.by_token)
    moods = [e["mood"] for e in sessions(r0)]
    assert moods == ["redundant"]
    for _, w in (a1, a2, b1, b2):
        w.close()
    await wait_for(lambda: [e["mood"] for e in sessions(r0)] == ["redundant", "jilted"])
    await wait_for(lambda: [e["mood"] for e in sessions(r2)] == ["lonely"])


async def test_a_killed_replica_ends_only_its_hops_and_its_stale_claims_are_dropped(cluster, redis):
    r0, r1, r2 = await cluster(3)
    # pair X: waits on r0, joined from r1; pair Y: waits on r2, joined from r1
    x_a = await tcp_side(r0, hs(b"a", token(3)))
    y_a = await tcp_side(r2, hs(b"a", token(4)))
    await wait_for(lambda: token(3) in r0.relay.by_token and token(4) in r2.relay.by_token)
    await asyncio.sleep(0.02)
    x_b = await tcp_side(r1, hs(b"b", token(3)))
    y_b = await tcp_side(r1, hs(b"b", token(4)))
    for r, _ in (x_a, y_a, x_b, y_b):
        assert await asyncio.wait_for(r.readexactly(3), TIMEOUT) == b"ok\n"
    # a side waiting on r0 whose partner will come after r0 is gone
    z_a = await tcp_side(r0, hs(b"a", token(5)))
    await wait_for(lambda: token(5) in r0.relay.by_token)
    await asyncio.sleep(0.02)
    await r0.stop()  # (in-process "kill": every socket of r0 closes)
    assert await asyncio.wait_for(x_b[0].read(), TIMEOUT) == b""  # X crossed r0: it ended
    y_a[1].write(b"still here")
    assert await asyncio.wait_for(y_b[0].readexactly(10), TIMEOUT) == b"still here"  # Y did not
    # a crash leaves r0's claim for token 5 behind (a graceful stop may have dropped it): put it back
    redis.cli("SET", key("transit", token(5).decode(), "waiting"), r0.cluster.address, "PX", "60000")
    # the newcomer's hop to r0 fails: it drops the stale claim and waits on its own replica
    z_b = await tcp_side(r1, hs(b"b", token(5)))
    await wait_for(lambda: token(5) in r1.relay.by_token)
    assert r1.registry.get_sample_value("burrow_transit_cluster_hops_out_total", {"result": "unreachable"}) == 1
    z_a2 = await tcp_side(r2, hs(b"a", token(5)))  # the partner retries: it meets z_b on r1
    assert await asyncio.wait_for(z_a2[0].readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(z_b[0].readexactly(3), TIMEOUT) == b"ok\n"
    for _, w in (x_a, y_a, x_b, y_b, z_a, z_b, z_a2):
        w.close()


async def test_without_redis_replicas_pair_on_their_own_and_say_so(cluster, redis):
    r0, r1 = await cluster(2)
    redis.kill()
    await wait_for(lambda: not r0.cluster.link.healthy and not r1.cluster.link.healthy, timeout=15)
    a_r, a_w = await tcp_side(r0, hs(b"a", token(6)))
    b_r, b_w = await tcp_side(r0, hs(b"b", token(6)))  # same replica: still pairs
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{r0.admin_port}/readyz") as r:
        body = await r.text()
    assert r.status == 200 and "pairing on this replica only" in body
    assert r0.registry.get_sample_value("burrow_transit_cluster_redis_reachable") == 0
    assert r0.registry.get_sample_value("burrow_transit_cluster_local_only_total") >= 1
    a_w.close()
    b_w.close()
    # a side that starts waiting on r1 while Redis is away is registered once Redis is back
    e_r, e_w = await tcp_side(r1, hs(b"a", token(12)))
    await wait_for(lambda: token(12) in r1.relay.by_token)
    redis.start()  # back: pairing across replicas resumes
    await wait_for(lambda: r0.cluster.link.healthy and r1.cluster.link.healthy, timeout=15)
    await wait_for(lambda: token(12) in r1.cluster.claimed)
    f_r, f_w = await tcp_side(r0, hs(b"b", token(12)))
    assert await asyncio.wait_for(f_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(e_r.readexactly(3), TIMEOUT) == b"ok\n"
    e_w.close()
    f_w.close()
    c_r, c_w = await tcp_side(r0, hs(b"a", token(7)))
    await wait_for(lambda: token(7) in r0.relay.by_token)
    await asyncio.sleep(0.05)
    d_r, d_w = await tcp_side(r1, hs(b"b", token(7)))
    assert await asyncio.wait_for(d_r.readexactly(3), TIMEOUT) == b"ok\n"
    c_w.close()
    d_w.close()


async def test_a_quiet_cross_replica_pair_idles_out_as_on_one_node(cluster):
    r0, r1 = await cluster(2, idle_timeout=0.4)
    a_r, a_w = await tcp_side(r0, hs(b"a", token(9)))
    await wait_for(lambda: token(9) in r0.relay.by_token)
    await asyncio.sleep(0.02)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(9)))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    a_w.write(b"x")
    assert await asyncio.wait_for(b_r.readexactly(1), TIMEOUT) == b"x"
    # then silence: the holder's idle timer ends the pair, and the hop's end reaches the other side
    assert await asyncio.wait_for(a_r.read(), TIMEOUT) == b""
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
    await wait_for(lambda: sessions(r0))
    assert r0.relay.timeouts["idle"] == 1 and r1.relay.timeouts["idle"] == 0
    assert [e["mood"] for e in sessions(r0)] == ["happy"] and sessions(r1) == []
    a_w.close()
    b_w.close()


async def test_a_hop_refused_by_the_holders_limit_refuses_the_client(cluster):
    r0, r1 = await cluster(2, max_connections_per_ip=1)
    a_r, a_w = await tcp_side(r0, hs(b"a", token(8)))  # 127.0.0.1's one connection on r0
    await wait_for(lambda: token(8) in r0.relay.by_token)
    await asyncio.sleep(0.02)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(8)))  # r0 would count it as a second one from 127.0.0.1
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
    assert r1.registry.get_sample_value("burrow_transit_cluster_hops_out_total", {"result": "refused"}) == 1
    assert r0.registry.get_sample_value("burrow_transit_refusals_total", {"limit": "per_ip"}) == 1
    assert [e["mood"] for e in sessions(r1)] == ["errory"]
    assert token(8) in r0.relay.by_token  # the waiting side is untouched
    a_w.close()
    b_w.close()


def test_hop_lines_are_authenticated_and_fresh():
    hs_ = Handshake(b"a" * 64, b"b" * 16)
    line = hop_line(SECRET, hs_, "websocket", "192.0.2.1", 1000.0).rstrip(b"\n")
    assert line.startswith(b"hop " + b"a" * 64 + b" " + b"b" * 16 + b" websocket 192.0.2.1 1000000 ")
    assert parse_hop(SECRET, line, 1001.0) == (hs_, "websocket", "192.0.2.1")
    assert parse_hop(b"another secret of 32 bytes......", line, 1001.0) is None
    assert parse_hop(SECRET, line, 1000.0 + 31) is None  # too old
    assert parse_hop(SECRET, line.replace(b"192.0.2.1", b"192.0.2.2"), 1001.0) is None  # tampered
    legacy = hop_line(SECRET, Handshake(b"c" * 64), "tcp", "::1", 5.0).rstrip(b"\n")
    assert parse_hop(SECRET, legacy, 5.0) == (Handshake(b"c" * 64), "tcp", "::1")
