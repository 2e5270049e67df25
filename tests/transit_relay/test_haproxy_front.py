"""Several transit replicas behind the Helm chart's own HAProxy front end (transit.scaling: haproxy).

The HAProxy configuration is the chart's, rendered by the Helm engine (harness/transit_front.py), with
only its listeners and server addresses moved to 127.0.0.1. The replicas run `--proxy-protocol`;
clients bind 127.0.0.2 / 127.0.0.3 so the replicas can only know them from the PROXY v2 header.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import urllib.request

import pytest
from websockets.asyncio.client import connect as ws_connect

from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.server import TransitServer
from harness.haproxy import HAProxy, require_haproxy
from harness.ports import free_port, wait_port
from harness.processes import ROOT, Process
from harness.transit_front import Replica, chart_config, front_config
from harness.wormhole_servers import MailboxProcess, relay_only_transfer
from tests.transit_relay.conftest import hs, read_events, wait_for

pytestmark = pytest.mark.slow
TIMEOUT = 10.0
REPLICAS = 3


def servers_up(hap: HAProxy, backend: str = "transit") -> dict[str, bool]:
    """{server name: running} from HAProxy's runtime API (srv_op_state 2 = running)."""
    lines = hap.command(f"show servers state {backend}").splitlines()
    header = lines[1].lstrip("# ").split()
    rows = [dict(zip(header, line.split(), strict=False)) for line in lines[2:] if line.strip()]
    return {r["srv_name"]: r["srv_op_state"] == "2" for r in rows}


async def wait_servers(hap: HAProxy, expected: dict[str, bool]) -> None:
    for _ in range(300):  # health checks every 2 s, 2 to fall, 2 to rise
        if servers_up(hap) == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"HAProxy sees {servers_up(hap)}, expected {expected}")


class Front:
    def __init__(self, replicas: list[TransitServer], hap: HAProxy, port: int, ws_port: int,
                 admin_port: int) -> None:
        self.replicas, self.hap, self.port, self.ws_port, self.admin_port = replicas, hap, port, ws_port, admin_port

    def holder(self, token: bytes) -> int | None:
        """Index of the replica where a side with `token` waits."""
        found = [i for i, r in enumerate(self.replicas) if r.relay.by_token.get(token)]
        assert len(found) <= 1, found
        return found[0] if found else None


@pytest.fixture
async def front(tmp_path):
    replicas = []
    for i in range(REPLICAS):
        server = TransitServer(TransitConfig(host="127.0.0.1", port=0, websocket_port=0, admin_port=-1,
                                             proxy_protocol=True, node_name=f"transit-{i}",
                                             event_log=str(tmp_path / f"transit-{i}.jsonl")))
        await server.start()
        replicas.append(server)
    port, ws_port, admin_port = free_port(), free_port(), free_port()
    config = front_config([Replica(r.port, r.websocket_port) for r in replicas], port, ws_port, admin_port)
    hap = HAProxy(tmp_path / "haproxy", config)
    try:
        await wait_servers(hap, {f"transit-{i}": True for i in range(REPLICAS)})
        yield Front(replicas, hap, port, ws_port, admin_port)
    finally:
        hap.stop()
        for server in replicas:
            if server.loop is not None and server._ready:
                await server.stop()


async def side(port: int, source: str, line: bytes, split: bool = False):
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), TIMEOUT)
    if split:  # the token arrives in a second segment: HAProxy must wait for it
        writer.write(line[:20])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(line[20:])
    else:
        writer.write(line)
    return reader, writer


async def one_pair(port: int, n: int) -> None:
    token = hashlib.sha256(b"pair %d" % n).hexdigest().encode()
    legacy = n % 2 == 0
    line_a = hs(None, token) if legacy else hs(b"a", token)
    line_b = hs(None, token) if legacy else hs(b"b", token)
    a_r, a_w = await side(port, "127.0.0.2", line_a, split=n % 5 == 0)
    b_r, b_w = await side(port, "127.0.0.3", line_b, split=n % 7 == 0)
    try:
        assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
        assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
        up, down = os.urandom(4096 + n), os.urandom(2048 + n)
        a_w.write(up)
        b_w.write(down)
        a_w.write_eof()  # half-close passes through HAProxy and the relay
        assert await asyncio.wait_for(b_r.readexactly(len(up)), TIMEOUT) == up
        assert await asyncio.wait_for(b_r.read(), TIMEOUT) == b""
        b_w.write_eof()
        assert await asyncio.wait_for(a_r.readexactly(len(down)), TIMEOUT) == down
        assert await asyncio.wait_for(a_r.read(), TIMEOUT) == b""
    finally:
        a_w.close()
        b_w.close()


async def test_hundreds_of_pairs_meet_on_one_replica_each(front):
    pairs = 300
    gate = asyncio.Semaphore(24)

    async def bounded(n):
        async with gate:
            await one_pair(front.port, n)

    await asyncio.gather(*(bounded(n) for n in range(pairs)))

    def happy():
        return [[e for e in read_events(r.config.event_log) if e["mood"] == "happy"] for r in front.replicas]

    await wait_for(lambda: sum(map(len, happy())) == pairs, timeout=10)
    per_replica = [len(h) for h in happy()]
    assert all(n > 0 for n in per_replica), per_replica  # the token hash spreads the pairs
    for replica in front.replicas:
        moods = {e["mood"] for e in read_events(replica.config.event_log)}
        assert moods == {"happy"}, moods  # no side waited alone on a wrong replica
        # the replicas counted the clients, never HAProxy's own address
        assert replica.relay.caps.held_by("127.0.0.1") == 0
        assert replica.registry.get_sample_value("burrow_transit_proxy_protocol_headers_total",
                                                 {"version": "v2"}) > 0
    admin = f"http://127.0.0.1:{front.admin_port}"
    for path in ("/readyz", "/healthz"):
        with urllib.request.urlopen(admin + path, timeout=5) as r:
            assert r.status == 200
    with urllib.request.urlopen(admin + "/metrics", timeout=5) as r:
        assert 'haproxy_backend_active_servers{proxy="transit"} 3' in r.read().decode()


async def test_websocket_clients_meet_on_the_first_live_replica(front):
    async def ws_pair(n: int, source_a: str, source_b: str) -> None:
        tok = hashlib.sha256(b"ws %d" % n).hexdigest().encode()
        url = f"ws://127.0.0.1:{front.ws_port}"
        async with ws_connect(url, local_addr=(source_a, 0)) as a, ws_connect(url, local_addr=(source_b, 0)) as b:
            await a.send(hs(b"a", tok))
            await b.send(hs(b"b", tok))
            assert await asyncio.wait_for(a.recv(), TIMEOUT) == b"ok\n"
            assert await asyncio.wait_for(b.recv(), TIMEOUT) == b"ok\n"
            assert front.replicas[0].relay.caps.held_by(source_a) == 1  # PROXY v2 on the WebSocket port too
            await a.send(b"over websocket")
            assert await asyncio.wait_for(b.recv(), TIMEOUT) == b"over websocket"

    for n in range(5):
        await ws_pair(n, "127.0.0.2", "127.0.0.3")
    await wait_for(lambda: len(read_events(front.replicas[0].config.event_log)) == 5)
    assert {e["transport"] for e in read_events(front.replicas[0].config.event_log)} == {"websocket"}
    await front.replicas[0].stop()  # balance first: the next live replica takes over
    await wait_servers(front.hap, {"transit-0": False, "transit-1": True, "transit-2": True})
    for _ in range(100):  # the WebSocket backend's own checks see it too
        if not servers_up(front.hap, "transit-websocket")["transit-0"]:
            break
        await asyncio.sleep(0.05)
    front.replicas = front.replicas[1:]  # ws_pair looks at replicas[0]: now transit-1
    await ws_pair(9, "127.0.0.4", "127.0.0.5")


async def where_tokens_go(front: Front, tokens: list[bytes]) -> dict[bytes, int]:
    """Open one waiting side per token, see which replica holds it, close it again."""
    out = {}
    for token in tokens:
        _r, w = await side(front.port, "127.0.0.2", hs(b"a", token))
        await wait_for(lambda t=token: front.holder(t) is not None)
        i = front.holder(token)
        out[token] = i
        assert front.replicas[i].relay.caps.held_by("127.0.0.2") == 1  # PROXY v2: the client's address
        w.close()
        await wait_for(lambda t=token: front.holder(t) is None)
    return out


async def test_a_stopped_replica_moves_only_its_own_tokens(front):
    tokens = [hashlib.sha256(b"token %d" % n).hexdigest().encode() for n in range(60)]
    before = await where_tokens_go(front, tokens)
    assert set(before.values()) == set(range(REPLICAS))
    assert before == await where_tokens_go(front, tokens)  # the hash is stable

    await front.replicas[1].stop()
    await wait_servers(front.hap, {"transit-0": True, "transit-1": False, "transit-2": True})
    after = await where_tokens_go(front, tokens)
    for token, i in before.items():
        if i == 1:
            assert after[token] in (0, 2)
        else:
            assert after[token] == i, "a token of a live replica moved"
    moved = next(t for t, i in before.items() if i == 1)
    a_r, a_w = await side(front.port, "127.0.0.2", hs(b"a", moved))
    b_r, b_w = await side(front.port, "127.0.0.3", hs(b"b", moved))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    a_w.close()
    b_w.close()


def test_the_documented_configuration_is_the_charts_and_valid(tmp_path):
    require_haproxy()
    docs = (ROOT / "docs" / "deploy.md").read_text()
    section = docs.split("## Transit with several replicas", 1)[1]
    block = section.split("Elsewhere, the same configuration", 1)[1].split("```", 2)[1]
    chart = chart_config(3)
    for line in block.strip().splitlines():
        if line.strip() and not line.strip().startswith(("server ", "default-server ")):
            assert line in chart, line
    assert "default-server check inter 2s fall 2 rise 2 send-proxy-v2" in block
    check = tmp_path / "documented.cfg"
    check.write_text("defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 2h\n"
                     "    timeout server 2h\n" + block)
    result = subprocess.run(["haproxy", "-c", "-f", str(check)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.interop
def test_magic_wormhole_024_through_three_replicas(tmp_path):
    """Real magic-wormhole 0.24 sender and receiver, relay only (`--no-listen`), via the front end."""
    replicas, logs = [], []
    mailbox = MailboxProcess(str(tmp_path / "mailbox.sqlite")).start()
    hap = None
    try:
        for i in range(REPLICAS):
            tcp, ws = free_port(), free_port()
            logs.append(tmp_path / f"transit-{i}.jsonl")
            replicas.append((Process([sys.executable, "-m", "burrow.transit_relay", "--host", "127.0.0.1",
                                      "--port", str(tcp), "--websocket-port", str(ws), "--admin-port", "-1",
                                      "--proxy-protocol", "--event-log", str(logs[-1])],
                                     log=tmp_path / f"transit-{i}.log"), Replica(tcp, ws)))
        for proc, r in replicas:
            wait_port(r.tcp_port, proc.proc)
        port, ws_port, admin_port = free_port(), free_port(), free_port()
        hap = HAProxy(tmp_path / "haproxy", front_config([r for _, r in replicas], port, ws_port, admin_port))
        helper = f"tcp:127.0.0.1:{port}"
        payload = os.urandom(2_000_000)
        relay_only_transfer(mailbox.url, helper, helper, tmp_path, payload, "7-brave-heron")
        happy = [[e for e in read_events(p) if e["mood"] == "happy"] for p in logs]
        assert sorted(map(len, happy)) == [0, 0, 1], happy  # one pair, on one replica
        pair = next(h[0] for h in happy if h)
        assert pair["total_bytes"] >= len(payload)
    finally:
        if hap is not None:
            hap.stop()
        for proc, _ in replicas:
            proc.stop()
        mailbox.stop()
