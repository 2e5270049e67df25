"""iroh relay frames: literal byte vectors, round trips and a fuzz test."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrow.wire.iroh import frames as f

A = bytes(range(32))
B = bytes(range(32, 64))


@pytest.mark.parametrize(("frame", "wire"), [
    (f.ServerChallenge(bytes(range(16))), bytes([0]) + bytes(range(16))),
    (f.ClientAuth(A, b"\x11" * 64), bytes([1]) + A + b"\x40" + b"\x11" * 64),
    (f.ServerConfirmsAuth(), b"\x02"),
    (f.ServerDeniesAuth("no"), b"\x03\x02no"),
    (f.Datagrams(4, B, b"\x00hello"), b"\x04" + B + b"\x00hello"),
    (f.Datagrams(5, B, b"\x02\x00\x03abcdefg"), b"\x05" + B + b"\x02\x00\x03abcdefg"),
    (f.Datagrams(6, A, b"\x01x"), b"\x06" + A + b"\x01x"),
    (f.EndpointGone(A), b"\x08" + A),
    (f.Ping(b"12345678"), b"\x0912345678"),
    (f.Pong(b"12345678"), b"\x0a12345678"),
    (f.Health("bad"), b"\x0bbad"),
    (f.Restarting(1000, 60000), b"\x0c\x00\x00\x03\xe8\x00\x00\xea\x60"),
    (f.Status(1), b"\x0d\x01"),
])
def test_literal_vectors_round_trip(frame, wire):
    assert frame.encode() == wire
    assert f.decode(wire) == frame


def test_forwarding_swaps_the_id_and_keeps_the_body():
    sent = f.decode(b"\x05" + B + b"\x02\x00\x03abcdefg")
    delivered = sent.delivered_from(A)
    assert delivered.encode() == b"\x07" + A + b"\x02\x00\x03abcdefg"
    assert sent.payload_len == 7


@pytest.mark.parametrize("wire", [
    b"", b"\x09short", b"\x0a123456789", b"\x01" + A + b"\x40" + b"\x11" * 63,
    b"\x04" + A, b"\x08" + A[:31], b"\x0d", b"\x3f", b"\x0c\x00",
    b"\x03\x05no", b"\x0b\xff\xfe",
])
def test_malformed_frames_raise_protocol_error(wire):
    with pytest.raises(f.IrohProtocolError):
        f.decode(wire)


@pytest.mark.parametrize("value", [0, 63, 64, 16383, 16384, 2**30 - 1, 2**30, 2**62 - 1])
def test_quic_varint_round_trip(value):
    encoded = f.write_varint(value)
    assert f.read_varint(encoded) == (value, len(encoded))


@given(st.binary(max_size=200))
def test_decoder_raises_only_protocol_errors(data):
    try:
        frame = f.decode(data)
    except f.IrohProtocolError:
        return
    assert f.decode(frame.encode()) == frame
