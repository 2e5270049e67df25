"""The discovery's HTTP API in one process with a memory store and a clock the tests move."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from burrow.client.messaging.discovery import DiscoveryClient, DiscoveryError, Publisher
from burrow.discovery.config import DiscoveryConfig
from burrow.discovery.server import DiscoveryServer
from burrow.messaging import keys
from burrow.messaging.entry import ClientInfo, Entry, ServerInfo
from harness.redis import RedisCluster, RedisServer
from tests.messaging import vectors as v

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="no")
    yield server
    server.stop()


async def _discovery(redis_url: str | None):
    """A discovery on a clock the test moves, with `test_clock` and a `test_client` attached."""
    clock = Clock()
    server = DiscoveryServer(DiscoveryConfig(host="127.0.0.1", port=0, admin_port=0, entry_ttl=60.0,
                                             redis_url=redis_url), clock=clock)
    await server.start()
    server.test_clock = clock
    server.test_client = DiscoveryClient(f"http://127.0.0.1:{server.port}")
    return server


@pytest.fixture(params=["memory", "redis"])
async def disc(request):
    redis_url = None
    if request.param == "redis":
        rs = request.getfixturevalue("redis_server")
        rs.cli("FLUSHALL")
        redis_url = rs.url
    server = await _discovery(redis_url)
    yield server
    await server.test_client.close()
    await server.stop()


@pytest.fixture
async def memory_disc():
    """Memory store only: Redis expires entries by its own clock (test_redis_entries_expire)."""
    server = await _discovery(None)
    yield server
    await server.test_client.close()
    await server.stop()


def client_entry(secret: keys.SecretKey, seq: int, ts: float, servers=()) -> Entry:
    return Entry(secret.public, seq, int(ts * 1e9), client=ClientInfo(tuple(servers))).signed(secret)


def server_entry(secret: keys.SecretKey, seq: int, ts: float, conns: int, addr="127.0.0.1:1") -> Entry:
    return Entry(secret.public, seq, int(ts * 1e9), server=ServerInfo(addr, "", conns)).signed(secret)


async def raw(server, method: str, path: str, body: bytes | None = None) -> tuple[int, dict | list]:
    async with aiohttp.ClientSession() as s:
        async with s.request(method, f"http://127.0.0.1:{server.port}/messaging-discovery{path}", data=body) as r:
            return r.status, json.loads(await r.read())


async def test_new_entry_then_iterations(disc):
    me = keys.SecretKey.generate()
    status, reply = await raw(disc, "POST", "/entry/", client_entry(me, 0, T0).to_json())
    assert (status, reply) == (200, {"message": "wrote a new entry", "code": 200})
    got = await disc.test_client.entry(me.public)
    assert got == client_entry(me, 0, T0)  # libsecp256k1 signs deterministically (RFC 6979)
    status, reply = await raw(disc, "POST", "/entry/", client_entry(me, 1, T0 + 1).to_json())
    assert (status, reply["message"]) == (200, "wrote new entry iteration")


async def test_entry_is_served_exactly_as_signed(disc):
    me = keys.SecretKey.generate()
    entry = client_entry(me, 0, T0, [keys.SecretKey.generate().public])
    await disc.test_client.post(entry)
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{disc.port}/messaging-discovery/entry/{me.public.hex()}") as r:
            assert r.status == 200 and r.content_type == "application/json"
            assert await r.read() == entry.to_json()


async def test_skywire_signed_entries_are_accepted(disc):
    for text in (v.SKYWIRE_CLIENT_ENTRY, v.SKYWIRE_CLIENT_ENTRY_NIL_SERVERS):
        obj = json.loads(text)
        if obj["sequence"]:
            continue  # a later iteration: the discovery wants 0 first
        disc.test_clock.now = obj["timestamp"] / 1e9
        status, reply = await raw(disc, "POST", "/entry/", text.encode())
        assert status == 200, reply
    obj = json.loads(v.SKYWIRE_SERVER_ENTRY)
    disc.test_clock.now = obj["timestamp"] / 1e9
    status, reply = await raw(disc, "POST", "/entry/", v.SKYWIRE_SERVER_ENTRY.encode())
    assert (status, reply["message"]) == (409, "entry validation error: new entry has non-zero sequence")


@pytest.mark.parametrize("seq,dt,status,reason", [
    (1, 1, 409, "sequence"),      # same sequence again
    (0, 2, 409, "sequence"),      # older sequence
    (3, 2, 409, "sequence"),      # a gap
    (2, 0, 409, "timestamp"),     # next sequence, not a later timestamp
])
async def test_stale_and_wrong_sequences_are_refused(disc, seq, dt, status, reason):
    me = keys.SecretKey.generate()
    await disc.test_client.post(client_entry(me, 0, T0))
    await disc.test_client.post(client_entry(me, 1, T0 + 1))
    got, reply = await raw(disc, "POST", "/entry/", client_entry(me, seq, T0 + dt).to_json())
    assert got == status, reply
    assert disc.stats.refused[reason] == 1
    assert (await disc.test_client.entry(me.public)).sequence == 1


async def test_bad_signatures_are_refused_401(disc):
    me, other = keys.SecretKey.generate(), keys.SecretKey.generate()
    forged = Entry(me.public, 0, int(T0 * 1e9), client=ClientInfo(())).signed(other)
    status, reply = await raw(disc, "POST", "/entry/", forged.to_json())
    assert (status, reply["message"]) == (401, "invalid signature")
    tampered = json.loads(client_entry(me, 0, T0).to_json())
    tampered["client"]["delegated_servers"] = [other.public.hex()]
    status, _ = await raw(disc, "POST", "/entry/", json.dumps(tampered).encode())
    assert status == 401
    assert await disc.test_client.entry(me.public) is None


@pytest.mark.parametrize("body,status", [
    (b"not json", 400),
    (b"[]", 400),
    (b'{"version":"0.0.1"}', 400),
    (b"{" + b" " * 20000 + b"}", 413),
])
async def test_malformed_posts(disc, body, status):
    got, reply = await raw(disc, "POST", "/entry/", body)
    assert got == status and reply["code"] == status


async def test_entry_without_client_or_server_and_unsigned(disc):
    me = keys.SecretKey.generate()
    bare = Entry(me.public, 0, int(T0 * 1e9)).signed(me)
    status, reply = await raw(disc, "POST", "/entry/", bare.to_json())
    assert (status, reply["message"]) == (400, "entry validation error: entry has neither client or server field")
    unsigned = Entry(me.public, 0, int(T0 * 1e9), client=ClientInfo(()))
    status, reply = await raw(disc, "POST", "/entry/", unsigned.to_json())
    assert (status, reply["message"]) == (400, "entry validation error: entry has no signature")


async def test_timestamps_far_from_now_are_refused(disc):
    me = keys.SecretKey.generate()
    for ts in (T0 - 61, T0 + 61):
        status, _ = await raw(disc, "POST", "/entry/", client_entry(me, 0, ts).to_json())
        assert status == 400


async def test_get_unknown_and_bad_keys(disc):
    status, reply = await raw(disc, "GET", "/entry/" + keys.SecretKey.generate().public.hex())
    assert (status, reply) == (404, {"message": "entry of public key is not found", "code": 404})
    status, _ = await raw(disc, "GET", "/entry/zz")
    assert status == 400


async def test_entries_expire_and_start_again_from_zero(memory_disc):
    disc = memory_disc
    me, srv = keys.SecretKey.generate(), keys.SecretKey.generate()
    await disc.test_client.post(client_entry(me, 0, T0))
    await disc.test_client.post(server_entry(srv, 0, T0, 10))
    disc.test_clock.now = T0 + 59
    assert await disc.test_client.entry(me.public) is not None
    disc.test_clock.now = T0 + 61
    assert await disc.test_client.entry(me.public) is None
    assert await disc.test_client.available_servers() == []
    with pytest.raises(DiscoveryError) as exc:
        await disc.test_client.post(client_entry(me, 1, T0 + 61))
    assert exc.value.status == 409
    await disc.test_client.post(client_entry(me, 0, T0 + 61))


async def test_available_servers_most_room_first_and_only_with_room(disc):
    keys_ = [keys.SecretKey.generate() for _ in range(4)]
    for k, conns in zip(keys_, (5, 50, 0, 20), strict=True):
        await disc.test_client.post(server_entry(k, 0, T0, conns))
    await disc.test_client.post(client_entry(keys.SecretKey.generate(), 0, T0))
    listed = await disc.test_client.available_servers()
    assert [e.server.available_connections for e in listed] == [50, 20, 5]


async def test_publisher_follows_the_stored_sequence(disc):
    me = keys.SecretKey.generate()
    pub = Publisher(disc.test_client, me)
    make = lambda seq, ts: Entry(me.public, seq, ts, client=ClientInfo(()))  # noqa: E731
    disc.test_clock.now = time.time()
    assert (await pub.publish(make)).sequence == 0
    assert (await pub.publish(make)).sequence == 1
    other = Publisher(disc.test_client, me)  # a restarted process that does not know the sequence
    assert (await other.publish(make)).sequence == 2
    assert (await pub.publish(make)).sequence == 3  # 409 for 2, reads 2 back, writes 3


async def test_metrics_name_reasons_not_keys(disc):
    me = keys.SecretKey.generate()
    await raw(disc, "POST", "/entry/", b"nope")
    await disc.test_client.post(client_entry(me, 0, T0))
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{disc.admin_port}/metrics") as r:
            text = await r.text()
        async with s.get(f"http://127.0.0.1:{disc.admin_port}/readyz") as r:
            assert r.status == 200
    assert 'burrow_discovery_refused_total{reason="bad_json"} 1.0' in text
    assert 'burrow_discovery_writes_total{kind="new"} 1.0' in text
    assert me.public.hex() not in text


async def _replica(redis_server, ttl: float = 60.0) -> DiscoveryServer:
    server = DiscoveryServer(DiscoveryConfig(host="127.0.0.1", port=0, admin_port=0, entry_ttl=ttl,
                                             redis_url=redis_server.url))
    await server.start()
    return server


async def test_two_replicas_serve_one_view(redis_server):
    r1, r2 = await _replica(redis_server), await _replica(redis_server)
    c1, c2 = DiscoveryClient(f"http://127.0.0.1:{r1.port}"), DiscoveryClient(f"http://127.0.0.1:{r2.port}")
    try:
        me, srv = keys.SecretKey.generate(), keys.SecretKey.generate()
        now = time.time()
        await c1.post(client_entry(me, 0, now))
        assert (await c2.entry(me.public)) == client_entry(me, 0, now)
        await c2.post(client_entry(me, 1, now + 0.001))
        with pytest.raises(DiscoveryError) as exc:  # replica 1 sees replica 2's write
            await c1.post(client_entry(me, 1, now + 0.002))
        assert exc.value.status == 409
        await c2.post(server_entry(srv, 0, now, 7))
        assert [e.static for e in await c1.available_servers()] == [srv.public]
        # the same next sequence posted to both replicas at once: exactly one is accepted
        results = await asyncio.gather(c1.post(client_entry(me, 2, now + 0.01)),
                                       c2.post(client_entry(me, 2, now + 0.02)), return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["DiscoveryError", "NoneType"]
    finally:
        for c in (c1, c2):
            await c.close()
        for r in (r1, r2):
            await r.stop()


async def test_redis_entries_expire(redis_server):
    r = await _replica(redis_server, ttl=1.0)
    c = DiscoveryClient(f"http://127.0.0.1:{r.port}")
    try:
        me, srv = keys.SecretKey.generate(), keys.SecretKey.generate()
        await c.post(client_entry(me, 0, time.time()))
        await c.post(server_entry(srv, 0, time.time(), 3))
        assert await c.entry(me.public) is not None
        async with asyncio.timeout(10):
            while await c.entry(me.public) is not None or srv.public in {
                    e.static for e in await c.available_servers()}:
                await asyncio.sleep(0.1)
        await c.post(client_entry(me, 0, time.time()))  # after expiry a key starts again from 0
    finally:
        await c.close()
        await r.stop()


async def test_redis_outage_is_503_and_not_ready(tmp_path):
    rs = RedisServer(tmp_path, appendfsync="no")
    r = await _replica(rs)
    c = DiscoveryClient(f"http://127.0.0.1:{r.port}")
    try:
        rs.kill()
        with pytest.raises(DiscoveryError) as exc:
            await c.entry(keys.SecretKey.generate().public)
        assert exc.value.status == 503
        assert r.stats.store_errors >= 1
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{r.admin_port}/readyz") as reply:
                assert reply.status == 503
            async with s.get(f"http://127.0.0.1:{r.admin_port}/metrics") as reply:
                assert "burrow_discovery_redis_up" in await reply.text()
    finally:
        await c.close()
        await r.stop()


@pytest.mark.slow
async def test_replicas_on_a_redis_cluster(tmp_path):
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        r1, r2 = await _replica(cluster.nodes[0]), await _replica(cluster.nodes[2])
        c1, c2 = DiscoveryClient(f"http://127.0.0.1:{r1.port}"), DiscoveryClient(f"http://127.0.0.1:{r2.port}")
        try:
            now = time.time()
            clients = [keys.SecretKey.generate() for _ in range(12)]  # keys spread over the cluster's slots
            servers = [keys.SecretKey.generate() for _ in range(3)]
            for i, k in enumerate(clients):
                await (c1 if i % 2 else c2).post(client_entry(k, 0, now))
            for i, k in enumerate(servers):
                await c1.post(server_entry(k, 0, now, 10 + i))
            for k in clients:
                assert (await c2.entry(k.public)).sequence == 0
            assert [e.static for e in await c2.available_servers()] == [k.public for k in reversed(servers)]
            results = await asyncio.gather(c1.post(client_entry(clients[0], 1, now + 0.01)),
                                           c2.post(client_entry(clients[0], 1, now + 0.02)), return_exceptions=True)
            assert sorted(type(r).__name__ for r in results) == ["DiscoveryError", "NoneType"]
        finally:
            for c in (c1, c2):
                await c.close()
            for r in (r1, r2):
                await r.stop()
    finally:
        cluster.stop()
