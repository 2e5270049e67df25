"""Real iroh endpoints (PyPI iroh 1.2) behind NATs, homed on the lab's burrow-relay, go direct through QAD.

Two endpoints sit behind two endpoint-independent NATs (`eim`). Each learns its public address from
burrow-relay's QUIC address discovery, exchanges it with the other through the relay, and iroh's hole
punching then selects a direct UDP path between the two NAT mappings; the bytes of both directions arrive
intact over it. With QAD off on the relay, the endpoints know only their LAN addresses and the connection
stays on the relay. Behind symmetric NATs QAD answers, but each NAT maps every destination to a new port,
so the reported address is no use to the peer and the connection stays on the relay too.

The relay's certificate is signed by a root that only the test's copy of the iroh package trusts
(harness/natlab/iroh_trust.py: the wheel checks relay certificates against compiled-in roots only).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.natlab import services
from harness.natlab.iroh_trust import patched_iroh
from harness.natlab.topology import build

PEER = Path(__file__).with_name("iroh_peer.py")
NBYTES = 2 * 1024 * 1024
DIRECT_WAIT = 15.0  # s the dialler waits for a direct path before sending (an upper bound, not a measurement)
PEER_TIMEOUT = 150.0


def _json_line(text: str) -> dict | None:
    lines = [x for x in text.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def run_pair(lab, scenario: str, qad: bool) -> dict:
    topo = build(lab, scenario)
    trust = patched_iroh(lab.workdir)
    cert = trust.issue(lab.workdir, [services.RELAY_NAME])
    servers = services.start_servers(lab, topo, tls=cert, qad=qad)
    env = {**services.python_env(), "PYTHONPATH": f"{trust.pythonpath}:{services.ROOT}"}
    qad_port = str(services.QAD_PORT)  # the relay map names it either way: with QAD off nothing answers there
    accept = subprocess.Popen(["ip", "netns", "exec", topo.hosts["b"].ns, sys.executable, str(PEER), "accept",
                               servers.relay_url, qad_port, str(NBYTES)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lab.procs.append(accept)
    first = accept.stdout.readline()  # {"id", "addrs", ...} once online
    b = _json_line(first)
    if b is None:
        accept.kill()
        raise AssertionError(f"accepting endpoint did not come online: {first!r} {accept.stderr.read()[-3000:]}")
    dial = subprocess.run(["ip", "netns", "exec", topo.hosts["a"].ns, sys.executable, str(PEER), "dial",
                           servers.relay_url, qad_port, str(NBYTES), b["id"], str(DIRECT_WAIT)],
                          capture_output=True, text=True, env=env, timeout=PEER_TIMEOUT)
    a = _json_line(dial.stdout)
    assert dial.returncode == 0 and a is not None, dial.stderr[-3000:]
    out, err = accept.communicate(timeout=30)
    assert _json_line(out) == {"answered": True}, err[-3000:]
    wan = {r.ns: r.wan_v4 for r in topo.routers.values()}
    return {"a": a, "b": b, "public": {name: wan[h.router] for name, h in topo.hosts.items()},
            "trust": str(trust.pythonpath)}


def _selected(paths: list[dict]) -> dict:
    chosen = [p for p in paths if p["selected"]]
    assert len(chosen) == 1, paths
    return chosen[0]


@pytest.mark.slow
def test_iroh_endpoints_behind_eim_nats_go_direct_with_qad(lab):
    r = run_pair(lab, "eim", qad=True)
    a, b = r["a"], r["b"]
    assert b["iroh"].startswith(r["trust"]) and a["iroh"].startswith(r["trust"])  # the patched copy ran
    # QAD: each endpoint knows its NAT's public address (its router's WAN address, the NAT keeps ports)
    a_public = [x for x in a["addrs"] if x.startswith(r["public"]["a"] + ":")]
    b_public = [x for x in b["addrs"] if x.startswith(r["public"]["b"] + ":")]
    assert a_public and b_public, (a["addrs"], b["addrs"])
    # the connection runs on a direct path to b's NAT mapping, and the payload went that way
    path = _selected(a["paths"])
    assert path["ip"] and not path["relay"] and path["remote"] in b_public, a["paths"]
    assert path["tx_bytes"] >= NBYTES and path["rx_bytes"] >= NBYTES, path
    assert a["their_digest_ok"] and a["got_sha256"] == b["reply_sha256"] and a["got_bytes"] == NBYTES


@pytest.mark.slow
def test_iroh_endpoints_stay_relayed_without_qad(lab):
    r = run_pair(lab, "eim", qad=False)
    a, b = r["a"], r["b"]
    # no public address learnt: only the LAN addresses, which the other side cannot reach
    assert all(x.startswith("192.168.") for x in a["addrs"] + b["addrs"]), (a["addrs"], b["addrs"])
    path = _selected(a["paths"])
    assert path["relay"] and not path["ip"], a["paths"]
    assert not any(p["ip"] and p["tx_bytes"] >= NBYTES for p in a["paths"]), a["paths"]
    assert a["their_digest_ok"] and a["got_sha256"] == b["reply_sha256"] and a["got_bytes"] == NBYTES


@pytest.mark.slow
def test_iroh_endpoints_behind_symmetric_nats_stay_relayed(lab):
    r = run_pair(lab, "symmetric", qad=True)
    a, b = r["a"], r["b"]
    for me, name in ((a, "a"), (b, "b")):  # QAD answered: the NAT's public address, at a port of its choosing
        assert any(x.startswith(r["public"][name] + ":") for x in me["addrs"]), me["addrs"]
    path = _selected(a["paths"])
    assert path["relay"] and not path["ip"], a["paths"]
    assert a["their_digest_ok"] and a["got_sha256"] == b["reply_sha256"] and a["got_bytes"] == NBYTES
