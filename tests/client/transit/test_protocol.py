"""Transit handshakes, hints and records, cross-checked against magic-wormhole 0.24 (wormhole.transit)."""

import re

import pytest
from nacl.secret import SecretBox
from wormhole import _hints as wh_hints
from wormhole import transit as wh_transit

from burrow.client.transit import protocol as P

TK = bytes(range(100, 132))


def test_handshakes_match_magic_wormhole():
    assert P.sender_handshake(TK) == wh_transit.build_sender_handshake(TK)
    assert P.receiver_handshake(TK) == wh_transit.build_receiver_handshake(TK)
    assert P.relay_handshake(TK, "0011223344556677") == wh_transit.build_sided_relay_handshake(TK, "0011223344556677")


def test_relay_handshake_matches_reference_relay_regex():
    line = P.relay_handshake(TK, P.new_relay_side()).decode().rstrip("\n")
    assert re.search(r"^please relay (\w{64}) for side (\w{16})$", line)


def test_literal_sender_handshake_prefix():
    assert P.sender_handshake(TK).startswith(b"transit sender ")
    assert P.sender_handshake(TK).endswith(b" ready\n\n")
    assert len(P.sender_handshake(TK)) == len("transit sender  ready\n\n") + 64


def _run(hs: P.Handshake, data: bytes, one_byte: bool):
    events, out = [], b""
    chunks = [data[i:i + 1] for i in range(len(data))] if one_byte else [data]
    for c in chunks:
        ev, o = hs.feed(c)
        events += ev
        out += o
    return events, out


@pytest.mark.parametrize("one_byte", [False, True])
def test_sender_and_receiver_handshake_through_relay(one_byte):
    s = P.Handshake(TK, "sender", relay_side="aa" * 8)
    r = P.Handshake(TK, "receiver", relay_side="bb" * 8)
    assert s.start().startswith(b"please relay ")
    ev, out = _run(s, b"ok\n", one_byte)
    assert ev == [P.RelayReady()] and out == P.sender_handshake(TK)
    _run(r, b"ok\n", one_byte)
    ev, _ = _run(s, P.receiver_handshake(TK), one_byte)
    assert ev == [P.PeerReady()] and s.state == "wait-go"
    assert s.select() == b"go\n"
    ev, _ = _run(r, P.sender_handshake(TK) + b"go\n", one_byte)
    assert ev == [P.PeerReady(), P.Go()] and r.state == "records"


def test_wanted_never_reads_past_the_handshake():
    r = P.Handshake(TK, "receiver")
    assert r.wanted() == len(P.sender_handshake(TK))
    r.feed(P.sender_handshake(TK)[:10])
    assert r.wanted() == len(P.sender_handshake(TK)) - 10


@pytest.mark.parametrize("bad", [b"bad handshake\n", b"transit sender 00", b"nevermind\n"])
def test_bad_handshake_bytes_rejected(bad):
    r = P.Handshake(TK, "receiver")
    with pytest.raises(P.TransitProtocolError):
        r.feed(bad if not bad.startswith(b"transit") else bad + b"x" * 80)


def test_receiver_refuses_nevermind_instead_of_go():
    r = P.Handshake(TK, "receiver")
    r.feed(P.sender_handshake(TK))
    with pytest.raises(P.TransitProtocolError):
        r.feed(b"nevermind\n")


def test_record_keys_match_magic_wormhole():
    ts = wh_transit.TransitSender("tcp:127.0.0.1:1", no_listen=True)
    ts.set_transit_key(TK)
    assert P.record_keys(TK, "sender") == (ts._sender_record_key(), ts._receiver_record_key())
    enc_r, dec_r = P.record_keys(TK, "receiver")
    assert enc_r == ts._receiver_record_key() and dec_r == ts._sender_record_key()


def test_records_format_and_nonce_counter():
    enc_key, _ = P.record_keys(TK, "sender")
    e = P.RecordEncoder(enc_key)
    r0, r1 = e.encode(b"hello"), e.encode(b"world")
    assert int.from_bytes(r0[:4], "big") == len(r0) - 4 == 24 + 5 + 16
    assert r0[4:28] == bytes(24) and r1[4:28] == (1).to_bytes(24, "big")
    assert SecretBox(enc_key).decrypt(bytes(r1[4:])) == b"world"  # standard secretbox
    _, dec_key = P.record_keys(TK, "receiver")
    d = P.RecordDecoder(dec_key)
    stream = r0 + r1
    got = []
    for i in range(len(stream)):
        got += d.feed(stream[i:i + 1])
    assert got == [b"hello", b"world"]


def test_record_replay_and_reorder_rejected():
    enc_key, _ = P.record_keys(TK, "sender")
    e = P.RecordEncoder(enc_key)
    r0, r1 = e.encode(b"a"), e.encode(b"b")
    with pytest.raises(P.TransitProtocolError):
        P.RecordDecoder(enc_key).feed(r1)
    d = P.RecordDecoder(enc_key)
    d.feed(r0)
    with pytest.raises(P.TransitProtocolError):
        d.feed(r0)


def test_tampered_record_rejected_and_length_limit():
    enc_key, _ = P.record_keys(TK, "sender")
    rec = bytearray(P.RecordEncoder(enc_key).encode(b"abc"))
    rec[-1] ^= 1
    with pytest.raises(P.TransitProtocolError):
        P.RecordDecoder(enc_key).feed(bytes(rec))
    with pytest.raises(P.TransitProtocolError):
        P.RecordDecoder(enc_key, max_record=1000).feed((2000).to_bytes(4, "big"))


def test_hints_roundtrip_and_parse_like_magic_wormhole():
    direct = [P.TcpHint("192.168.1.5", 40123), P.TcpHint("127.0.0.1", 40123)]
    relays = [P.TcpHint("relay.example", 4001)]
    hints = P.encode_hints(direct, relays)
    assert hints[0] == {"type": "direct-tcp-v1", "priority": 0.0, "hostname": "192.168.1.5", "port": 40123}
    assert hints[-1] == {"type": "relay-v1", "hints": [{"type": "direct-tcp-v1", "priority": 0.0,
                                                        "hostname": "relay.example", "port": 4001}]}
    for h in hints:
        assert wh_hints.parse_hint(h) is not None  # magic-wormhole accepts what we emit
    assert P.decode_hints(hints) == (direct, relays)


def test_decode_hints_skips_unknown_and_malformed():
    hints = [{"type": "tor-tcp-v1", "hostname": "x.onion", "port": 80},
             {"type": "direct-tcp-v1", "hostname": "", "port": 1},
             {"type": "direct-tcp-v1", "hostname": "h", "port": "nope"},
             {"type": "relay-v1", "hints": [{"type": "websocket-v1", "url": "wss://x"}]},
             "garbage"]
    assert P.decode_hints(hints) == ([], [])


@pytest.mark.parametrize("text,host,port,prio", [("tcp:127.0.0.1:4001", "127.0.0.1", 4001, 0.0),
                                                 ("tcp:relay.example:99:priority=2.5", "relay.example", 99, 2.5),
                                                 ("tcp:[::1]:4001", "::1", 4001, 0.0)])
def test_parse_helper(text, host, port, prio):
    h = P.parse_helper(text)
    assert (h.hostname, h.port, h.priority) == (host, port, prio)


@pytest.mark.parametrize("bad", ["127.0.0.1:4001", "tcp:host", "tcp::1"])
def test_parse_helper_rejects(bad):
    with pytest.raises(ValueError):
        P.parse_helper(bad)


async def test_pipe_protocol_reassembles_frames_from_any_chunking():
    from burrow.client.transit.pipe import _PipeProtocol

    enc_key, _ = P.record_keys(TK, "sender")
    e = P.RecordEncoder(enc_key)
    frames = [bytes(e.encode(bytes([i]) * (i * 1000 + 1))) for i in range(5)]
    stream = b"".join(frames)
    for chunk in (1, 7, 4096, len(stream)):
        proto = _PipeProtocol(P.MAX_RECORD)
        proto.feed(stream[:3])  # leftover from the negotiation reader
        pos = 3
        while pos < len(stream):
            buf = proto.get_buffer(-1)
            n = min(len(buf), chunk, len(stream) - pos)
            buf[:n] = stream[pos:pos + n]
            proto.buffer_updated(n)
            pos += n
        d = P.RecordDecoder(enc_key)
        got = [bytes(d.decrypt(await proto.next_frame())) for _ in frames]
        assert got == [bytes([i]) * (i * 1000 + 1) for i in range(5)]
        proto.eof_received()
        with pytest.raises(P.TransitError):
            await proto.next_frame()


async def test_pipe_protocol_rejects_bad_length():
    from burrow.client.transit.pipe import _PipeProtocol

    proto = _PipeProtocol(1000)
    proto.feed((5000).to_bytes(4, "big"))
    with pytest.raises(P.TransitError):
        await proto.next_frame()


def test_simultaneous_open_ability_in_the_transit_message():
    assert {"type": "tcp-simultaneous-open-v1"} in P.ABILITIES
    ours = {"abilities-v1": P.ABILITIES, "hints-v1": []}
    assert P.offers_simultaneous_open(ours)
    # magic-wormhole 0.24 and wormhole-william list only these two
    assert not P.offers_simultaneous_open({"abilities-v1": [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]})
    for odd in ({}, {"abilities-v1": "tcp-simultaneous-open-v1"}, {"abilities-v1": None}, []):
        assert not P.offers_simultaneous_open(odd)
