"""Noise KK over secp256k1 against byte vectors from Skywire's own Go code."""

from __future__ import annotations

import pytest

from burrow.messaging import keys, noise
from burrow.messaging.errors import ChannelError

from . import vectors as v

A = keys.SecretKey(bytes.fromhex(v.SKYWIRE_A_SECRET))
B = keys.SecretKey(bytes.fromhex(v.SKYWIRE_B_SECRET))


def _pair(ephemerals: bool = True):
    ea = bytes.fromhex(v.SKYWIRE_A_EPHEMERAL) if ephemerals else None
    eb = bytes.fromhex(v.SKYWIRE_B_EPHEMERAL) if ephemerals else None
    return noise.ChannelNoise(A, B.public, True, ea), noise.ChannelNoise(B, A.public, False, eb)


def test_noise_kk_matches_skywire_byte_for_byte():
    a, b = _pair()
    m1 = a.message1()
    assert m1.hex() == v.SKYWIRE_MESSAGE1 and len(m1) == 49
    m2 = b.read_message1(m1)
    assert m2.hex() == v.SKYWIRE_MESSAGE2 and len(m2) == 49
    a.read_message2(m2)
    for i, want in enumerate(v.SKYWIRE_A_TO_B, start=1):  # the 10th and later follow a rekey
        ct = a.encrypt(f"a->b {i}".encode())
        assert ct.hex() == want
        assert b.decrypt(ct) == f"a->b {i}".encode()
    assert b.encrypt(b"b->a 1").hex() == v.SKYWIRE_B_TO_A_1


def test_noise_refuses_a_message_for_another_key_and_tampered_ciphertext():
    c = keys.SecretKey.generate()
    a = noise.ChannelNoise(A, B.public, True)
    wrong = noise.ChannelNoise(B, c.public, False)  # B expects C, but A opened it
    with pytest.raises(ChannelError) as exc:
        wrong.read_message1(a.message1())
    assert exc.value.reason == "noise_auth"
    a, b = _pair(ephemerals=False)
    a.read_message2(b.read_message1(a.message1()))
    ct = bytearray(a.encrypt(b"hello"))
    ct[0] ^= 1
    with pytest.raises(ChannelError):
        b.decrypt(bytes(ct))


def test_noise_message_of_wrong_length_is_refused():
    a, b = _pair(ephemerals=False)
    with pytest.raises(ChannelError) as exc:
        b.read_message1(a.message1()[:48])
    assert exc.value.reason == "noise_length"
