"""The fast paths of a mailbox connection, over a real socket to a real server.

The usual upgrade request is answered without `websockets`' HTTP parser, and complete masked text frames
are cut from the received bytes by the connection itself; everything else goes to `websockets`. These
tests write hand-built requests and frames, split and joined across writes, and read the server's answers
with the `websockets` client parser.
"""

from __future__ import annotations

import asyncio
import json
import os
import random

import pytest
from websockets.client import ClientProtocol
from websockets.frames import CLOSE, PONG, TEXT, Close
from websockets.http11 import Response
from websockets.protocol import CLIENT, OPEN, Protocol
from websockets.uri import parse_uri

from burrow.mailbox_server import wsconn
from burrow.mailbox_server.server import MailboxServer
from burrow.mailbox_server.wsfast import quick_upgrade, switching

from .test_server import make_config

MASK = b"\x37\xfa\x21\x3d"


def frame(payload: bytes, opcode: int = 1, fin: bool = True, mask: bytes | None = MASK) -> bytes:
    """One client frame, built by hand (7, 16 or 64-bit length)."""
    n = len(payload)
    head = bytes(((0x80 if fin else 0) | opcode,))
    bit = 0x80 if mask is not None else 0
    if n < 126:
        head += bytes((bit | n,))
    elif n < 65536:
        head += bytes((bit | 126,)) + n.to_bytes(2, "big")
    else:
        head += bytes((bit | 127,)) + n.to_bytes(8, "big")
    if mask is None:
        return head + payload
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def msg(**fields) -> bytes:
    return json.dumps(fields).encode()


class Raw:
    """A client socket that writes raw bytes and parses what the server sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ws = ClientProtocol(parse_uri("ws://127.0.0.1/v1"), max_size=None)
        self.events: list = []

    @classmethod
    async def open(cls, port: int) -> Raw:
        raw = cls(*await asyncio.open_connection("127.0.0.1", port))
        raw.ws.send_request(raw.ws.connect())
        raw.writer.write(b"".join(raw.ws.data_to_send()))
        first = await raw.next()
        assert isinstance(first, Response) and first.status_code == 101
        assert json.loads((await raw.next()).data)["type"] == "welcome"
        return raw

    async def send(self, *chunks: bytes) -> None:
        for chunk in chunks:
            self.writer.write(chunk)
            await self.writer.drain()

    async def next(self):
        """The next handshake response or frame from the server (None at EOF)."""
        while not self.events:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            if not data:
                return None
            self.ws.receive_data(data)
            self.events.extend(self.ws.events_received())
        return self.events.pop(0)

    async def json(self) -> dict:
        f = await self.next()
        assert f is not None and f.opcode is TEXT
        out = json.loads(f.data)
        out.pop("server_tx", None)
        return out

    async def close_code(self) -> int:
        """Frames until the close frame; its code."""
        while True:
            f = await self.next()
            assert f is not None, "EOF without a close frame"
            if f.opcode is CLOSE:
                return Close.parse(f.data).code

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def server(tmp_path):
    srv = MailboxServer(make_config(tmp_path, max_message_bytes=100))  # frames up to 100 + 65536 bytes
    await srv.start()
    yield srv
    await srv.stop()


def spy_on_websockets(srv: MailboxServer) -> list[bytes]:
    """Record every byte string the (only) connection hands to the websockets parser."""
    (conn,) = srv.conns.values()
    seen: list[bytes] = []
    real = conn.ws.receive_data

    def receive_data(data: bytes) -> None:
        seen.append(bytes(data))
        real(data)
    conn.ws.receive_data = receive_data
    return seen


async def until(predicate) -> None:
    for _ in range(250):  # bounded: 5 s
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_text_frames_skip_the_websockets_parser_and_keep_their_order(server):
    raw = await Raw.open(server.port)
    seen = spy_on_websockets(server)
    long = "p" * 300  # 16-bit length
    await raw.send(frame(msg(type="ping", ping=1, id="a")) + frame(msg(type="ping", ping=long, id="b")))
    got = [await raw.json() for _ in range(4)]
    assert got == [{"type": "ack", "id": "a"}, {"type": "pong", "pong": 1},
                   {"type": "ack", "id": "b"}, {"type": "pong", "pong": long}]
    assert seen == []
    raw.close()


async def test_a_frame_split_across_reads_waits_for_its_end(server):
    raw = await Raw.open(server.port)
    (conn,) = server.conns.values()
    whole = frame(msg(type="ping", ping="s" * 200, id="c"))
    for cut in (1, 3, 7, len(whole) - 1):  # inside the header, the length, the mask, the payload
        await raw.send(whole[:cut])
        await until(lambda cut=cut: conn.rx == whole[:cut])
        await raw.send(whole[cut:])
        assert await raw.json() == {"type": "ack", "id": "c"}
        assert (await raw.json())["pong"] == "s" * 200
        assert conn.rx == b""
    raw.close()


async def test_a_long_frame_in_many_small_reads(server):
    raw = await Raw.open(server.port)
    (conn,) = server.conns.values()
    first = frame(msg(type="ping", ping="L" * 60_000, id="l"))
    whole = first + frame(msg(type="ping", ping=0, id="m"))
    sent = 0
    while sent + 1000 < len(first):  # the long frame's bytes gather in the connection's buffer
        await raw.send(whole[sent:sent + 1000])
        sent += 1000
        await until(lambda n=sent: len(conn.rx) == n)
    await raw.send(whole[sent:])  # its end and the next frame in one write
    got = [await raw.json() for _ in range(4)]
    assert [g["type"] for g in got] == ["ack", "pong", "ack", "pong"]
    assert got[0]["id"] == "l" and got[1]["pong"] == "L" * 60_000 and got[2]["id"] == "m"
    assert conn.rx == b""
    raw.close()


async def test_a_fragmented_message_with_a_ping_inside_goes_through_websockets(server):
    raw = await Raw.open(server.port)
    seen = spy_on_websockets(server)
    text = msg(type="ping", ping="frag", id="f")
    ping = frame(b"hi", opcode=9)
    parts = [frame(text[:5], fin=False), ping, frame(text[5:12], opcode=0, fin=False),
             frame(text[12:], opcode=0)]
    await raw.send(parts[0][:4], parts[0][4:] + parts[1][:3], parts[1][3:] + parts[2], parts[3])
    pong = await raw.next()
    assert pong.opcode is PONG and pong.data == b"hi"
    assert await raw.json() == {"type": "ack", "id": "f"}
    assert await raw.json() == {"type": "pong", "pong": "frag"}
    assert seen == parts  # each whole, none split
    await raw.send(frame(msg(type="ping", ping=2, id="g")))  # then the fast path again
    assert await raw.json() == {"type": "ack", "id": "g"}
    assert len(seen) == 4
    raw.close()


async def test_a_text_frame_inside_a_fragmented_message_is_a_protocol_error(server):
    raw = await Raw.open(server.port)
    await raw.send(frame(b'{"type"', fin=False) + frame(msg(type="ping", ping=1)))
    assert await raw.close_code() == 1002
    raw.close()


async def test_an_oversized_header_is_refused_with_1009_before_its_payload(server):
    raw = await Raw.open(server.port)
    await raw.send(frame(b"x" * 70_000)[:14])  # 64-bit length over the limit, payload never sent
    assert await raw.close_code() == 1009
    await until(lambda: server.refusals["message_bytes"] == 1)
    raw.close()


async def test_a_fragmented_message_over_the_limit_is_refused_with_1009(server):
    raw = await Raw.open(server.port)
    await raw.send(frame(b"y" * 40_000, fin=False), frame(b"y" * 30_000, opcode=0)[:4])
    assert await raw.close_code() == 1009
    raw.close()


async def test_an_unmasked_frame_is_a_protocol_error(server):
    raw = await Raw.open(server.port)
    await raw.send(frame(msg(type="ping", ping=1), mask=None)[:2])
    assert await raw.close_code() == 1002
    await until(lambda: server.core.errors["bad websocket frame"] == 1)
    raw.close()


async def test_invalid_utf8_gets_the_same_answer_whole_or_fragmented(server):
    bad = b'{"type": "ping", "ping": "\xff\xfe"}'
    answers = []
    for frames in ([frame(bad)], [frame(bad[:10], fin=False), frame(bad[10:], opcode=0)]):
        raw = await Raw.open(server.port)
        await raw.send(*frames)
        answers.append((await raw.json(), await raw.close_code()))
        raw.close()
    assert answers[0] == answers[1]
    assert answers[0][0]["type"] == "error" and answers[0][1] == 1008  # websockets 17 does not check UTF-8


async def answers(srv: MailboxServer, chunks: list[bytes], fast: bool, expect: int = 0) -> list:
    """What the server sends after the welcome for these writes: `expect` frames, then (after a close
    frame of ours if the chunks had none) everything until it closes the connection."""
    raw = await Raw.open(srv.port)
    (conn,) = srv.conns.values()
    conn.fast = fast  # False: websockets parses every byte, as without the fast path
    for chunk in chunks:
        await raw.send(chunk)
    got = []

    def add(f) -> None:
        got.append((f.opcode, f.data if f.opcode is not TEXT else
                    {k: v for k, v in json.loads(f.data).items() if k != "server_tx"}))
    for _ in range(expect):
        add(await raw.next())
    if expect:
        await raw.send(frame((1000).to_bytes(2, "big"), opcode=8))
    while (f := await raw.next()) is not None:
        add(f)
    raw.close()
    return got


async def test_a_close_frame_after_text_in_one_read_is_answered_as_by_websockets(server):
    stream = frame(msg(type="ping", ping=5, id="z")) + frame((1000).to_bytes(2, "big"), opcode=8)
    fast = await answers(server, [stream], True)
    assert fast == await answers(server, [stream], False)
    assert fast[-1] == (CLOSE, (1000).to_bytes(2, "big"))


async def test_random_frames_get_the_same_answers_as_from_websockets_alone(server):
    """Bytes cut at random places: the fast path answers exactly like websockets parsing everything."""
    rng = random.Random(os.getpid())
    kinds = [  # (frames, how many frames the server answers with)
        (lambda i: frame(msg(type="ping", ping=i, id=str(i))), 2),
        (lambda i: frame(msg(type="ping", ping="q" * rng.randrange(100, 400), id=str(i))), 2),
        (lambda i: frame(b"p%d" % i, opcode=9), 1),
        (lambda i: frame(msg(type="ping", ping=i)[:6], fin=False) + frame(msg(type="ping", ping=i)[6:], opcode=0), 2),
    ]
    picked = [(rng.choice(kinds), i) for i in range(40)]
    stream = b"".join(make(i) for (make, _), i in picked)
    expect = sum(n for (_, n), _ in picked)
    cuts = sorted(rng.sample(range(1, len(stream)), 30))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    fast = await answers(server, chunks, True, expect)
    slow = await answers(server, chunks, False, expect)
    # Text replies leave on the next turn of the loop, a pong as soon as its frame is read: which of the two
    # goes first across reads depends on the event loop's scheduling, not on the parser.
    for kind in (lambda f: f[0] is TEXT, lambda f: f[0] is not TEXT):
        assert [f for f in fast if kind(f)] == [f for f in slow if kind(f)]
    assert len(fast) == expect + 1 and fast[-1][0] is CLOSE


# ---- the upgrade ---------------------------------------------------------------------------------
UPGRADE = (b"GET /v1 HTTP/1.1\r\nUser-Agent: AutobahnPython/23.1.2\r\nHost: 127.0.0.1:4000\r\n"
           b"Upgrade: WebSocket\r\nConnection: Upgrade\r\nPragma: no-cache\r\nCache-Control: no-cache\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


async def upgrade_answer(port: int, request: bytes) -> tuple[bytes, list[str]]:
    """The server's response head to `request` (Date line left out) and the JSON messages after it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    rest = []
    if head.startswith(b"HTTP/1.1 101"):
        ws = Protocol(CLIENT, state=OPEN)
        while not rest:
            ws.receive_data(await asyncio.wait_for(reader.read(65536), 5))
            rest = [json.loads(f.data)["type"] for f in ws.events_received()]
    writer.close()
    return b"\r\n".join(x for x in head.split(b"\r\n") if not x.startswith(b"Date: ")), rest


async def test_the_usual_upgrade_skips_websockets_and_answers_as_it_would(server, monkeypatch):
    accepted = []
    real = wsconn.ServerProtocol.accept
    monkeypatch.setattr(wsconn.ServerProtocol, "accept", lambda ws, req: accepted.append(req) or real(ws, req))
    quick = await upgrade_answer(server.port, UPGRADE)
    assert accepted == []
    # one header the fast path does not take: websockets handles the same request
    slow = await upgrade_answer(server.port, UPGRADE.replace(b"Pragma", b"X-Other"))
    assert len(accepted) == 1
    assert quick == slow
    assert quick[0].startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in quick[0]  # RFC 6455's example
    assert quick[1] == ["welcome"]


@pytest.mark.parametrize("change, status", [
    ((b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"), b"400 Bad Request"),
    ((b"dGhlIHNhbXBsZSBub25jZQ==", b"dGhlIHNhbXBsZSBub25jZQ"), b"400 Bad Request"),
    ((b"Upgrade: WebSocket", b"Upgrade: h2c"), b"426 Upgrade Required"),
    ((b"Connection: Upgrade", b"Connection: close"), b"426 Upgrade Required"),
    ((b"GET /v1 ", b"GET /v2 "), b"404 Not Found"),
    ((b"GET /v1 ", b"POST /v1 "), b"405 Method Not Allowed"),
    ((b"Pragma: no-cache", b"Sec-WebSocket-Protocol: x"), b"101 Switching Protocols"),  # ignored there
    ((b"Pragma: no-cache", b"Host: again"), b"101 Switching Protocols"),
])
async def test_any_other_request_gets_the_answer_of_websockets(server, change, status):
    request = UPGRADE.replace(*change)
    assert quick_upgrade(request) is None
    head, _ = await upgrade_answer(server.port, request)
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 " + status


def test_quick_upgrade_reads_header_names_in_any_case_and_connection_lists():
    request = UPGRADE.replace(b"Connection: Upgrade", b"connection: keep-alive, Upgrade").replace(
        b"Host:", b"HOST:") + b""
    headers = quick_upgrade(request)
    assert headers is not None and headers["Host"] == "127.0.0.1:4000" and headers.get("X-Real-IP") is None
    assert quick_upgrade(request[:-2]) is None  # incomplete
    assert quick_upgrade(request + frame(b"{}")) is None  # frame bytes already behind it


def test_the_101_is_byte_for_byte_what_websockets_sends():
    from websockets.server import ServerProtocol

    ws = ServerProtocol()
    ws.receive_data(UPGRADE)
    (request,) = ws.events_received()
    response = ws.accept(request)
    response.headers["Server"] = "Burrow Mailbox"
    ours = switching("dGhlIHNhbXBsZSBub25jZQ==", "Burrow Mailbox")
    date = response.headers["Date"]
    assert response.serialize() == ours.replace(ours.split(b"Date: ")[1].split(b"\r\n")[0], date.encode())


async def test_x_real_ip_reaches_the_welcome_through_the_fast_upgrade(server):
    request = UPGRADE.replace(b"Pragma: no-cache", b"X-Real-IP: 203.0.113.9\r\nX-Real-Port: 4444")
    assert quick_upgrade(request) is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request)
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    ws = Protocol(CLIENT, state=OPEN)
    events = []
    while not events:
        ws.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        events = ws.events_received()
    welcome = json.loads(events[0].data)["welcome"]
    assert welcome["your-address"] == {"ipv4": "203.0.113.9", "port": 4444}
    writer.close()
