"""The asyncio server on 127.0.0.1 with a real WebSocket client, a real SQLite file and real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from burrow.common.events import validate
from burrow.mailbox_server.config import MailboxConfig
from burrow.mailbox_server.server import MailboxServer


def make_config(tmp_path, **kw) -> MailboxConfig:
    base = dict(host="127.0.0.1", port=0, db=str(tmp_path / "mb.sqlite"), admin_port=0,
                event_log=str(tmp_path / "events.jsonl"))
    base.update(kw)
    return MailboxConfig(**base)


@pytest.fixture
async def server(tmp_path):
    srv = MailboxServer(make_config(tmp_path))
    await srv.start()
    yield srv
    await srv.stop()


async def recv(ws, timeout=5.0):
    raw = await asyncio.wait_for(ws.recv(), timeout)
    assert isinstance(raw, str), "the server must send text frames (magic-wormhole asserts it)"
    msg = json.loads(raw)
    assert isinstance(msg.pop("server_tx"), float)
    return msg


async def call(ws, **msg):
    await ws.send(json.dumps(msg))


async def test_welcome_ack_text_frames_and_exchange(server):
    url = f"ws://127.0.0.1:{server.port}/v1"
    async with connect(url) as a, connect(url, additional_headers={"X-Real-IP": "2001:db8::7"}) as b:
        wa = await recv(a)
        assert wa == {"type": "welcome", "welcome": {"your-address": wa["welcome"]["your-address"]}}
        assert wa["welcome"]["your-address"]["ipv4"] == "127.0.0.1"
        # X-Real-IP without X-Real-Port is handled (the reference crashes on it)
        assert (await recv(b))["welcome"]["your-address"] == {"ipv6": "2001:db8::7"}
        await call(a, type="bind", appid="app", side="sa", id="1")
        assert await recv(a) == {"type": "ack", "id": "1"}
        await call(a, type="allocate")
        assert (await recv(a))["type"] == "ack"
        nameplate = (await recv(a))["nameplate"]
        await call(a, type="claim", nameplate=nameplate)
        await recv(a)
        mailbox = (await recv(a))["mailbox"]
        await call(a, type="open", mailbox=mailbox)
        await call(a, type="add", phase="pake", body="aa", id="x")
        assert (await recv(a))["type"] == "ack"
        assert (await recv(a))["type"] == "ack"
        echo = await recv(a)
        assert echo["phase"] == "pake" and echo["id"] == "x" and echo["side"] == "sa"
        await call(b, type="bind", appid="app", side="sb")
        await call(b, type="claim", nameplate=nameplate)
        await call(b, type="open", mailbox=mailbox)
        got = [await recv(b) for _ in range(5)]
        assert [g["type"] for g in got] == ["ack", "ack", "claimed", "ack", "message"]
        assert got[-1]["body"] == "aa"
        pong = await a.ping()  # WebSocket-level pings are answered
        await asyncio.wait_for(pong, 5)


async def test_http_root_and_404(server):
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.port}/") as r:
            assert r.status == 200 and await r.text() == "Wormhole Relay\n"
        async with http.get(f"http://127.0.0.1:{server.port}/nope") as r:
            assert r.status == 404
        async with http.get(f"http://127.0.0.1:{server.admin_port}/metrics") as r:
            text = await r.text()
            assert "burrow_mailbox_open_connections " in text and "burrow_mailbox_delivery_latency_seconds" in text
        async with http.get(f"http://127.0.0.1:{server.admin_port}/readyz") as r:
            assert r.status == 200


async def test_garbage_gets_error_then_close_and_others_unaffected(server):
    url = f"ws://127.0.0.1:{server.port}/v1"
    async with connect(url) as bad, connect(url) as good:
        await recv(bad)
        await recv(good)
        await bad.send(b"\x00\xffnot json")
        assert (await recv(bad))["error"] == "message is not a JSON object"
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(bad.recv(), 5)
        assert info.value.rcvd.code == 1008
        await call(good, type="ping", ping=3)
        assert [await recv(good), await recv(good)] == [{"type": "ack", "id": None}, {"type": "pong", "pong": 3}]


async def test_per_ip_limit_and_bind_deadline(tmp_path):
    srv = MailboxServer(make_config(tmp_path, max_connections_per_ip=1, bind_deadline=0.3))
    await srv.start()
    try:
        url = f"ws://127.0.0.1:{srv.port}/v1"
        async with connect(url) as first:
            await recv(first)
            async with connect(url) as second:
                w = await recv(second)
                assert w["welcome"]["error"] == "too many connections from your address"
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(second.recv(), 5)
            # no bind: the deadline closes the first one with a clear error
            assert (await recv(first))["error"] == "no bind received in time"
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(first.recv(), 5)
        assert srv.refusals["connections_per_ip"] == 1
    finally:
        await srv.stop()
    lines = [json.loads(x) for x in open(tmp_path / "events.jsonl")]
    reasons = sorted(x["close_reason"] for x in lines if x["event"] == "connection")
    assert reasons == ["limit", "timeout"]


async def test_state_survives_restart_on_same_db(tmp_path):
    config = make_config(tmp_path)
    srv = MailboxServer(config)
    await srv.start()
    url = f"ws://127.0.0.1:{srv.port}/v1"
    async with connect(url) as a:
        await recv(a)
        await call(a, type="bind", appid="app", side="sa")
        await call(a, type="claim", nameplate="12")
        await call(a, type="open", mailbox="m-restart")
        await call(a, type="add", phase="pake", body="aa")
        msgs = [await recv(a) for _ in range(6)]
        assert msgs[-1]["type"] == "message"  # acknowledged => committed
        claimed = next(x["mailbox"] for x in msgs if x["type"] == "claimed")
    await srv.stop()
    srv2 = MailboxServer(dataclasses.replace(config, port=srv.port))
    await srv2.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv2.port}/v1") as b:
            await recv(b)
            await call(b, type="bind", appid="app", side="sb")
            await call(b, type="list")
            await call(b, type="claim", nameplate="12")
            got = [await recv(b) for _ in range(5)]
            assert got[2] == {"type": "nameplates", "nameplates": [{"id": "12"}]}
            assert got[4] == {"type": "claimed", "mailbox": claimed}  # same channel as before the restart
            await call(b, type="open", mailbox="m-restart")
            replay = [await recv(b) for _ in range(2)]
            assert replay[1]["type"] == "message" and replay[1]["body"] == "aa"
    finally:
        await srv2.stop()
    for line in open(tmp_path / "events.jsonl"):
        rec = json.loads(line)
        fields = {k: v for k, v in rec.items() if k not in ("v", "ts", "service", "event", "node")}
        validate("mailbox", rec["event"], fields)


async def test_prune_timer_stats_line_and_metrics(tmp_path):
    srv = MailboxServer(make_config(tmp_path, channel_expiry=0.2, prune_interval=0.2, stats_interval=0.2))
    await srv.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/v1") as a:
            await recv(a)
            await call(a, type="bind", appid="app", side="sa", client_version=["python", "0.24.0"])
            await call(a, type="claim", nameplate="4")
            await call(a, type="open", mailbox="lonely-box")
            await call(a, type="add", phase="pake", body="ab" * 10)
            for _ in range(6):
                await recv(a)
        # the client left without closing: both channels expire by the prune timer
        for _ in range(100):
            if srv.store.counts()[0] == 0:
                break
            await asyncio.sleep(0.05)
        assert srv.store.counts()[:2] == (0, 0)
        await asyncio.sleep(0.3)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{srv.admin_port}/metrics") as r:
                text = await r.text()
        assert 'burrow_mailbox_sessions_total{mood="pruney"} 2.0' in text
        assert "burrow_mailbox_messages_total 1.0" in text
        assert "burrow_mailbox_delivery_latency_seconds_count 1.0" in text
        assert "burrow_mailbox_connections_accepted_total 1.0" in text
    finally:
        await srv.stop()
    lines = [json.loads(x) for x in open(tmp_path / "events.jsonl")]
    mailboxes = [x for x in lines if x["event"] == "mailbox"]
    assert {(x["mood"], x["for_nameplate"], x["messages"], x["bytes"]) for x in mailboxes} == {
        ("pruney", True, 0, 0), ("pruney", False, 1, 20)}
    assert [x["mood"] for x in lines if x["event"] == "nameplate"] == ["pruney"]
    conn = next(x for x in lines if x["event"] == "connection")
    assert (conn["app_id"], conn["client_impl"], conn["client_version"], conn["messages_in"]) == (
        "app", "python", "0.24.0", 4)
    assert any(x["event"] == "stats" for x in lines)
    text = open(tmp_path / "events.jsonl").read()
    assert "lonely-box" not in text and "sa" not in [x.get("side") for x in lines]  # no ids or sides


def test_flags_used_by_make_run(tmp_path):
    from burrow.common.config import load_config

    cfg = load_config(MailboxConfig, "mailbox", ["--db", "var/mailbox.sqlite", "--event-log",
                                                 "var/logs/mailbox.jsonl"], environ={"BURROW_MAILBOX_PORT": "4555"})
    assert (cfg.db, cfg.event_log, cfg.port, cfg.admin_port, cfg.host) == (
        "var/mailbox.sqlite", "var/logs/mailbox.jsonl", 4555, 9400, "::")


async def test_default_host_is_dual_stack(tmp_path):
    srv = MailboxServer(make_config(tmp_path, host="::"))
    await srv.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/v1") as ws:
            assert (await recv(ws))["welcome"]["your-address"]["ipv4"] == "127.0.0.1"  # ::ffff: mapped
    finally:
        await srv.stop()


async def test_oversized_frame_is_refused_with_1009(tmp_path):
    srv = MailboxServer(make_config(tmp_path, max_message_bytes=100))
    await srv.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/v1", max_size=None) as ws:
            await recv(ws)
            await call(ws, type="bind", appid="app", side="s")
            await recv(ws)
            await ws.send(json.dumps({"type": "ping", "ping": "x" * 70_000}))
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)
            assert info.value.rcvd.code == 1009
        for _ in range(50):
            if not srv.conns:
                break
            await asyncio.sleep(0.02)
        assert srv.refusals["message_bytes"] == 1
    finally:
        await srv.stop()
    lines = [json.loads(x) for x in open(tmp_path / "events.jsonl")]
    assert [x["close_reason"] for x in lines if x["event"] == "connection"] == ["limit"]


@pytest.mark.parametrize("peer, headers, you", [
    (("127.0.0.1", 5000), {}, {"port": 5000, "ipv4": "127.0.0.1"}),
    (("::ffff:10.0.0.1", 5001, 0, 0), {}, {"port": 5001, "ipv4": "10.0.0.1"}),
    (("::1", 5002, 0, 0), {}, {"port": 5002, "ipv6": "::1"}),
    (("127.0.0.1", 1), {"X-Real-IP": "198.51.100.7", "X-Real-Port": "4444"}, {"port": 4444, "ipv4": "198.51.100.7"}),
    (("127.0.0.1", 1), {"X-Real-IP": "198.51.100.7", "X-Real-Port": "nope"}, {"ipv4": "198.51.100.7"}),
])
def test_your_address(peer, headers, you):
    from websockets.datastructures import Headers

    from burrow.mailbox_server.wsconn import address_of

    assert address_of(peer, Headers(headers))[0] == you


async def test_random_bytes_on_the_wire_never_hurt_the_server(server):
    """Raw TCP: a valid upgrade followed by random bytes (bad frames, bad UTF-8, huge lengths)."""
    import random

    rng = random.Random(7)
    handshake = (b"GET /v1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    for _ in range(30):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        prefix = handshake if rng.random() < 0.8 else b""
        writer.write(prefix + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300))))
        await writer.drain()
        try:
            await asyncio.wait_for(reader.read(65536), 0.2)
        except (TimeoutError, ConnectionError):
            pass
        writer.close()
    url = f"ws://127.0.0.1:{server.port}/v1"
    async with connect(url) as a:
        await recv(a)
        await call(a, type="ping", ping="still here")
        assert [await recv(a), await recv(a)] == [{"type": "ack", "id": None}, {"type": "pong", "pong": "still here"}]


async def test_blur_usage_rounds_event_times(tmp_path):
    srv = MailboxServer(make_config(tmp_path, blur_usage=3600.0))
    await srv.start()
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/v1") as a:
            await recv(a)
            await call(a, type="bind", appid="app", side="s")
            await call(a, type="open", mailbox="m")
            await call(a, type="add", phase="0", body="ab" * 30)
            await call(a, type="close", mood="lonely")
            types = [(await recv(a))["type"] for _ in range(6)]
            assert types[-1] == "closed"
    finally:
        await srv.stop()
    lines = [json.loads(x) for x in open(tmp_path / "events.jsonl")]
    mailbox = next(x for x in lines if x["event"] == "mailbox")
    assert mailbox["started"] % 3600 == 0 and mailbox["ts"] % 3600 == 0
    assert (mailbox["mood"], mailbox["bytes"]) == ("lonely", 10_000)  # 60 bytes rounded up to the 10 kB step


async def test_a_handshake_finished_during_the_drain_is_sent_away_at_once(tmp_path):
    """A client accepted before SIGTERM but whose WebSocket handshake ends after it gets 1012 at once,
    not at the drain deadline."""
    srv = MailboxServer(make_config(tmp_path, drain_timeout=10.0))
    await srv.start()
    port = srv.port
    request = (b"GET /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
    # a connected client that never answers the close keeps the drain going until its deadline
    _, stubborn = await asyncio.open_connection("127.0.0.1", port)
    stubborn.write(request + b"\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    await asyncio.sleep(0.2)  # accepted; the handshake is not finished
    stopping = asyncio.create_task(srv.stop())
    await asyncio.sleep(0.2)
    writer.write(b"\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101")
    code = None
    loop = asyncio.get_running_loop()
    started = loop.time()
    while code is None:  # server frames are unmasked: opcode, length, payload
        first, length = await asyncio.wait_for(reader.readexactly(2), 5)
        payload = await reader.readexactly(length & 0x7F)
        if first & 0x0F == 0x8:
            code = int.from_bytes(payload[:2], "big")
    assert code == 1012
    assert loop.time() - started < 5  # well before the 10 s drain deadline
    writer.close()
    stubborn.close()
    await asyncio.wait_for(stopping, 15)


async def test_the_drain_asks_a_client_to_reconnect_only_once_its_connection_is_quiet(tmp_path):
    """A client still talking during the drain keeps its connection (a peer's message it was just sent is
    likely being answered); a quiet one is asked at once; both get 1012."""
    srv = MailboxServer(make_config(tmp_path, drain_timeout=30.0, drain_quiet=2.0))
    await srv.start()
    stopping = None
    try:
        async with connect(f"ws://127.0.0.1:{srv.port}/v1") as talker, \
                connect(f"ws://127.0.0.1:{srv.port}/v1") as quiet:
            for ws, side in ((talker, "t"), (quiet, "q")):
                await recv(ws)
                await call(ws, type="bind", appid="app", side=side)
            stopping = asyncio.create_task(srv.stop())
            quiet_closed = asyncio.create_task(quiet.wait_closed())
            for n in range(40):  # 4 s of talk, never 2 s quiet: a close frame would make a send raise
                await talker.send(json.dumps({"type": "ping", "ping": n}))
                await asyncio.sleep(0.1)
            assert quiet_closed.done() and quiet.close_code == 1012  # asked while the other still talked
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(talker.recv(), 15)
            assert talker.close_code == 1012
    finally:
        await asyncio.wait_for(stopping or srv.stop(), 30)


class CountingTransport:
    """A connection's real transport, its writes recorded (uvloop's transports cannot be patched)."""

    def __init__(self, transport, writes: list[bytes]) -> None:
        self._transport, self.writes = transport, writes

    def write(self, data) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name):
        return getattr(self._transport, name)


def count_writes(conn, writes: list[bytes] | None = None) -> list[bytes]:
    """The bytes of each write on this connection's (real) transport, in order."""
    writes = [] if writes is None else writes
    conn.transport = CountingTransport(conn.transport, writes)
    return writes


async def test_frames_queued_for_one_batch_go_out_in_order_in_one_write(server):
    async with connect(f"ws://127.0.0.1:{server.port}/v1") as ws:
        await recv(ws)
        (conn,) = server.conns.values()
        writes = count_writes(conn)
        conn.queue([b'{"n": 1}'])
        conn.send_many([b'{"n": 2}', b'{"n": 3}' + b" " * 200])  # a longer header too
        got = [json.loads(await asyncio.wait_for(ws.recv(), 5)) for _ in range(3)]
        assert [g["n"] for g in got] == [1, 2, 3]
        assert len(writes) == 1


async def test_a_close_after_queued_frames_delivers_them_first(server):
    async with connect(f"ws://127.0.0.1:{server.port}/v1") as ws:
        await recv(ws)
        (conn,) = server.conns.values()
        writes = count_writes(conn)
        conn.queue([b'{"n": 1}', b'{"n": 2}'])  # as the server does for the frames before a Drop
        conn.drop("shutdown", "bye", 1012)
        assert [json.loads(await asyncio.wait_for(ws.recv(), 5))["n"] for _ in range(2)] == [1, 2]
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 5)
        assert info.value.rcvd.code == 1012
        assert len(writes) == 1  # the frames and the close frame together


async def test_the_welcome_goes_out_with_the_101_in_one_write(server, monkeypatch):
    from burrow.mailbox_server.wsconn import WSConnection
    writes: list[bytes] = []
    made = WSConnection.connection_made

    def connection_made(conn, transport):
        made(conn, transport)
        count_writes(conn, writes)
    monkeypatch.setattr(WSConnection, "connection_made", connection_made)
    async with connect(f"ws://127.0.0.1:{server.port}/v1") as ws:
        assert (await recv(ws))["type"] == "welcome"
        assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 101") and b'"welcome"' in writes[0]
