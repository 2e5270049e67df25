"""The messaging client library against in-process servers: channels across two servers, re-delegation."""

from __future__ import annotations

import asyncio

import pytest

from burrow.client.messaging.link import ChannelClosedError
from tests.packet_relay.messaging_server.inprocess import Cluster


async def test_library_channels_across_two_servers():
    c = Cluster()
    await c.start(servers=2)
    try:
        s1, s2 = c.services
        a, b = await c.client(s1), await c.client(s2)
        ch = await a.dial(b.public)
        inc = await asyncio.wait_for(b.accept(), 5)
        for i in range(30):
            await ch.send(b"a%d" % i)
            await inc.send(b"b%d" % i)
        assert [await inc.recv() for _ in range(30)] == [b"a%d" % i for i in range(30)]
        assert [await ch.recv() for _ in range(30)] == [b"b%d" % i for i in range(30)]
        assert set(a.links) == {s1.key.public, s2.key.public}  # a linked to b's server to reach it
        entry = await a.discovery.entry(a.public)
        assert set(entry.client.delegated_servers) == {s1.key.public, s2.key.public}
        await ch.close()
        assert ch.closed_reason == "closed"
        with pytest.raises(ChannelClosedError):
            await inc.recv()
    finally:
        await c.stop()


async def test_client_re_delegates_when_its_server_dies():
    c = Cluster()
    await c.start(servers=2)
    try:
        s1, s2 = c.services
        b = await c.client(s1)  # b names s1; it may move to any other server
        b.wanted = []
        a = await c.client(s2)
        await s1.stop()
        async with asyncio.timeout(10):
            while list(b.links) != [s2.key.public]:
                await asyncio.sleep(0.05)
        async with asyncio.timeout(10):
            while (await a.discovery.entry(b.public)).client.delegated_servers != (s2.key.public,):
                await asyncio.sleep(0.05)
        ch = await a.dial(b.public)
        inc = await asyncio.wait_for(b.accept(), 5)
        await ch.send(b"found you")
        assert await inc.recv() == b"found you"
    finally:
        await c.stop()
