"""HTTP request heads and responses, sans-IO: limits, errors, the WebSocket accept key."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.wire.http import (
    HttpError,
    RequestReader,
    parse_head,
    parse_response_head,
    response,
    websocket_accept,
    websocket_request,
)


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


def test_websocket_request_and_the_servers_answer():
    wire = websocket_request("[::1]:4000", "/v1?x=1", "dGhlIHNhbXBsZSBub25jZQ==", {"User-Agent": "t"})
    req = parse_head(wire[:-4])
    assert (req.method, req.target, req.header("host"), req.header("user-agent")) == ("GET", "/v1?x=1",
                                                                                        "[::1]:4000", "t")
    assert req.tokens("upgrade") == ["websocket"] and req.header("sec-websocket-version") == "13"
    answer = parse_response_head(response(101, {"Upgrade": "websocket", "Connection": "Upgrade",
                                                "Sec-WebSocket-Accept": websocket_accept(req.header(
                                                    "sec-websocket-key"))})[:-4])
    assert (answer.status, answer.reason) == (101, "Switching Protocols")
    assert answer.tokens("connection") == ["upgrade"]
    assert answer.header("sec-websocket-accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert parse_response_head(b"HTTP/1.0 404 Not Found").reason == "Not Found"
    assert parse_response_head(b"HTTP/1.1 200").reason == ""


@pytest.mark.parametrize("head", [b"SSH-2.0-OpenSSH_9.6", b"HTTP/1.1 99 Short", b"HTTP/1.1 abc X",
                                  b"HTTP/1.1 101 OK\r\nno colon"])
def test_malformed_response_heads_raise(head):
    with pytest.raises(HttpError):
        parse_response_head(head)
