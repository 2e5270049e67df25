"""HTTP request heads and responses, sans-IO: limits, errors, the WebSocket accept key."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.wire.http import HttpError, RequestReader, response, websocket_accept


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
