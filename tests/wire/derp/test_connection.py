"""DERP handshake crypto and the sans-IO server/client state machines."""

import json

import nacl.public
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.common.limits import TokenBucket
from burrow.wire.derp import frames as f
from burrow.wire.derp.connection import (
    ClientConnection,
    ClientHello,
    Connected,
    Forwarded,
    ForwardedBatch,
    Sends,
    ServerConnection,
    Throttled,
)
from burrow.wire.derp.handshake import (
    ClientInfoJSON,
    ServerInfoJSON,
    generate_private_key,
    make_client_info,
    open_client_info,
    public_key,
)

SERVER = generate_private_key()
CLIENT = generate_private_key()


def handshake(server: ServerConnection, client: ClientConnection) -> list:
    """Run greeting -> ClientInfo -> accept -> ServerInfo in memory; returns the client's events."""
    assert client.receive_data(server.greeting()) == []
    events = server.receive_data(client.data_to_send(), now=0.0)
    assert len(events) == 1 and isinstance(events[0], ClientHello)
    return client.receive_data(server.accept())


def test_client_info_is_a_nacl_box_from_client_to_server():
    frame = make_client_info(CLIENT, public_key(SERVER), ClientInfoJSON())
    assert frame.key == public_key(CLIENT)
    nonce, box = frame.sealed[:24], frame.sealed[24:]
    plain = nacl.public.Box(nacl.public.PrivateKey(SERVER), nacl.public.PublicKey(frame.key)).decrypt(box, nonce)
    assert json.loads(plain) == {"version": 2, "CanAckPings": True}
    assert open_client_info(SERVER, frame).can_ack_pings


def test_go_style_client_info_json_is_understood():
    raw = b'{"meshKey":"' + b"ab" * 32 + b'","version":2,"CanAckPings":true,"IsProber":true,"Future":1}'
    info = ClientInfoJSON.from_json(raw)
    assert info.mesh_key == "ab" * 32 and info.is_prober and info.version == 2


def test_server_info_json_fields():
    assert ServerInfoJSON().to_json() == b'{"version":2}'
    info = ServerInfoJSON.from_json(b'{"version":2,"TokenBucketBytesPerSecond":5,"TokenBucketBytesBurst":9}')
    assert (info.token_bucket_bytes_per_second, info.token_bucket_bytes_burst) == (5, 9)


def test_full_handshake_in_memory():
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    events = handshake(server, client)
    assert events == [Connected(public_key(SERVER), ServerInfoJSON())]
    assert server.client_key == public_key(CLIENT) and server.state == "established"


def test_fast_start_client_sends_client_info_at_once_and_ignores_server_key():
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT, server_key=public_key(SERVER))
    hello = server.receive_data(client.data_to_send(), 0.0)
    assert isinstance(hello[0], ClientHello)
    events = client.receive_data(server.greeting() + server.accept())
    assert isinstance(events[0], Connected)


def test_first_frame_must_be_client_info_and_errors_are_terminal():
    server = ServerConnection(SERVER, 0.0)
    with pytest.raises(f.HandshakeError):
        server.receive_data(f.KeepAlive().encode(), 0.0)
    with pytest.raises(f.HandshakeError):
        server.receive_data(b"", 0.0)
    assert server.state == "closed"


def test_client_info_sealed_to_another_key_is_refused():
    frame = make_client_info(CLIENT, public_key(generate_private_key()), ClientInfoJSON())
    with pytest.raises(f.HandshakeError):
        ServerConnection(SERVER, 0.0).receive_data(frame.encode(), 0.0)


def test_client_info_size_limit():
    server = ServerConnection(SERVER, 0.0, max_client_info_len=100)
    with pytest.raises(f.FrameTooLarge):
        server.receive_data(f.header(f.CLIENT_INFO, 101), 0.0)


def test_handshake_deadline():
    server = ServerConnection(SERVER, 100.0, handshake_timeout=10.0)
    assert not server.handshake_expired(109.9)
    assert server.handshake_expired(110.0)


def test_established_events_and_unknown_frames_skipped():
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    data = (f.UnknownFrame(0x33, b"future").encode() + client.send_packet(bytes(32), b"pkt")
            + f.NotePreferred(True).encode() + f.Ping(b"abcdefgh").encode())
    events = server.receive_data(data, 1.0)
    assert events == [f.SendPacket(bytes(32), b"pkt"), f.NotePreferred(True), f.Ping(b"abcdefgh")]
    assert server.unknown_frames == 1


def recv_frames_per_destination(packets) -> dict:
    """(dst, src, payload) -> the RecvPacket frames each destination gets, in order."""
    want: dict = {}
    for dst, src, payload in packets:
        want.setdefault(dst, []).append(f.RecvPacket(src, payload).encode())
    return want


def merged(runs) -> dict:
    """The frames of several Forwarded or Sends runs, per destination, in order."""
    got: dict = {}
    for run in runs:
        for dst, frames in run.frames.items():
            got.setdefault(dst, []).extend(frames)
    return got


def test_forwarded_frames_are_the_recv_packets_byte_for_byte_in_order():
    """A peer relay's ForwardPackets come out as the exact RecvPacket frames the slow path builds, per
    destination in arrival order, and a frame between two runs keeps its place between them."""
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    server.recv_frames = True
    a, b, src = b"\xaa" * 32, b"\xbb" * 32, b"\x5c" * 32
    sizes = [0, 1, 31, 32, 33, 1200, 1500, 16 * 1024 - 69, 16 * 1024, 65535, 65536]
    first = [f.ForwardPacket(src, (a, b)[i % 2], bytes([i]) * n) for i, n in enumerate(sizes)]
    second = [f.ForwardPacket(src, a, b"after the ping %d" % i) for i in range(3)]
    data = b"".join(p.encode() for p in first) + f.Ping(b"12345678").encode() + b"".join(p.encode() for p in second)
    events = []
    for i in range(0, len(data), 7000):  # any chunking
        events += server.receive_data(data[i:i + 7000], 1.0)
    ping = events.index(f.Ping(b"12345678"))
    before, after = events[:ping], events[ping + 1:]
    assert before and after and all(type(e) is Forwarded for e in before + after)

    def expected(packets):
        return recv_frames_per_destination((p.dst, p.src, p.payload) for p in packets)

    assert merged(before) == expected(first) and sum(r.packets for r in before) == len(first)
    assert merged(after) == expected(second) and sum(r.packets for r in after) == len(second)
    # without recv_frames (any other connection) they stay ForwardPacket events
    plain, client2 = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(plain, client2)
    assert plain.receive_data(second[0].encode(), 1.0) == [second[0]]


def test_sends_are_the_recv_packets_byte_for_byte_grouped_per_destination_in_order():
    """With send_frames, a client's SendPackets come out as the RecvPacket frames their receivers get
    (the client's key as source), per destination in arrival order; a frame between two runs, or a
    ForwardPacket run, keeps its place between them."""
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    server.send_frames = server.recv_frames = True
    me, a, b = public_key(CLIENT), b"\xaa" * 32, b"\xbb" * 32
    sizes = [0, 1, 31, 32, 33, 1200, 1500, 16 * 1024 - 69, 16 * 1024, 65535 - 32]
    first = [((a, b)[i % 3 == 0], bytes([i]) * n) for i, n in enumerate(sizes)]
    second = [(b, b"after the ping %d" % i) for i in range(3)]
    fwd = f.ForwardPacket(b"\x5c" * 32, a, b"from a peer")
    third = [(a, b"after the forward")]
    data = (b"".join(client.send_packet(d, p) for d, p in first) + f.Ping(b"12345678").encode()
            + b"".join(client.send_packet(d, p) for d, p in second) + fwd.encode()
            + b"".join(client.send_packet(d, p) for d, p in third))
    events = []
    for i in range(0, len(data), 7000):  # any chunking
        events += server.receive_data(data[i:i + 7000], 1.0)
    kinds = [type(e) for e in events]
    ping, forwarded = events.index(f.Ping(b"12345678")), kinds.index(Forwarded)
    assert set(kinds[:ping]) == {Sends} and set(kinds[ping + 1:forwarded]) == {Sends}
    assert kinds[forwarded + 1:] == [Sends]

    def expected(packets):
        return recv_frames_per_destination((dst, me, payload) for dst, payload in packets)

    for runs, packets in ((events[:ping], first), (events[ping + 1:forwarded], second),
                          (events[forwarded + 1:], third)):
        assert merged(runs) == expected(packets) and sum(r.packets for r in runs) == len(packets)
    assert events[forwarded].frames == {a: [f.RecvPacket(fwd.src, fwd.payload).encode()]}



def test_sends_stay_exact_for_many_packet_sizes_and_the_header_cache_stays_bounded():
    """The RecvPacket header (with the client's key) is kept per payload length; 300 different lengths
    still give the exact frames, and the kept headers stay bounded."""
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    server.send_frames = True
    me, a = public_key(CLIENT), b"\xaa" * 32
    packets = [(a, bytes([n % 251]) * n) for n in (*range(300), *range(300))]
    events = server.receive_data(b"".join(client.send_packet(d, p) for d, p in packets), 1.0)
    assert merged(events) == recv_frames_per_destination((dst, me, payload) for dst, payload in packets)
    assert len(server._recv_heads) <= 64

def batch_server() -> ServerConnection:
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    server.forward_batch = True
    server.decoder.max_frame_len = f.KEY_LEN + 4 + f.FORWARD_BATCH_MAX
    return server


def test_forward_batch_round_trip_split_anywhere():
    """ForwardBatch frames carry a read's RecvPacket frames byte for byte, in order, with their count and
    payload bytes, however the stream is cut; big reads go in several batches, a frame between keeps its place."""
    dst, src = b"\xaa" * 32, b"\x5c" * 32
    sizes = [0, 1, 1200, 65535, 65536, 65536, 65536, 65536, 7]
    frames = [f.RecvPacket(src, bytes([i]) * n).encode() for i, n in enumerate(sizes)]
    batches = f.forward_batches(dst, frames)
    assert len(batches) == 2 and all(len(b) <= f.FRAME_HEADER_LEN + 36 + f.FORWARD_BATCH_MAX for b in batches)
    data = batches[0] + f.Ping(b"12345678").encode() + batches[1]
    for cut in (1, 5, 40, 41, 1000, len(batches[0]) - 1, len(batches[0]) + 3, len(data) - 1):
        server = batch_server()
        events = server.receive_data(data[:cut], 1.0) + server.receive_data(data[cut:], 1.0)
        assert [type(e) for e in events] == [ForwardedBatch, f.Ping, ForwardedBatch]
        got = [ev for ev in events if type(ev) is ForwardedBatch]
        assert all(ev.dst == dst for ev in got)
        assert b"".join(ev.data for ev in got) == b"".join(frames)
        assert sum(ev.packets for ev in got) == len(frames) and sum(ev.nbytes for ev in got) == sum(sizes)
        assert f.split_frames(got[0].data) + f.split_frames(got[1].data) == frames
    # a connection that was not told to take them skips them, as an unknown frame
    plain, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(plain, client)
    assert plain.receive_data(f.forward_batches(dst, frames[:2])[0], 1.0) == [] and plain.unknown_frames == 1


@pytest.mark.parametrize("count, body", [
    (3, b""),                                                  # fewer frames than the count
    (0, b""),                                                  # none
    (1, b"\x05\x00\x00\x00\x30" + b"k" * 32 + b"ab"),             # a frame runs past the batch
    (1, f.RecvPacket(b"k" * 32, b"x").encode() + b"extra"),     # bytes after the last frame
    (1, f.Ping(b"12345678").encode()),                         # not a RecvPacket
])
def test_an_inconsistent_forward_batch_is_a_protocol_error(count, body):
    server = batch_server()
    frame = f.header(f.FORWARD_BATCH, 36 + len(body)) + b"d" * 32 + count.to_bytes(4, "big") + body
    with pytest.raises(f.MalformedFrame, match="ForwardBatch"):
        server.receive_data(frame, 1.0)
    with pytest.raises(f.MalformedFrame):  # terminal
        server.receive_data(b"", 1.0)


def test_server_info_announces_forward_batch_only_when_set():
    assert ServerInfoJSON.from_json(ServerInfoJSON(forward_batch=True).to_json()).forward_batch
    assert b"burrow" not in ServerInfoJSON().to_json() and not ServerInfoJSON.from_json(b"{}").forward_batch


def test_packet_size_limit_after_handshake():
    server, client = ServerConnection(SERVER, 0.0, max_frame_len=32 + 1000), ClientConnection(CLIENT)
    handshake(server, client)
    with pytest.raises(f.FrameTooLarge):
        server.receive_data(f.header(f.SEND_PACKET, 32 + 1001), 1.0)


def test_frames_behind_client_info_wait_during_verification():
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT, server_key=public_key(SERVER))
    data = client.data_to_send() + client.send_packet(bytes(32), b"early")
    assert isinstance(server.receive_data(data, 0.0)[0], ClientHello)
    server.accept()
    assert server.receive_data(b"", 0.0) == [f.SendPacket(bytes(32), b"early")]


def test_rate_limit_throttles_then_resumes_without_loss():
    bucket = TokenBucket(1000.0, 100.0, now=0.0)
    server, client = ServerConnection(SERVER, 0.0, rate=bucket), ClientConnection(CLIENT)
    handshake(server, client)
    pkt = client.send_packet(bytes(32), bytes(40))  # 72-byte body each
    events = server.receive_data(pkt * 3, 0.0)
    assert isinstance(events[0], f.SendPacket) and isinstance(events[-1], Throttled)
    assert events[-1].wait > 0
    got = [e for e in events if isinstance(e, f.SendPacket)]
    now = 0.0
    while len(got) < 3:
        now += 1.0
        got += [e for e in server.receive_data(b"", now) if isinstance(e, f.SendPacket)]
    assert len(got) == 3


def test_client_answers_ping_and_reports_frames():
    server, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server, client)
    events = client.receive_data(f.Ping(b"12345678").encode() + f.RecvPacket(bytes(32), b"x").encode()
                                 + f.Restarting(5, 6).encode() + f.UnknownFrame(0x77, b"").encode())
    assert events == [f.Ping(b"12345678"), f.RecvPacket(bytes(32), b"x"), f.Restarting(5, 6)]
    assert client.data_to_send() == f.Pong(b"12345678").encode()
    assert client.unknown_frames == 1


def test_client_rejects_wrong_first_frame():
    with pytest.raises(f.HandshakeError):
        ClientConnection(CLIENT).receive_data(f.KeepAlive().encode())


@given(st.binary(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_fuzz_server_machine_raises_only_protocol_error(blob):
    server = ServerConnection(SERVER, 0.0)
    try:
        server.receive_data(blob, 0.0)
    except f.ProtocolError:
        pass
    server2, client = ServerConnection(SERVER, 0.0), ClientConnection(CLIENT)
    handshake(server2, client)
    try:
        server2.receive_data(blob, 1.0)
    except f.ProtocolError:
        pass


@given(st.integers(0, 5), st.binary(max_size=600))
@settings(max_examples=300, deadline=None)
def test_fuzz_forward_batch_raises_only_protocol_error(count, body):
    server = batch_server()
    frame = f.header(f.FORWARD_BATCH, 36 + len(body)) + b"d" * 32 + count.to_bytes(4, "big") + body
    try:
        for ev in server.receive_data(frame, 1.0):
            assert type(ev) is ForwardedBatch and f.split_frames(ev.data) and ev.packets == count
    except f.ProtocolError:
        pass


@given(st.binary(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_fuzz_client_machine_raises_only_protocol_error(blob):
    try:
        ClientConnection(CLIENT).receive_data(f.ServerKey(public_key(SERVER)).encode() + blob)
    except f.ProtocolError:
        pass
