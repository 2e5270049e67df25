"""The mailbox WebSocket adapter (client/mailbox_ws.py) against real servers on 127.0.0.1: burrow's mailbox,
a `websockets` server in front of it that pings, closes or oversends, a TLS one, and HTTP servers that
refuse the upgrade."""

import asyncio
import json
import ssl

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed as WsClosed

from burrow.client import mailbox_ws
from burrow.client.errors import ServerConnectionError
from burrow.client.mailbox_ws import ConnectionClosed, connect
from burrow.client.wormhole import MAX_MESSAGE_SIZE, Wormhole
from burrow.wire.http import response, websocket_accept
from burrow.wire.websocket import WebSocketStream
from harness.wormhole_servers import MailboxProcess

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def mailbox(tmp_path_factory):
    m = MailboxProcess(str(tmp_path_factory.mktemp("mailbox") / "mailbox.sqlite")).start()
    yield m
    m.stop()


class Front:
    """A `websockets` server relaying every message to and from a real mailbox; after the first message
    of its first connection (the welcome) it runs `act(ws)` (ping, close, oversend)."""

    def __init__(self, upstream: str, act=None) -> None:
        self.upstream, self.act = upstream, act
        self.connections = 0
        self.close_codes: list[int | None] = []
        self.notes: list[str] = []

    async def handler(self, ws) -> None:
        self.connections += 1
        act, self.act = self.act, None
        async with ws_connect(self.upstream) as up:
            async def down():
                async for message in up:
                    await ws.send(message)
                    if act is not None:
                        await act(self, ws)
                        return

            async def upward():
                async for message in ws:
                    await up.send(message)

            tasks = [asyncio.create_task(down()), asyncio.create_task(upward())]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                await asyncio.wait_for(ws.wait_closed(), 15)
            except (WsClosed, TimeoutError):
                pass
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        self.close_codes.append(ws.close_code)


async def started(front: Front, **kw):
    server = await serve(front.handler, "127.0.0.1", 0, **kw)
    return server, server.sockets[0].getsockname()[1]


async def ping_then_tell(front, ws):
    waiter = await ws.ping(b"are you there")
    try:
        await asyncio.wait_for(waiter, 10)
        await ws.send(json.dumps({"type": "test", "pong": True}))
    except TimeoutError:
        await ws.send(json.dumps({"type": "test", "pong": False}))
    await ws.wait_closed()


async def close_going_away(front, ws):
    await ws.close(1001, "going away")


async def oversend(front, ws):
    try:
        await ws.send("x" * (MAX_MESSAGE_SIZE + 1))
    except WsClosed:
        pass


async def test_text_round_trip_with_burrow_mailbox(mailbox):
    ws = await asyncio.wait_for(connect(mailbox.url, max_size=MAX_MESSAGE_SIZE), 10)
    welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert welcome["type"] == "welcome"
    big = "é" * 70_000  # a 16-bit and then a 64-bit length, non-ASCII text
    await ws.send(json.dumps({"type": "ping", "ping": 7, "pad": big}))
    answers = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(2)]
    assert [a["type"] for a in answers] == ["ack", "pong"] and answers[1]["pong"] == 7
    await ws.close()
    assert ws.close_code == 1000
    with pytest.raises(ConnectionClosed):
        await ws.recv()
    with pytest.raises(ConnectionClosed):
        await ws.send("{}")


async def test_a_server_ping_is_answered(mailbox):
    front = Front(mailbox.url, ping_then_tell)
    server, port = await started(front)
    try:
        ws = await asyncio.wait_for(connect(f"ws://127.0.0.1:{port}/v1", max_size=MAX_MESSAGE_SIZE), 10)
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "welcome"
        assert json.loads(await asyncio.wait_for(ws.recv(), 15)) == {"type": "test", "pong": True}
        await ws.close()
    finally:
        server.close()
        await server.wait_closed()


async def exchange_through(front_url: str, mailbox_url: str) -> None:
    """A Wormhole on the front and one straight on the mailbox exchange keys and two messages."""
    a, b = Wormhole(front_url), Wormhole(mailbox_url)
    await a.open()
    await b.open()
    a.allocate_code()
    b.set_code(await asyncio.wait_for(a.get_code(), 20))
    await asyncio.wait_for(asyncio.gather(a.get_verifier(), b.get_verifier()), 20)
    a.send_message(b"from a")
    b.send_message(b"from b")
    assert await asyncio.wait_for(b.get_message(), 20) == b"from a"
    assert await asyncio.wait_for(a.get_message(), 20) == b"from b"
    assert await a.close() == "happy" and await b.close() == "happy"


async def exchange_via_front(mailbox, act) -> Front:
    front = Front(mailbox.url, act)
    server, port = await started(front)
    try:
        await exchange_through(f"ws://127.0.0.1:{port}/v1", mailbox.url)
    finally:
        server.close()
        await server.wait_closed()
    return front


async def test_the_server_closing_makes_the_wormhole_reconnect(mailbox):
    front = await exchange_via_front(mailbox, close_going_away)
    assert front.connections == 2
    assert front.close_codes[0] == 1001  # our client answered its Close, echoing the code


async def test_an_oversize_message_closes_1009_and_the_wormhole_reconnects(mailbox):
    front = await exchange_via_front(mailbox, oversend)
    assert front.connections == 2 and front.close_codes[0] == 1009


async def test_wss_with_sni_and_the_callers_ca(mailbox, tmp_path):
    from burrow.packet_relay.tls import generate_self_signed

    cert, key = generate_self_signed(str(tmp_path / "tls"), names=("localhost",))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    names = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)
    front = Front(mailbox.url)
    server, port = await started(front, ssl=server_ctx)
    url = f"wss://localhost:{port}/v1"
    try:
        ws = await asyncio.wait_for(connect(url, ssl_context=ssl.create_default_context(cafile=cert),
                                            max_size=MAX_MESSAGE_SIZE), 10)
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "welcome"
        await ws.close()
        assert names == ["localhost"]
        with pytest.raises(ServerConnectionError, match="certificate that is not trusted"):
            await Wormhole(url).open()  # the system's CAs do not know this one
    finally:
        server.close()
        await server.wait_closed()


async def http_server(answer):
    """An HTTP server that reads one request head and writes `answer(sec_websocket_key)`."""
    async def handle(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        key = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                   if line.lower().startswith("sec-websocket-key:"))
        writer.write(answer(key))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


@pytest.mark.parametrize(("answer", "said"), [
    (lambda key: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
     "refused the WebSocket upgrade: HTTP 404 Not Found"),
    (lambda key: ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {websocket_accept(key + 'x')}\r\n\r\n").encode(),
     "answered HTTP 101 Switching Protocols with a wrong Sec-WebSocket-Accept"),
], ids=["404", "wrong-accept"])
async def test_a_refused_upgrade_is_a_clear_server_connection_error(answer, said):
    server, url = await http_server(answer)
    try:
        with pytest.raises(ServerConnectionError) as info:
            await Wormhole(url).open()
        assert str(info.value).startswith(f"the server at {url} {said}")
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("url", ["http://127.0.0.1:4000/v1", "ws://127.0.0.1:99999/v1", "ws:///v1"])
async def test_a_bad_url_is_a_server_connection_error(url):
    with pytest.raises(ServerConnectionError, match="is not a ws:// or wss:// URL"):
        await asyncio.wait_for(Wormhole(url).open(), 10)


async def test_a_silent_server_is_pinged_then_dropped(monkeypatch):
    monkeypatch.setattr(mailbox_ws, "PING_INTERVAL", 0.3)
    monkeypatch.setattr(mailbox_ws, "PING_TIMEOUT", 0.5)
    pings = []

    async def silent(reader, writer):  # accepts the upgrade, then reads and never answers
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        key = head.partition("Sec-WebSocket-Key: ")[2].partition("\r\n")[0]
        writer.write(response(101, {"Upgrade": "websocket", "Connection": "Upgrade",
                                    "Sec-WebSocket-Accept": websocket_accept(key)}))
        frames = WebSocketStream(client=False)
        while data := await reader.read(4096):
            frames.feed(data)
            pings.append(bool(frames.data_to_send()))  # a Pong to send: the client pinged
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        ws = await asyncio.wait_for(connect(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1",
                                            max_size=MAX_MESSAGE_SIZE), 10)
        with pytest.raises(ConnectionClosed, match="no answer to a Ping"):
            await asyncio.wait_for(ws.recv(), 10)
        assert pings == [True]
    finally:
        server.close()
        await server.wait_closed()
