"""Transit replicas as real processes on one real Redis: `python -m burrow.transit_relay --redis-url ...`.

Round-robin HAProxy (standing in for a Kubernetes Service) spreads the sides of each pair over the
replicas; real magic-wormhole 0.24 clients are given different replicas as `--transit-helper`; a
replica and then Redis are killed (SIGKILL) while bytes flow.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from harness.haproxy import HAProxy
from harness.ports import free_port, wait_port
from harness.processes import Process
from harness.wormhole_servers import MailboxProcess, relay_only_transfer
from tests.transit_relay.conftest import hs, read_events

pytestmark = pytest.mark.slow
TIMEOUT = 20.0


class Replica:
    def __init__(self, workdir: Path, i: int, redis_url: str, *extra: str) -> None:
        self.port, self.peer_port, self.admin_port = free_port(), free_port(), free_port()
        self.events = workdir / f"transit-{i}.jsonl"
        secret = workdir / "secret"
        if not secret.exists():
            secret.write_bytes(os.urandom(32).hex().encode())
        self.process = Process([sys.executable, "-m", "burrow.transit_relay", "--host", "127.0.0.1",
                                "--port", str(self.port), "--websocket-port", "-1",
                                "--admin-port", str(self.admin_port), "--redis-url", redis_url,
                                "--peer-port", str(self.peer_port), "--peer-secret-file", str(secret),
                                "--advertise-address", f"127.0.0.1:{self.peer_port}",
                                "--node-name", f"transit-{i}", "--event-log", str(self.events), *extra],
                               log=workdir / f"transit-{i}.log")
        wait_port(self.port, self.process.proc)
        wait_port(self.admin_port, self.process.proc)
        for _ in range(200):  # until it reaches Redis (sides arriving earlier are registered later)
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=5) as r:
                if "Redis reachable" in r.read().decode():
                    break
            threading.Event().wait(0.05)

    def metric(self, name: str, labels: str = "") -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + labels + " "):
                    return float(line.split()[-1])
        return 0.0

    def happy(self) -> list[dict]:
        return [e for e in read_events(self.events) if e["mood"] == "happy"]


def wait_happy(rs: list, count: int, timeout: float = 10.0) -> list[dict]:
    """The replicas' happy session events once `count` are written (a relay writes one just after its pair
    ends, so a client can see the end first), or what there is after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        events = [e for r in rs for e in r.happy()]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        threading.Event().wait(0.05)


@pytest.fixture
def replicas(tmp_path, redis):
    started: list[Replica] = []

    def make(n: int, *extra: str) -> list[Replica]:
        for _ in range(n):
            started.append(Replica(tmp_path, len(started), redis.url, *extra))
        return started

    yield make
    for r in started:
        r.process.stop()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0))
    return s


def read_exactly(s: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


def pair(port_a: int, port_b: int, n: int) -> tuple[socket.socket, socket.socket]:
    tok = hashlib.sha256(b"proc %d" % n).hexdigest().encode()
    a = connect(port_a, "127.0.0.2")
    a.sendall(hs(b"a", tok))
    b = connect(port_b, "127.0.0.3")
    b.sendall(hs(b"b", tok))
    assert read_exactly(a, 3) == b"ok\n" and read_exactly(b, 3) == b"ok\n", n
    return a, b


def test_round_robin_front_end_over_three_replicas(tmp_path, replicas):
    rs = replicas(3, "--proxy-protocol")
    port = free_port()
    servers = "".join(f"    server t{i} 127.0.0.1:{r.port} send-proxy-v2\n" for i, r in enumerate(rs))
    hap = HAProxy(tmp_path / "haproxy", f"frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n"
                  f"backend be\n    balance roundrobin\n{servers}")
    try:
        pairs = 90
        for n in range(pairs):
            a, b = pair(port, port, n)
            up, down = os.urandom(50_000 + n), os.urandom(20_000 + n)
            a.sendall(up)
            a.shutdown(socket.SHUT_WR)
            b.sendall(down)
            b.shutdown(socket.SHUT_WR)
            assert read_exactly(b, len(up) + 1) == up and read_exactly(a, len(down) + 1) == down
            a.close()
            b.close()
        assert len(wait_happy(rs, pairs)) == pairs  # one session line per pair, cluster-wide
        hops = sum(r.metric("burrow_transit_cluster_hops_out_total", '{result="paired"}') for r in rs)
        assert hops >= pairs // 3  # round robin split most pairs over two replicas
        lonely = [e for r in rs for e in read_events(r.events) if e["mood"] != "happy"]
        assert lonely == []
    finally:
        hap.stop()


@pytest.mark.interop
def test_magic_wormhole_clients_given_different_replicas(tmp_path, replicas):
    r0, r1 = replicas(2)
    mailbox = MailboxProcess(str(tmp_path / "mailbox.sqlite")).start()
    try:
        payload = os.urandom(3_000_000)
        relay_only_transfer(mailbox.url, f"tcp:127.0.0.1:{r0.port}", f"tcp:127.0.0.1:{r1.port}", tmp_path,
                            payload, "8-brave-heron")
        big = [e for r in (r0, r1) for e in r.happy() if e["total_bytes"] >= len(payload)]
        assert len(big) == 1, big  # the file crossed the relays once, recorded once
    finally:
        mailbox.stop()


def pump(a: socket.socket, b: socket.socket, total: int, result: dict, name: str) -> None:
    """Send `total` bytes a -> b in 64 kB pieces while reading them at b; record what arrived."""
    block = os.urandom(65536)
    digest_sent, digest_got = hashlib.sha256(), hashlib.sha256()
    got = [0]

    def reader():
        with b:
            while True:
                try:
                    chunk = b.recv(1 << 20)
                except OSError:
                    break
                if not chunk:
                    break
                got[0] += len(chunk)
                digest_got.update(chunk)

    t = threading.Thread(target=reader)
    t.start()
    sent = 0
    try:
        while sent < total:
            a.sendall(block)
            digest_sent.update(block)
            sent += len(block)
            threading.Event().wait(0.002)
        a.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    t.join(TIMEOUT)
    a.close()
    result[name] = (sent, got[0], digest_sent.digest() == digest_got.digest())


def test_a_replica_then_redis_killed_mid_transfer(tmp_path, replicas, redis):
    r0, r1, r2 = replicas(3)
    x = pair(r0.port, r1.port, 1)  # crosses r1
    y = pair(r0.port, r2.port, 2)  # crosses r0 and r2 only
    z = pair(r2.port, r2.port, 3)  # local to r2
    result: dict = {}
    total = 24 << 20
    threads = [threading.Thread(target=pump, args=(*p, total, result, name))
               for p, name in ((x, "x"), (y, "y"), (z, "z"))]
    for t in threads:
        t.start()
    threading.Event().wait(0.5)
    r1.process.kill()  # SIGKILL
    threading.Event().wait(0.3)
    redis.kill()
    for t in threads:
        t.join(60)
    assert result["y"] == (total, total, True) and result["z"] == (total, total, True), result
    assert result["x"][1] < total  # the pair through the killed replica ended
    # without Redis the live replicas still pair their own sides
    a, b = pair(r0.port, r0.port, 4)
    a.sendall(b"ping")
    assert read_exactly(b, 4) == b"ping"
    a.close()
    b.close()


def pair_waiting_first(first: Replica, second: Replica, n: int) -> tuple[socket.socket, socket.socket]:
    """Side a waits on `first` (registered) before side b reaches `second`: the pair's holder is `first`."""
    tok = hashlib.sha256(b"proc %d" % n).hexdigest().encode()
    a = connect(first.port, "127.0.0.2")
    a.sendall(hs(b"a", tok))
    for _ in range(200):
        if first.metric("burrow_transit_pending_connections") == 1:
            break
        threading.Event().wait(0.02)
    threading.Event().wait(0.1)  # its claim reaches Redis
    b = connect(second.port, "127.0.0.3")
    b.sendall(hs(b"b", tok))
    assert read_exactly(a, 3) == b"ok\n" and read_exactly(b, 3) == b"ok\n", n
    return a, b


def test_clients_handed_over_between_replica_processes(tmp_path, replicas):
    """With --handover-dir the holder relays both clients alone: killing the other replica ends nothing of it."""
    r0, r1 = replicas(2, "--handover-dir", str(tmp_path / "handover"))
    x = pair_waiting_first(r0, r1, 21)  # b's socket handed from r1 to r0
    y = pair_waiting_first(r1, r0, 22)  # b's socket handed from r0 to r1
    assert r1.metric("burrow_transit_cluster_hops_out_total", '{result="handed_over"}') == 1
    assert r0.metric("burrow_transit_cluster_hops_out_total", '{result="handed_over"}') == 1
    assert r0.metric("burrow_transit_active_pairs") == 1 and r1.metric("burrow_transit_active_pairs") == 1
    result: dict = {}
    total = 24 << 20
    threads = [threading.Thread(target=pump, args=(*p, total, result, name)) for p, name in ((x, "x"), (y, "y"))]
    for t in threads:
        t.start()
    threading.Event().wait(0.5)
    r1.process.kill()  # SIGKILL: y's clients were r1's alone; r1's copy of x's side b is long closed
    for t in threads:
        t.join(60)
    assert result["x"] == (total, total, True), result
    assert result["y"][1] < total  # the pair on the killed replica ended
    assert [e["total_bytes"] >= total for e in wait_happy([r0], 1)] == [True]
