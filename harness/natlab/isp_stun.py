"""A bare STUN Binding answerer standing in for "the ISP" in front of a UPnP router (test fixture).

miniupnpd refuses port forwarding when its WAN address is in a reserved range (the lab uses RFC 5737
addresses) unless a STUN check shows no NAT upstream: it sends four Binding requests, two carrying
CHANGE-REQUEST, and wants all four answered with its own address and port. burrow-relay rightly answers
CHANGE-REQUEST with 420 (it has one address), so the lab runs this answerer, which ignores CHANGE-REQUEST
and replies from where it was asked with XOR-MAPPED-ADDRESS only. Usage: isp_stun.py HOST PORT
"""

import socket
import struct
import sys

COOKIE = 0x2112A442


def answer(data: bytes, ip: str, port: int) -> bytes | None:
    if len(data) < 20:
        return None
    mtype, _length, cookie = struct.unpack_from("!HHI", data)
    if mtype != 0x0001 or cookie != COOKIE:
        return None
    txid = data[8:20]
    xaddr = struct.pack("!BBH4s", 0, 1, port ^ (COOKIE >> 16),
                        bytes(a ^ b for a, b in zip(socket.inet_aton(ip), struct.pack("!I", COOKIE), strict=True)))
    attr = struct.pack("!HH", 0x0020, len(xaddr)) + xaddr
    return struct.pack("!HHI", 0x0101, len(attr), COOKIE) + txid + attr


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((sys.argv[1], int(sys.argv[2])))
    while True:
        data, (ip, port) = sock.recvfrom(2048)
        reply = answer(data, ip, port)
        if reply:
            sock.sendto(reply, (ip, port))


if __name__ == "__main__":
    main()
