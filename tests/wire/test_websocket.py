"""RFC 6455 framing, both faces: messages (iroh) and a byte stream (DERP over WebSocket); limits enforced."""

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.wire.iroh.frames import MAX_FRAME_SIZE
from burrow.wire.websocket import (
    OP_PING,
    OP_TEXT,
    InvalidText,
    MessageStream,
    MessageTooBig,
    WebSocketError,
    WebSocketStream,
    binary_header,
    encode_frame,
    py_mask,
    wrap,
)


def masked(opcode: int, payload: bytes, fin: bool = True, mask: bool = True) -> bytes:
    frame = bytearray(encode_frame(opcode, payload, mask=mask))
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


# ---- the text face (the mailbox client)
def unmasked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    return masked(opcode, payload, fin, mask=False)


def test_text_messages_whole_and_fragmented_one_byte_at_a_time():
    wire = (unmasked(OP_TEXT, "héllo".encode()) + unmasked(OP_TEXT, "é".encode()[:1], fin=False)
            + unmasked(OP_PING, b"p") + unmasked(0x0, "é".encode()[1:] + b" ok") + unmasked(0x2, b"bin"))
    ws, got = WebSocketStream(client=True, text=True), []
    for i in range(len(wire)):
        got += ws.feed_messages(wire[i:i + 1])
    assert got == ["héllo", "é ok", b"bin"]
    pong = WebSocketStream(client=False)
    pong.feed(ws.data_to_send())  # our Pong is masked, as a client's must be
    assert pong.data_to_send() == b""


@pytest.mark.parametrize(("wire", "error", "code"), [
    (unmasked(OP_TEXT, b"\xff\xfe"), InvalidText, 1007),
    (unmasked(OP_TEXT, b"x" * 101), MessageTooBig, 1009),
    (unmasked(OP_TEXT, b"x" * 60, fin=False) + unmasked(0x0, b"x" * 41), MessageTooBig, 1009),
    (masked(OP_TEXT, b"masked by a server"), WebSocketError, 1002),
    (unmasked(0x8, b"\x03"), WebSocketError, 1002),
])
def test_text_errors_carry_their_close_code(wire, error, code):
    with pytest.raises(error) as info:
        WebSocketStream(client=True, text=True, max_frame=100, max_message=100).feed_messages(wire)
    assert info.value.close_code == code


@pytest.mark.parametrize(("sent", "echoed"), [(1001, 1001), (1009, 1009), (4000, 4000), (1006, 1000)])
def test_the_peers_close_code_is_kept_and_echoed(sent, echoed):
    ws = WebSocketStream(client=True, text=True)
    assert ws.feed_messages(unmasked(OP_TEXT, b"last") + unmasked(0x8, struct.pack(">H", sent))) == ["last"]
    assert ws.closed and ws.close_code == sent
    server = WebSocketStream(client=False)
    server.feed(ws.data_to_send())
    assert server.close_code == echoed


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 125, 4095, 4096, 70_000])
def test_client_masking_matches_websockets(n):
    from websockets.frames import apply_mask

    data, key = os.urandom(n), os.urandom(4)
    assert py_mask(data, key) == apply_mask(data, key)


def test_a_client_stream_does_not_import_websockets():
    code = ("import sys; from burrow.wire.websocket import WebSocketStream, encode_frame; "
            "ws = WebSocketStream(client=True, text=True); encode_frame(1, b'x' * 1000, mask=True); "
            "ws.feed_messages(encode_frame(1, b'hi', mask=False)); "
            "print(sorted(m for m in sys.modules if m.startswith('websockets')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
