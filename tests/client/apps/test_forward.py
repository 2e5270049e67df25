"""`burrow forward` between two burrow clients: a local port carried to an allowed target on the peer."""

from __future__ import annotations

import argparse
import asyncio
import os

import pytest

from burrow.client.apps.forward import LocalSpec, build_parser, parse_allow, run

pytestmark = pytest.mark.timeout(60)


def test_specs():
    assert LocalSpec.parse("8000") == LocalSpec(8000, "127.0.0.1", 8000)
    assert LocalSpec.parse("0:db.internal:5432") == LocalSpec(0, "db.internal", 5432)
    assert parse_allow("127.0.0.1:22") == ("127.0.0.1", 22)
    with pytest.raises(ValueError):
        LocalSpec.parse("1:2")


async def echo_server():
    async def handle(r, w):
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_forward_to_allowed_target_and_refuse_others(wormhole_servers):
    echo, echo_port = await echo_server()
    stop = asyncio.Event()
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    code_f: asyncio.Future = asyncio.get_running_loop().create_future()

    def args(*extra) -> argparse.Namespace:
        return build_parser().parse_args(["--relay-url", wormhole_servers.relay_url, "--transit-helper",
                                          wormhole_servers.transit_helper, *extra])

    a = asyncio.ensure_future(run(args("--local", f"0:127.0.0.1:{echo_port}", "--local", "0:127.0.0.1:1"),
                                  on_code=code_f.set_result, on_ready=ready.set_result,
                                  stop=stop))
    code = await code_f
    b = asyncio.ensure_future(run(args("--code", code, "--allow", f"127.0.0.1:{echo_port}"), stop=stop))
    ports = await ready

    payload = os.urandom(3_000_000)

    async def roundtrip():
        r, w = await asyncio.open_connection("127.0.0.1", ports[0])
        w.write(payload)
        await w.drain()
        w.write_eof()
        got = await r.read()
        w.close()
        return got

    results = await asyncio.wait_for(asyncio.gather(*(roundtrip() for _ in range(4))), 30)
    assert all(got == payload for got in results)

    # the second forward points at a target the peer did not allow: the connection is closed, no data
    r, w = await asyncio.open_connection("127.0.0.1", ports[1])
    assert await asyncio.wait_for(r.read(), 30) == b""
    w.close()
    stop.set()
    assert await asyncio.wait_for(asyncio.gather(a, b), 20) == [0, 0]
    echo.close()
