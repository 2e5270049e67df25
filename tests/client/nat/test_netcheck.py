"""netcheck against a real burrow-relay on 127.0.0.1 (STUN on two ports, HTTPS, /generate_204), through
`burrow netcheck` as users run it; the relay counts each STUN port's requests in its metrics."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request

import pytest

from burrow.client.nat.netcheck import Relay, netcheck
from harness.ports import free_port, wait_http
from harness.processes import burrow


@pytest.fixture
def relay(tmp_path):
    https, admin = free_port(), free_port()
    stun, stun2 = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    proc = burrow("packet_relay", "--host", "127.0.0.1", "--https-port", str(https), "--dev-tls",
                  "--tls-dir", str(tmp_path / "tls"), "--stun-port", str(stun), "--stun-port2", str(stun2),
                  "--admin-port", str(admin), "--key-file", str(tmp_path / "relay.key"), log=tmp_path / "relay.log")
    with proc:
        wait_http(f"http://127.0.0.1:{admin}/readyz", proc.proc)
        yield {"url": f"https://127.0.0.1:{https}", "stun": stun, "stun2": stun2, "admin": admin}


def _metric(admin: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


async def test_netcheck_sees_one_mapping_two_round_trips_and_no_portal(relay):
    r = await netcheck([Relay(relay["url"], relay["stun"], relay["stun2"])], timeout=2.0, portmap=False,
                       ssl_context=False)
    assert r.udp and r.ipv4 and r.global_v4.startswith("127.0.0.1:")
    assert r.mapping_varies_by_dest_port is False  # both STUN ports saw the same source address
    assert r.preserves_port is True and r.hairpin is True  # no NAT on loopback
    assert r.captive_portal is False  # /generate_204 echoed the challenge
    assert set(r.relay_stun_rtt_s) == set(r.relay_https_rtt_s) == {relay["url"]}
    assert r.preferred_relay == relay["url"] and r.errors == []
    answered = '{result="answered"}'
    assert _metric(relay["admin"], "burrow_relay_stun_requests_total" + answered) >= 1
    assert _metric(relay["admin"], "burrow_relay_stun2_requests_total" + answered) >= 1


def test_burrow_netcheck_json_and_exit_status(relay):
    base = [sys.executable, "-m", "burrow.client.cli", "netcheck", "--json", "--no-portmap", "--timeout", "1"]
    res = subprocess.run([*base, relay["url"], "--insecure", "--stun-port", str(relay["stun"]),
                          "--stun-port2", str(relay["stun2"])], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["preferred_relay"] == relay["url"] and report["mapping_varies_by_dest_port"] is False
    # the certificate is self-signed: without --insecure HTTPS fails, STUN still answers
    res = subprocess.run([*base, relay["url"], "--stun-port", str(relay["stun"]), "--stun-port2", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["relay_https_rtt_s"] == {} and report["relay_stun_rtt_s"]
    assert any("CERTIFICATE_VERIFY_FAILED" in e for e in report["errors"]), report["errors"]
    # nothing answers: exit 1
    dead = f"https://127.0.0.1:{free_port()}"
    res = subprocess.run([*base, dead, "--stun-port", str(free_port(socket.SOCK_DGRAM)), "--stun-port2", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and json.loads(res.stdout)["nat"] == "no-udp"
