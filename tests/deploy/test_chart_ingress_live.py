"""The chart's Ingress against the real servers. HAProxy in HTTP mode stands in for the Ingress controller:
it ends TLS and routes by the rendered Ingress's paths and path types (Exact, then the longest Prefix) to a
mailbox, a transit relay and a packet relay on 127.0.0.1, the relay started with the settings the chart
gives it behind an Ingress (plain HTTP, no HTTPS listener). Through it: `burrow relay-probe` (DERP with
`Upgrade: DERP` and DERP over WebSocket, iroh's /relay and /ping, /generate_204), a mailbox client at
/v1, two WebSocket transit sides paired at the transit path; STUN goes to the relay directly, as through
the chart's Service. Needs Debian's haproxy (with TLS), which CI installs."""

from __future__ import annotations

import asyncio
import io
import json
import os
import ssl
import sys

import pytest
import websockets

from burrow.client.apps import relay_probe
from burrow.packet_relay.tls import generate_self_signed
from harness.haproxy import HAProxy
from harness.ports import free_port, wait_port
from harness.processes import Process, burrow
from tests.deploy.chart_util import env_of, find, ingress_routes, pod_spec, render
from tests.deploy.test_chart import FULL

VALUES = {"publicHost": "localhost", "expose": {"mode": "ingress", "ingress": {"transitPath": "/transit"}}}


def haproxy_config(routes: list[tuple[str, str, str]], servers: dict[str, int], port: int, pem: str) -> str:
    """An HTTP front end that routes as the Ingress says: (path, pathType, Service port name) rows."""
    exact = [(p, n) for p, t, n in routes if t == "Exact"]
    prefix = sorted(((p, n) for p, t, n in routes if t == "Prefix"), key=lambda r: -len(r[0]))
    lines = ["frontend ingress", "    mode http", f"    bind 127.0.0.1:{port} ssl crt {pem}",
             "    timeout client 1h", "    timeout http-request 10s"]
    for path, name in exact:
        lines.append(f"    use_backend {name} if {{ path {path} }}")
    for path, name in prefix:  # Ingress Prefix: the path itself or below it, element by element
        below = path.rstrip("/") + "/"
        lines.append(f"    use_backend {name} if {{ path {path} }} || {{ path_beg {below} }}")
    for name, server_port in servers.items():
        lines += ["", f"backend {name}", "    mode http", f"    server s 127.0.0.1:{server_port}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    docs, _ = render(VALUES)
    routes = [(p, next(x["pathType"] for i in find(docs, "Ingress") for r in i["spec"]["rules"]
                       for x in r["http"]["paths"] if x["path"] == p), port["name"])
              for _host, p, _svc, port in ingress_routes(docs)]
    relay_env = env_of(pod_spec(find(docs, "Deployment", f"{FULL}-relay")[0])["containers"][0])
    work = tmp_path_factory.mktemp("ingress")
    cert, key = generate_self_signed(str(work / "tls"))
    pem = work / "ingress.pem"
    pem.write_text(open(cert).read() + open(key).read())
    ports = {name: free_port() for name in ("mailbox-ws", "transit", "transit-ws", "relay-http", "admin")}
    stun = free_port()
    env = {**os.environ, **{k: v for k, v in relay_env.items()
                            if k in ("BURROW_RELAY_HTTPS_PORT", "BURROW_RELAY_DEV_TLS")}}
    procs = [
        Process([sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1", "--port",
                 str(ports["mailbox-ws"]), "--db", str(work / "mailbox.sqlite"), "--admin-port", "-1"],
                log=work / "mailbox.log"),
        burrow("transit_relay", "--host", "127.0.0.1", "--port", str(ports["transit"]), "--websocket-port",
               str(ports["transit-ws"]), "--admin-port", "-1", log=work / "transit.log"),
        Process([sys.executable, "-m", "burrow.packet_relay", "--host", "127.0.0.1", "--http-port",
                 str(ports["relay-http"]), "--stun-port", str(stun), "--admin-port", str(ports["admin"]),
                 "--key-file", str(work / "relay.key")], log=work / "relay.log", env=env),
    ]
    front = None
    try:
        for name in ("mailbox-ws", "transit-ws", "relay-http"):
            wait_port(ports[name])
        front_port = free_port()
        servers = {name: ports[name] for name in ("mailbox-ws", "transit-ws", "relay-http")}
        front = HAProxy(work / "haproxy", haproxy_config(routes, servers, front_port, str(pem)))
        yield {"url": f"https://localhost:{front_port}", "ws": f"wss://localhost:{front_port}", "ca": cert,
               "stun": stun, "routes": routes, "relay_log": work / "relay.log"}
    finally:
        if front is not None:
            front.stop()
        for p in procs:
            p.stop()


def test_the_relay_runs_as_the_chart_configures_it_behind_an_ingress(stack):
    assert {(p, t) for p, t, n in stack["routes"] if n == "relay-http"} == {
        ("/derp", "Prefix"), ("/generate_204", "Exact"), ("/relay", "Exact"), ("/ping", "Exact"),
        ("/robots.txt", "Exact"), ("/", "Exact")}
    log = stack["relay_log"].read_text()
    assert "relay up: https off http" in log, log  # HTTPS off: TLS ends at the Ingress


@pytest.mark.parametrize("websocket", [False, True], ids=["upgrade-derp", "derp-over-websocket"])
async def test_relay_probe_passes_through_the_ingress(stack, websocket):
    args = [stack["url"], "--ca-file", stack["ca"], "--stun-host", "127.0.0.1", "--stun-port",
            str(stack["stun"]), "--count", "3"] + (["--websocket"] if websocket else [])
    out = io.StringIO()
    assert await relay_probe.probe(relay_probe.parse_args(args), out) == 0, out.getvalue()
    for step in ("handshake", "packets", "ping", "iroh-http", "iroh-login", "iroh-data", "iroh-ping", "stun"):
        assert f"ok   {step}" in out.getvalue(), out.getvalue()


def client_tls(stack) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=stack["ca"])


async def test_the_mailbox_answers_at_v1(stack):
    async with websockets.connect(stack["ws"] + "/v1", ssl=client_tls(stack)) as ws:
        welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert welcome["type"] == "welcome"
        await ws.send(json.dumps({"type": "ping", "ping": 7}))
        replies = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(2)]
        assert {"type": "pong", "pong": 7} in [{k: r.get(k) for k in ("type", "pong")} for r in replies]


async def test_websocket_transit_sides_pair_at_the_transit_path(stack):
    token = os.urandom(32).hex()
    url = stack["ws"] + "/transit"
    async with websockets.connect(url, ssl=client_tls(stack)) as a, \
            websockets.connect(url, ssl=client_tls(stack)) as b:
        await a.send(f"please relay {token} for side {'a' * 16}\n".encode())
        await b.send(f"please relay {token} for side {'b' * 16}\n".encode())
        assert await asyncio.wait_for(a.recv(), 10) == b"ok\n"
        assert await asyncio.wait_for(b.recv(), 10) == b"ok\n"
        await a.send(b"through the ingress")
        assert await asyncio.wait_for(b.recv(), 10) == b"through the ingress"
