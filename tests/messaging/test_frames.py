"""Frame layout (type, big-endian payload size, payload) and per-type validation."""

from __future__ import annotations

import pytest

from burrow.messaging import frames as f
from burrow.messaging.errors import ProtocolError

KEY = bytes.fromhex("02" + "11" * 32)
NOISE = bytes(range(49))


def test_byte_layouts():
    assert f.OpenChannel(7, KEY, NOISE).encode() == b"\x00\x00\x53\x07" + KEY + NOISE
    assert f.ChannelOpened(7, NOISE).encode() == b"\x01\x00\x32\x07" + NOISE
    assert f.CloseChannel(255).encode() == b"\x02\x00\x01\xff"
    assert f.ChannelClosed(0).encode() == b"\x03\x00\x01\x00"
    ct = bytes(300)
    assert f.Send(9, ct).encode() == b"\x04\x01\x2f\x09\x01\x2c" + ct  # 303 = 1 + 2 + 300


def test_round_trip_one_byte_at_a_time():
    wire = (f.OpenChannel(1, KEY, NOISE).encode() + f.ChannelOpened(2, NOISE).encode()
            + f.Send(3, bytes(16)).encode() + f.CloseChannel(4).encode() + f.ChannelClosed(5).encode())
    dec = f.FrameDecoder()
    got = []
    for i in range(len(wire)):
        got += dec.feed(wire[i:i + 1])
    assert got == [f.OpenChannel(1, KEY, NOISE), f.ChannelOpened(2, NOISE), f.Send(3, bytes(16)),
                   f.CloseChannel(4), f.ChannelClosed(5)]


@pytest.mark.parametrize("wire,reason", [
    (b"\x05\x00\x01\x00", "unknown_type"),
    (b"\x00\x00\x52" + bytes(82), "bad_length"),    # OpenChannel one byte short
    (b"\x01\x00\x33" + bytes(51), "bad_length"),    # ChannelOpened one byte long
    (b"\x02\x00\x00", "bad_length"),                # CloseChannel without its ID
    (b"\x03\x00\x02\x00\x00", "bad_length"),
    (b"\x04\x00\x12" + bytes(18), "bad_length"),    # Send shorter than ID + size + tag
    (b"\x04\x00\x13\x00\x00\x11" + bytes(16), "send_size"),  # size says 17, 16 follow
])
def test_malformed_frames(wire, reason):
    with pytest.raises(ProtocolError) as exc:
        f.FrameDecoder().feed(wire)
    assert exc.value.reason == reason


def test_bad_header_is_refused_before_the_payload_arrives():
    with pytest.raises(ProtocolError):
        f.FrameDecoder().feed(b"\x02\xff\xff")  # a 65535-byte CloseChannel is refused at once


def test_largest_send():
    frame = f.Send(0, bytes(f.MAX_CIPHERTEXT)).encode()
    assert len(frame) == 3 + 65535
    assert f.FrameDecoder().feed(frame) == [f.Send(0, bytes(f.MAX_CIPHERTEXT))]
    with pytest.raises(ValueError):
        f.Send(0, bytes(f.MAX_CIPHERTEXT + 1)).encode()
