"""The lab's NATs behave as real ones do: mapping kinds, filtering, port forwards, TCP simultaneous open,
and teardown. Raw sockets made inside the namespaces (no burrow code involved)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading

import pytest

from harness.natlab import upnp
from harness.natlab.rig import Lab, LabError, inside
from harness.natlab.topology import ISP_STUN_PORT, build

COOKIE = 0x2112A442


def _stun(sock: socket.socket, server: tuple[str, int], timeout: float = 1.0) -> tuple[str, int] | None:
    """One Binding request from `sock`; the XOR-MAPPED-ADDRESS, or None if nothing came back."""
    txid = os.urandom(12)
    sock.settimeout(timeout)
    sock.sendto(struct.pack("!HHI", 1, 0, COOKIE) + txid, server)
    try:
        data, _ = sock.recvfrom(2048)
    except TimeoutError:
        return None
    assert data[8:20] == txid
    _fam, xport = struct.unpack_from("!xBH", data, 24)
    ip = bytes(a ^ b for a, b in zip(data[28:32], struct.pack("!I", COOKIE), strict=True))
    return socket.inet_ntoa(ip), xport ^ (COOKIE >> 16)


def _stun_servers(lab: Lab, topo) -> list[tuple[str, int]]:
    return [upnp.start_isp_stun(lab, topo, p) for p in (ISP_STUN_PORT, ISP_STUN_PORT + 1)]


def _mappings(topo, peer: str, servers) -> list[tuple[str, int] | None]:
    with inside(topo.hosts[peer].ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        s.bind(("0.0.0.0", 0))
        local = s.getsockname()[1]
        return [local] + [_stun(s, srv) for srv in servers]


def test_eim_keeps_the_port_and_one_mapping_per_socket(lab):
    topo = build(lab, "eim")
    servers = _stun_servers(lab, topo)
    local, m1, m2 = _mappings(topo, "a", servers)
    assert m1 == m2 == ("203.0.113.11", local)


def test_symmetric_maps_each_destination_to_another_port(lab):
    topo = build(lab, "symmetric")
    servers = _stun_servers(lab, topo)
    local, m1, m2 = _mappings(topo, "a", servers)
    assert m1[0] == m2[0] == "203.0.113.11"
    assert m1[1] != m2[1]


def test_no_udp_drops_udp_but_passes_tcp(lab):
    topo = build(lab, "no-udp")
    servers = _stun_servers(lab, topo)
    assert _mappings(topo, "a", servers)[1:] == [None, None]
    with inside(topo.inet):
        srv = socket.create_server((topo.server_v4, 0))
    with srv, inside(topo.hosts["a"].ns):
        socket.create_connection((topo.server_v4, srv.getsockname()[1]), timeout=2).close()


def test_unsolicited_inbound_is_dropped_and_replies_pass(lab):
    """Address-and-port-dependent filtering: only the host the peer sent to gets through its mapping."""
    topo = build(lab, "eim")
    servers = _stun_servers(lab, topo)
    with inside(topo.hosts["a"].ns):
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with inside(topo.inet):
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with a, stranger:
        a.bind(("0.0.0.0", 0))
        mapped = _stun(a, servers[0])
        stranger.sendto(b"hello", mapped)
        a.settimeout(0.5)
        with pytest.raises(TimeoutError):
            a.recvfrom(100)
        a.sendto(b"hi", stranger.getsockname() if stranger.getsockname()[0] != "0.0.0.0" else
                 (topo.server_v4, stranger.getsockname()[1]))
        stranger.settimeout(1)
        _, src = stranger.recvfrom(100)
        stranger.sendto(b"now", src)
        assert a.recvfrom(100)[0] == b"now"


def _reuse_socket(ns: str, family=socket.AF_INET) -> socket.socket:
    with inside(ns):
        s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return s


def test_tcp_simultaneous_open_through_two_eim_nats(lab):
    """Both peers connect from their listening port to the other's external address at about the same time;
    each NAT lets the other's SYN in because it matches the conntrack entry of its own SYN."""
    topo = build(lab, "eim")
    socks = {}
    for name in ("a", "b"):
        listener = _reuse_socket(topo.hosts[name].ns)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        dialer = _reuse_socket(topo.hosts[name].ns)
        dialer.bind(("0.0.0.0", listener.getsockname()[1]))
        socks[name] = (listener, dialer)
    ext = {"a": "203.0.113.11", "b": "203.0.113.12"}  # eim keeps ports: external = router WAN + same port
    results: dict[str, object] = {}

    def dial(name, other):
        listener, dialer = socks[name]
        dialer.settimeout(8)
        try:
            dialer.connect((ext[other], socks[other][0].getsockname()[1]))
            results[name] = dialer.getpeername()
        except OSError as e:
            results[name] = e

    threads = [threading.Thread(target=dial, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert results == {"a": (ext["b"], socks["b"][0].getsockname()[1]),
                           "b": (ext["a"], socks["a"][0].getsockname()[1])}
        socks["a"][1].sendall(b"through")
        socks["b"][1].settimeout(2)
        assert socks["b"][1].recv(100) == b"through"
    finally:
        for pair in socks.values():
            for s in pair:
                s.close()


def test_symmetric_breaks_tcp_simultaneous_open(lab):
    topo = build(lab, "symmetric")
    listener = _reuse_socket(topo.hosts["b"].ns)
    with listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        with inside(topo.hosts["a"].ns):
            s = socket.socket()
        with s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect(("203.0.113.12", listener.getsockname()[1]))


def test_ipv6_is_routed_behind_a_stateful_firewall(lab):
    topo = build(lab, "symmetric-v6")
    b = topo.hosts["b"]
    listener = _reuse_socket(b.ns, socket.AF_INET6)
    with listener:
        listener.bind(("::", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with inside(topo.hosts["a"].ns):
            s = socket.socket(socket.AF_INET6)
        with s, pytest.raises(OSError):  # unsolicited inbound: dropped by b's router
            s.settimeout(1.5)
            s.connect((b.v6, port))
        with inside(topo.inet):  # outbound from b to the internet works
            srv = socket.create_server(("::", 0), family=socket.AF_INET6)
        with srv, inside(b.ns):
            socket.create_connection((topo.server_v6, srv.getsockname()[1]), timeout=2).close()


def test_upnp_router_forwards_a_nat_pmp_mapping(lab):

    topo = build(lab, "upnp")
    upnp.start(lab, topo)
    a = topo.hosts["a"]
    with inside(a.ns):
        listener = socket.create_server(("0.0.0.0", 0))
        pmp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with listener, pmp:
        port = listener.getsockname()[1]
        pmp.settimeout(2)
        pmp.sendto(struct.pack("!BBHHHI", 0, 2, 0, port, port, 120), ("192.168.1.1", 5351))
        reply = pmp.recvfrom(16)[0]
        _ver, op, result, _epoch, internal, external, _life = struct.unpack("!BBHIHHI", reply)
        assert (op, result, internal) == (130, 0, port)
        with inside(topo.hosts["b"].ns):  # b is behind a symmetric NAT and still gets in
            socket.create_connection(("203.0.113.11", external), timeout=3).close()


def test_teardown_removes_namespaces_even_after_an_error(tmp_path):
    with pytest.raises(RuntimeError), Lab(tmp_path) as lab:
        build(lab, "hairpin")
        names = list(lab.namespaces)
        proc = lab.spawn(names[0], ["sleep", "60"])
        raise RuntimeError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
    assert proc.poll() is not None


def test_a_failing_setup_command_names_itself(lab):
    ns = lab.netns("x")
    with pytest.raises(LabError, match="no-such-device"):
        lab.cmd("ip", "-n", ns, "link", "set", "no-such-device", "up")


def test_a_simultaneous_open_dial_into_an_unreachable_network_fails_without_redialling(lab, monkeypatch):
    """A peer's LAN address behind another NAT has no route (the router answers ICMP net unreachable): the dial
    from our listening port gives up at once instead of re-dialling as it does after a RST."""
    import asyncio
    import errno

    from burrow.client.nat import hints

    topo = build(lab, "symmetric")
    real, made = hints.reusable_socket, []

    def counted(family, port=0):
        made.append(port)
        return real(family, port)

    monkeypatch.setattr(hints, "reusable_socket", counted)
    with inside(topo.hosts["a"].ns):
        listener = real(socket.AF_INET)
        with listener:
            port = listener.getsockname()[1]
            with pytest.raises(OSError) as e:
                asyncio.run(hints.dial_from(port, topo.hosts["b"].v4, 9, 10.0))
    assert e.value.errno == errno.ENETUNREACH
    assert made == [port]  # one dial, no re-dials
