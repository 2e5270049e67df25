"""client/nat/natpmp.py against RFC 6886's byte layouts, written out literally."""

import pytest

from burrow.client.nat import natpmp


def test_external_address_request_is_version_0_opcode_0():
    assert natpmp.external_address_request() == bytes.fromhex("0000")


def test_map_request_tcp_and_udp():
    # version 0, opcode 2 (TCP), reserved 0, internal 4000 (0x0fa0), suggested 4000, lifetime 7200 (0x1c20)
    assert natpmp.map_request("tcp", 4000, 4000, 7200) == bytes.fromhex("0002 0000 0fa0 0fa0 00001c20")
    # opcode 1 (UDP); lifetime 0 with suggested port 0 deletes the mapping (RFC 6886 3.4)
    assert natpmp.map_request("udp", 41641, 0, 0) == bytes.fromhex("0001 0000 a2a9 0000 00000000")


@pytest.mark.parametrize("bad", [("tcp", 0, 0, 60), ("tcp", 65536, 0, 60), ("udp", 1, -1, 60),
                                 ("udp", 1, 0, 2**32)])
def test_map_request_rejects_out_of_range(bad):
    with pytest.raises(ValueError):
        natpmp.map_request(*bad)


def test_parse_external_address():
    # version 0, opcode 128, result 0, epoch 0x00000e10 (3600 s), 203.0.113.11
    data = bytes.fromhex("0080 0000 00000e10 cb00710b")
    assert natpmp.parse_external_address(data) == natpmp.ExternalAddress(3600, "203.0.113.11")


def test_parse_map_answer():
    # version 0, opcode 130 (TCP answer), result 0, epoch 7, internal 4000, external 40001 (0x9c41), 7200 s
    data = bytes.fromhex("0082 0000 00000007 0fa0 9c41 00001c20")
    assert natpmp.parse_map(data, "tcp") == natpmp.PortMapping("tcp", 7, 4000, 40001, 7200)


def test_refusal_carries_the_result_code():
    data = bytes.fromhex("0082 0002 00000007 0fa0 0000 00000000")  # 2: not authorized or refused
    with pytest.raises(natpmp.NatPmpError, match="not authorized or refused") as e:
        natpmp.parse_map(data, "tcp")
    assert e.value.result == 2


@pytest.mark.parametrize("data,why", [
    (b"", "not a NAT-PMP answer"),
    (bytes.fromhex("0280 0000 00000e10 cb00710b"), "not a NAT-PMP answer"),  # PCP's version 2
    (bytes.fromhex("0081 0000 00000007 0fa0 9c41 00001c20"), "answer to opcode 1, expected 2"),  # UDP answer
    (bytes.fromhex("0082 0000 00000007 0fa0"), "answer of 10 bytes, expected 16"),  # truncated
])
def test_not_an_answer_to_our_request(data, why):
    with pytest.raises(natpmp.NatPmpError, match=why) as e:
        natpmp.parse_map(data, "tcp")
    assert e.value.result is None  # the client keeps waiting for the real answer


def test_truncated_external_address():
    with pytest.raises(natpmp.NatPmpError, match="expected 12"):
        natpmp.parse_external_address(bytes.fromhex("0080 0000 00000e10 cb00"))
