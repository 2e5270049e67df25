"""The link handshake: seed frame layout, Skywire's frame 1, every refusal, byte-at-a-time feeding."""

from __future__ import annotations

import json

import pytest

from burrow.messaging import keys
from burrow.messaging.errors import HandshakeError
from burrow.messaging.handshake import MAX_LINE, HandshakeFrame, InitiatorHandshake, ResponderHandshake

from . import vectors as v

SEED_FRAME4 = {
    "version": "0.1", "initiator": v.SEED_INITIATOR, "responder": v.SEED_RESPONDER, "nonce": v.SEED_NONCE,
    "sig1": v.SEED_SIG1, "sig2": v.SEED_SIG2, "accepted": True}


def test_seed_frames_encode_field_for_field():
    f4 = HandshakeFrame.decode(json.dumps(SEED_FRAME4).encode(), want_sig1=True, want_sig2=True)
    assert f4.accepted is True
    assert json.loads(f4.encode()) == SEED_FRAME4
    assert list(json.loads(f4.encode())) == list(SEED_FRAME4)  # Skywire's field order
    assert f4.encode().endswith(b"}\n") and b" " not in f4.encode()
    f1 = HandshakeFrame(f4.version, f4.initiator, f4.responder, f4.nonce)
    assert list(json.loads(f1.encode())) == ["version", "initiator", "responder", "nonce"]


def test_responder_answers_skywires_frame1_with_zero_signatures():
    server = keys.SecretKey(bytes.fromhex(v.SKYWIRE_SERVER_SECRET))
    r = ResponderHandshake(server)
    f2 = HandshakeFrame.decode(r.receive_data(v.SKYWIRE_FRAME1.encode() + b"\n"), want_sig1=True)
    assert f2.initiator.hex() == v.SKYWIRE_A_PUBLIC
    assert keys.verify(server.public, f2.sig1, f2.signed_bytes(False))


def _run(initiator: InitiatorHandshake, responder: ResponderHandshake, one_byte: bool = False) -> None:
    def feed(machine, data):
        if not one_byte:
            return machine.receive_data(data)
        return b"".join(machine.receive_data(data[i:i + 1]) for i in range(len(data)))

    to_r = initiator.start()
    while not (initiator.complete and responder.complete):
        to_i = feed(responder, to_r)
        to_r = feed(initiator, to_i)


@pytest.mark.parametrize("one_byte", [False, True])
def test_both_sides_complete_and_learn_the_other_key(one_byte):
    a, s = keys.SecretKey.generate(), keys.SecretKey.generate()
    i, r = InitiatorHandshake(a, s.public), ResponderHandshake(s)
    _run(i, r, one_byte)
    assert r.remote == a.public and i.remote == s.public


def test_bytes_after_the_last_frame_are_kept():
    a, s = keys.SecretKey.generate(), keys.SecretKey.generate()
    i, r = InitiatorHandshake(a, s.public), ResponderHandshake(s)
    f3 = i.receive_data(r.receive_data(i.start()))
    f4 = r.receive_data(f3 + b"early")
    assert r.rest == b"early"
    i.receive_data(f4 + b"\x03\x00\x01\x05")
    assert i.complete and i.rest == b"\x03\x00\x01\x05"


def test_responder_refuses_a_frame_for_another_key():
    a, s, other = keys.SecretKey.generate(), keys.SecretKey.generate(), keys.SecretKey.generate()
    with pytest.raises(HandshakeError) as exc:
        ResponderHandshake(s).receive_data(InitiatorHandshake(a, other.public).start())
    assert exc.value.reason == "wrong_responder"


def test_initiator_refuses_sig1_from_another_key():
    a, s, impostor = keys.SecretKey.generate(), keys.SecretKey.generate(), keys.SecretKey.generate()
    i = InitiatorHandshake(a, s.public)
    f1 = HandshakeFrame.decode(i.start())
    forged = HandshakeFrame(f1.version, f1.initiator, f1.responder, f1.nonce, impostor.sign(f1.signed_bytes(False)))
    with pytest.raises(HandshakeError) as exc:
        i.receive_data(forged.encode())
    assert exc.value.reason == "bad_sig1"


def test_responder_refuses_bad_sig2_with_accepted_false():
    a, s = keys.SecretKey.generate(), keys.SecretKey.generate()
    i, r = InitiatorHandshake(a, s.public), ResponderHandshake(s)
    f3 = HandshakeFrame.decode(i.receive_data(r.receive_data(i.start())), want_sig1=True, want_sig2=True)
    bad = HandshakeFrame(f3.version, f3.initiator, f3.responder, f3.nonce, f3.sig1, s.sign(b"other"))
    with pytest.raises(HandshakeError) as exc:
        r.receive_data(bad.encode())
    assert exc.value.reason == "bad_sig2"
    reply = exc.value.reply
    assert json.loads(reply)["accepted"] is False
    with pytest.raises(HandshakeError) as exc:  # the initiator reads that reply as a refusal
        i.receive_data(reply)
    assert exc.value.reason == "refused"


def test_responder_without_room_refuses_after_checking():
    a, s = keys.SecretKey.generate(), keys.SecretKey.generate()
    i, r = InitiatorHandshake(a, s.public), ResponderHandshake(s, admit=lambda key: False)
    f3 = i.receive_data(r.receive_data(i.start()))
    with pytest.raises(HandshakeError) as exc:
        r.receive_data(f3)
    assert exc.value.reason == "full"


@pytest.mark.parametrize("line,reason", [
    (b"not json\n", "bad_json"),
    (b"[1,2]\n", "bad_json"),
    (b'{"version":"0.1"}\n', "bad_field"),
    (b"x" * (MAX_LINE + 1), "too_long"),
])
def test_malformed_frames_are_refused(line, reason):
    with pytest.raises(HandshakeError) as exc:
        ResponderHandshake(keys.SecretKey.generate()).receive_data(line)
    assert exc.value.reason == reason


def test_other_versions_and_short_nonces_are_refused():
    a, s = keys.SecretKey.generate(), keys.SecretKey.generate()
    f1 = HandshakeFrame.decode(InitiatorHandshake(a, s.public).start())
    with pytest.raises(HandshakeError) as exc:
        ResponderHandshake(s).receive_data(HandshakeFrame("0.2", f1.initiator, f1.responder, f1.nonce).encode())
    assert exc.value.reason == "version"
    with pytest.raises(HandshakeError) as exc:
        ResponderHandshake(s).receive_data(HandshakeFrame("0.1", f1.initiator, f1.responder, b"short").encode())
    assert exc.value.reason == "bad_field"
