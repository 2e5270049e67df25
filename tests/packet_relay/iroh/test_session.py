"""The iroh relay connection state machine with a manual clock and real Ed25519 signatures."""

from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from burrow.packet_relay.iroh.session import (
    Authenticated,
    Closed,
    Forward,
    IrohSession,
)
from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import challenge_message, pick_subprotocol

CHALLENGE = bytes(range(16))


def _login(version="iroh-relay-v2"):
    key = SigningKey(b"\x07" * 32)
    session = IrohSession(version, CHALLENGE, ping_interval=15, pong_timeout=5)
    out = session.start(0.0)
    assert out.send == [b"\x00" + CHALLENGE]
    sig = key.sign(challenge_message(CHALLENGE)).signature
    out = session.receive(f.ClientAuth(bytes(key.verify_key), sig).encode(), 0.1)
    assert out.events == [Authenticated(bytes(key.verify_key))]
    assert session.accept().send == [b"\x02"]
    return session, bytes(key.verify_key)


def test_pick_subprotocol_prefers_v2_and_refuses_others():
    assert pick_subprotocol("iroh-relay-v2, iroh-relay-v1") == "iroh-relay-v2"
    assert pick_subprotocol("iroh-relay-v1") == "iroh-relay-v1"
    assert pick_subprotocol("derp") is None
    assert pick_subprotocol(None) is None


def test_challenge_message_is_blake3_derive_key():
    # blake3 derive_key of 16 zero bytes under the iroh context, computed once and pinned.
    import blake3
    expected = blake3.blake3(bytes(16), derive_key_context="iroh-relay handshake v1 challenge signature")
    assert challenge_message(bytes(16)) == expected.digest()
    assert len(challenge_message(bytes(16))) == 32


def test_login_then_forward_datagrams_with_source_id():
    session, me = _login()
    dst = b"\x99" * 32
    out = session.receive(b"\x04" + dst + b"\x00payload", 1.0)
    (event,) = out.events
    assert isinstance(event, Forward)
    assert event.dst == dst
    assert event.frame == b"\x06" + me + b"\x00payload"
    assert (event.packets, event.payload_bytes) == (1, 7)
    out = session.receive(b"\x05" + dst + b"\x00\x00\x04" + b"x" * 10, 1.0)
    assert out.events[0].packets == 3


def test_bad_signature_is_denied():
    session = IrohSession("iroh-relay-v2", CHALLENGE)
    session.start(0.0)
    other = SigningKey(b"\x01" * 32)
    wrong = SigningKey(b"\x02" * 32).sign(challenge_message(CHALLENGE)).signature
    out = session.receive(f.ClientAuth(bytes(other.verify_key), wrong).encode(), 0.0)
    assert out.send == [f.ServerDeniesAuth("signature invalid").encode()]
    assert out.events == [Closed("denied", "signature invalid")]


def test_data_before_auth_is_a_protocol_error():
    session = IrohSession("iroh-relay-v1", CHALLENGE)
    session.start(0.0)
    out = session.receive(b"\x04" + b"\x00" * 33, 0.0)
    assert isinstance(out.events[0], Closed) and session.state == "closed"


def test_client_may_not_send_relay_frames():
    session, _ = _login()
    out = session.receive(b"\x06" + b"\x00" * 33, 0.0)
    assert out.events[0].reason == "protocol"


def test_ping_is_answered_and_server_pings_with_deadline():
    session, _ = _login()
    assert session.receive(b"\x09abcdefgh", 1.0).send == [b"\x0aabcdefgh"]
    assert session.tick(10.0).send == []
    ping = session.tick(16.5).send
    assert len(ping) == 1 and ping[0][0] == f.PING
    assert session.receive(b"\x0a" + ping[0][1:], 17.0).events == []
    ping = session.tick(32.5).send
    assert len(ping) == 1
    assert session.tick(37.6).events == [Closed("timeout", "no pong")]


def test_status_frames_follow_the_version():
    v2, _ = _login("iroh-relay-v2")
    v1, _ = _login("iroh-relay-v1")
    assert v2.status_frame(f.STATUS_SAME_ENDPOINT_ID_CONNECTED) == b"\x0d\x01"
    assert v1.status_frame(f.STATUS_SAME_ENDPOINT_ID_CONNECTED)[0] == f.HEALTH


def test_forward_fast_path_matches_the_slow_path_and_checks_length():
    session, me = _login()
    dst = b"\x42" * 32
    assert session.forward(b"\x04" + dst + b"\x01data", 2.0) == (dst, b"\x01data", 4)
    assert session.forward(b"\x05" + dst + b"\x00\x00\x02" + b"abcd", 2.0) == (dst, b"\x00\x00\x02abcd", 4)
    assert session.forward(b"\x05" + dst + b"\x00", 2.0) is None
    assert session.state == "closed"


def test_next_deadline_follows_pings_and_pongs_with_jitter():
    session = IrohSession("iroh-relay-v2", CHALLENGE, ping_interval=15, pong_timeout=5, jitter=lambda: 2.0)
    assert session.next_deadline() is None  # not active yet
    session.start(0.0)
    key = SigningKey(b"\x09" * 32)
    session.receive(f.ClientAuth(bytes(key.verify_key), key.sign(challenge_message(CHALLENGE)).signature)
                    .encode(), 1.0)
    session.accept()
    assert session.next_deadline() == 18.0          # 1.0 + 15 + 2 of jitter
    session.receive(b"\x09" + b"x" * 8, 3.0)        # any inbound frame pushes the ping back
    assert session.next_deadline() == 20.0
    assert session.tick(19.0).send == []
    (ping,) = session.tick(20.0).send
    assert session.next_deadline() == 25.0          # now the pong deadline
    session.receive(b"\x0a" + ping[1:], 21.0)
    assert session.next_deadline() == 38.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=80), max_size=6), st.booleans())
def test_any_message_sequence_is_handled_or_closes_cleanly(messages, logged_in):
    if logged_in:
        session, _ = _login()
    else:
        session = IrohSession("iroh-relay-v2", CHALLENGE)
        session.start(0.0)
    for m in messages:
        out = session.receive(m, 1.0)
        assert all(isinstance(ev, (Authenticated, Forward, Closed)) for ev in out.events)
        if session.state == "closed":
            assert session.receive(b"\x09" + b"x" * 8, 1.0).send == []
            break
