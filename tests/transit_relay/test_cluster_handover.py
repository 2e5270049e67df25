"""Replicas on one host hand a TCP client's socket to its partner's replica (`--handover-dir`,
transit_relay/handover.py) instead of joining them by a hop.

Real redis-server; replicas run in this process, each with its own listeners and its own Unix socket in
the shared directory, so a test sees which replica relays a pair.
"""

from __future__ import annotations

import array
import asyncio
import os
import socket

from websockets.asyncio.client import connect as ws_connect

from burrow.common.redis import key
from burrow.transit_relay import handover
from burrow.transit_relay.handover import socket_path
from tests.transit_relay.conftest import hs, read_events, wait_for
from tests.transit_relay.test_cluster import TIMEOUT, both_ways, sessions, tcp_side, token, websocket_and_tcp


def hops(server, direction: str, result: str) -> float:
    return server.registry.get_sample_value(f"burrow_transit_cluster_hops_{direction}_total", {"result": result})


async def wait_claimed(server, n: int) -> None:
    await wait_for(lambda: token(n) in server.relay.by_token)
    await wait_for(lambda: token(n) in server.cluster.claimed)


async def test_a_tcp_side_is_handed_to_the_replica_where_its_partner_waits(cluster, tmp_path):
    r0, r1 = await cluster(2, handover_dir=str(tmp_path))
    for n in range(5):
        a_r, a_w = await tcp_side(r0, hs(b"a", token(n)))
        await wait_claimed(r0, n)
        b_r, b_w = await tcp_side(r1, hs(b"b", token(n)))
        assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
        # both clients are relayed by r0 alone, as if both had connected to it
        assert len(r0.forwarders) == 1 and not r1.forwarders and not r1.relay.pairs
        assert not next(iter(r0.relay.pairs)).hop and r1.relay.caps.total == 0
        await both_ways(a_r, a_w, b_r, b_w, n)
    await wait_for(lambda: len(sessions(r0)) == 5)
    assert [e["mood"] for e in sessions(r0)] == ["happy"] * 5 and sessions(r1) == []
    assert hops(r1, "out", "handed_over") == 5 and hops(r1, "out", "paired") == 0
    assert hops(r0, "in", "handed_over") == 5
    await wait_for(lambda: r0.relay.caps.total == 0 and not r0.relay.pairs)


async def test_a_websocket_side_still_hops(cluster, tmp_path):
    r0, r1 = await cluster(2, handover_dir=str(tmp_path))
    a_r, a_w = await tcp_side(r0, hs(b"a", token(10)))
    await wait_claimed(r0, 10)
    async with ws_connect(f"ws://127.0.0.1:{r1.websocket_port}") as ws:
        await ws.send(hs(b"b", token(10)))
        assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
        a_w.write(b"over the hop")
        assert await asyncio.wait_for(ws.recv(), TIMEOUT) == b"over the hop"
    a_w.close()
    assert hops(r1, "out", "paired") == 1 and hops(r1, "out", "handed_over") == 0


async def test_an_unreachable_socket_falls_back_to_the_hop(cluster, tmp_path):
    r0, r1 = await cluster(2, handover_dir=str(tmp_path))
    r0.cluster.handover.stop()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never listening: connect is refused
    dead.bind(str(socket_path(str(tmp_path), r0.cluster.address)))
    a_r, a_w = await tcp_side(r0, hs(b"a", token(11)))
    await wait_claimed(r0, 11)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(11)))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    b_w.write(b"through the hop")
    assert await asyncio.wait_for(a_r.readexactly(15), TIMEOUT) == b"through the hop"
    assert hops(r1, "out", "paired") == 1 and hops(r1, "out", "handed_over") == 0
    for w in (a_w, b_w):
        w.close()
    dead.close()


async def test_a_holder_without_the_partner_gives_the_client_back(cluster, tmp_path, redis):
    """The claim names r0 but nobody waits there: r1 keeps its client, which waits on r1 and pairs there."""
    r0, r1 = await cluster(2, handover_dir=str(tmp_path))
    redis.cli("SET", key("transit", token(12).decode(), "waiting"), r0.cluster.address, "PX", "60000")
    b_r, b_w = await tcp_side(r1, hs(b"b", token(12)))
    await wait_claimed(r1, 12)
    assert hops(r0, "in", "no_partner") == 1 and hops(r1, "out", "no_partner") == 1
    a_r, a_w = await tcp_side(r0, hs(b"a", token(12)))  # handed to r1 in turn
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    a_w.write(b"back and forth")
    assert await asyncio.wait_for(b_r.readexactly(14), TIMEOUT) == b"back and forth"
    assert len(r1.forwarders) == 1 and not r0.forwarders and hops(r0, "out", "handed_over") == 1
    for w in (a_w, b_w):
        w.close()


async def test_a_holder_that_takes_the_socket_and_never_answers_ends_the_side_here(cluster, tmp_path, redis):
    """Once the socket is sent the sender never touches the client again: it only drops its copy."""
    r1 = (await cluster(1, handover_dir=str(tmp_path)))[0]
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a holder that takes the socket, then dies
    mute.bind(str(socket_path(str(tmp_path), "127.0.0.1:9")))
    mute.listen()
    mute.setblocking(False)
    redis.cli("SET", key("transit", token(13).decode(), "waiting"), "127.0.0.1:9", "PX", "60000")
    b_r, b_w = await tcp_side(r1, hs(b"b", token(13)))
    loop = asyncio.get_running_loop()
    conn, _ = await asyncio.wait_for(loop.sock_accept(mute), TIMEOUT)
    ancillary = []
    for _ in range(int(TIMEOUT / 0.01)):  # bounded: the line and the socket come in one message
        try:
            _line, ancillary, _, _ = conn.recvmsg(512, socket.CMSG_SPACE(4))
            break
        except BlockingIOError:
            await asyncio.sleep(0.01)
    (client_fd,) = array.array("i", ancillary[0][2])
    conn.close()  # no answer
    await wait_for(lambda: hops(r1, "out", "lost") == 1)
    assert r1.relay.caps.total == 0 and not r1.relay.pending and sessions(r1) == []
    os.write(client_fd, b"ok\n")  # the client is this "holder's" now, and only its
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    os.close(client_fd)
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
    b_w.close()
    mute.close()


async def test_a_tcp_side_handed_to_a_websocket_partner_pairs_as_a_mixed_pair(cluster, tmp_path):
    r0, r1 = await cluster(2, handover_dir=str(tmp_path))
    async with ws_connect(f"ws://127.0.0.1:{r0.websocket_port}") as ws:
        await ws.send(hs(b"a", token(14)))
        await wait_for(lambda: token(14) in r0.cluster.claimed)
        b_r, b_w = await tcp_side(r1, hs(b"b", token(14)))
        await websocket_and_tcp(ws, b_r, b_w)
        assert len(r0.streams) == 1 and not r1.relay.pairs and hops(r1, "out", "handed_over") == 1
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""  # the WebSocket side ended: B is told
    b_w.close()
    await wait_for(lambda: sessions(r0))
    assert [(e["mood"], e["transport"]) for e in sessions(r0)] == [("happy", "mixed")]


async def test_a_draining_holder_still_takes_a_handed_over_partner(cluster, tmp_path):
    r0, r1 = await cluster(2, handover_dir=str(tmp_path), drain_timeout=10.0)
    a_r, a_w = await tcp_side(r0, hs(b"a", token(15)))
    await wait_claimed(r0, 15)
    stopping = asyncio.create_task(r0.stop())
    await wait_for(lambda: r0.registry.get_sample_value("burrow_transit_draining") == 1)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(15)))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    b_w.write(b"while draining")
    assert await asyncio.wait_for(a_r.readexactly(14), TIMEOUT) == b"while draining"
    assert hops(r1, "out", "handed_over") == 1 and not stopping.done()
    for w in (a_w, b_w):
        w.close()
    await asyncio.wait_for(stopping, TIMEOUT)  # the pair ended: the drain is done before its deadline
    assert [e["ended"] for e in read_events(r0.config.event_log, "drain")] == ["done"]


async def test_connections_that_send_nothing_are_capped(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(handover, "MAX_READING", 3)
    r0 = (await cluster(1, handover_dir=str(tmp_path)))[0]
    loop = asyncio.get_running_loop()
    path = str(socket_path(str(tmp_path), r0.cluster.address))
    silent = []
    for _ in range(4):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        await loop.sock_connect(s, path)
        silent.append(s)
    await wait_for(lambda: len(r0.cluster.handover._reading) == 3)
    assert await asyncio.wait_for(loop.sock_recv(silent[3], 64), TIMEOUT) == b""  # the fourth: closed at once
    assert len(r0.cluster.handover._reading) == 3
    for s in silent:
        s.close()


async def test_a_holder_at_its_pair_limit_refuses_the_handed_client(cluster, tmp_path, redis):
    """As for a hop: the client is closed by its own replica, and the holder's side keeps waiting, claimed."""
    r0, r1 = await cluster(2, handover_dir=str(tmp_path), max_pairs=1)
    x = [await tcp_side(r0, hs(side, token(20))) for side in (b"a", b"b")]  # r0's one pair
    for r, _ in x:
        assert await asyncio.wait_for(r.readexactly(3), TIMEOUT) == b"ok\n"
    a_r, a_w = await tcp_side(r0, hs(b"a", token(21)))
    await wait_claimed(r0, 21)
    b_r, b_w = await tcp_side(r1, hs(b"b", token(21)))
    assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""  # closed, never told `ok`
    assert hops(r1, "out", "refused") == 1 and hops(r0, "in", "refused") == 1
    assert redis.cli("GET", key("transit", token(21).decode(), "waiting")) == r0.cluster.address
    assert token(21) in r0.relay.by_token and not r1.relay.pending
    for _, w in (*x, (a_r, a_w), (b_r, b_w)):
        w.close()
