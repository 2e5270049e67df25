"""A transit replica drained (SIGTERM) while a side waits on it for its partner: two real replicas on a
real redis-server behind a real HAProxy routing by token, with /readyz health checks and fast mark-down
as in docker/haproxy.cfg. The partner, sent by HAProxy to the other replica, joins the waiting side on
the draining one by a hop.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import threading
import time

import pytest

from burrow.common.redis import key
from harness.haproxy import HAProxy
from harness.ports import free_port
from harness.redis import RedisServer
from tests.transit_relay.conftest import hs, read_events
from tests.transit_relay.test_cluster_processes import Replica, connect, read_exactly
from tests.transit_relay.test_haproxy_front import servers_up

pytestmark = pytest.mark.slow
DEADLINE = 30.0


def front_config(port: int, replicas: list[Replica]) -> str:
    """docker/haproxy.cfg's transit front end, on 127.0.0.1."""
    servers = "".join(f"    server t{i} 127.0.0.1:{r.port} check port {r.admin_port} send-proxy-v2\n"
                      for i, r in enumerate(replicas))
    return (f"frontend transit\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 10s\n"
            "    tcp-request content set-var(txn.token) req.payload(13,64)\n"
            "    tcp-request content accept if { req.len ge 77 }\n    default_backend transit\n"
            "backend transit\n    balance hash var(txn.token)\n    hash-type consistent\n"
            "    timeout connect 1s\n    retries 3\n    option redispatch 1\n"
            "    option httpchk GET /readyz\n    http-check expect status 200\n"
            "    default-server inter 1s fastinter 500ms downinter 2s fall 2 rise 2 observe layer4 "
            "error-limit 1 on-error mark-down\n" + servers)


def until(what: str, check, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not reached")
        time.sleep(0.05)


def exchange(a: socket.socket, b: socket.socket, size: int) -> None:
    """`size` random bytes each way at once; both arrive intact."""
    up, down = os.urandom(size), os.urandom(size)
    got: dict[str, bytes] = {}

    def read(name: str, s: socket.socket) -> None:
        got[name] = read_exactly(s, size)

    readers = [threading.Thread(target=read, args=("b", b)), threading.Thread(target=read, args=("a", a))]
    for t in readers:
        t.start()
    a.sendall(up)
    b.sendall(down)
    for t in readers:
        t.join(DEADLINE)
    assert hashlib.sha256(got["b"]).digest() == hashlib.sha256(up).digest()
    assert hashlib.sha256(got["a"]).digest() == hashlib.sha256(down).digest()


def test_a_side_waiting_on_a_draining_replica_meets_its_partner_through_the_other(tmp_path):
    redis = RedisServer(tmp_path / "redis", appendfsync="no")
    replicas = [Replica(tmp_path, i, redis.url, "--proxy-protocol", "--drain-timeout", "60") for i in range(2)]
    port = free_port()
    hap = HAProxy(tmp_path / "haproxy", front_config(port, replicas))
    try:
        until("HAProxy sees both replicas up", lambda: servers_up(hap) == {"t0": True, "t1": True})
        token = hashlib.sha256(b"drain").hexdigest().encode()
        first = connect(port, "127.0.0.2")
        first.sendall(hs(b"a" * 16, token))
        until("the first side waits", lambda: sum(r.metric("burrow_transit_pending_connections") for r in replicas))
        holder = next(i for i, r in enumerate(replicas) if r.metric("burrow_transit_pending_connections"))
        draining, other = replicas[holder], replicas[1 - holder]
        claim = key("transit", token.decode(), "waiting")
        assert redis.cli("GET", claim) == f"127.0.0.1:{draining.peer_port}"

        draining.process.proc.send_signal(signal.SIGTERM)
        until("HAProxy marks the draining replica down", lambda: not servers_up(hap)[f"t{holder}"])
        assert draining.metric("burrow_transit_draining") == 1
        with pytest.raises(ConnectionRefusedError):  # no new client on its public port
            socket.create_connection(("127.0.0.1", draining.port), timeout=5).close()
        assert redis.cli("GET", claim) == f"127.0.0.1:{draining.peer_port}"  # still registered

        second = connect(port, "127.0.0.3")  # HAProxy sends it to the other replica
        second.sendall(hs(b"b" * 16, token))
        assert read_exactly(first, 3) == b"ok\n" and read_exactly(second, 3) == b"ok\n"
        assert other.metric("burrow_transit_cluster_hops_out_total", '{result="paired"}') == 1
        until("the claim is dropped once the side paired", lambda: redis.cli("EXISTS", claim) == "0")
        exchange(first, second, 2 << 20)
        assert draining.process.alive()  # the pair keeps the drain going
        first.close()
        second.close()
        assert draining.process.proc.wait(DEADLINE) == 0

        drains = read_events(draining.events, "drain")
        assert len(drains) == 1, drains
        assert (drains[0]["waiting"], drains[0]["pairs"], drains[0]["ended"]) == (1, 0, "done")
        sessions = read_events(draining.events)
        assert [(s["mood"], s["total_bytes"]) for s in sessions] == [("happy", 4 << 20)]
    finally:
        hap.stop()
        for r in replicas:
            r.process.stop()
        redis.kill()
