"""Warm hop connections between transit replicas (transit_relay/hop_pool.py).

Real redis-server; replicas run in this process (conftest's `cluster` fixture), so a test can read
each replica's pool. Every pair's sides reach different replicas, so every pair is joined by a hop.
"""

from __future__ import annotations

import asyncio
import os

from burrow.transit_relay import hop_pool
from burrow.transit_relay.hop_pool import parse_warm, warm_line
from harness.ports import free_port
from tests.transit_relay.conftest import CLUSTER_SECRET as SECRET
from tests.transit_relay.conftest import hs, wait_for
from tests.transit_relay.test_cluster import TIMEOUT, tcp_side, token


def value(server, name: str, **labels) -> float:
    return server.registry.get_sample_value(name, labels or None) or 0.0


def hops(server, connection: str) -> float:
    return value(server, "burrow_transit_cluster_hop_seconds_count", connection=connection)


async def cross_pair(waits_on, arrives_on, n: int) -> None:
    """One pair: side a waits on `waits_on`, side b arrives on `arrives_on`; bytes checked both ways."""
    a_r, a_w = await tcp_side(waits_on, hs(b"a", token(n)))
    await wait_for(lambda: token(n) in waits_on.relay.by_token and token(n) in waits_on.cluster.claimed)
    b_r, b_w = await tcp_side(arrives_on, hs(b"b", token(n)))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    up, down = os.urandom(100_000 + n), os.urandom(50_000 + n)
    a_w.write(up)
    b_w.write(down)
    assert await asyncio.wait_for(b_r.readexactly(len(up)), TIMEOUT) == up
    assert await asyncio.wait_for(a_r.readexactly(len(down)), TIMEOUT) == down
    a_w.close()
    b_w.close()
    await wait_for(lambda: not waits_on.relay.pairs and not arrives_on.relay.pairs)


async def test_hops_after_the_first_travel_on_warm_connections_and_the_pool_stays_bounded(cluster):
    r0, r1 = await cluster(2, peer_pool_size=2)
    await cross_pair(r0, r1, 1)  # r1 learns r0 from the claim: this hop dials
    assert hops(r1, "fresh") == 1
    await wait_for(lambda: value(r1, "burrow_transit_cluster_pool_idle") == 2)
    # r0 learned r1 from r1's warm connections and keeps its own towards it
    await wait_for(lambda: value(r0, "burrow_transit_cluster_pool_idle") == 2)
    for n in range(2, 12):
        await cross_pair(r0 if n % 2 else r1, r1 if n % 2 else r0, n)
        for r in (r0, r1):  # bounded: never more than --peer-pool-size per peer, either end
            assert value(r, "burrow_transit_cluster_pool_idle") <= 2
            assert value(r, "burrow_transit_cluster_pool_parked") <= 2
        # refilled in the background (waited for, so that a slow machine cannot make the next hop dial)
        await wait_for(lambda: all(value(r, "burrow_transit_cluster_pool_idle") == 2 for r in (r0, r1)))
    assert hops(r1, "warm") + hops(r0, "warm") == 10 and hops(r1, "fresh") == 1 and hops(r0, "fresh") == 0
    assert value(r0, "burrow_transit_cluster_pool_peers") == value(r1, "burrow_transit_cluster_pool_peers") == 1
    assert value(r0, "burrow_transit_cluster_hops_in_total", result="paired") == 5 + 1
    assert value(r1, "burrow_transit_cluster_pool_dials_total", result="ok") >= 2


async def test_a_killed_peer_leaves_the_pool_and_pairs_fall_back_to_a_fresh_hop(cluster):
    port, peer_port = free_port(), free_port()
    r0, r1 = await cluster(2, peer_pool_size=2)
    r2 = (await cluster(1, peer_pool_size=2, port=port, peer_port=peer_port))[2]
    await cross_pair(r2, r0, 1)
    await wait_for(lambda: value(r0, "burrow_transit_cluster_pool_idle") == 2)
    await r2.stop()  # its end of every warm connection closes
    await wait_for(lambda: value(r0, "burrow_transit_cluster_pool_dropped_total", reason="closed") == 2)
    await wait_for(lambda: value(r0, "burrow_transit_cluster_pool_peers") == 0)  # redialing failed: forgotten
    assert value(r0, "burrow_transit_cluster_pool_dials_total", result="unreachable") >= 3
    await cross_pair(r1, r0, 2)  # pairs with other peers go on
    # the replica comes back at the same address: the first pair through it dials, later ones are warm
    r3 = (await cluster(1, peer_pool_size=2, port=port, peer_port=peer_port))[3]
    fresh = hops(r0, "fresh")
    await cross_pair(r3, r0, 3)
    assert hops(r0, "fresh") == fresh + 1
    await wait_for(lambda: value(r0, "burrow_transit_cluster_pool_idle") == 4)  # r1 and r3, two each
    warm = hops(r0, "warm")
    await cross_pair(r3, r0, 4)
    assert hops(r0, "warm") == warm + 1


async def test_a_peer_with_another_secret_is_refused_and_counted(cluster, tmp_path):
    (tmp_path / "other").write_bytes(b"another secret, not the cluster's")
    r0, = await cluster(1, peer_pool_size=2)
    r1, = (await cluster(1, peer_pool_size=2, peer_secret_file=str(tmp_path / "other")))[1:]
    a_r, a_w = await tcp_side(r0, hs(b"a", token(5)))
    await wait_for(lambda: token(5) in r0.cluster.claimed)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(5)))
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""  # its hop is refused: so is the client
    assert value(r0, "burrow_transit_cluster_hops_in_total", result="refused") == 1
    await wait_for(lambda: value(r1, "burrow_transit_cluster_pool_dials_total", result="refused") >= 1)
    assert value(r0, "burrow_transit_cluster_pool_warm_in_total", result="refused") >= 1
    assert value(r0, "burrow_transit_cluster_pool_parked") == 0
    await wait_for(lambda: value(r1, "burrow_transit_cluster_pool_peers") == 0)  # given up after a few
    assert token(5) in r0.relay.by_token  # the waiting side is untouched
    a_w.close()
    b_w.close()


def test_warm_lines_are_authenticated_and_fresh():
    line = warm_line(SECRET, "10.0.0.7:4003", 1000.0).rstrip(b"\n")
    assert line.startswith(b"warm 1000000 10.0.0.7:4003 ")
    assert parse_warm(SECRET, line, 1001.0) == "10.0.0.7:4003"
    assert parse_warm(b"x" * 32, line, 1001.0) is None  # another secret
    assert parse_warm(SECRET, line, 1100.0) is None  # too old
    assert parse_warm(SECRET, line.replace(b"10.0.0.7", b"10.0.0.8"), 1001.0) is None  # altered


async def test_a_holder_at_its_parking_limit_answers_busy_and_the_dialer_keeps_what_it_has(cluster, monkeypatch):
    monkeypatch.setattr(hop_pool, "MAX_PARKED", 1)  # the limit, made small enough to reach here
    r0, r1 = await cluster(2, peer_pool_size=3)
    await cross_pair(r0, r1, 1)  # r1 learns r0 and fills towards it: one is parked, the next is refused
    await wait_for(lambda: value(r1, "burrow_transit_cluster_pool_dials_total", result="busy") >= 1)
    assert value(r0, "burrow_transit_cluster_pool_warm_in_total", result="busy") >= 1
    assert value(r0, "burrow_transit_cluster_pool_parked") == 1
    assert value(r1, "burrow_transit_cluster_pool_idle") == 1  # kept, and the peer is not forgotten
    assert value(r1, "burrow_transit_cluster_pool_peers") == 1
    warm = hops(r1, "warm")
    await cross_pair(r0, r1, 2)
    assert hops(r1, "warm") == warm + 1
