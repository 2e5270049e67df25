"""Fixtures of the mailbox tests: the protocol driver on each channel store, and the Redis they need."""

import pytest
import uvloop

from harness.redis import RedisServer

from .vectors import Harness, RedisHarness


def pytest_asyncio_loop_factories(config, item):
    """In-process servers run on the event loop burrow-mailbox runs by default (--loop uvloop)."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """Debian's redis-server on 127.0.0.1 (AOF, appendfsync always), one for the whole session."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis"])
def make(request):
    """`make(**kw)` builds the protocol driver on the single-node store, then on the Redis store."""
    made = []

    def factory(**kw):
        if request.param == "memory":
            h = Harness(**kw)
        else:
            server = request.getfixturevalue("redis_server")
            server.cli("FLUSHALL")
            h = RedisHarness(server.url, **kw)
        made.append(h)
        return h

    yield factory
    for h in made:
        if isinstance(h, RedisHarness):
            h.close()
