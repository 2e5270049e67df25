"""common/resp.py against Debian's redis-server started by the test: order of replies and pushes, the
bound on commands in flight, reconnecting after a restart."""

import asyncio

import pytest

from burrow.common.resp import LeanClient, ReplyError, connect, parse_url
from harness.redis import RedisServer

PUBLISH = "redis.call('SPUBLISH', KEYS[1], ARGV[1]) return 2"


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


def test_urls():
    t = parse_url("redis://user:p%40ss@h:6380/2")
    assert (t.host, t.port, t.db, t.username, t.password) == ("h", 6380, 2, "user", "p@ss")
    t = parse_url("unix:///run/redis.sock?db=3")
    assert (t.path, t.db) == ("/run/redis.sock", 3)
    with pytest.raises(ValueError):
        parse_url("rediss://h:6380")


def test_replies_and_pushes_keep_the_stream_order(redis_server):
    """A batch's callback runs before any push written after its last reply, and after those before it:
    the mailbox relies on this to deliver its own messages and other replicas' in order."""

    async def main():
        seen = []
        conn = await connect(redis_server.url, lambda push: seen.append(("push", push[0], push[2])))
        conn.send("SSUBSCRIBE", "ch")
        while not seen:
            await asyncio.sleep(0.01)
        finished = asyncio.get_running_loop().create_future()

        def done(tag):
            def record(replies):
                seen.append(("reply", tag, replies))
                if tag == "last":
                    finished.set_result(None)
            return record

        # no await in between: the three batches' replies and the two pushes arrive in one read
        conn.submit([("EVAL", PUBLISH, 1, "ch", "a")], done("first"))
        conn.submit([("ECHO", "x")], done("second"))
        conn.submit([("EVAL", PUBLISH, 1, "ch", "b"), ("EVAL", "return redis.error_reply('E1 no')", 0)],
                    done("last"))
        await asyncio.wait_for(finished, 5)
        conn.close()
        return seen[1:]

    seen = asyncio.run(main())
    assert [s[:2] for s in seen] == [("push", b"smessage"), ("reply", "first"), ("reply", "second"),
                                     ("push", b"smessage"), ("reply", "last")]
    assert seen[0][2] == b"a" and seen[3][2] == b"b"
    assert seen[4][2][0] == 2 and isinstance(seen[4][2][1], ReplyError)  # an error reply is a value


def test_commands_in_flight_are_bounded(redis_server):
    async def main():
        conn = await connect(redis_server.url, max_in_flight=2, timeout=30)
        other = await connect(redis_server.url)
        blocked = asyncio.create_task(conn.execute([("BLPOP", "k", 0)]))
        while conn.in_flight != 1:
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(conn.execute([("PING",), ("PING",)]))  # 1 + 2 > 2: held back
        await asyncio.sleep(0.2)
        held = (conn.in_flight, waiting.done())
        with pytest.raises(BufferError):
            conn.submit([("PING",)] * 3, lambda _: None)
        await other.execute([("LPUSH", "k", "v")])
        first, second = await asyncio.wait_for(asyncio.gather(blocked, waiting), 5)
        conn.close()
        other.close()
        return held, first, second

    held, first, second = asyncio.run(main())
    assert held == (1, False)  # the two PINGs were not written while the BLPOP was out
    assert first == [[b"k", b"v"]]
    assert second == [b"PONG", b"PONG"]


def test_lean_client_reconnects_after_a_restart(redis_server):
    async def main():
        connected = []

        async def on_connect(conn):
            connected.append(conn)

        client = LeanClient(redis_server.url, on_connect=on_connect)
        assert await client.execute([("SET", "k", "1")]) == [b"OK"]
        blocked = asyncio.create_task(client.execute([("BLPOP", "nothing", 0)]))
        await asyncio.sleep(0.1)
        redis_server.stop()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(blocked, 5)  # in flight when Redis went away: failed, not hung
        with pytest.raises(OSError):
            await client.execute([("PING",)])  # Redis still down
        redis_server.start()
        replies = await client.execute([("GET", "k")])  # AOF kept the write
        client.close()
        return replies, len(connected)

    replies, connections = asyncio.run(main())
    assert replies == [b"1"]
    assert connections == 2
