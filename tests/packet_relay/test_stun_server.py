"""The STUN server on loopback: independent clients, garbage, rate limits, metrics, dual stack."""

import asyncio
import os
import random
import re
import shutil
import socket

import pytest
from aioice import stun as aioice_stun
from aioice.candidate import Candidate
from aioice.ice import StunProtocol, server_reflexive_candidate
from prometheus_client import CollectorRegistry, generate_latest

from burrow.packet_relay.stun_server import Pressure, SourceLimiter, StunServer, start_stun_server
from burrow.wire.stun import BindingRequest, StunError, build_binding_request, parse_binding_response

CLIENT_TIMEOUT = 15.0  # seconds for an external client run or one awaited answer


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _spy_sources(server: StunServer) -> list:
    """Record the source address of each datagram the real server handles."""
    seen = []
    real = server.handle

    def handle(data, addr):
        seen.append(addr[:2])
        real(data, addr)

    server.handle = handle  # _on_readable looks the method up on the instance
    return seen


class Receiver:
    """What aioice's StunProtocol reports to (normally its ICE Connection)."""

    def protocol_lost(self, protocol):
        pass

    def data_received(self, data, component):
        raise AssertionError(f"not STUN: {data!r}")

    def request_received(self, message, addr, protocol):
        raise AssertionError("unexpected request")


class UdpClient:
    """A plain asyncio UDP client socket (no STUN logic) for sending raw datagrams."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()[:2]

    async def send(self, data: bytes, port: int, host: str = "127.0.0.1") -> None:
        await asyncio.get_running_loop().sock_sendto(self.sock, data, (host, port))

    async def recv(self) -> bytes:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.sock, 2048), CLIENT_TIMEOUT)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
async def server():
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=1000, burst=1000, registry=None)
    yield server
    server.close()


async def _run(*cmd: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), CLIENT_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out.decode(errors="replace")


async def _until(predicate, what: str) -> None:
    for _ in range(int(CLIENT_TIMEOUT * 100)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.interop
async def test_debian_stun_client(server):
    """Debian's `stun` (stun-client 0.97) speaks RFC 3489: it needs MAPPED-ADDRESS."""
    if shutil.which("stun") is None:
        pytest.fail("stun (Debian package stun-client) is not installed: apt-get install -y stun-client")
    seen = _spy_sources(server)
    code, out = await _run("stun", f"127.0.0.1:{server.port}", "1", "-v")
    assert code == 0, out
    source_port = int(re.search(r"Opened port (\d+)", out).group(1))
    assert f"MappedAddress = 127.0.0.1:{source_port}" in out
    assert "ok=1" in out  # the client parsed every attribute we sent
    assert seen == [("127.0.0.1", source_port)]
    assert server.answered == 1


@pytest.mark.interop
async def test_coturn_stunclient(server):
    if shutil.which("turnutils_stunclient") is None:
        pytest.fail("turnutils_stunclient (Debian package coturn) is not installed: apt-get install -y coturn")
    seen = _spy_sources(server)
    code, out = await _run("turnutils_stunclient", "-p", str(server.port), "127.0.0.1")
    assert code == 0, out
    reported = re.search(r"UDP reflexive addr: ([\d.]+):(\d+)", out)
    assert reported, out
    assert (reported.group(1), int(reported.group(2))) in seen
    assert all(addr == seen[0] for addr in seen)
    assert server.answered == len(seen) >= 1


@pytest.mark.interop
async def test_aioice_server_reflexive_candidate(server):
    """aioice's own srflx gathering (StunProtocol + server_reflexive_candidate) against us."""

    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(lambda: StunProtocol(Receiver()),
                                                              local_addr=("127.0.0.1", 0))
    try:
        host, port = transport.get_extra_info("sockname")[:2]
        protocol.local_candidate = Candidate("1", 1, "udp", 1, host, port, "host")
        candidate, _ = await asyncio.wait_for(
            server_reflexive_candidate(protocol, ("127.0.0.1", server.port)), CLIENT_TIMEOUT)
        assert (candidate.type, candidate.host, candidate.port) == ("srflx", "127.0.0.1", port)

        # An ICE-style request with USERNAME, PRIORITY, MESSAGE-INTEGRITY and FINGERPRINT.
        request = aioice_stun.Message(aioice_stun.Method.BINDING, aioice_stun.Class.REQUEST)
        request.attributes.update({"USERNAME": "a:b", "PRIORITY": 7, "SOFTWARE": "aioice"})
        request.add_message_integrity(b"password")
        response, _ = await asyncio.wait_for(protocol.request(request, ("127.0.0.1", server.port)),
                                             CLIENT_TIMEOUT)
        assert response.attributes["XOR-MAPPED-ADDRESS"] == ("127.0.0.1", port)
        assert response.attributes["SOFTWARE"] == "burrow"
        assert "FINGERPRINT" in response.attributes  # aioice verified it while parsing
    finally:
        transport.close()
    assert server.answered == 2


async def test_garbage_gets_no_answer(server):
    client = UdpClient()
    rng = random.Random(5769)
    valid = build_binding_request(os.urandom(12))
    garbage = [rng.randbytes(rng.randrange(0, 120)) for _ in range(150)]
    garbage += [valid[:cut] for cut in range(len(valid))]             # every truncation
    garbage += [valid[:-1] + bytes([valid[-1] ^ 0x80])]               # bad FINGERPRINT
    garbage += [bytes.fromhex("00110000") + valid[4:20]]              # Binding indication
    try:
        for data in garbage:
            await client.send(data, server.port)
        txid = os.urandom(12)
        await client.send(build_binding_request(txid), server.port)
        # Loopback keeps order: the first datagram back must answer the valid request.
        assert parse_binding_response(await client.recv(), txid) == client.address
    finally:
        client.close()
    assert server.answered == 1
    assert server.malformed + server.ignored == len(garbage)
    assert server.ignored >= 1


async def test_rate_limit_per_source():
    registry = CollectorRegistry()
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=0.001, burst=3, capacity=0,
                                     registry=registry)
    first, second = UdpClient(), UdpClient("127.0.0.2")  # two source IPs on loopback
    try:
        txids = [os.urandom(12) for _ in range(10)]
        for txid in txids:
            await first.send(build_binding_request(txid), server.port)
        await _until(lambda: server.answered + server.rate_limited == 10, "10 requests handled")
        assert (server.answered, server.rate_limited) == (3, 7)
        answers = [await first.recv() for _ in range(3)]
        assert [parse_binding_response(a, t) for a, t in zip(answers, txids[:3], strict=True)] == [
            first.address] * 3
        # Another source has its own bucket.
        txid = os.urandom(12)
        await second.send(build_binding_request(txid), server.port)
        assert parse_binding_response(await second.recv(), txid) == second.address
        text = generate_latest(registry).decode()
        assert 'burrow_relay_stun_requests_total{result="answered"} 4.0' in text
        assert 'burrow_relay_stun_requests_total{result="rate_limited"} 7.0' in text
        assert "burrow_relay_stun_rate_limit_sources 2.0" in text
    finally:
        first.close()
        second.close()
        server.close()
    # close() unregisters, so the same registry can take a new server (restarts in one process).
    again = await start_stun_server("127.0.0.1", 0, rate_per_source=1, burst=1, registry=registry)
    again.close()


async def test_a_busy_nat_address_is_answered_in_full_below_capacity():
    """2,000 requests from one address (a carrier-grade NAT's many users) all get answers by default."""
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=20, burst=40, registry=None)
    clients = [UdpClient() for _ in range(20)]
    try:
        for round_ in range(100):
            for c in clients:
                await c.send(build_binding_request(os.urandom(12)), server.port)
            if round_ % 10 == 9:
                await _until(lambda r=round_: server.answered + server.rate_limited == 20 * (r + 1), "handled")
        assert (server.answered, server.rate_limited) == (2000, 0)
    finally:
        for c in clients:
            c.close()
        server.close()


async def test_under_pressure_the_heaviest_source_is_limited_and_a_light_one_is_not():
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=0.001, burst=5, capacity=20,
                                     registry=None)
    heavy, light = UdpClient(), UdpClient("127.0.0.2")
    try:
        for _ in range(200):  # far more than 20/s in all: pressure
            await heavy.send(build_binding_request(os.urandom(12)), server.port)
        await _until(lambda: server.answered + server.rate_limited == 200, "200 requests handled")
        assert server.rate_limited > 150  # the capacity's second, then the heavy source's own burst
        txid = os.urandom(12)
        await light.send(build_binding_request(txid), server.port)
        assert parse_binding_response(await light.recv(), txid) == light.address
    finally:
        heavy.close()
        light.close()
        server.close()


def test_pressure_is_one_second_of_capacity():
    p = Pressure(10, now=0.0)
    assert [p.on(0.0) for _ in range(11)] == [False] * 10 + [True]
    assert not p.on(0.5)  # half a second refilled five
    assert Pressure(0, now=0.0).on(0.0)  # capacity 0: always limit per source


async def test_metrics_count_malformed_and_unknown_attributes():
    registry = CollectorRegistry()
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=100, burst=100, registry=registry)
    client = UdpClient()
    try:
        await client.send(b"\x00\x01garbage", server.port)
        classic_change = BindingRequest(os.urandom(16)).encode()
        classic_change = classic_change[:3] + b"\x08" + classic_change[4:] + bytes.fromhex("0003000400000006")
        await client.send(classic_change, server.port)
        answer = await client.recv()
        assert answer[:2] == b"\x01\x11"  # 420: we cannot answer from another address
        text = generate_latest(registry).decode()
        assert 'burrow_relay_stun_requests_total{result="malformed"} 1.0' in text
        assert 'burrow_relay_stun_requests_total{result="unknown_attribute"} 1.0' in text
        assert 'burrow_relay_stun_requests_total{result="answered"} 0.0' in text
    finally:
        client.close()
        server.close()


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_ipv6_and_dual_stack():
    server = await start_stun_server("::", 0, rate_per_source=100, burst=100, registry=None)
    v4, v6 = UdpClient("127.0.0.1"), UdpClient("::1")
    try:
        for client, host in ((v4, "127.0.0.1"), (v6, "::1")):
            txid = os.urandom(12)
            await client.send(build_binding_request(txid), server.port, host)
            data = await client.recv()
            # IPv4 through the dual-stack socket is reported as IPv4, not ::ffff:127.0.0.1.
            assert parse_binding_response(data, txid) == client.address
            assert aioice_stun.parse_message(data).attributes["XOR-MAPPED-ADDRESS"] == client.address
        # aioice over IPv6, straight through its transaction code.
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(lambda: StunProtocol(Receiver()),
                                                                  local_addr=("::1", 0))
        try:
            request = aioice_stun.Message(aioice_stun.Method.BINDING, aioice_stun.Class.REQUEST)
            response, _ = await asyncio.wait_for(protocol.request(request, ("::1", server.port)),
                                                 CLIENT_TIMEOUT)
            assert response.attributes["XOR-MAPPED-ADDRESS"] == transport.get_extra_info("sockname")[:2]
        finally:
            transport.close()
    finally:
        v4.close()
        v6.close()
        server.close()
    assert server.answered == 3


async def test_bound_port_and_close():
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=10, burst=10, registry=None)
    assert server.port > 0
    server.close()
    server.close()  # idempotent
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", server.port))  # the port is free again


def test_limiter_buckets_refill_and_table_stays_bounded():
    limiter = SourceLimiter(rate=1.0, burst=2, max_sources=100)
    assert limiter.allow(b"a", 0.0) and limiter.allow(b"a", 0.0)
    assert not limiter.allow(b"a", 0.0)
    assert limiter.allow(b"a", 1.0)
    # A flood of spoofed sources never grows the table past its bound.
    for i in range(10_000):
        limiter.allow(i.to_bytes(4, "big"), 1.0 + i * 1e-6)
        assert len(limiter) <= 100
    # Idle sources are pruned first: a busy source keeps its (empty) bucket across a prune.
    limiter = SourceLimiter(rate=1.0, burst=2, max_sources=8)
    for i in range(7):
        limiter.allow(bytes([i]), 0.0)          # seven sources, each with one token left
    limiter.allow(b"busy", 9.0)
    limiter.allow(b"busy", 9.0)
    assert not limiter.allow(b"busy", 9.0)
    limiter.allow(b"new", 9.0)                  # table full: the seven idle ones go, busy stays
    assert len(limiter) == 2
    assert not limiter.allow(b"busy", 9.0)


def test_limiter_rate_zero_is_unlimited():
    limiter = SourceLimiter(rate=0, burst=1)
    assert all(limiter.allow(b"x", 0.0) for _ in range(1000))
    assert len(limiter) == 0


def test_stun_error_family():
    with pytest.raises(StunError):
        parse_binding_response(b"\x00" * 3, bytes(12))
