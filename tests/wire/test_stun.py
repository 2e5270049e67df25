"""STUN codec: RFC 5769 vectors, literal answers, strict validation, truncation and fuzzing."""

import hmac
import struct
import zlib

import pytest
from aioice import stun as aioice_stun
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burrow.wire.stun import (
    BadFingerprint,
    BindingErrorResponse,
    BindingRequest,
    BindingSuccess,
    ErrorResponse,
    MalformedAttribute,
    NotBindingRequest,
    NotStun,
    Responder,
    StunError,
    build_binding_request,
    pack_ip,
    parse_binding_response,
    parse_request,
)

# RFC 5769 section 2: the published test vectors, byte for byte.
RFC5769_TXID = bytes.fromhex("b7e7a701bc34d686fa87dfae")
RFC5769_PASSWORD = b"VOkJxbRl1RmTxUk/WvJxBt"
RFC5769_REQUEST = bytes.fromhex(
    "00010058" "2112a442" "b7e7a701" "bc34d686" "fa87dfae"
    "80220010" "5354554e" "20746573" "7420636c" "69656e74"   # SOFTWARE "STUN test client"
    "00240004" "6e0001ff"                                   # PRIORITY
    "80290008" "932ff9b1" "51263b36"                        # ICE-CONTROLLED
    "00060009" "6576746a" "3a683676" "59202020"             # USERNAME "evtj:h6vY" + padding
    "00080014" "9aeaa70c" "bfd8cb56" "781ef2b5" "b2d3f249" "c1b571a2"  # MESSAGE-INTEGRITY
    "80280004" "e57a3bcf"                                   # FINGERPRINT
)
RFC5769_IPV4_RESPONSE = bytes.fromhex(
    "0101003c" "2112a442" "b7e7a701" "bc34d686" "fa87dfae"
    "8022000b" "74657374" "20766563" "746f7220"             # SOFTWARE "test vector"
    "00200008" "0001a147" "e112a643"                        # XOR-MAPPED-ADDRESS 192.0.2.1:32853
    "00080014" "2b91f599" "fd9e90c3" "8c7489f9" "2af9ba53" "f06be7d7"
    "80280004" "c07d4c96"
)
RFC5769_IPV6_RESPONSE = bytes.fromhex(
    "01010048" "2112a442" "b7e7a701" "bc34d686" "fa87dfae"
    "8022000b" "74657374" "20766563" "746f7220"
    "00200014" "0002a147" "0113a9fa" "a5d3f179" "bc25f4b5" "bed2b9d9"  # 2001:db8:1234:5678:11:2233:4455:6677
    "00080014" "a382954e" "4be67bf1" "1784c97c" "8292c275" "bfe3ed41"
    "80280004" "c8fb0b4c"
)
# What Debian's `stun` (stun-client 0.97, RFC 3489) sends for test 1: no cookie, a 16-byte
# transaction id and CHANGE-REQUEST with no flags.
CLASSIC_REQUEST = bytes.fromhex("00010008" "01a1e55a5d66c117d3175d177585ef51" "00030004" "00000000")
CLASSIC_TXID = CLASSIC_REQUEST[4:20]


def _integrity(message: bytes) -> bytes:
    """HMAC-SHA1 over the message up to MESSAGE-INTEGRITY, length field covering it (RFC 5389 15.4)."""
    mi = message.index(bytes.fromhex("00080014"), 20)
    covered = message[:2] + struct.pack("!H", mi + 24 - 20) + message[4:mi]
    return hmac.new(RFC5769_PASSWORD, covered, "sha1").digest()


def test_rfc5769_vectors_are_transcribed_exactly():
    # The vectors' own MESSAGE-INTEGRITY and FINGERPRINT prove every byte above is as published.
    for vector in (RFC5769_REQUEST, RFC5769_IPV4_RESPONSE, RFC5769_IPV6_RESPONSE):
        mi = vector.index(bytes.fromhex("00080014"), 20)
        assert _integrity(vector) == vector[mi + 4:mi + 24]
        assert zlib.crc32(vector[:-8]) ^ 0x5354554E == int.from_bytes(vector[-4:], "big")


def test_rfc5769_sample_request_decodes():
    request = BindingRequest.decode(RFC5769_REQUEST)
    assert request.txid == RFC5769_TXID
    assert request.software == "STUN test client"
    assert request.fingerprint
    assert request.unknown == ()  # PRIORITY, USERNAME, MESSAGE-INTEGRITY need no action from us
    assert not request.classic
    assert parse_request(RFC5769_REQUEST) == (RFC5769_TXID, ())


def test_rfc5769_responses_decode():
    assert parse_binding_response(RFC5769_IPV4_RESPONSE, RFC5769_TXID) == ("192.0.2.1", 32853)
    assert parse_binding_response(RFC5769_IPV6_RESPONSE, RFC5769_TXID) == (
        "2001:db8:1234:5678:11:2233:4455:6677", 32853)
    assert BindingSuccess.decode(RFC5769_IPV4_RESPONSE, RFC5769_TXID).software == "test vector"


def test_our_xor_mapped_address_matches_rfc5769_bytes():
    v4 = BindingSuccess(RFC5769_TXID, "192.0.2.1", 32853).encode()
    assert bytes.fromhex("00200008" "0001a147" "e112a643") in v4
    v6 = BindingSuccess(RFC5769_TXID, "2001:db8:1234:5678:11:2233:4455:6677", 32853).encode()
    assert bytes.fromhex("00200014" "0002a147" "0113a9fa" "a5d3f179" "bc25f4b5" "bed2b9d9") in v6


def test_answer_to_rfc5769_request_literal_bytes():
    txid, unknown = parse_request(RFC5769_REQUEST)
    answer = Responder().answer(txid, unknown, pack_ip("192.0.2.1"), 32853)
    assert answer == bytes.fromhex(
        "01010020" "2112a442" "b7e7a701bc34d686fa87dfae"
        "00200008" "0001a147" "e112a643"            # XOR-MAPPED-ADDRESS
        "80220006" "627572726f770000"              # SOFTWARE "burrow" + 2 bytes padding
        "80280004" "2dbf12e3")                     # FINGERPRINT
    # An independent decoder agrees, FINGERPRINT included (aioice raises on a bad one).
    parsed = aioice_stun.parse_message(answer)
    assert parsed.message_class == aioice_stun.Class.RESPONSE
    assert parsed.attributes["XOR-MAPPED-ADDRESS"] == ("192.0.2.1", 32853)
    assert parsed.attributes["SOFTWARE"] == "burrow"


def test_ipv6_answer_literal_bytes():
    answer = Responder(software=None).answer(RFC5769_TXID, (), pack_ip("2001:db8::1"), 443)
    assert answer[:-4] == bytes.fromhex(
        "01010020" "2112a442" "b7e7a701bc34d686fa87dfae"
        "00200014" "0002" "20a9"                          # port 443 ^ 0x2112
        "0113a9fa" "b7e7a701" "bc34d686" "fa87dfaf"       # 2001:db8::1 ^ cookie || txid
        "80280004")
    assert zlib.crc32(answer[:-8]) ^ 0x5354554E == int.from_bytes(answer[-4:], "big")
    assert parse_binding_response(answer, RFC5769_TXID) == ("2001:db8::1", 443)


def test_classic_rfc3489_request_gets_mapped_address():
    request = BindingRequest.decode(CLASSIC_REQUEST)
    assert request.classic and request.txid == CLASSIC_TXID and request.unknown == ()
    answer = Responder().answer(*parse_request(CLASSIC_REQUEST), pack_ip("127.0.0.1"), 18052)
    assert answer == bytes.fromhex(
        "01010018" "01a1e55a5d66c117d3175d177585ef51"
        "00010008" "0001" "4684" "7f000001"      # MAPPED-ADDRESS 127.0.0.1:18052, not XORed
        "80220008" "627572726f772020")          # SERVER "burrow  ": RFC 3489 wants a multiple of 4
    assert parse_binding_response(answer, CLASSIC_TXID) == ("127.0.0.1", 18052)


def test_change_request_we_cannot_honour_gets_420():
    request = CLASSIC_REQUEST[:-1] + b"\x06"  # change IP and port
    txid, unknown = parse_request(request)
    assert unknown == (0x0003,)
    answer = Responder().answer(txid, unknown, pack_ip("127.0.0.1"), 1)
    assert answer[:2] == b"\x01\x11"
    # RFC 3489 lists an odd number of unknown attributes with one repeated.
    assert bytes.fromhex("000a0004" "00030003") in answer
    assert bytes.fromhex("00090015" "00000414") + b"Unknown Attribute" in answer
    with pytest.raises(ErrorResponse) as err:
        parse_binding_response(answer, txid)
    assert err.value.code == 420


def test_unknown_required_attribute_gets_420_optional_is_ignored():
    txid = bytes(range(12))
    # RESPONSE-ADDRESS (0x0002) would make us send to a third party: never honoured.
    body = struct.pack("!HHBBH4s", 0x0002, 8, 0, 1, 9, bytes(4)) + struct.pack("!HH", 0x8055, 1) + b"x\0\0\0"
    message = struct.pack("!HHI12s", 1, len(body), 0x2112A442, txid) + body
    assert parse_request(message) == (txid, (0x0002,))
    answer = Responder().answer(txid, (0x0002,), pack_ip("10.0.0.1"), 5)
    assert bytes.fromhex("000a0002" "0002" "0000") in answer
    assert aioice_stun.parse_message(answer).error_code == 420
    with pytest.raises(ErrorResponse):
        parse_binding_response(answer, txid)
    only_optional = struct.pack("!HHI12s", 1, 8, 0x2112A442, txid) + struct.pack("!HH", 0x8055, 1) + b"x\0\0\0"
    assert parse_request(only_optional) == (txid, ())


def test_attributes_after_message_integrity_are_ignored():
    txid = bytes(12)
    body = bytes.fromhex("00080014") + bytes(20) + bytes.fromhex("00020000")  # unknown, but unprotected
    message = struct.pack("!HHI12s", 1, len(body), 0x2112A442, txid) + body
    assert parse_request(message) == (txid, ())


def test_round_trips():
    for txid in (bytes(range(12)), bytes(range(16))):
        for request in (BindingRequest(txid), BindingRequest(txid, "probe é", fingerprint=True)):
            decoded = BindingRequest.decode(request.encode())
            assert decoded.txid == txid and decoded.software == request.software
            assert decoded.fingerprint == (request.fingerprint and len(txid) == 12)
        for ip in ("198.51.100.7", "2001:db8::42"):
            if len(txid) == 16 and ":" in ip:
                continue
            success = BindingSuccess(txid, ip, 65535, software="x" * 9)
            if len(txid) == 12:
                assert BindingSuccess.decode(success.encode(), txid) == success
            assert parse_binding_response(success.encode(), txid) == (ip, 65535)
        error = BindingErrorResponse(txid, 420, "Unknown Attribute", (2, 0x27, 0x26))
        with pytest.raises(ErrorResponse):
            parse_binding_response(error.encode(), txid)


def test_client_helper_builds_a_checked_request():
    txid = bytes.fromhex("000102030405060708090a0b")
    data = build_binding_request(txid)
    assert data == bytes.fromhex("00010008" "2112a442" "000102030405060708090a0b" "80280004") + data[-4:]
    assert aioice_stun.parse_message(data).attributes["FINGERPRINT"] == int.from_bytes(data[-4:], "big")
    assert parse_request(data) == (txid, ())
    with pytest.raises(ValueError):
        build_binding_request(bytes(16))
    with pytest.raises(StunError):
        parse_binding_response(RFC5769_IPV4_RESPONSE, bytes(12))  # someone else's transaction


def test_aioice_messages_decode():
    message = aioice_stun.Message(aioice_stun.Method.BINDING, aioice_stun.Class.REQUEST, bytes(range(12)))
    message.attributes["SOFTWARE"] = "aioice"
    message.attributes["PRIORITY"] = 1
    message.attributes["USE-CANDIDATE"] = None
    message.add_message_integrity(b"secret")
    request = BindingRequest.decode(bytes(message))
    assert request.software == "aioice" and request.fingerprint and request.unknown == ()


@pytest.mark.parametrize(("data", "error"), [
    (b"", NotStun),
    (bytes.fromhex("0001000021"), NotStun),                                      # short header
    (bytes.fromhex("c0010000") + bytes(16), NotStun),                            # top bits set
    (bytes.fromhex("00010004") + bytes(16), NotStun),                            # length says 4, has 0
    (bytes.fromhex("00010002") + bytes(16) + b"\0\0", NotStun),                   # length not a multiple of 4
    (bytes.fromhex("00110000") + bytes(16), NotBindingRequest),                  # Binding indication
    (bytes.fromhex("01010000") + bytes(16), NotBindingRequest),                  # a response
    (bytes.fromhex("00030000") + bytes(16), NotBindingRequest),                  # TURN Allocate
    (bytes.fromhex("00010004") + bytes(16) + bytes.fromhex("80220008"), MalformedAttribute),  # overrun
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("80220005") + b"abcd", MalformedAttribute),
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("80280004") + bytes(4), BadFingerprint),
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("80280000") + bytes(4), MalformedAttribute),
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("00080004") + bytes(4), MalformedAttribute),
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("00030002") + bytes(4), MalformedAttribute),
    (bytes.fromhex("00010008") + bytes(16) + bytes.fromhex("80220004") + b"\xff\xfe\xfd\xfc", MalformedAttribute),
    (bytes.fromhex("00010310") + bytes(16) + bytes.fromhex("8022030c") + b"a" * 780, MalformedAttribute),
], ids=["empty", "short", "top-bits", "length-mismatch", "length-not-4n", "indication", "response",
        "allocate", "overrun", "padding-overrun", "bad-fingerprint", "fingerprint-length", "integrity-length",
        "change-request-length", "software-not-utf8", "software-too-long"])
def test_malformed_requests_raise_stun_errors(data, error):
    with pytest.raises(error):
        parse_request(data)
    assert issubclass(error, StunError)


def test_fingerprint_must_be_last_and_match():
    good = build_binding_request(bytes(12))
    with pytest.raises(BadFingerprint):
        parse_request(good[:-1] + bytes([good[-1] ^ 1]))
    trailing = bytearray(good + bytes.fromhex("80550000"))
    trailing[3] += 4
    with pytest.raises(BadFingerprint):
        parse_request(bytes(trailing))


@pytest.mark.parametrize("message", [RFC5769_REQUEST, CLASSIC_REQUEST, build_binding_request(bytes(12)),
                                     BindingRequest(bytes(12)).encode()],
                         ids=["rfc5769", "rfc3489", "fingerprint", "bare"])
def test_every_truncation_and_extension_is_rejected(message):
    for cut in range(len(message)):
        with pytest.raises(StunError):
            parse_request(message[:cut])
    with pytest.raises(StunError):
        parse_request(message + b"\0")
    parse_request(message)


@pytest.mark.parametrize("message", [RFC5769_IPV4_RESPONSE, RFC5769_IPV6_RESPONSE], ids=["ipv4", "ipv6"])
def test_every_response_truncation_is_rejected(message):
    for cut in range(len(message)):
        with pytest.raises(StunError):
            parse_binding_response(message[:cut], RFC5769_TXID)


def test_pack_ip():
    assert pack_ip("127.0.0.1") == b"\x7f\0\0\1"
    assert pack_ip("::ffff:192.0.2.1") == bytes([192, 0, 2, 1])  # dual-stack socket view of IPv4
    assert pack_ip("fe80::1%eth0") == bytes.fromhex("fe800000000000000000000000000001")


def _answer_or_none(data: bytes) -> bytes | None:
    try:
        txid, unknown = parse_request(data)
    except StunError:
        return None
    return Responder().answer(txid, unknown, pack_ip("192.0.2.9"), 4242)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_only_raise_stun_error(data):
    answer = _answer_or_none(data)
    if answer is not None:  # only for something that really is a Binding request
        mtype, length, _ = struct.unpack_from("!HHI", data)
        assert mtype == 1 and length + 20 == len(data) and length % 4 == 0
        assert answer[4:20] == data[4:20] or answer[8:20] == data[8:20]
    for txid in (bytes(12), data[8:20].ljust(12, b"\0")):
        try:
            parse_binding_response(data, txid)
        except StunError:
            pass


_attribute = st.tuples(st.sampled_from([0x0001, 0x0003, 0x0006, 0x0008, 0x0009, 0x0020, 0x0024, 0x8022, 0x8028,
                                        0x8029, 0x7FFF, 0x0000]) | st.integers(0, 0xFFFF),
                       st.binary(max_size=40))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_attribute, max_size=6), st.booleans(), st.integers(0, 2**32 - 1), st.binary(max_size=3))
def test_fuzz_attribute_lists(attrs, cookie, flip, tail):
    """Well-framed headers with arbitrary TLVs (walker and value checks), then a flipped byte."""
    body = b"".join(struct.pack("!HH", t, len(v)) + v + bytes(-len(v) % 4) for t, v in attrs)
    head = struct.pack("!HH", 1, len(body)) + (struct.pack("!I", 0x2112A442) if cookie else b"\x01\x02\x03\x04")
    message = head + bytes(range(12)) + body
    _answer_or_none(message)
    _answer_or_none(message + tail)
    for mtype in (0x0101, 0x0111):  # the client side walks the same TLVs in responses
        try:
            parse_binding_response(struct.pack("!H", mtype) + message[2:], message[8:20])
        except StunError:
            pass
    if message:
        pos = flip % len(message)
        mutated = message[:pos] + bytes([message[pos] ^ (flip >> 8 & 0xFF or 1)]) + message[pos + 1:]
        _answer_or_none(mutated)
    signed = bytes(BindingRequest(bytes(range(12)), "fuzz", fingerprint=True).encode())
    pos = flip % (len(signed) - 20) + 20
    broken = signed[:pos] + bytes([signed[pos] ^ 0x01]) + signed[pos + 1:]
    # Any change after the header breaks FINGERPRINT or the framing, except one that renames the
    # FINGERPRINT attribute itself into an optional attribute we ignore.
    assert _answer_or_none(broken) is None or pos in (len(signed) - 8, len(signed) - 7)
