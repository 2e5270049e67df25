"""The iroh side of the packet relay on 127.0.0.1: real sockets, TLS and a real WebSocket library.

Real iroh endpoints are in tests/interop/test_iroh_interop.py; here our client (over `websockets`)
and hand-made frames exercise the rules one by one.
"""

import asyncio
import os

import aiohttp
import pytest
from nacl.signing import SigningKey
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from burrow.client.iroh.client import IrohRelayClient, IrohRelayDenied
from burrow.packet_relay.iroh.service import IrohSettings
from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import challenge_message

from ..derp_util import client as derp_client
from .util import TIMEOUT, client, events, http_url, iroh_relay, metric, wait_for


async def test_ping_and_upgrade_negotiation(tmp_path):
    async with iroh_relay(tmp_path) as server:
        base = http_url(server)
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/ping") as r:
                assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
            async with http.get(base + "/relay") as r:
                assert r.status == 400
            async with http.get(base + "/generate_204", headers={"X-Iroh-Challenge": "ts_127.0.0.1"}) as r:
                assert r.status == 204 and r.headers["X-Iroh-Response"] == "response ts_127.0.0.1"
            async with http.get(base + "/") as r:
                assert "/relay" in await r.text()
        ws_base = "ws" + base[4:] + "/relay"
        for offered, chosen in ((["iroh-relay-v2", "iroh-relay-v1"], "iroh-relay-v2"),
                                (["iroh-relay-v1"], "iroh-relay-v1")):
            ws = await connect(ws_base, subprotocols=offered)
            assert ws.subprotocol == chosen
            assert (await asyncio.wait_for(ws.recv(), TIMEOUT))[0] == f.SERVER_CHALLENGE
            await ws.close()
        with pytest.raises(InvalidStatus) as exc:
            await connect(ws_base, subprotocols=["derp"])
        assert exc.value.response.status_code == 400


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_two_endpoints_exchange_single_and_batched_datagrams(tmp_path, tls):
    async with iroh_relay(tmp_path) as server:
        a, b = await client(server, tls), await client(server, tls)
        for i in range(20):
            await a.send(b.endpoint_id, b"a->b %d" % i, ecn=i % 4)
            await b.send(a.endpoint_id, b"b->a %d" % i)
        for i in range(20):
            got = await b.recv(TIMEOUT)
            assert (got.frame_type, got.peer, got.body) == (6, a.endpoint_id, bytes([i % 4]) + b"a->b %d" % i)
            got = await a.recv(TIMEOUT)
            assert (got.peer, got.body) == (b.endpoint_id, b"\x00b->a %d" % i)
        segments = os.urandom(1200 * 3 + 500)
        await a.send_batch(b.endpoint_id, 1200, segments, ecn=2)
        got = await b.recv(TIMEOUT)
        assert got.encode() == b"\x07" + a.endpoint_id + b"\x02\x04\xb0" + segments
        big = os.urandom(f.MAX_PACKET_SIZE)
        await b.send(a.endpoint_id, big)
        assert (await a.recv(TIMEOUT)).body == b"\x00" + big
        assert await metric(server, "burrow_relay_clients", protocol="iroh") == 2
        assert await metric(server, "burrow_relay_packets_forwarded_total", protocol="iroh") == 42
        total = 2 * sum(len(b"a->b %d" % i) for i in range(20)) + len(segments) + len(big)
        assert await metric(server, "burrow_relay_forwarded_bytes_total", protocol="iroh") == total
        await a.close()
        await b.close()
        await wait_for(lambda: len(events(server)) == 2)
    lines = events(server)
    assert all(x["protocol"] == "iroh" and x["transport"] == "websocket" and x["tls"] is tls
               and x["close_reason"] == "client" for x in lines)
    assert sorted(x["packets_in"] for x in lines) == [21, 21]
    assert sum(x["bytes_in"] for x in lines) == sum(x["bytes_out"] for x in lines) == total


async def test_iroh_ids_and_derp_keys_are_separate_address_spaces(tmp_path):
    async with iroh_relay(tmp_path) as server:
        d = await derp_client(server)
        a = await client(server)
        await a.send(d.public_key, b"not for a DERP key")  # same 32 bytes, other address space
        with pytest.raises(asyncio.TimeoutError):
            await d.recv(0.3)
        assert await metric(server, "burrow_relay_packets_dropped_total", protocol="iroh",
                            reason="unknown_dest") == 1
        assert await metric(server, "burrow_relay_clients", protocol="derp") == 1
        await a.close()
        await d.close()


async def test_bad_signature_is_denied_with_a_reason(tmp_path):
    async with iroh_relay(tmp_path) as server:
        ws = await connect(f"ws://127.0.0.1:{server.http_port}/relay", subprotocols=["iroh-relay-v2"])
        challenge = f.decode(await asyncio.wait_for(ws.recv(), TIMEOUT))
        me, other = SigningKey.generate(), SigningKey.generate()
        sig = other.sign(challenge_message(challenge.challenge)).signature
        await ws.send(f.ClientAuth(bytes(me.verify_key), sig).encode())
        assert f.decode(await asyncio.wait_for(ws.recv(), TIMEOUT)) == f.ServerDeniesAuth("signature invalid")
        await asyncio.wait_for(ws.wait_closed(), TIMEOUT)
        assert await metric(server, "burrow_relay_access_denied_total", protocol="iroh", source="signature") == 1
    assert [x["close_reason"] for x in events(server)] == ["denied"]


async def test_allow_list_is_keyed_by_endpoint_id(tmp_path):
    good = SigningKey.generate()
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# both protocols\nendpoint:{bytes(good.verify_key).hex()}\n")
    async with iroh_relay(tmp_path, allow_list=str(allow)) as server:
        ok = await client(server, key=good)
        with pytest.raises(IrohRelayDenied, match="allow-list"):
            await client(server)
        assert await metric(server, "burrow_relay_access_denied_total", protocol="iroh",
                            source="allow_list") == 1
        await ok.close()


async def test_bearer_token_header_or_query(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n# comment\nother\n")
    async with iroh_relay(tmp_path, IrohSettings(tokens_file=str(tokens))) as server:
        with pytest.raises(IrohRelayDenied, match="bearer token"):
            await client(server)
        with pytest.raises(IrohRelayDenied):
            await client(server, token="wrong")
        a = await client(server, token="s3cret")
        b = IrohRelayClient(http_url(server))
        b.url += "?token=other"
        await b.connect(TIMEOUT)
        await a.send(b.endpoint_id, b"x")
        assert (await b.recv(TIMEOUT)).body == b"\x00x"
        assert await metric(server, "burrow_relay_access_denied_total", protocol="iroh", source="token") == 2
        await a.close()
        await b.close()


async def test_callout_gets_the_endpoint_id_and_fails_closed(tmp_path):
    good = SigningKey.generate()
    seen = []

    async def decide(request):
        body = await request.json()
        seen.append((request.headers.get("X-Iroh-NodeId"), body))
        return aiohttp.web.Response(text="true" if body["EndpointId"] == bytes(good.verify_key).hex() else "false")

    app = aiohttp.web.Application()
    app.router.add_post("/check", decide)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with iroh_relay(tmp_path, access_callout_url=f"http://127.0.0.1:{port}/check") as server:
            a = await client(server, key=good)
            with pytest.raises(IrohRelayDenied, match="access check"):
                await client(server)
            await a.close()
    finally:
        await runner.cleanup()
    assert seen[0] == (bytes(good.verify_key).hex(), {"Protocol": "iroh", "EndpointId": bytes(good.verify_key).hex(),
                                                      "Source": "127.0.0.1"})


async def test_endpoint_gone_goes_to_those_it_sent_to(tmp_path):
    async with iroh_relay(tmp_path) as server:
        a, b, c = await client(server), await client(server), await client(server)
        await a.send(b.endpoint_id, b"hi")
        await b.recv(TIMEOUT)
        await a.close()
        assert await b.recv(TIMEOUT, f.EndpointGone) == f.EndpointGone(a.endpoint_id)
        await b.close()
        with pytest.raises(asyncio.TimeoutError):
            await c.recv(0.3, f.EndpointGone)  # c never heard from a or b
        await c.close()


@pytest.mark.parametrize("version", ["iroh-relay-v2", "iroh-relay-v1"])
async def test_duplicate_ids_newest_receives_older_is_told(tmp_path, version):
    key = SigningKey.generate()
    async with iroh_relay(tmp_path) as server:
        old = await client(server, key=key, subprotocols=(version,))
        new = await client(server, key=key, subprotocols=(version,))
        b = await client(server)
        told = await old.recv(TIMEOUT, (f.Status, f.Health))
        assert told == (f.Status(f.STATUS_SAME_ENDPOINT_ID_CONNECTED) if version == "iroh-relay-v2"
                        else f.Health("Another endpoint connected with the same endpoint id. "
                                      "No more messages will be received"))
        await old.send(b.endpoint_id, b"the inactive one may send")
        assert (await b.recv(TIMEOUT)).body == b"\x00the inactive one may send"
        await b.send(key.verify_key.encode(), b"to the newest")
        assert (await new.recv(TIMEOUT)).body == b"\x00to the newest"
        await new.close()
        if version == "iroh-relay-v2":
            assert await old.recv(TIMEOUT, f.Status) == f.Status(f.STATUS_HEALTHY)
        await wait_for(lambda: server.registry.active(("iroh", key.verify_key.encode())) is not None
                       and len(server.registry) == 2)
        await b.send(key.verify_key.encode(), b"promoted")
        assert (await old.recv(TIMEOUT)).body == b"\x00promoted"
        await old.close()
        await b.close()


async def test_server_pings_and_closes_without_pong(tmp_path):
    settings = IrohSettings(ping_interval=0.2, pong_timeout=0.3)
    async with iroh_relay(tmp_path, settings) as server:
        polite = await client(server)
        silent = await client(server, answer_pings=False)
        assert isinstance(await silent.recv(TIMEOUT, f.Ping), f.Ping)
        await asyncio.wait_for(silent.closed.wait(), TIMEOUT)
        assert isinstance(await polite.recv(TIMEOUT, f.Ping), f.Ping)
        assert not polite.closed.is_set()
        assert await polite.ping(TIMEOUT) >= 0  # and the relay answers client pings
        await polite.close()
        await wait_for(lambda: len(events(server)) == 2)
    assert sorted(x["close_reason"] for x in events(server)) == ["client", "timeout"]


@pytest.mark.parametrize("bad", [
    b"\x04" + b"\x00" * 10,                # datagram frame shorter than its header
    b"\x06" + b"\x00" * 40,                # relay-to-client frame from a client
    b"\x3f",                               # unknown frame type
    b"\x09short",                          # ping that is not 8 bytes
    b"\x01" + b"\x00" * 97,                # a second ClientAuth
])
async def test_bad_frames_close_only_the_sender(tmp_path, bad):
    async with iroh_relay(tmp_path) as server:
        a, b, bad_client = await client(server), await client(server), await client(server)
        await bad_client.send_raw(bad)
        await asyncio.wait_for(bad_client.closed.wait(), TIMEOUT)
        await a.send(b.endpoint_id, b"still fine")
        assert (await b.recv(TIMEOUT)).body == b"\x00still fine"
        assert sum([await metric(server, "burrow_relay_protocol_errors_total", protocol="iroh", kind=k)
                    for k in ("protocol", "malformed")]) == 1
        await a.close()
        await b.close()


async def test_rate_limit_pauses_reading_and_tells_v2_once(tmp_path):
    async with iroh_relay(tmp_path, rate_limit_bytes_per_sec=200_000, rate_limit_burst_bytes=70_000) as server:
        a, b = await client(server), await client(server)
        chunk = os.urandom(16_000)
        for _ in range(30):  # 480 kB at 200 kB/s: the relay must slow us down, not drop
            await a.send(b.endpoint_id, chunk)
        for _ in range(30):
            assert (await b.recv(TIMEOUT)).body == b"\x00" + chunk
        assert await a.recv(TIMEOUT, f.Status) == f.Status(f.STATUS_RATE_LIMITED)
        assert await metric(server, "burrow_relay_throttled_total", protocol="iroh") >= 1
        await a.close()
        await b.close()


async def test_slow_receiver_drops_are_counted(tmp_path):
    async with iroh_relay(tmp_path, send_queue_depth=4, write_timeout=30) as server:
        a = await client(server)
        stuck = await client(server)
        stuck.ws.transport.pause_reading()  # a receiver that stops reading its socket
        chunk = os.urandom(60_000)
        for _ in range(400):  # 24 MB: more than the socket buffers and the queue can hold
            await a.send(stuck.endpoint_id, chunk)
        await a.ping(TIMEOUT)  # everything sent so far has been read by the relay
        drops = await metric(server, "burrow_relay_packets_dropped_total", protocol="iroh", reason="queue_head")
        assert drops > 0
        await a.close()
        stuck.ws.transport.abort()
        await wait_for(lambda: len(events(server)) == 2)
    assert sum(x["drops"].get("queue_head", 0) for x in events(server)) == drops
