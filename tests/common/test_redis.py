"""common/redis.py against Debian's redis-server started by the test: connect, health, back-off, Cluster."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from burrow.common.redis import Backoff, RedisLink, RedisMetrics, key, redacted
from harness.redis import RedisCluster, RedisServer


def test_keys_carry_the_hash_tag_and_refuse_braces():
    assert key("mailbox", "app1", "nameplate", "4") == "burrow:mailbox:{app1}:nameplate:4"
    with pytest.raises(ValueError):
        key("mailbox", "a{b}")


def test_backoff_grows_to_its_cap_with_jitter_and_resets():
    b = Backoff(base=0.1, cap=1.0, rand=lambda: 1.0)
    assert [round(b.next_delay(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next_delay() == 0.1
    low = Backoff(base=0.1, cap=1.0, rand=lambda: 0.0)
    assert low.next_delay() == 0.05  # never zero: a failure always waits a little


def test_redacted_hides_only_the_password():
    assert redacted("redis://:s3cret@h:6379/0") == "redis://***@h:6379/0"
    assert redacted("rediss://user:s3cret@h:6380") == "rediss://user:***@h:6380"
    assert redacted("unix:///run/redis.sock") == "unix:///run/redis.sock"


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


def _metric(registry, name):
    return registry.get_sample_value(name, {"replica": "r1"})


async def test_link_works_reports_health_and_recovers_after_a_restart(redis_server):
    registry = CollectorRegistry()
    link = RedisLink(redis_server.url, RedisMetrics(registry, "test", "r1"), ping_interval=0.05)
    changes = []
    link.on_health_change(changes.append)
    await link.start()
    try:
        assert link.healthy and not link.cluster
        await link.timed(link.client.set(key("test", "t", "k"), "v"))
        assert await link.client.get(key("test", "t", "k")) == b"v"
        assert _metric(registry, "burrow_test_redis_up") == 1
        assert _metric(registry, "burrow_test_redis_roundtrip_seconds_count") >= 2

        redis_server.kill()
        for _ in range(200):
            if not link.healthy:
                break
            await asyncio.sleep(0.02)
        assert not link.healthy and link.last_error
        assert _metric(registry, "burrow_test_redis_up") == 0
        await asyncio.sleep(1.0)
        # a second of downtime costs a handful of attempts, not a spin
        attempts = _metric(registry, "burrow_test_redis_failures_total")
        assert 1 <= attempts <= 20

        redis_server.start()
        for _ in range(400):
            if link.healthy:
                break
            await asyncio.sleep(0.02)
        assert link.healthy
        assert await link.client.get(key("test", "t", "k")) == b"v"  # AOF always: the write survived SIGKILL
        assert changes == [True, False, True]  # up at start, down on the kill, up again
    finally:
        await link.close()


async def test_start_gives_up_with_a_clear_error_when_nothing_listens(tmp_path):
    from harness.ports import free_port

    link = RedisLink(f"redis://:pw@127.0.0.1:{free_port()}/0", backoff=Backoff(base=0.01, cap=0.05))
    with pytest.raises(ConnectionError, match=r"cannot reach Redis at redis://\*\*\*@127\.0\.0\.1"):
        await link.start(connect_deadline=0.3)


async def test_a_cluster_is_recognised_and_tagged_keys_share_a_slot(tmp_path):
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        link = RedisLink(cluster.url)
        await link.start()
        try:
            assert link.cluster
            a, b = key("mailbox", "app", "x"), key("mailbox", "app", "y")
            # one MULTI across two keys only works when they are in one slot
            async with link.client.pipeline(transaction=True) as pipe:
                pipe.set(a, "1").set(b, "2")
                assert await pipe.execute() == [True, True]
            assert link.client.keyslot(a) == link.client.keyslot(b)
            slots = {link.client.keyslot(key("mailbox", f"tag{i}", "x")) for i in range(50)}
            assert len(slots) > 1  # different tags spread over the cluster
        finally:
            await link.close()
    finally:
        cluster.stop()
