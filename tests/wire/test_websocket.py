"""RFC 6455 framing, both faces: messages (iroh) and a byte stream (DERP over WebSocket); limits enforced."""

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.wire.iroh.frames import MAX_FRAME_SIZE
from burrow.wire.websocket import (
    OP_PING,
    OP_TEXT,
    MessageStream,
    WebSocketError,
    WebSocketStream,
    binary_header,
    encode_frame,
    wrap,
)


def masked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    frame = bytearray(encode_frame(opcode, payload, mask=True))
    if not fin:
        frame[0] &= 0x7F
    return bytes(frame)


def test_one_byte_at_a_time_keeps_message_boundaries():
    msgs = [b"\x09" + b"p" * 8, b"\x04" + os.urandom(200), b"", b"\x05" + os.urandom(70_000)]
    wire = b"".join(masked(0x2, m) for m in msgs)
    ws, got = MessageStream(), []
    for i in range(len(wire)):
        got += ws.feed_messages(wire[i:i + 1])
    assert got == msgs


def test_fragmented_message_and_interleaved_ping():
    ws = MessageStream()
    wire = masked(0x2, b"abc", fin=False) + masked(0x9, b"hi") + masked(0x0, b"def")
    assert ws.feed_messages(wire) == [b"abcdef"]
    assert ws.data_to_send() == encode_frame(0xA, b"hi", mask=False)


def test_server_frames_are_unmasked_and_sized():
    for n in (0, 125, 126, 65535, 65536):
        assert wrap(b"x" * n) == encode_frame(0x2, b"x" * n, mask=False)
        assert binary_header(n) == encode_frame(0x2, b"x" * n, mask=False)[:len(binary_header(n))]


@pytest.mark.parametrize("wire", [
    encode_frame(0x2, b"unmasked", mask=False),               # clients must mask
    masked(0x1, b"text"),                                     # iroh uses binary messages only
    masked(0x0, b"continuation first"),
    masked(0x2, b"a", fin=False) + masked(0x2, b"b"),         # new message inside a fragmented one
])
def test_protocol_violations_raise(wire):
    with pytest.raises(WebSocketError):
        MessageStream().feed_messages(wire)


def test_oversized_messages_are_refused_before_buffering():
    head = struct.pack(">BBQ", 0x82, 0x80 | 127, MAX_FRAME_SIZE + 1)
    with pytest.raises(WebSocketError):
        MessageStream().feed_messages(head + b"\x00" * 4)
    ws = MessageStream()
    part = os.urandom(MAX_FRAME_SIZE // 2 + 1)
    with pytest.raises(WebSocketError):
        ws.feed_messages(masked(0x2, part, fin=False) + masked(0x0, part, fin=False))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_any_chunking_yields_the_same_messages(msgs, cuts):
    wire = b"".join(masked(0x2, m) for m in msgs)
    ws, got, pos, i = MessageStream(), [], 0, 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        got += ws.feed_messages(wire[pos:pos + step])
        pos += step
        i += 1
    assert got == msgs


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_raises_only_websocket_errors(data):
    try:
        MessageStream().feed_messages(data)
    except WebSocketError:
        pass


# ---- the byte-stream face (DERP over WebSocket)
def test_websocket_round_trip_client_to_server_and_back():
    client, server = WebSocketStream(client=True), WebSocketStream(client=False)
    wire = client.wrap(b"derp bytes") + client.wrap(bytes(70000))
    assert wire[1] & 0x80  # masked
    got = b"".join(server.feed(wire[i:i + 7]) for i in range(0, len(wire), 7))
    assert got == b"derp bytes" + bytes(70000)
    assert client.feed(server.wrap(b"back")) == b"back"


def test_websocket_ping_close_and_rejections():
    server = WebSocketStream(client=False)
    server.feed(encode_frame(OP_PING, b"p", mask=True))
    assert server.data_to_send() == encode_frame(0xA, b"p", mask=False)
    with pytest.raises(WebSocketError):
        WebSocketStream(client=False).feed(encode_frame(OP_TEXT, b"t", mask=True))
    with pytest.raises(WebSocketError):
        WebSocketStream(client=False).feed(encode_frame(0x2, b"unmasked", mask=False))
    closing = WebSocketStream(client=False)
    closing.feed(encode_frame(0x8, b"\x03\xe8", mask=True))
    assert closing.closed and closing.data_to_send()[:1] == b"\x88"


@given(st.binary(max_size=500))
@settings(max_examples=300, deadline=None)
def test_fuzz_websocket_raises_only_websocket_error(blob):
    try:
        WebSocketStream(client=False, max_frame=1000).feed(blob)
    except WebSocketError:
        pass
