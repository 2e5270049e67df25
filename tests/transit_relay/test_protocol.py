"""Sans-IO tests: literal handshake vectors, pairing rules, moods, timers and limits."""

import pytest

from burrow.common.events import validate
from burrow.transit_relay.protocol import (
    BAD_HANDSHAKE,
    IMPATIENT,
    BadHandshake,
    Close,
    Handshake,
    HandshakeTooLong,
    Limits,
    LineReader,
    Pair,
    Phase,
    Record,
    Relay,
)

TOKEN = b"0123456789abcdef" * 4
NEW_A = b"please relay " + TOKEN + b" for side aaaaaaaaaaaaaaaa\n"
NEW_B = b"please relay " + TOKEN + b" for side bbbbbbbbbbbbbbbb\n"
OLD = b"please relay " + TOKEN + b"\n"


def records(actions):
    return [a.fields for a in actions if isinstance(a, Record)]


def moods(actions):
    return [r["mood"] for r in records(actions)]


def check_schema(actions):
    for fields in records(actions):
        validate("transit", "session", fields)


# -- wire format ----------------------------------------------------------------------------
def test_decode_literal_vectors():
    assert Handshake.decode(NEW_A[:-1]) == Handshake(TOKEN, b"a" * 16)
    assert Handshake.decode(OLD[:-1]) == Handshake(TOKEN, None)
    # `$` also matches before one trailing newline (the WebSocket form may keep it)
    assert Handshake.decode(NEW_A) == Handshake(TOKEN, b"a" * 16)
    # any ASCII word characters, uppercase and underscore included, as the reference accepts
    assert Handshake.decode(b"please relay " + b"A_" * 32) == Handshake(b"A_" * 32)


@pytest.mark.parametrize("line", [
    b"please relay " + TOKEN + b"\r",                       # "\r\n" line ending
    b"please relay " + TOKEN[:-1],                          # 63 characters
    b"please relay " + TOKEN + b"0",                        # 65 characters
    b"please relay " + TOKEN + b" for side abc",            # short side
    b"please relay " + TOKEN + b" for side " + b"a" * 17,
    b"Please relay " + TOKEN,
    b"please  relay " + TOKEN,
    b"please relay " + b"-" * 64,
    b"",
])
def test_decode_rejects(line):
    with pytest.raises(BadHandshake):
        Handshake.decode(line)


def test_encode_round_trip():
    for hs in (Handshake(TOKEN, b"0123456789abcdef"), Handshake(TOKEN)):
        assert Handshake.decode(hs.encode()) == hs
    assert Handshake(TOKEN, b"a" * 16).encode() == NEW_A
    assert Handshake(TOKEN).encode() == OLD


def test_line_reader_one_byte_at_a_time():
    reader = LineReader()
    data = NEW_A + b"xy"
    for i in range(len(NEW_A) - 1):
        assert reader.feed(data[i:i + 1]) is None
    assert reader.feed(data[len(NEW_A) - 1:]) == (Handshake(TOKEN, b"a" * 16), b"xy")


def test_line_reader_limit_is_1024_bytes():
    with pytest.raises(HandshakeTooLong):
        LineReader().feed(b"x" * 1025)
    with pytest.raises(HandshakeTooLong):
        LineReader().feed(b"x" * 1025 + b"\n")
    with pytest.raises(BadHandshake):
        LineReader().feed(b"x" * 1024 + b"\n")


# -- pairing ------------------------------------------------------------------------------------
def opened(relay, now=0.0, ip="10.0.0.1", transport="tcp"):
    conn = relay.open(ip, transport, now)
    assert not isinstance(conn, str)
    return conn


def test_two_sides_pair_and_first_is_first():
    relay = Relay(Limits())
    a, b = opened(relay, 1.0), opened(relay, 2.0)
    assert relay.receive(a, NEW_A, 1.5) == []
    assert a.phase is Phase.PENDING
    out = relay.receive(b, NEW_B, 3.0)
    assert len(out) == 1 and isinstance(out[0], Pair)
    pair = out[0].state
    assert (pair.first, pair.second) == (a, b)
    assert a.phase is b.phase is Phase.PAIRED
    assert not relay.pending and not relay.by_token
    pair.bytes_from_first, pair.bytes_from_second = 12345, 10
    out = relay.finish(pair, 10.0)
    check_schema(out)
    assert records(out) == [{"started": 1.0, "duration": 9.0, "waiting_time": 2.0, "mood": "happy",
                             "transport": "tcp", "bytes_from_first": 12345, "bytes_from_second": 10,
                             "total_bytes": 12355}]
    assert relay.finish(pair, 11.0) == []  # exactly one line per pair
    assert relay.caps.total == 0


def test_pair_without_bytes_is_jilted():
    relay = Relay(Limits())
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    pair = relay.receive(b, NEW_B, 0)[0].state
    assert moods(relay.finish(pair, 1)) == ["jilted"]


def test_same_side_never_pairs():
    relay = Relay(Limits())
    a1, a2 = opened(relay), opened(relay)
    assert relay.receive(a1, NEW_A, 0) == []
    assert relay.receive(a2, NEW_A, 0) == []
    assert len(relay.pending) == 2


@pytest.mark.parametrize("first,second", [(OLD, OLD), (OLD, NEW_A), (NEW_A, OLD)])
def test_legacy_handshakes_pair_with_anything(first, second):
    relay = Relay(Limits())
    a, b = opened(relay), opened(relay)
    relay.receive(a, first, 0)
    assert isinstance(relay.receive(b, second, 0)[0], Pair)


def test_other_token_does_not_pair():
    relay = Relay(Limits())
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    assert relay.receive(b, NEW_B.replace(b"0123", b"9999"), 0) == []


def test_redundant_connections_dropped_when_pair_forms():
    relay = Relay(Limits())
    a1, a2, b = opened(relay), opened(relay), opened(relay)
    relay.receive(a1, NEW_A, 0)
    relay.receive(a2, NEW_A, 0)
    out = relay.receive(b, NEW_B, 1)
    check_schema(out)
    assert isinstance(out[0], Pair) and out[0].state.first is a1
    assert [(type(x), getattr(x, "conn", None), getattr(x, "reply", None)) for x in out[1:2]] == \
        [(Close, a2, None)]  # plain close, no message
    assert moods(out) == ["redundant"]
    assert a2.phase is Phase.CLOSED and not relay.pending


def test_third_connection_after_pair_waits_alone():
    relay = Relay(Limits())
    a, b, c = opened(relay), opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    relay.receive(b, NEW_B, 0)
    assert relay.receive(c, NEW_A, 0) == []
    assert moods(relay.lost(c, 5)) == ["lonely"]


def test_bad_handshake_reply_and_mood():
    relay = Relay(Limits())
    a = opened(relay)
    out = relay.receive(a, b"please relay nope\n", 0)
    check_schema(out)
    assert out[0] == Close(a, BAD_HANDSHAKE) and moods(out) == ["errory"]
    assert relay.receive(a, b"more", 0) == []  # terminal


def test_crlf_is_a_bad_handshake():
    relay = Relay(Limits())
    a = opened(relay)
    assert relay.receive(a, OLD[:-1] + b"\r\n", 0)[0] == Close(a, BAD_HANDSHAKE)


def test_impatient_while_pending_and_in_same_segment():
    relay = Relay(Limits())
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    out = relay.receive(a, b"x", 1)
    assert out[0] == Close(a, IMPATIENT) and moods(out) == ["impatient"]
    out = relay.receive(b, NEW_B + b"early", 1)
    assert out[0] == Close(b, IMPATIENT) and not relay.pending


def test_overlong_line_closes_silently_as_empty():
    relay = Relay(Limits())
    a = opened(relay)
    out = relay.receive(a, b"p" * 1100, 0)
    assert out[0] == Close(a, None) and moods(out) == ["empty"]


def test_lost_moods():
    relay = Relay(Limits())
    a, b = opened(relay, 0), opened(relay, 0)
    relay.receive(b, b"please", 0)
    assert moods(relay.lost(a, 1)) == ["empty"]
    out = relay.lost(b, 1)
    assert moods(out) == ["empty"] and not any(isinstance(x, Close) for x in out)
    c = opened(relay, 2)
    relay.receive(c, OLD, 2)
    out = relay.lost(c, 7)
    check_schema(out)
    assert records(out)[0]["mood"] == "lonely" and records(out)[0]["duration"] == 5


def test_websocket_message_rules():
    relay = Relay(Limits())
    a, b, c, d = (opened(relay, transport="websocket") for _ in range(4))
    assert relay.message(a, NEW_A[:-1], 0) == []  # trailing newline optional
    assert relay.message(b, NEW_A[:20], 0)[0] == Close(b, BAD_HANDSHAKE)  # split handshake
    assert relay.message(c, NEW_B + b"data", 0)[0] == Close(c, BAD_HANDSHAKE)  # handshake + data
    assert relay.message(a, b"data", 0)[0] == Close(a, IMPATIENT)
    assert moods(relay.protocol_error(d, 0)) == ["errory"]


def test_mixed_transport_pair_record():
    relay = Relay(Limits())
    a, b = opened(relay, transport="websocket"), opened(relay)
    relay.message(a, NEW_A, 0)
    pair = relay.receive(b, NEW_B, 0)[0].state
    pair.bytes_from_second = 1
    assert records(relay.finish(pair, 1))[0]["transport"] == "mixed"


# -- timers and limits --------------------------------------------------------------------------
def test_handshake_deadline():
    relay = Relay(Limits(handshake_timeout=10))
    a = opened(relay, 0)
    b = opened(relay, 5)
    assert relay.tick(9.9) == []
    out = relay.tick(10.0)
    assert out[0] == Close(a, None) and moods(out) == ["empty"]
    assert relay.timeouts["handshake"] == 1 and b.phase is Phase.HANDSHAKE


def test_pending_deadline_counts_from_handshake():
    relay = Relay(Limits(handshake_timeout=100, pending_timeout=30))
    a = opened(relay, 0)
    relay.receive(a, NEW_A, 20)
    assert relay.tick(49) == []
    out = relay.tick(50)
    assert out[0] == Close(a, None) and moods(out) == ["lonely"] and not relay.by_token


def test_idle_timeout_closes_both_sides_only_without_traffic():
    relay = Relay(Limits(idle_timeout=60))
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    pair = relay.receive(b, NEW_B, 0)[0].state
    assert relay.tick(50) == []
    pair.bytes_from_first += 1  # traffic resets the idle clock
    assert relay.tick(100) == []
    assert relay.tick(159) == []
    assert relay.tick(160) == [Close(a), Close(b)]
    assert relay.timeouts["idle"] == 1


def test_idle_timeout_off_by_default():
    relay = Relay(Limits())
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    relay.receive(b, NEW_B, 0)
    assert relay.tick(10 ** 9) == []


def test_max_pending():
    relay = Relay(Limits(max_pending=1))
    a, b = opened(relay), opened(relay)
    relay.receive(a, NEW_A, 0)
    out = relay.receive(b, NEW_A.replace(b"0123", b"4567"), 0)
    assert isinstance(out[0], Close) and out[0].reply.startswith(b"error: ") and moods(out) == ["errory"]
    assert relay.refusals == {"pending": 1}
    c = opened(relay)
    assert isinstance(relay.receive(c, NEW_B, 0)[0], Pair)  # a partner never counts as pending


def test_max_pairs():
    relay = Relay(Limits(max_pairs=1))
    conns = [opened(relay) for _ in range(4)]
    relay.receive(conns[0], NEW_A, 0)
    relay.receive(conns[1], NEW_B, 0)
    other = NEW_A.replace(b"0123", b"4567")
    relay.receive(conns[2], other, 0)
    out = relay.receive(conns[3], other.replace(b"aaaa", b"bbbb"), 0)
    assert isinstance(out[0], Close) and out[0].reply == b"error: relay is full (pairs)\n"
    assert relay.refusals == {"pairs": 1} and len(relay.pairs) == 1


def test_connection_caps_per_ip_and_total():
    relay = Relay(Limits(max_per_ip=2, max_connections=3))
    opened(relay, ip="1.1.1.1")
    c = opened(relay, ip="1.1.1.1")
    assert relay.open("1.1.1.1", "tcp", 0) == "per_ip"
    opened(relay, ip="2.2.2.2")
    assert relay.open("3.3.3.3", "tcp", 0) == "total"
    relay.lost(c, 1)  # a closed connection gives its slot back
    assert not isinstance(relay.open("1.1.1.1", "tcp", 1), str)
    assert relay.refusals == {"per_ip": 1, "total": 1}


def test_shutdown_closes_everything():
    relay = Relay(Limits())
    a, b, c, d = (opened(relay) for _ in range(4))
    relay.receive(b, NEW_A, 0)
    relay.receive(c, OLD.replace(b"0123", b"9999"), 0)
    relay.receive(d, OLD.replace(b"0123", b"9999"), 0)
    out = relay.shutdown(1)
    assert moods(out) == ["empty", "lonely"]
    assert {x.conn for x in out if isinstance(x, Close)} == {a, b, c, d}
