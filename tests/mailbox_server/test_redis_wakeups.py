"""A replica on a real redis-server answers from the Redis read itself: at a client's pace each request
arrives alone, and a task's wake-up per batch or per reply was a large part of its cost. The exchange must
still be the single node's, message for message and in order."""

import asyncio

import pytest
from websockets.asyncio.client import connect

from burrow.mailbox_server.server import MailboxServer

from .test_server import call, make_config, recv

pytestmark = pytest.mark.timeout(120)


def count_sets(event: asyncio.Event) -> list[int]:
    """Count how often `event` is set from now on (it keeps working as before)."""
    sets = [0]
    real = event.set

    def counted() -> None:
        sets[0] += 1
        real()

    event.set = counted
    return sets


async def exchange(port: int, app: str) -> None:
    """Two clients of one app: allocate, claim, open, three messages each way, release, close."""
    url = f"ws://127.0.0.1:{port}/v1"
    async with connect(url) as a, connect(url) as b:
        await recv(a)
        await recv(b)
        await call(a, type="bind", appid=app, side="sa")
        await call(a, type="allocate")
        assert [(await recv(a))["type"] for _ in range(2)] == ["ack", "ack"]
        nameplate = (await recv(a))["nameplate"]
        await call(a, type="claim", nameplate=nameplate)
        assert (await recv(a))["type"] == "ack"
        mailbox = (await recv(a))["mailbox"]
        await call(a, type="open", mailbox=mailbox)
        assert (await recv(a))["type"] == "ack"
        await call(b, type="bind", appid=app, side="sb")
        await call(b, type="claim", nameplate=nameplate)
        await call(b, type="open", mailbox=mailbox)
        assert [(await recv(b))["type"] for _ in range(4)] == ["ack", "ack", "claimed", "ack"]
        for i in range(3):
            await call(a, type="add", phase=str(i), body=f"a{i}")
            await call(b, type="add", phase=str(i), body=f"b{i}")
        got_a = [await recv(a) for _ in range(9)]  # 3 acks, its own 3 echoes, b's 3 messages
        got_b = [await recv(b) for _ in range(9)]
        for got, mine, theirs in ((got_a, "a", "b"), (got_b, "b", "a")):
            bodies = [g["body"] for g in got if g["type"] == "message"]
            assert [x for x in bodies if x[0] == mine] == [f"{mine}{i}" for i in range(3)]
            assert [x for x in bodies if x[0] == theirs] == [f"{theirs}{i}" for i in range(3)]
        for ws in (a, b):
            await call(ws, type="release")
            await call(ws, type="close", mood="happy")
        for ws in (a, b):
            got = [await recv(ws) for _ in range(4)]
            assert [g["type"] for g in got] == ["ack", "released", "ack", "closed"]


async def test_requests_and_replies_on_redis_wake_no_task(tmp_path, redis_server):
    srv = MailboxServer(make_config(tmp_path, redis_url=redis_server.url, replica_id="r-wake"))
    await srv.start()
    try:
        await exchange(srv.port, "app")  # the first open of an app subscribes (through the runner task)
        flusher, runner = count_sets(srv._wake), count_sets(srv.store._wake)
        await exchange(srv.port, "app")
        assert (flusher[0], runner[0]) == (0, 0)
    finally:
        await srv.stop()
    assert not srv.conns
