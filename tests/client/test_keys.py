"""Key schedule vectors, cross-checked against magic-wormhole 0.24's own functions."""

import json

import pytest
from spake2 import SPAKE2_Symmetric
from wormhole import _key as wh_key
from wormhole import util as wh_util

from burrow.client import keys
from burrow.client.errors import WrongCodeError

K = bytes(range(32))
PHASE_KEY_HEX = "fb0634a65fc823a06c93860cac98f8281255f0d897e9024984e68715b7cdf94b"
VERIFIER_HEX = "116c6e41d0faf2886a5b488079748585db2c4d6d151cca6c580055e1bd176459"
ENCRYPTED_HEX = "00" * 24 + "a32e85e5fc60e5d1ac6a371db80cd66e4f4eda4246"
APPID = "lothar.com/wormhole/text-or-file-xfer"


def test_hkdf_matches_magic_wormhole():
    for info in (b"", b"wormhole:verifier", b"transit_sender", b"lothar.com/x/transit-key"):
        for n in (16, 32, 64):
            assert keys.hkdf(K, n, info) == wh_util.HKDF(K, n, CTXinfo=info)


@pytest.mark.parametrize("side,phase", [("abcdef0123", "version"), ("0011223344", "0"),
                                        ("ffffffffff", "dilate-7"), ("a", "pake")])
def test_phase_key_matches_magic_wormhole(side, phase):
    assert keys.derive_phase_key(K, side, phase) == wh_key.derive_phase_key(K, side, phase)


def test_derive_key_and_verifier_match():
    assert keys.derive_key(K, b"some/purpose", 17) == wh_key.derive_key(K, b"some/purpose", 17)
    assert keys.derive_verifier(K) == wh_key.derive_key(K, b"wormhole:verifier")


def test_literal_vectors():
    # pinned: HKDF-SHA256 with K = 00..1f, no salt
    assert keys.derive_phase_key(K, "abcdef0123", "version").hex() == PHASE_KEY_HEX
    assert keys.derive_verifier(K).hex() == VERIFIER_HEX


def test_encrypt_decrypt_cross():
    pk = keys.derive_phase_key(K, "abcdef0123", "0")
    nonce = bytes(24)
    ours = keys.encrypt_data(pk, b"hello", nonce)
    assert ours[:24] == nonce
    assert wh_key.decrypt_data(pk, ours) == b"hello"
    theirs = wh_key.encrypt_data(pk, b"world")
    assert keys.decrypt_data(pk, theirs) == b"world"
    assert ours.hex() == ENCRYPTED_HEX


def test_decrypt_with_wrong_key_is_wrong_code():
    data = keys.encrypt_data(K, b"x")
    with pytest.raises(WrongCodeError):
        keys.decrypt_data(bytes(32), data)


def test_pake_against_magic_wormhole_parameters():
    code = "4-purple-sausages"
    ours = keys.Pake(code, APPID)
    theirs = SPAKE2_Symmetric(wh_util.to_bytes(code), idSymmetric=wh_util.to_bytes(APPID))
    their_msg = theirs.start()
    body = json.loads(ours.body())
    assert set(body) == {"pake_v1"}
    k_theirs = theirs.finish(bytes.fromhex(body["pake_v1"]))
    k_ours = ours.finish(json.dumps({"pake_v1": their_msg.hex()}).encode())
    assert k_ours == k_theirs


def test_pake_wrong_code_gives_different_keys():
    a, b = keys.Pake("4-purple-sausages", APPID), keys.Pake("4-purple-sausage", APPID)
    ka, kb = a.finish(b.body()), b.finish(a.body())
    assert ka != kb


def test_pake_garbage_is_wrong_code():
    with pytest.raises(WrongCodeError):
        keys.Pake("1-a", APPID).finish(b'{"pake_v1": "zz"}')
    with pytest.raises(WrongCodeError):
        keys.Pake("1-a", APPID).finish(b"not json")


def test_nfc_normalisation():
    assert keys.to_bytes("e\u0301") == "\u00e9".encode()
