"""PROXY protocol v1/v2 codec: literal byte vectors (hand-assembled from the specification), every way
a header can be wrong, and byte-at-a-time feeding."""

from __future__ import annotations

import pytest

from burrow.wire.proxy_protocol import (
    HeaderReader,
    ProxyHeader,
    ProxyProtocolError,
    encode_v1,
    encode_v2,
)

SIG = bytes.fromhex("0d0a0d0a000d0a515549540a")
# v2, PROXY, INET/STREAM, 12 bytes: 127.0.0.2:51000 -> 127.0.0.1:4001
V2_TCP4 = SIG + bytes.fromhex("21 11 000c 7f000002 7f000001 c738 0fa1")
# v2, PROXY, INET6/STREAM, 36 bytes: [2001:db8::1]:443 -> [2001:db8::2]:4001
V2_TCP6 = SIG + bytes.fromhex("21 21 0024" "20010db8000000000000000000000001" "20010db8000000000000000000000002"
                              "01bb 0fa1")
# v2, LOCAL (a health check), UNSPEC, no body
V2_LOCAL = SIG + bytes.fromhex("20 00 0000")
# v2 TCP4 with two TLVs: PP2_TYPE_ALPN (0x01) "h2" and PP2_TYPE_UNIQUE_ID (0x05) "abc"
V2_TLVS = SIG + bytes.fromhex("21 11 0017 0a000001 0a000002 0050 1f90 01 0002 6832 05 0003 616263")
V1_TCP4 = b"PROXY TCP4 127.0.0.3 127.0.0.1 40000 4001\r\n"
V1_TCP6 = b"PROXY TCP6 2001:db8::1 2001:db8::2 443 4001\r\n"


def parse(data: bytes):
    return HeaderReader().feed(data)


def test_v2_tcp4_vector():
    header, rest = parse(V2_TCP4 + b"please relay")
    assert header == ProxyHeader(2, ("127.0.0.2", 51000), ("127.0.0.1", 4001))
    assert rest == b"please relay"
    assert encode_v2(("127.0.0.2", 51000), ("127.0.0.1", 4001)) == V2_TCP4


def test_v2_tcp6_vector():
    header, rest = parse(V2_TCP6)
    assert header.source == ("2001:db8::1", 443) and header.destination == ("2001:db8::2", 4001)
    assert rest == b""
    assert encode_v2(("2001:db8::1", 443), ("2001:db8::2", 4001)) == V2_TCP6


def test_v2_local_keeps_the_socket_address():
    header, rest = parse(V2_LOCAL + b"x")
    assert header.local and header.source is None and rest == b"x"
    assert encode_v2(None, None, local=True) == V2_LOCAL


def test_v2_tlvs_are_read_and_skipped():
    header, rest = parse(V2_TLVS + b"GET /")
    assert header.source == ("10.0.0.1", 80) and header.destination == ("10.0.0.2", 8080)
    assert header.tlvs == ((0x01, b"h2"), (0x05, b"abc"))
    assert rest == b"GET /"
    assert encode_v2(("10.0.0.1", 80), ("10.0.0.2", 8080), tlvs=((1, b"h2"), (5, b"abc"))) == V2_TLVS


def test_v2_unix_and_unspec_carry_no_client():
    unix = SIG + bytes([0x21, 0x31]) + (216).to_bytes(2, "big") + b"\0" * 216
    assert parse(unix)[0].source is None
    unspec = SIG + bytes([0x21, 0x00, 0x00, 0x00])
    assert parse(unspec)[0] == ProxyHeader(2, None, None)


def test_v1_vectors():
    header, rest = parse(V1_TCP4 + b"please")
    assert header == ProxyHeader(1, ("127.0.0.3", 40000), ("127.0.0.1", 4001)) and rest == b"please"
    assert encode_v1(("127.0.0.3", 40000), ("127.0.0.1", 4001)) == V1_TCP4
    assert parse(V1_TCP6)[0].source == ("2001:db8::1", 443)
    assert encode_v1(("2001:db8::1", 443), ("2001:db8::2", 4001)) == V1_TCP6
    assert parse(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nrest") == (ProxyHeader(1, None, None), b"rest")
    assert encode_v1(None, None) == b"PROXY UNKNOWN\r\n"


@pytest.mark.parametrize("vector", [V2_TCP4, V2_TCP6, V2_TLVS, V1_TCP4, V1_TCP6])
def test_one_byte_at_a_time(vector):
    reader = HeaderReader()
    data = vector + b"after"
    for i in range(len(vector) - 1):
        assert reader.feed(data[i:i + 1]) is None
    header, rest = reader.feed(data[len(vector) - 1:])
    assert rest == b"after"
    assert header == parse(vector)[0]


@pytest.mark.parametrize("first", [b"please relay " + b"a" * 64 + b"\n", b"GET /v1 HTTP/1.1\r\n",
                                   b"\x16\x03\x01", b"p", b"\r\n\r\n\x01", b"PROXZ"])
def test_a_client_without_a_header_is_told_at_its_first_wrong_byte(first):
    with pytest.raises(ProxyProtocolError) as err:
        parse(first)
    assert err.value.reason == "missing"


@pytest.mark.parametrize("data, reason", [
    (SIG + bytes.fromhex("11 11 000c") + b"\0" * 12, "malformed"),      # version 1 in a v2 header
    (SIG + bytes.fromhex("22 11 000c") + b"\0" * 12, "malformed"),      # command 2
    (SIG + bytes.fromhex("21 41 000c") + b"\0" * 12, "malformed"),      # family 4
    (SIG + bytes.fromhex("21 13 000c") + b"\0" * 12, "malformed"),      # transport 3
    (SIG + bytes.fromhex("21 11 0008") + b"\0" * 8, "malformed"),       # too short for INET
    (SIG + bytes.fromhex("21 21 000c") + b"\0" * 12, "malformed"),      # too short for INET6
    (SIG + bytes.fromhex("21 11 000f") + b"\0" * 12 + b"\x01\x00\x05", "malformed"),  # TLV past the end
    (SIG + bytes.fromhex("21 11 000e") + b"\0" * 12 + b"\x01\x00", "malformed"),      # truncated TLV
    (SIG + bytes.fromhex("21 11 1001"), "too_long"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "malformed"),
    (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "malformed"),
    (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", "malformed"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "malformed"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "malformed"),
    (b"PROXY TCP4 1.2.3.400 5.6.7.8 1 2\r\n", "malformed"),
    (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "malformed"),
    (b"PROXY TCP4 " + b"1" * 100, "too_long"),
])
def test_malformed_headers(data, reason):
    with pytest.raises(ProxyProtocolError) as err:
        parse(data)
    assert err.value.reason == reason


def test_v1_longest_line_is_accepted():
    line = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
    assert len(line) == 104
    assert parse(line)[0].source == ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535)
