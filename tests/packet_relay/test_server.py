"""The DERP relay on 127.0.0.1: real TLS, real sockets, our client and hand-driven raw clients."""

import asyncio
import json
import os

import aiohttp
import pytest

from burrow.client.derp import DerpClient, DerpClientError
from burrow.wire.derp import frames as f

from .derp_util import TIMEOUT, RawClient, ca, client, running_relay, url


def events(server, kind="connection"):
    path = server.config.event_log
    lines = [json.loads(x) for x in open(path).read().splitlines()] if os.path.exists(path) else []
    return [x for x in lines if x["event"] == kind]


async def exchange(a: DerpClient, b: DerpClient, n: int = 20) -> None:
    for i in range(n):
        await a.send(b.public_key, b"a->b %d" % i)
        await b.send(a.public_key, b"b->a %d" % i)
    for i in range(n):
        assert await b.recv(TIMEOUT) == (a.public_key, b"a->b %d" % i)
        assert await a.recv(TIMEOUT) == (b.public_key, b"b->a %d" % i)


@pytest.mark.parametrize(("ws_a", "ws_b"), [(False, False), (True, True), (False, True)],
                         ids=["upgrade", "websocket", "mixed"])
async def test_two_clients_exchange_packets_over_tls(tmp_path, ws_a, ws_b):
    async with running_relay(tmp_path) as server:
        a, b = await client(server, websocket=ws_a), await client(server, websocket=ws_b)
        await exchange(a, b)
        big = os.urandom(f.MAX_PACKET_SIZE)
        await a.send(b.public_key, big)
        assert await b.recv(TIMEOUT) == (a.public_key, big)
        await a.close()
        await b.close()
        for _ in range(100):
            if len(events(server)) == 2:
                break
            await asyncio.sleep(0.05)
    lines = events(server)
    assert sorted(x["transport"] for x in lines) == sorted(["websocket" if w else "upgrade" for w in (ws_a, ws_b)])
    assert all(x["tls"] and x["home"] and x["close_reason"] == "client" for x in lines)
    assert sorted(x["packets_in"] for x in lines) == [20, 21]
    assert sum(x["bytes_out"] for x in lines) == sum(x["bytes_in"] for x in lines)


async def test_plain_http_port_and_fast_start(tmp_path):
    async with running_relay(tmp_path, _http=True) as server:
        a = DerpClient(f"http://127.0.0.1:{server.http_port}")
        await a.start()
        b = await client(server, server_key=server.public_key)  # Derp-Fast-Start: no 101 round trip
        await exchange(a, b, 3)
        await a.close()
        await b.close()
    assert any(not x["tls"] for x in events(server))


async def test_101_headers_and_http_endpoints(tmp_path):
    async with running_relay(tmp_path, _http=True) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/derp/probe") as r:
                assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
            async with http.head(base + "/derp/latency-check") as r:
                assert r.status == 200
            async with http.post(base + "/derp/probe") as r:
                assert r.status == 405
            async with http.get(base + "/generate_204", headers={"X-Tailscale-Challenge": "abc.1:2"}) as r:
                assert r.status == 204 and r.headers["X-Tailscale-Response"] == "response abc.1:2"
            async with http.get(base + "/generate_204", headers={"X-Tailscale-Challenge": "bad value!"}) as r:
                assert r.status == 204 and "X-Tailscale-Response" not in r.headers
            async with http.get(base + "/derp") as r:
                assert r.status == 426
            async with http.get(base + "/") as r:
                assert r.status == 200 and server.public_key.hex() in await r.text()
            async with http.get(base + "/nope") as r:
                assert r.status == 404
            async with http.get(f"http://127.0.0.1:{server.admin_port}/metrics") as r:
                assert "burrow_relay_clients" in await r.text()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n")
        head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        assert head.startswith("http/1.1 101")
        assert "derp-version: 2\r\n" in head and f"derp-public-key: {server.public_key.hex()}" in head
        frame = await reader.readexactly(45)
        assert f.decode_frame(frame[0], frame[5:]) == f.ServerKey(server.public_key)
        writer.close()


async def test_peer_gone_after_disconnect_and_not_here(tmp_path):
    async with running_relay(tmp_path) as server:
        a, b = await client(server), await client(server)
        await a.send(b.public_key, b"x")
        await b.recv(TIMEOUT)
        await a.close()
        gone = await asyncio.wait_for(b.notices.get(), TIMEOUT)
        assert gone == f.PeerGone(a.public_key, f.PEER_GONE_DISCONNECTED)
        disco = "TS💬".encode() + bytes(60)
        await b.send(a.public_key, disco)  # a is gone: disco gets PeerGone(NotHere)
        assert await asyncio.wait_for(b.notices.get(), TIMEOUT) == f.PeerGone(a.public_key, f.PEER_GONE_NOT_HERE)
        assert server.stats.drops[("derp", "unknown_dest")] == 1
        await b.close()


async def test_one_write_to_many_destinations_reaches_each_in_order(tmp_path):
    """A read holding packets for two receivers and an absent key, interleaved with a Ping: each receiver
    gets its packets in order, the absent key's are counted one by one (a disco one answered NotHere),
    and the Pong comes back."""
    async with running_relay(tmp_path) as server:
        a, b = await client(server), await client(server)
        raw = await RawClient.open(server)
        absent = os.urandom(32)
        disco = "TS💬".encode() + bytes(60)
        order = [(a.public_key, b"a%d" % i) if i % 3 else (b.public_key, b"b%d" % i) for i in range(60)]
        data = b"".join(f.SendPacket(dst, p).encode() for dst, p in order[:30])
        data += f.SendPacket(absent, b"lost").encode() + f.SendPacket(absent, disco).encode()
        data += f.Ping(b"12345678").encode() + b"".join(f.SendPacket(dst, p).encode() for dst, p in order[30:])
        raw.writer.write(data)
        for receiver in (a, b):
            want = [(raw.key, p) for dst, p in order if dst == receiver.public_key]
            assert [await receiver.recv(TIMEOUT) for _ in want] == want
        got = []
        while f.Pong(b"12345678") not in got or not any(type(e) is f.PeerGone for e in got):
            got += raw.machine.receive_data(await asyncio.wait_for(raw.reader.read(65536), TIMEOUT))
        assert f.PeerGone(absent, f.PEER_GONE_NOT_HERE) in got
        assert server.stats.drops[("derp", "unknown_dest")] == 2
        assert server.stats.packets["derp"] == 60
        raw.close()
        await a.close()
        await b.close()


async def test_duplicate_keys_newest_then_last_writer_receives(tmp_path):
    async with running_relay(tmp_path) as server:
        key = os.urandom(32)
        old = await client(server, private_key=key)
        new = await client(server, private_key=key)
        sender = await client(server)
        await sender.send(new.public_key, b"1")
        assert await new.recv(TIMEOUT) == (sender.public_key, b"1")
        await old.send(sender.public_key, b"I am active again")  # last writer becomes active
        await sender.recv(TIMEOUT)
        await sender.send(old.public_key, b"2")
        assert await old.recv(TIMEOUT) == (sender.public_key, b"2")
        await old.close()
        await asyncio.sleep(0.1)
        await sender.send(new.public_key, b"3")  # the remaining connection takes over
        assert await new.recv(TIMEOUT) == (sender.public_key, b"3")
        assert new.packets.empty() and server.stats.dup_conns == 1
        for c in (new, sender):
            await c.close()


async def test_flooder_is_dropped_from_while_a_good_pair_keeps_its_packets(tmp_path):
    async with running_relay(tmp_path, send_queue_depth=16) as server:
        slow = await RawClient.open(server)  # never reads again: its queue overflows
        flooder = await client(server)
        good_a, good_b = await client(server), await client(server)
        blob = os.urandom(8000)

        async def flood():
            for _ in range(3000):  # 24 MB, more than the socket buffers hold
                flooder.send_nowait(slow.key, blob)
                await flooder.drain()

        task = asyncio.get_running_loop().create_task(flood())
        while not server.stats.drops[("derp", "queue_head")] and not task.done():
            await asyncio.sleep(0.05)  # the slow client's queue is overflowing now
        for i in range(200):
            await good_a.send(good_b.public_key, b"%d" % i)
        got = [await good_b.recv(TIMEOUT) for _ in range(200)]
        await asyncio.wait_for(task, 60)
        assert [p for _, p in got] == [b"%d" % i for i in range(200)]
        assert server.stats.drops[("derp", "queue_head")] > 0
        slow.close()
        for c in (flooder, good_a, good_b):
            await c.close()
        await asyncio.sleep(0.2)
    slow_line = [x for x in events(server) if x["packets_in"] == 0 and x["drops"]]
    assert slow_line and slow_line[0]["drops"].get("queue_head", 0) > 0


async def test_allow_list_refuses_unknown_key_and_reload_closes(tmp_path):
    allowed, other = os.urandom(32), os.urandom(32)
    from burrow.wire.derp.handshake import public_key

    listfile = tmp_path / "allow.txt"
    listfile.write_text(f"# operators\nnodekey:{public_key(allowed).hex()}\n{public_key(other).hex()}\n")
    async with running_relay(tmp_path, allow_list=str(listfile)) as server:
        with pytest.raises(DerpClientError, match="allow_list"):
            await client(server, reconnect=False)
        a = await client(server, private_key=allowed, reconnect=False)
        b = await client(server, private_key=other, reconnect=False)
        await exchange(a, b, 2)
        listfile.write_text(public_key(allowed).hex() + "\n")
        server.reload()  # what SIGHUP does
        await asyncio.wait_for(b._task, TIMEOUT)  # b's connection ends
        assert public_key(other) not in server.registry and public_key(allowed) in server.registry
        await a.close()
        await b.close()
    assert server.stats.denied[("derp", "allow_list")] == 2
    assert sorted(x["close_reason"] for x in events(server)).count("denied") == 2


@pytest.fixture
async def callout_url():
    from aiohttp import web

    seen = []

    async def verify(request):
        body = await request.json()
        seen.append(body)
        return web.json_response({"allow": body["NodePublic"].endswith(ALLOWED_SUFFIX[0])})

    app = web.Application()
    app.router.add_post("/verify", verify)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/verify", seen
    await runner.cleanup()


ALLOWED_SUFFIX = [""]


async def test_access_callout_allow_deny_and_unreachable(tmp_path, callout_url):
    address, seen = callout_url
    from burrow.wire.derp.handshake import public_key

    good = os.urandom(32)
    ALLOWED_SUFFIX[0] = public_key(good).hex()
    async with running_relay(tmp_path, access_callout_url=address) as server:
        a = await client(server, private_key=good, reconnect=False)
        with pytest.raises(DerpClientError, match="callout"):
            await client(server, reconnect=False)
        await a.close()
    assert seen[0] == {"NodePublic": "nodekey:" + public_key(good).hex(), "Source": "127.0.0.1"}
    # nothing listens on this port any more: the callout fails closed
    async with running_relay(tmp_path / "2", access_callout_url=address.replace("/verify", "/gone"),
                             access_callout_timeout=2.0) as server:
        with pytest.raises(DerpClientError, match="callout"):
            await client(server, private_key=good, reconnect=False)
    async with running_relay(tmp_path / "3", access_callout_url="http://127.0.0.1:9/verify",
                             access_callout_timeout=2.0) as server:
        with pytest.raises(DerpClientError, match="callout"):
            await client(server, private_key=good, reconnect=False)


async def test_restarting_on_graceful_stop_and_client_reconnects(tmp_path):
    async with running_relay(tmp_path, restart_reconnect=0.2) as server:
        port = server.https_port
        c = await client(server)
    assert await asyncio.wait_for(c.notices.get(), TIMEOUT) == f.Restarting(200, 60000)
    assert events(server)[-1]["close_reason"] == "shutdown"
    async with running_relay(tmp_path, https_port=port) as server2:  # same key file, same port
        await c.wait_connected(TIMEOUT)
        assert c.connects == 2
        other = await client(server2)
        await exchange(c, other, 2)
        await other.close()
        await c.close()


async def test_misbehaving_clients_get_closed_and_counted(tmp_path):
    async with running_relay(tmp_path, max_packet_bytes=1000, handshake_timeout=0.5) as server:
        a, b = await client(server), await client(server)
        raw = await RawClient.open(server)
        # an unknown frame type is skipped, the connection stays
        raw.writer.write(f.UnknownFrame(0x40, b"future").encode() + raw.machine.send_packet(b.public_key, b"ok"))
        assert await b.recv(TIMEOUT) == (raw.key, b"ok")
        # a packet over the limit closes that connection only
        raw.writer.write(f.header(f.SEND_PACKET, 32 + 1001) + bytes(32 + 1001))
        await raw.frames_until_eof()
        assert server.stats.errors[("derp", "frame_too_large")] == 1
        assert server.stats.unknown_frames["derp"] == 1
        # a client that never sends ClientInfo hits the handshake deadline
        silent = await RawClient.open(server, handshake=False)
        await silent.frames_until_eof()
        await exchange(a, b, 2)
        await a.close()
        await b.close()
    reasons = sorted(x["close_reason"] for x in events(server))
    assert len(reasons) == 4 and reasons.count("protocol") == 1 and reasons.count("timeout") == 1


async def test_per_client_rate_limit_throttles_without_loss(tmp_path):
    async with running_relay(tmp_path, rate_limit_bytes_per_sec=400_000) as server:
        a, b = await client(server), await client(server)
        for i in range(100):  # 200 KB: more than the 64 KiB burst
            await a.send(b.public_key, bytes([i % 256]) * 2000)
        got = [await b.recv(TIMEOUT) for _ in range(100)]
        assert [p[0] for _, p in got] == [i % 256 for i in range(100)]
        assert server.stats.throttled["derp"] > 0
        await a.close()
        await b.close()


async def test_key_file_is_created_private_and_reused(tmp_path):
    async with running_relay(tmp_path) as server:
        key = server.public_key
    assert (os.stat(tmp_path / "relay.key").st_mode & 0o777) == 0o600
    async with running_relay(tmp_path) as server:
        assert server.public_key == key
        assert url(server).startswith("https://") and ca(server).endswith("relay.crt")


async def test_stats_event_and_metrics(tmp_path):
    async with running_relay(tmp_path, stats_interval=0.2) as server:
        a, b = await client(server), await client(server)
        await exchange(a, b, 5)
        await asyncio.sleep(0.5)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{server.admin_port}/metrics") as r:
                text = await r.text()
        assert 'burrow_relay_packets_forwarded_total{protocol="derp"} 10.0' in text
        assert 'burrow_relay_clients{protocol="derp"} 2.0' in text
        await a.close()
        await b.close()
    stats = events(server, "stats")
    assert sum(x["packets_interval"] for x in stats) == 10
    assert max(x["clients"] for x in stats) == 2


async def test_keepalive_frames_arrive_on_an_idle_connection(tmp_path):
    async with running_relay(tmp_path, keepalive_interval=0.2) as server:
        raw = await RawClient.open(server)
        seen = []
        while len(seen) < 2:
            seen += [e for e in raw.machine.receive_data(await asyncio.wait_for(raw.reader.read(65536), TIMEOUT))
                     if isinstance(e, f.KeepAlive)]
        raw.close()
