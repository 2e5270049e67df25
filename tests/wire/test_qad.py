"""wire/qad.py on literal bytes: the transport parameter and the OBSERVED_ADDRESS frames as n0's Quinn fork
(the QUIC stack iroh uses) writes them."""

import pytest

from burrow.wire.qad import (
    OBSERVED_IPV4,
    OBSERVED_IPV6,
    Observed,
    QadError,
    Role,
    encode_observed,
    encode_parameter,
    find_role,
    parse_observed,
)


def test_frames_on_literal_bytes():
    # type 0x9f81a6 is a 4-byte varint; sequence 0; 192.0.2.1; port 7842
    assert encode_observed(0, "192.0.2.1", 7842) == bytes.fromhex("809f81a6" "00" "c0000201" "1ea2")
    # an IPv4 client seen through a dual-stack socket is reported as IPv4
    assert encode_observed(70, "::ffff:192.0.2.1", 1) == bytes.fromhex("809f81a6" "4046" "c0000201" "0001")
    v6 = encode_observed(1, "2001:db8::5", 65535)
    assert v6 == bytes.fromhex("809f81a7" "01" "20010db8000000000000000000000005" "ffff")


@pytest.mark.parametrize("seq, host, port", [(0, "203.0.113.7", 41641), (2**30, "2001:db8::1", 7842)])
def test_frames_round_trip(seq, host, port):
    frame = encode_observed(seq, host, port) + b"tail"
    kind = OBSERVED_IPV4 if "." in host else OBSERVED_IPV6
    assert parse_observed(kind, frame, 4) == (Observed(seq, host, port), len(frame) - 4)


@pytest.mark.parametrize("body", ["", "40", "00c00002", "00c0000201ff"])
def test_truncated_frames_are_refused(body):
    with pytest.raises(QadError):
        parse_observed(OBSERVED_IPV4, bytes.fromhex(body))


def test_transport_parameter_on_literal_bytes():
    # under noq's id (iroh 1.x) and iroh-quinn's (iroh 0.9x): each an 8-byte varint; length 1; the role
    assert encode_parameter(Role.PROVIDES) == bytes.fromhex("c00000009f81a176" "01" "00" "c00000009f81a174" "01" "00")
    assert encode_parameter(Role.BOTH) == bytes.fromhex("c00000009f81a176" "01" "02" "c00000009f81a174" "01" "02")


# iroh 1.2's QAD client (noq 1.4) in its ClientHello: min_ack_delay, source connection id, the role (receive
# only), initial_max_streams_uni
NOQ_CLIENT = bytes.fromhex("c0000000ff04de1b0243e8" "0f08ac0e069b059ae686" "c00000009f81a176" "01" "01" "09024064")


def test_role_is_read_under_either_id():
    assert find_role(NOQ_CLIENT) == Role.RECEIVES
    assert find_role(bytes.fromhex("c00000009f81a174" "01" "01")) == Role.RECEIVES  # iroh 0.9x
    # both sent: the current id wins
    assert find_role(bytes.fromhex("c00000009f81a174" "01" "02" "c00000009f81a176" "01" "01")) == Role.RECEIVES


def test_role_is_found_among_other_parameters():
    others = bytes.fromhex("0104" "80007530" "0e01" "04")  # max_idle_timeout 30000, active_connection_id_limit 4
    assert find_role(others) is None
    assert find_role(others + encode_parameter(Role.RECEIVES)) == Role.RECEIVES
    assert find_role(encode_parameter(Role.BOTH) + others) == Role.BOTH
    assert not Role.PROVIDES.reports_to(Role.PROVIDES) and not Role.RECEIVES.reports_to(Role.BOTH)
    assert Role.PROVIDES.reports_to(Role.RECEIVES) and Role.BOTH.reports_to(Role.BOTH)
    assert not Role.PROVIDES.reports_to(None)


@pytest.mark.parametrize("raw", ["c00000009f81a174" "01" "03",       # no such role
                                 "c00000009f81a176" "01" "03",
                                 "c00000009f81a174" "02" "0000",     # trailing byte
                                 "c00000009f81a174" "05" "00",       # longer than the parameters
                                 "0e"])                             # truncated id/length
def test_bad_parameters_are_refused(raw):
    with pytest.raises(QadError):
        find_role(bytes.fromhex(raw))
