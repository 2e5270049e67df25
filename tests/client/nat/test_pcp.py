"""client/nat/pcp.py against RFC 6887's byte layouts; the answers are what miniupnpd 2.3.1 (Debian) sent
in the NAT lab, byte for byte."""

import pytest

from burrow.client.nat import pcp

NONCE = bytes(range(12))


def test_announce_request():
    # version 2, opcode 0, reserved, lifetime 0, client 192.168.1.11 as ::ffff:c0a8:010b
    assert pcp.announce_request("192.168.1.11") == bytes.fromhex(
        "02 00 0000 00000000 00000000000000000000ffffc0a8010b")


def test_map_request():
    got = pcp.map_request(NONCE, "tcp", 4000, "192.168.1.11", lifetime=60)
    assert got == bytes.fromhex(
        "02 01 0000 0000003c 00000000000000000000ffffc0a8010b"  # header: MAP, 60 s, client
        "000102030405060708090a0b 06 000000 0fa0 0000"  # nonce, TCP (6), reserved, internal 4000, any port
        "00000000000000000000ffff00000000")  # any external address (::ffff:0.0.0.0)
    assert len(got) == 60
    udp = pcp.map_request(NONCE, "udp", 41641, "2001:db8:1::b", suggested_port=41641)
    assert udp[8:24] == bytes.fromhex("20010db800010000000000000000000b")  # an IPv6 client as is
    assert udp[36] == 17 and udp[40:44] == bytes.fromhex("a2a9a2a9")


@pytest.mark.parametrize("bad", [dict(nonce=b"short"), dict(internal_port=0), dict(lifetime=2**32)])
def test_map_request_rejects(bad):
    args = dict(nonce=NONCE, protocol="tcp", internal_port=4000, client_ip="192.168.1.11") | bad
    lifetime = args.pop("lifetime", 60)
    with pytest.raises(ValueError):
        pcp.map_request(args.pop("nonce"), args.pop("protocol"), args.pop("internal_port"), args.pop("client_ip"),
                        lifetime=lifetime)


def test_miniupnpd_announce_answer():
    data = bytes.fromhex("02800000000000000000346c000000000000000000000000")
    assert pcp.parse_answer(data, pcp.OP_ANNOUNCE) == pcp.Answer(0, 0, 0, 0x346C, b"")


def test_miniupnpd_map_answer():
    data = bytes.fromhex("02810000000000780000346c000000000000000000000000"  # MAP answer, 120 s, epoch
                         "000102030405060708090a0b060000000fa00fa0"  # nonce, TCP, internal 4000, external 4000
                         "00000000000000000000ffffcb00710b")  # 203.0.113.11
    assert pcp.parse_map(data, NONCE) == pcp.MapAnswer(NONCE, "tcp", 4000, 4000, "203.0.113.11", 120, 0x346C)
    with pytest.raises(pcp.PcpError, match="nonce"):
        pcp.parse_map(data, bytes(12))


def test_refusal_and_strangers():
    refused = bytes.fromhex("02810002000000000000346c000000000000000000000000")  # result 2
    with pytest.raises(pcp.PcpError, match="not authorized") as e:
        pcp.parse_answer(refused, pcp.OP_MAP)
    assert e.value.result == 2
    natpmp_only = bytes.fromhex("0080 0001 00000000")  # NAT-PMP "unsupported version"
    with pytest.raises(pcp.PcpError, match="NAT-PMP only") as e:
        pcp.parse_answer(natpmp_only, pcp.OP_ANNOUNCE)
    assert e.value.result is None
    with pytest.raises(pcp.PcpError, match="answer to opcode 1, expected 0"):
        pcp.parse_answer(bytes.fromhex("02810000000000780000346c000000000000000000000000"), pcp.OP_ANNOUNCE)
    with pytest.raises(pcp.PcpError, match="answer of 10 bytes"):
        pcp.parse_answer(bytes.fromhex("02800000000000000000"), pcp.OP_ANNOUNCE)
