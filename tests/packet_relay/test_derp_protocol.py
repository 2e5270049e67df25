"""DERP handshake crypto and the sans-IO server/client state machines, WebSocket framing, HTTP heads."""

import json

import nacl.public
import pytest
from burrow.common.limits import TokenBucket
from burrow.packet_relay.protocol import frames as f
from burrow.packet_relay.protocol.connection import (
    ClientConnection,
    ClientHello,
    Connected,
    ServerConnection,
    Throttled,
)
from burrow.packet_relay.protocol.handshake import (
    ClientInfoJSON,
    ServerInfoJSON,
    generate_private_key,
    make_client_info,
    open_client_info,
    public_key,
)
from burrow.packet_relay.protocol.http import HttpError, RequestReader, response, websocket_accept
from burrow.packet_relay.protocol.websocket import (
    OP_PING,
    OP_TEXT,
    WebSocketError,
    WebSocketStream,
    encode_frame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

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


@given(st.binary(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_fuzz_client_machine_raises_only_protocol_error(blob):
    try:
        ClientConnection(CLIENT).receive_data(f.ServerKey(public_key(SERVER)).encode() + blob)
    except f.ProtocolError:
        pass


# ---- WebSocket framing
def test_websocket_round_trip_client_to_server_and_back():
    client, server = WebSocketStream(client=True), WebSocketStream(client=False)
    wire = client.wrap(b"derp bytes") + client.wrap(bytes(70000))
    assert wire[1] & 0x80  # masked
    got = b"".join(server.feed(wire[i:i + 7]) for i in range(0, len(wire), 7))
    assert got == b"derp bytes" + bytes(70000)
    assert client.feed(server.wrap(b"back")) == b"back"


def test_websocket_ping_close_and_rejections():
    server = WebSocketStream(client=False)
    server.feed(encode_frame(OP_PING, b"p", mask=True))
    assert server.data_to_send() == encode_frame(0xA, b"p", mask=False)
    with pytest.raises(WebSocketError):
        WebSocketStream(client=False).feed(encode_frame(OP_TEXT, b"t", mask=True))
    with pytest.raises(WebSocketError):
        WebSocketStream(client=False).feed(encode_frame(0x2, b"unmasked", mask=False))
    closing = WebSocketStream(client=False)
    closing.feed(encode_frame(0x8, b"\x03\xe8", mask=True))
    assert closing.closed and closing.data_to_send()[:1] == b"\x88"


@given(st.binary(max_size=500))
@settings(max_examples=300, deadline=None)
def test_fuzz_websocket_raises_only_protocol_error(blob):
    try:
        WebSocketStream(client=False, max_frame=1000).feed(blob)
    except f.ProtocolError:
        pass


# ---- HTTP heads
def test_websocket_accept_rfc6455_example():
    assert websocket_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_request_reader_keeps_bytes_after_the_head():
    reader = RequestReader()
    assert reader.feed(b"GET /derp HTTP/1.1\r\nUpgrade: DERP\r\nX-A: 1\r\nx-a: 2\r\n") is None
    req, rest = reader.feed(b"\r\n\x02\x00")
    assert (req.method, req.path, req.header("upgrade"), req.header("x-a")) == ("GET", "/derp", "DERP", "1, 2")
    assert rest == b"\x02\x00"


def test_request_reader_limits_and_errors():
    with pytest.raises(HttpError) as exc:
        RequestReader(max_head=100).feed(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 30)
    assert exc.value.status == 431
    with pytest.raises(HttpError):
        RequestReader().feed(b"NONSENSE\r\n\r\n")


def test_response_head():
    assert response(204, {"A": "b"}) == b"HTTP/1.1 204 No Content\r\nA: b\r\nConnection: close\r\n\r\n"


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_fuzz_http_raises_only_http_error(blob):
    try:
        RequestReader(max_head=200).feed(blob + b"\r\n\r\n")
    except HttpError:
        pass
