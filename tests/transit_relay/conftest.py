import asyncio
import json
import socket

import pytest

from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.server import TransitServer
from harness.redis import RedisServer

TOKEN = b"0123456789abcdef" * 4
# the three ways a TCP<->TCP pair is moved: splice in pump threads (here from its first bytes on), splice
# from the event loop, copy
PUMPS = {"threads": dict(splice=True, splice_threads_after=0), "loop": dict(splice=True, splice_threads=0),
         "copy": dict(splice=False)}


def hs(side: bytes | None = None, token: bytes = TOKEN) -> bytes:
    if side is None:
        return b"please relay " + token + b"\n"
    return b"please relay " + token + b" for side " + side * (16 // len(side)) + b"\n"


def read_events(path, event="session"):
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return []
    return [r for r in map(json.loads, lines) if r["event"] == event]


async def wait_for(predicate, timeout=5.0):
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


@pytest.fixture
async def make_server(tmp_path):
    servers = []

    async def make(**overrides):
        settings = dict(host="127.0.0.1", port=0, websocket_port=0, admin_port=0,
                        event_log=str(tmp_path / f"transit{len(servers)}.jsonl"))
        settings.update(overrides)
        server = TransitServer(TransitConfig(**settings))
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def server(make_server):
    return await make_server()


async def connect(srv):
    return await asyncio.open_connection("127.0.0.1", srv.port)


def raw_socket(srv) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port))


CLUSTER_SECRET = b"0123456789abcdef0123456789abcdef"


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path / "redis", appendfsync="no")
    yield server
    server.kill()


@pytest.fixture
async def cluster(tmp_path, redis):
    (tmp_path / "secret").write_bytes(CLUSTER_SECRET)
    replicas: list[TransitServer] = []

    async def make(n: int = 2, **overrides) -> list[TransitServer]:
        for _ in range(n):
            i = len(replicas)
            settings = dict(host="127.0.0.1", port=0, websocket_port=0, admin_port=0, peer_port=0,
                            redis_url=redis.url, peer_secret_file=str(tmp_path / "secret"),
                            node_name=f"transit-{i}", event_log=str(tmp_path / f"transit-{i}.jsonl"))
            settings.update(overrides)
            server = TransitServer(TransitConfig(**settings))
            await server.start()
            replicas.append(server)
        await wait_for(lambda: all(r.cluster.link.healthy for r in replicas), timeout=10)
        return replicas

    yield make
    for server in replicas:
        if server._ready:
            await server.stop()
