"""secp256k1 keys, signatures and key files against the seed's and Skywire's own byte vectors."""

from __future__ import annotations

import os
import stat

import pytest

from burrow.messaging import keys
from burrow.messaging.errors import KeyFormatError
from burrow.messaging.handshake import HandshakeFrame

from . import vectors as v

A = keys.SecretKey(bytes.fromhex(v.SKYWIRE_A_SECRET))
B = keys.SecretKey(bytes.fromhex(v.SKYWIRE_B_SECRET))


def test_public_keys_are_compressed_like_skycoin():
    assert A.public.hex() == v.SKYWIRE_A_PUBLIC
    assert B.public.hex() == v.SKYWIRE_B_PUBLIC


def test_seed_signatures_recover_the_seed_keys():
    opening = HandshakeFrame("0.1", bytes.fromhex(v.SEED_INITIATOR), bytes.fromhex(v.SEED_RESPONDER),
                             bytes.fromhex(v.SEED_NONCE), bytes.fromhex(v.SEED_SIG1))
    assert keys.verify(opening.responder, opening.sig1, opening.signed_bytes(False))
    assert keys.verify(opening.initiator, bytes.fromhex(v.SEED_SIG2), opening.signed_bytes(True))
    # the same signature does not pass for the other key, nor over other bytes
    assert not keys.verify(opening.initiator, opening.sig1, opening.signed_bytes(False))
    assert not keys.verify(opening.responder, opening.sig1, opening.signed_bytes(False) + b"x")


def test_skywire_signature_verifies_and_ours_round_trip():
    assert keys.verify(A.public, bytes.fromhex(v.SKYWIRE_SIG_A_BURROW), b"burrow")
    sig = A.sign(b"burrow")
    assert len(sig) == 65 and sig[64] in (0, 1)
    assert keys.verify(A.public, sig, b"burrow")
    assert not keys.verify(B.public, sig, b"burrow")
    assert not keys.verify(A.public, sig[:64] + b"\x07", b"burrow")  # recovery id out of range


def test_ecdh_is_skycoins_hashed_compressed_point():
    assert (A.ecdh(B.public) + b"\x00").hex() == v.SKYWIRE_DH_A_B
    assert A.ecdh(B.public) == B.ecdh(A.public)


@pytest.mark.parametrize("text", ["", "02" + "00" * 31 + "05",  # x = 5 is not on the curve
                                   "04" + "11" * 32, "zz" * 33, "02" + "ff" * 32])
def test_bad_public_keys_are_refused(text):
    with pytest.raises(KeyFormatError):
        keys.parse_public_key(text)


def test_key_file_is_created_private_and_read_back(tmp_path):
    path = tmp_path / "sub" / "client.key"
    first = keys.load_or_create(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert keys.load_or_create(path).public == first.public
    path.write_text("not hex\n")
    with pytest.raises(KeyFormatError):
        keys.load_or_create(path)


