"""`--proxy-protocol` in burrow-transit, burrow-mailbox and burrow-relay behind a real HAProxy.

HAProxy listens on 127.0.0.1 and connects to the servers from 127.0.0.1 with `send-proxy-v2` (or
`send-proxy`, v1); the clients bind 127.0.0.2 and 127.0.0.3 first, so only the PROXY header can tell the
server who they are. Per-IP limits of 1 then prove the servers count the clients, not the balancer.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from websockets.asyncio.client import connect as ws_connect

from burrow.mailbox_server.config import MailboxConfig
from burrow.mailbox_server.server import MailboxServer
from burrow.packet_relay.server import RelayServer
from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.server import TransitServer
from harness.haproxy import HAProxy
from harness.ports import free_port
from tests.packet_relay.derp_util import relay_config
from tests.transit_relay.conftest import hs, read_events, wait_for

TIMEOUT = 5.0


def front(name: str, port: int, backend_port: int, option: str = "send-proxy-v2") -> str:
    return (f"frontend fe_{name}\n    bind 127.0.0.1:{port}\n    default_backend be_{name}\n"
            f"backend be_{name}\n    server s1 127.0.0.1:{backend_port} {option}\n")


async def open_from(source_ip: str, port: int):
    """A TCP connection to 127.0.0.1:port from source_ip."""
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source_ip, 0)),
                                  TIMEOUT)


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), TIMEOUT)


def metric(registry, name: str, labels: dict[str, str]) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture
async def transit(tmp_path):
    server = TransitServer(TransitConfig(host="127.0.0.1", port=0, websocket_port=0, admin_port=-1,
                                         event_log=str(tmp_path / "transit.jsonl"), proxy_protocol=True,
                                         max_connections_per_ip=1))
    await server.start()
    yield server
    await server.stop()


@pytest.mark.parametrize("option", ["send-proxy-v2", "send-proxy"])
async def test_transit_counts_the_client_named_in_the_header(tmp_path, transit, option):
    fport, wport = free_port(), free_port()
    hap = HAProxy(tmp_path / "hap", front("tcp", fport, transit.port, option)
                  + front("ws", wport, transit.websocket_port, option))
    try:
        a_r, a_w = await open_from("127.0.0.2", fport)
        b_r, b_w = await open_from("127.0.0.3", fport)
        a_w.write(hs(b"a"))
        b_w.write(hs(b"b"))
        assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
        a_w.write(b"from a")
        b_w.write(b"from b")
        assert await asyncio.wait_for(b_r.readexactly(6), TIMEOUT) == b"from a"
        assert await asyncio.wait_for(a_r.readexactly(6), TIMEOUT) == b"from b"

        # 127.0.0.2 already holds its one connection: a second one from it is refused, by the relay
        c_r, c_w = await open_from("127.0.0.2", fport)
        assert await read_all(c_r) == b"error: relay is full (per_ip)\n"
        c_w.close()
        # the WebSocket port sees the client too: 127.0.0.3 is at its limit, 127.0.0.4 is not
        async with ws_connect(f"ws://127.0.0.1:{wport}", local_addr=("127.0.0.4", 0)) as ws:
            await ws.send(hs(b"c", token=b"f" * 64))
            await asyncio.sleep(0.2)
            assert transit.relay.caps.held_by("127.0.0.4") == 1
        assert metric(transit.registry, "burrow_transit_refusals_total", {"limit": "per_ip"}) == 1
        version = "v2" if option == "send-proxy-v2" else "v1"
        assert metric(transit.registry, "burrow_transit_proxy_protocol_headers_total", {"version": version}) >= 4
        for w in (a_w, b_w):
            w.close()
        await wait_for(lambda: any(e["mood"] == "happy" for e in read_events(transit.config.event_log)))
        assert transit.relay.caps.held_by("127.0.0.1") == 0  # none counted as the balancer's
    finally:
        hap.stop()


async def test_transit_refuses_a_connection_without_the_header(transit):
    reader, writer = await open_from("127.0.0.2", transit.port)  # straight to the relay, no balancer
    writer.write(hs(b"a"))
    reply = await read_all(reader)
    assert reply == (b"error: a PROXY protocol header is required on this port "
                     b"(connect through the load balancer)\n")
    writer.close()
    # a TCP health check (connect, close) is not a refusal
    reader, writer = await open_from("127.0.0.2", transit.port)
    writer.close()
    await asyncio.sleep(0.2)
    assert metric(transit.registry, "burrow_transit_proxy_protocol_refusals_total", {"reason": "missing"}) == 1
    assert metric(transit.registry, "burrow_transit_proxy_protocol_refusals_total", {"reason": "malformed"}) == 0
    assert transit.proxy.waiting == 0
    assert transit.relay.caps.total == 0  # nothing was admitted


async def test_transit_header_timeout_and_garbage_after_the_signature(tmp_path):
    server = TransitServer(TransitConfig(host="127.0.0.1", port=0, websocket_port=-1, admin_port=-1,
                                         proxy_protocol=True))
    await server.start()
    server.proxy.timeout = 0.3
    try:
        reader, writer = await open_from("127.0.0.2", server.port)
        writer.write(b"\r\n\r\n\x00\r\n")  # half a v2 signature, then silence
        assert await read_all(reader) == b"error: no PROXY protocol header in time\n"
        writer.close()
        reader, writer = await open_from("127.0.0.2", server.port)
        writer.write(b"\r\n\r\n\x00\r\nQUIT\n\x99\x11\x00\x0c")
        assert await read_all(reader) == b"error: malformed PROXY protocol header\n"
        writer.close()
        refusals = {r: metric(server.registry, "burrow_transit_proxy_protocol_refusals_total", {"reason": r})
                    for r in ("timeout", "malformed")}
        assert refusals == {"timeout": 1, "malformed": 1}
    finally:
        await server.stop()


async def test_mailbox_welcomes_the_client_by_its_own_address(tmp_path):
    server = MailboxServer(MailboxConfig(host="127.0.0.1", port=0, db=":memory:", admin_port=-1,
                                         proxy_protocol=True, max_connections_per_ip=1))
    await server.start()
    fport = free_port()
    hap = HAProxy(tmp_path / "hap", front("mb", fport, server.port))
    try:
        async with ws_connect(f"ws://127.0.0.1:{fport}/v1", local_addr=("127.0.0.2", 0)) as a, \
                ws_connect(f"ws://127.0.0.1:{fport}/v1", local_addr=("127.0.0.3", 0)) as b:
            for ws, ip in ((a, "127.0.0.2"), (b, "127.0.0.3")):
                welcome = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                assert welcome["welcome"]["your-address"]["ipv4"] == ip
        # without the balancer: a 400 that says why, counted
        reader, writer = await open_from("127.0.0.2", server.port)
        writer.write(b"GET /v1 HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = await read_all(reader)
        assert reply.startswith(b"HTTP/1.1 400 ") and b"PROXY protocol header is required" in reply
        writer.close()
        assert metric(server.metrics.registry, "burrow_mailbox_proxy_protocol_refusals_total",
                      {"reason": "missing"}) == 1
        assert metric(server.metrics.registry, "burrow_mailbox_proxy_protocol_headers_total",
                      {"version": "v2"}) == 2
    finally:
        hap.stop()
        await server.stop()


async def test_relay_counts_the_client_named_in_the_header(tmp_path):
    server = RelayServer(relay_config(tmp_path, proxy_protocol=True, max_connections_per_ip=1),
                         http_ephemeral=True)
    await server.start()
    fport = free_port()
    hap = HAProxy(tmp_path / "hap", front("derp", fport, server.http_port))
    try:
        held_r, held_w = await open_from("127.0.0.2", fport)  # holds 127.0.0.2's one connection
        await asyncio.sleep(0.2)
        probe = b"GET /derp/probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        r, w = await open_from("127.0.0.3", fport)  # another client: served
        w.write(probe)
        assert (await read_all(r)).startswith(b"HTTP/1.1 200 ")
        w.close()
        r, w = await open_from("127.0.0.2", fport)  # 127.0.0.2 again: over its limit
        w.write(probe)
        assert await read_all(r) == b""
        w.close()
        assert server.stats.http["refused_limit"] == 1
        held_w.close()
        # straight to the port, no header: refused with a reason
        r, w = await open_from("127.0.0.3", server.http_port)
        w.write(probe)
        assert b"PROXY protocol header is required" in await read_all(r)
        w.close()
        assert metric(server.prometheus, "burrow_relay_proxy_protocol_refusals_total", {"reason": "missing"}) == 1
    finally:
        hap.stop()
        await server.stop()


async def test_transit_a_local_header_is_a_health_check_until_a_byte_follows(tmp_path, transit):
    from burrow.wire.proxy_protocol import encode_v2

    for _ in range(3):  # a balancer's health checks: LOCAL header, then close
        reader, writer = await open_from("127.0.0.2", transit.port)
        writer.write(encode_v2(None, None, local=True))
        writer.close()
    # LOCAL then a handshake: served, counted under the socket's own address
    a_r, a_w = await open_from("127.0.0.2", transit.port)
    a_w.write(encode_v2(None, None, local=True))
    await a_w.drain()
    await asyncio.sleep(0.05)
    a_w.write(hs(b"a"))
    b_r, b_w = await open_from("127.0.0.3", transit.port)
    b_w.write(encode_v2(("192.0.2.7", 5000), ("127.0.0.1", transit.port)) + hs(b"b"))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert transit.relay.caps.held_by("127.0.0.2") == 1 and transit.relay.caps.held_by("192.0.2.7") == 1
    a_w.close()
    b_w.close()
    await wait_for(lambda: read_events(transit.config.event_log))
    await asyncio.sleep(0.1)
    moods = [e["mood"] for e in read_events(transit.config.event_log)]
    assert len(moods) == 1 and moods[0] != "empty", moods  # the pair; the checks made no sessions
    assert metric(transit.registry, "burrow_transit_proxy_protocol_headers_total", {"version": "local"}) == 4
    assert metric(transit.registry, "burrow_transit_proxy_protocol_refusals_total", {"reason": "malformed"}) == 0


def test_a_socket_bound_to_127_0_0_2_is_possible():
    """The tests above rely on the whole 127/8 being local (Linux)."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
