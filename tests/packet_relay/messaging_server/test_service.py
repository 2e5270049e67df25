"""The messaging server over real TCP (in-process): handshakes, bad frames, limits, stalls, duplicates."""

from __future__ import annotations

import asyncio
import json

import pytest

from burrow.messaging import keys
from burrow.messaging.client_link import ChannelEnded, ChannelReady, ChannelRefused, IncomingChannel, Message
from burrow.messaging.errors import HandshakeError
from burrow.messaging.handshake import HandshakeFrame, InitiatorHandshake

from .inprocess import Cluster, RawLink


@pytest.fixture
async def cluster():
    c = Cluster()
    await c.start(servers=1, write_timeout=0.5, handshake_timeout=1.0, max_links=8)
    yield c
    await c.stop()


async def pair(svc):
    a, b = await RawLink.connect(svc), await RawLink.connect(svc)
    cid = a.machine.open_channel(b.machine.local.public)
    a.flush()
    await b.until(lambda evs: any(type(e) is IncomingChannel for e in evs))
    await a.until(lambda evs: any(type(e) is ChannelReady for e in evs))
    bid = next(e.channel_id for e in b.events if type(e) is IncomingChannel)
    a.events.clear()
    b.events.clear()
    return a, b, cid, bid


async def test_wrong_responder_key_is_closed_without_a_reply(cluster):
    svc = cluster.services[0]
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    writer.write(InitiatorHandshake(keys.SecretKey.generate(), keys.SecretKey.generate().public).start())
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert svc.stats["handshake_wrong_responder"] == 1


async def test_bad_sig2_gets_accepted_false(cluster):
    svc = cluster.services[0]
    me = keys.SecretKey.generate()
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    hs = InitiatorHandshake(me, svc.key.public)
    writer.write(hs.start())
    f2 = HandshakeFrame.decode(await reader.readline(), want_sig1=True)
    f3 = HandshakeFrame(f2.version, f2.initiator, f2.responder, f2.nonce, f2.sig1, me.sign(b"something else"))
    writer.write(f3.encode())
    assert json.loads(await asyncio.wait_for(reader.readline(), 5))["accepted"] is False
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert svc.stats["handshake_bad_sig2"] == 1


async def test_silent_connection_times_out(cluster):
    svc = cluster.services[0]
    reader, _writer = await asyncio.open_connection("127.0.0.1", svc.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert svc.stats["handshake_timeout"] == 1


@pytest.mark.parametrize("wire,kind", [
    (b"\x07\x00\x01\x00", "unknown_type"),
    (b"\x02\x00\x05" + bytes(5), "bad_length"),
    (b"\x04\x00\x20\x00\x00\x05" + bytes(29), "send_size"),
])
async def test_malformed_frames_close_only_that_link(cluster, wire, kind):
    svc = cluster.services[0]
    a, b, cid, bid = await pair(svc)
    c, d, cid2, did = await pair(svc)
    b.writer.write(wire)
    assert await b.closed_by_server()
    await a.until(lambda evs: ChannelEnded(cid, b.machine.local.public, "remote_closed") in evs)
    assert svc.stats[f"protocol_{kind}"] == 1
    c.machine.send(cid2, b"unaffected")
    c.flush()
    await d.until(lambda evs: Message(did, b"unaffected") in evs)


async def test_257th_channel_is_refused_over_tcp(cluster):
    svc = cluster.services[0]
    b = await RawLink.connect(svc)
    a1, a2 = await RawLink.connect(svc), await RawLink.connect(svc)
    for i in range(256):
        (a1 if i % 2 else a2).machine.open_channel(b.machine.local.public)
    a1.flush()
    a2.flush()
    await b.until(lambda evs: sum(type(e) is IncomingChannel for e in evs) == 256, timeout=30)
    late = await RawLink.connect(svc)
    cid = late.machine.open_channel(b.machine.local.public)
    late.flush()
    await late.until(lambda evs: ChannelRefused(cid, b.machine.local.public, "refused") in evs)
    assert svc.switch.stats["refused_channels_full"] == 1
    await a1.until(lambda evs: sum(type(e) is ChannelReady for e in evs) == 128, timeout=30)


async def test_stalled_link_is_closed_and_others_keep_going(cluster):
    svc = cluster.services[0]
    fast_a, fast_b, fcid, fbid = await pair(svc)
    sender = await RawLink.connect(svc)
    sink = await RawLink.connect(svc, rcvbuf=4096)  # never reads after the channel opens
    cid = sender.machine.open_channel(sink.machine.local.public)
    sender.flush()
    await sink.until(lambda evs: any(type(e) is IncomingChannel for e in evs))
    await sender.until(lambda evs: any(type(e) is ChannelReady for e in evs))
    sender.events.clear()
    chunk = bytes(60000)
    for _ in range(200):  # at most 12 MB; stops as soon as the server gives up on the sink
        if svc.stats.get("links_stalled") or sender.writer.transport.is_closing():
            break
        sender.machine.send(cid, chunk)
        sender.flush()
        fast_a.machine.send(fcid, b"tick")
        fast_a.flush()
        await asyncio.sleep(0.02)
    await sender.until(lambda evs: any(type(e) is ChannelEnded for e in evs), timeout=10)
    assert svc.closes["stalled"] == 1
    fast_a.machine.send(fcid, b"after")
    fast_a.flush()
    await fast_b.until(lambda evs: Message(fbid, b"after") in evs)


async def test_newest_link_of_a_key_wins(cluster):
    svc = cluster.services[0]
    me = keys.SecretKey.generate()
    old = await RawLink.connect(svc, me)
    await RawLink.connect(svc, me)
    assert await old.closed_by_server()
    assert svc.closes["duplicate"] == 1
    assert len(svc.switch.links) == 1


async def test_link_limit_answers_accepted_false(cluster):
    svc = cluster.services[0]
    held = [await RawLink.connect(svc) for _ in range(8)]  # referenced: a collected link would close
    with pytest.raises(HandshakeError) as exc:
        await RawLink.connect(svc)
    assert exc.value.reason == "refused"
    assert svc.stats["handshake_full"] == 1
    assert len(held) == len(svc.switch.links) == 8
