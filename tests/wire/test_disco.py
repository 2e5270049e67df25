"""Disco codec: Tailscale's disco_test.go vectors for the plaintexts, sealed round trips, bad input."""

import nacl.public
import pytest

from burrow.wire.disco import (
    HEADER_LEN,
    MAGIC,
    CallMeMaybe,
    CannotOpen,
    DiscoError,
    MalformedMessage,
    NotDisco,
    Ping,
    Pong,
    SharedBox,
    UnknownType,
    generate_private_key,
    looks_like_disco,
    parse_message,
    public_key,
    sender_key,
)

TXID = bytes(range(1, 13))
NODE_KEY = bytes([0, 1, 2] + [0] * 27 + [30, 31])

# TestMarshalAndParse in tailscale/tailscale disco/disco_test.go: message and its bytes, as listed there.
VECTORS = [
    ("ping", Ping(TXID), "01 00 01 02 03 04 05 06 07 08 09 0a 0b 0c"),
    ("ping_with_nodekey_src", Ping(TXID, NODE_KEY),
     "01 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 00 01 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
     "00 00 00 00 00 00 00 00 00 00 00 1e 1f"),
    ("ping_with_padding", Ping(TXID, padding=3), "01 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 00 00 00"),
    ("ping_with_padding_and_nodekey_src", Ping(TXID, NODE_KEY, 3),
     "01 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 00 01 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
     "00 00 00 00 00 00 00 00 00 00 00 1e 1f 00 00 00"),
    ("pong", Pong(TXID, ("2.3.4.5", 1234)),
     "02 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 00 00 00 00 00 00 00 00 00 00 ff ff 02 03 04 05 04 d2"),
    ("pongv6", Pong(TXID, ("fed0::12", 6666)),
     "02 00 01 02 03 04 05 06 07 08 09 0a 0b 0c fe d0 00 00 00 00 00 00 00 00 00 00 00 00 00 12 1a 0a"),
    ("call_me_maybe", CallMeMaybe(), "03 00"),
    ("call_me_maybe_endpoints", CallMeMaybe((("1.2.3.4", 567), ("2001::3456", 789))),
     "03 00 00 00 00 00 00 00 00 00 00 00 ff ff 01 02 03 04 02 37 20 01 00 00 00 00 00 00 00 00 00 00 00 00"
     " 34 56 03 15"),
]


@pytest.mark.parametrize(("name", "message", "wire"), VECTORS, ids=[v[0] for v in VECTORS])
def test_tailscale_vectors(name, message, wire):
    raw = bytes.fromhex(wire)
    assert message.encode() == raw
    assert parse_message(raw) == message


def test_trailing_bytes_are_ignored():
    pong = bytes.fromhex(VECTORS[4][2])
    assert parse_message(pong + b"future") == Pong(TXID, ("2.3.4.5", 1234))
    # a CallMeMaybe that is not whole endpoints, or of a later version, carries none (as Tailscale reads it)
    assert parse_message(b"\x03\x00" + bytes(19)) == CallMeMaybe()
    assert parse_message(b"\x03\x01" + bytes(18)) == CallMeMaybe()


def test_short_and_unknown_plaintexts():
    with pytest.raises(MalformedMessage):
        parse_message(b"\x01")
    with pytest.raises(MalformedMessage):
        parse_message(b"\x01\x00" + bytes(11))
    with pytest.raises(MalformedMessage):
        parse_message(b"\x02\x00" + bytes(29))
    with pytest.raises(UnknownType, match="0x04"):
        parse_message(b"\x04\x00" + bytes(40))


def _pair():
    a, b = generate_private_key(), generate_private_key()
    return a, b, SharedBox(a, public_key(b)), SharedBox(b, public_key(a))


@pytest.mark.parametrize("message", [v[1] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_sealed_round_trip(message):
    a, _, ab, ba = _pair()
    packet = ab.seal(message)
    assert packet[:6] == bytes.fromhex("5453f09f92ac") == MAGIC
    assert sender_key(packet) == public_key(a)
    assert looks_like_disco(packet)
    assert len(packet) == HEADER_LEN + 16 + len(message.encode())
    assert ba.open(packet) == message


def test_box_is_plain_nacl_box_with_the_nonce_in_the_header():
    a, b, ab, _ = _pair()
    nonce = bytes(range(24))
    packet = ab.seal(Ping(TXID), nonce=nonce)
    assert packet[38:62] == nonce
    box = nacl.public.Box(nacl.public.PrivateKey(b), nacl.public.PublicKey(public_key(a)))
    assert box.decrypt(packet[62:], nonce) == Ping(TXID).encode()


def test_looks_like_disco():
    assert not looks_like_disco(MAGIC + bytes(55))
    assert looks_like_disco(MAGIC + bytes(56))
    assert not looks_like_disco(b"DERP\xf0\x9f" + bytes(56))
    assert not looks_like_disco(b"")


def test_bad_packets_raise_clear_errors():
    _, _, ab, ba = _pair()
    good = ab.seal(Ping(TXID))
    with pytest.raises(NotDisco):
        ba.open(good[:61])
    with pytest.raises(NotDisco):
        ba.open(b"XX" + good[2:])
    with pytest.raises(NotDisco):
        ba.open(good[:HEADER_LEN + 3])  # header, but no room for the tag
    tampered = bytearray(good)
    tampered[-1] ^= 1
    with pytest.raises(CannotOpen, match="does not open"):
        ba.open(bytes(tampered))
    stranger = SharedBox(generate_private_key(), public_key(generate_private_key()))
    with pytest.raises(CannotOpen, match="another disco key"):
        ba.open(stranger.seal(Ping(TXID)))
    for exc in (NotDisco, CannotOpen, MalformedMessage, UnknownType):
        assert issubclass(exc, DiscoError)


def test_encode_rejects_bad_fields():
    with pytest.raises(ValueError):
        Ping(b"short").encode()
    with pytest.raises(ValueError):
        Ping(TXID, b"\x01" * 5).encode()
