"""The challenge login with literal vectors, cross-checked against iroh's own Ed25519 keys."""

import pytest

from burrow.packet_relay.iroh.session import Authenticated, IrohSession
from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import challenge_message

SEED = bytes(range(32))
PUBLIC = bytes.fromhex("03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")
CHALLENGE = bytes(16)
# blake3 derive_key("iroh-relay handshake v1 challenge signature", 16 zero bytes)
MESSAGE = bytes.fromhex("8105e7bd9963194e6d6d80225a3f1b071da3b6e65edcd12531e16233f33de9d6")
# Ed25519 signature of MESSAGE by SEED, as iroh.SecretKey.from_bytes(SEED).sign(MESSAGE) gives it
SIGNATURE = bytes.fromhex("379e507f819c0e3bf771514681534d2565b2a2b162b6b8f82f5e6139d54c0930"
                          "810e12109be5190497b87c2b51148798b42aece99d0774983e8862c0e797f800")
CLIENT_AUTH_WIRE = b"\x01" + PUBLIC + b"\x40" + SIGNATURE


def test_literal_handshake_vectors():
    assert challenge_message(CHALLENGE) == MESSAGE
    session = IrohSession("iroh-relay-v2", CHALLENGE)
    assert session.start(0.0).send == [b"\x00" + CHALLENGE]
    assert f.decode(CLIENT_AUTH_WIRE) == f.ClientAuth(PUBLIC, SIGNATURE)
    assert session.receive(CLIENT_AUTH_WIRE, 0.0).events == [Authenticated(PUBLIC)]
    assert session.accept().send == [b"\x02"]


def test_same_auth_against_another_challenge_is_denied():
    session = IrohSession("iroh-relay-v2", b"\x01" * 16)
    session.start(0.0)
    out = session.receive(CLIENT_AUTH_WIRE, 0.0)
    assert out.send == [b"\x03\x11signature invalid"]


def test_iroh_keys_sign_what_we_verify():
    iroh = pytest.importorskip("iroh")
    key = iroh.SecretKey.from_bytes(SEED)
    assert key.public().to_bytes() == PUBLIC
    assert key.sign(MESSAGE).to_bytes() == SIGNATURE
    other = iroh.SecretKey.generate()
    challenge = bytes(range(100, 116))
    session = IrohSession("iroh-relay-v1", challenge)
    session.start(0.0)
    auth = f.ClientAuth(other.public().to_bytes(), other.sign(challenge_message(challenge)).to_bytes())
    assert session.receive(auth.encode(), 0.0).events == [Authenticated(other.public().to_bytes())]
