"""DERP frame codec: literal byte vectors from the layouts of Tailscale's derp.go, round trips,
one-byte-at-a-time feeding, and fuzzing (decoders raise only our ProtocolError)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.wire.derp import frames as f

K1 = bytes(range(32))
K2 = bytes(range(32, 64))


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


VECTORS = [
    # ServerKey: 8-byte magic "DERP🔑" + 32-byte key; length 40 = 0x28
    (f.ServerKey(K1), h("01 00000028 44455250 f09f9491") + K1),
    (f.SendPacket(K2, b"hi"), h("04 00000022") + K2 + b"hi"),
    (f.RecvPacket(K1, b"hi"), h("05 00000022") + K1 + b"hi"),
    (f.KeepAlive(), h("06 00000000")),
    (f.NotePreferred(True), h("07 00000001 01")),
    (f.NotePreferred(False), h("07 00000001 00")),
    (f.PeerGone(K1, f.PEER_GONE_NOT_HERE), h("08 00000021") + K1 + h("01")),
    # PeerPresent: key + 16-byte v4-mapped IP + u16 port + flags byte = 51 = 0x33
    (f.PeerPresent(K1, h("00000000000000000000ffff7f000001"), 443, f.PRESENT_IS_REGULAR),
     h("09 00000033") + K1 + h("00000000000000000000ffff7f000001 01bb 01")),
    (f.ForwardPacket(K1, K2, b"x"), h("0a 00000041") + K1 + K2 + b"x"),
    # burrow's mesh extension: src, dst, the iroh datagram frame type, its body (ECN + data)
    (f.ForwardIroh(K1, K2, 4, b"\x01x"), h("40 00000043") + K1 + K2 + h("04 01") + b"x"),
    (f.WatchConns(), h("10 00000000")),
    (f.ClosePeer(K2), h("11 00000020") + K2),
    (f.Ping(b"12345678"), h("12 00000008") + b"12345678"),
    (f.Pong(b"12345678"), h("13 00000008") + b"12345678"),
    (f.Health("sick"), h("14 00000004") + b"sick"),
    # Restarting: u32 reconnect_in_ms (1000) + u32 try_for_ms (60000)
    (f.Restarting(1000, 60000), h("15 00000008 000003e8 0000ea60")),
]


@pytest.mark.parametrize(("frame", "wire"), VECTORS, ids=[type(v[0]).__name__ for v in VECTORS])
def test_literal_vectors(frame, wire):
    assert frame.encode() == wire
    ftype, payload = wire[0], wire[5:]
    assert f.decode_frame(ftype, payload) == frame


def test_magic_bytes():
    assert f.MAGIC == h("44 45 52 50 f0 9f 94 91")


def test_client_info_layout():
    sealed = bytes(24) + b"box"
    wire = f.ClientInfo(K1, sealed).encode()
    assert wire[:5] == h("02 0000003b")
    assert wire[5:37] == K1 and wire[37:] == sealed


def test_peer_gone_without_reason_means_disconnected():
    assert f.PeerGone.decode(K1) == f.PeerGone(K1, f.PEER_GONE_DISCONNECTED)


def test_short_peer_present_from_older_servers():
    assert f.PeerPresent.decode(K1) == f.PeerPresent(K1)


def test_ping_accepts_up_to_1000_and_echoes_first_8():
    assert f.Ping.decode(b"abcdefgh" + bytes(992)).data == b"abcdefgh"
    with pytest.raises(f.MalformedFrame):
        f.Ping.decode(bytes(1001))
    with pytest.raises(f.MalformedFrame):
        f.Ping.decode(bytes(7))


@pytest.mark.parametrize(("ftype", "payload", "error"), [
    (f.SERVER_KEY, b"DERPnope" + K1, f.HandshakeError),
    (f.SERVER_KEY, f.MAGIC + bytes(10), f.HandshakeError),
    (f.CLIENT_INFO, bytes(55), f.HandshakeError),
    (f.SEND_PACKET, bytes(31), f.MalformedFrame),
    (f.SEND_PACKET, bytes(32 + f.MAX_PACKET_SIZE + 1), f.FrameTooLarge),
    (f.NOTE_PREFERRED, b"", f.MalformedFrame),
    (f.NOTE_PREFERRED, b"\x01\x01", f.MalformedFrame),
    (f.WATCH_CONNS, b"x", f.MalformedFrame),
    (f.CLOSE_PEER, bytes(31), f.MalformedFrame),
    (f.RESTARTING, bytes(7), f.MalformedFrame),
])
def test_bad_bodies(ftype, payload, error):
    with pytest.raises(error):
        f.decode_frame(ftype, payload)


def test_unknown_type_is_kept_not_rejected():
    assert f.decode_frame(0x42, b"abc") == f.UnknownFrame(0x42, b"abc")


def test_decoder_one_byte_at_a_time():
    stream = b"".join(wire for _, wire in VECTORS)
    dec = f.FrameDecoder(1 << 20)
    got = []
    for i in range(len(stream)):
        dec.feed(stream[i:i + 1])
        while (frame := dec.next_frame()) is not None:
            got.append(frame)
    assert got == [frame for frame, _ in VECTORS]
    assert dec.buffered() == 0


def test_decoder_rejects_oversized_length_before_the_body():
    dec = f.FrameDecoder(100)
    dec.feed(h("04 00000065"))  # 101 > 100: the header alone is enough to refuse
    with pytest.raises(f.FrameTooLarge):
        dec.next_raw()


keys = st.binary(min_size=32, max_size=32)
frames = st.one_of(
    st.builds(f.ServerKey, keys, st.binary(max_size=20)),
    st.builds(f.ClientInfo, keys, st.binary(min_size=24, max_size=100)),
    st.builds(f.ServerInfo, st.binary(min_size=24, max_size=100)),
    st.builds(f.SendPacket, keys, st.binary(max_size=2000)),
    st.builds(f.RecvPacket, keys, st.binary(max_size=2000)),
    st.builds(f.KeepAlive),
    st.builds(f.NotePreferred, st.booleans()),
    st.builds(f.PeerGone, keys, st.integers(0, 255)),
    st.builds(f.PeerPresent, keys, st.binary(min_size=16, max_size=16), st.integers(0, 65535), st.integers(0, 255)),
    st.builds(f.ForwardPacket, keys, keys, st.binary(max_size=500)),
    st.builds(f.ForwardIroh, keys, keys, st.integers(0, 255), st.binary(min_size=1, max_size=500)),
    st.builds(f.WatchConns),
    st.builds(f.ClosePeer, keys),
    st.builds(f.Ping, st.binary(min_size=8, max_size=8)),
    st.builds(f.Pong, st.binary(min_size=8, max_size=8)),
    st.builds(f.Health, st.text(max_size=50)),
    st.builds(f.Restarting, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
)


@given(st.lists(frames, max_size=10), st.data())
@settings(max_examples=200, deadline=None)
def test_round_trip_any_chunking(items, data):
    stream = b"".join(x.encode() for x in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = f.FrameDecoder(1 << 20)
    got, last = [], 0
    for cut in [*cuts, len(stream)]:
        dec.feed(stream[last:cut])
        last = cut
        while (frame := dec.next_frame()) is not None:
            got.append(frame)
    assert got == items


@given(st.binary(max_size=3000))
@settings(max_examples=500, deadline=None)
def test_fuzz_decoder_raises_only_protocol_error(blob):
    dec = f.FrameDecoder(2048)
    try:
        dec.feed(blob)
        while dec.next_frame() is not None:
            pass
    except f.ProtocolError:
        pass


@given(st.integers(0, 255), st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_fuzz_each_body_decoder(ftype, payload):
    try:
        f.decode_frame(ftype, payload)
    except f.ProtocolError:
        pass
