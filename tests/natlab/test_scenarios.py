"""Per NAT scenario: `burrow netcheck` names each peer's NAT, and a Dilated and a classic file transfer between
the two peers arrive intact over the expected path (direct or the transit relay). Real processes in the lab's namespaces:
burrow-relay, mailbox and transit relay in the internet, two burrow clients behind the routers."""

from __future__ import annotations

import json
import sys

import pytest

from harness.natlab import services, upnp
from harness.natlab.rig import Lab, missing_requirements
from harness.natlab.topology import build

SIZE = 4_000_000  # bytes per transfer

# scenario -> (expected path, {peer: expected netcheck "nat"}, extra netcheck expectations)
EXPECT = {
    "eim": ("direct", {"a": "eim", "b": "eim"}),
    "symmetric": ("relay", {"a": "symmetric", "b": "symmetric"}),
    "upnp": ("direct", {"a": "eim", "b": "symmetric"}),
    "no-udp": ("relay", {"a": "no-udp", "b": "eim"}),
    "hairpin": ("direct", {"a": "eim", "b": "eim"}),
    "symmetric-v6": ("direct", {"a": "symmetric", "b": "symmetric"}),
}


@pytest.fixture
def lab(tmp_path):
    problem = missing_requirements() or upnp.missing()
    if problem:
        pytest.fail(problem)
    with Lab(tmp_path) as lab:
        yield lab


def netcheck(lab: Lab, ns: str, servers: services.Servers) -> dict:
    res = lab.run(ns, [sys.executable, "-m", services.MODULES["client"], "netcheck", servers.relay_url,
                       "--insecure", "--json", "--timeout", "1", "--qad-port", str(services.QAD_PORT)], env=services.python_env(), check=False, timeout=60)
    assert res.stdout.strip(), res.stderr
    return json.loads(res.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(EXPECT))
def test_scenario(lab, scenario):
    path, nats = EXPECT[scenario]
    topo = build(lab, scenario)
    upnp.start(lab, topo)
    servers = services.start_servers(lab, topo)
    reports = {peer: netcheck(lab, topo.hosts[peer].ns, servers) for peer in topo.hosts}
    assert {p: r["nat"] for p, r in reports.items()} == nats, reports
    for r in reports.values():
        assert r["captive_portal"] is False and r["preferred_relay"] == servers.relay_url
        # QUIC address discovery (what iroh endpoints use) sees the same public address as STUN: the NAT's
        if r["global_v4"]:
            assert r["qad"] and r["qad"].rpartition(":")[0] == r["global_v4"].rpartition(":")[0], r
        else:
            assert r["qad"] is None, r
        assert r["hairpin"] in (False, None)  # Linux NAT does not hairpin (harness/natlab/topology.py)
    # only miniupnpd (the upnp router) answers PCP; the other routers stay silent on UDP 5351
    assert {p: r["pcp"] for p, r in reports.items()} == {p: scenario == "upnp" and p == "a" for p in reports}
    if scenario == "upnp":
        assert reports["a"]["portmap"] == "nat-pmp" and reports["b"]["portmap"] is None
    if scenario == "symmetric-v6":
        assert all(r["ipv6"] and r["global_v6"] for r in reports.values())
    for dilated in (True, False):  # Dilation, then classic Transit: the same hints and simultaneous open
        extra = ["--stun-port2", str(services.STUN_PORT2)]
        if dilated and path == "direct":
            # Between burrow peers Dilation takes the relay first and moves to a direct path once one completes
            # (tests/natlab/test_upgrade.py); a transfer this small may end on the relay before a late hint (a
            # port mapping) connects. Without a transit relay the direct path itself must carry it.
            extra += ["--transit-helper", services.DEAD_TRANSIT]
        result = services.transfer(lab, topo, servers, "a", "b", SIZE, dilated=dilated,
                                   code=f"7-natlab-{'dilated' if dilated else 'classic'}", extra=extra)
        assert result.bytes_ok, result.output
        assert result.path == path, (dilated, result.route, result.output)
        if scenario == "symmetric-v6":
            assert "2001:db8:" in result.route, (dilated, result.route)


@pytest.mark.slow
@pytest.mark.interop
def test_magic_wormhole_dials_the_mapped_hint(lab):
    """A magic-wormhole 0.24 Dilation peer behind a symmetric NAT reaches a burrow peer through the port the
    burrow peer mapped with NAT-PMP: to 0.24 it is one more direct-tcp-v1 hint, and it ignores our extra
    ability. Burrow runs in this process with its thread inside namespace a; 0.24 runs in namespace b."""
    import asyncio
    import subprocess

    from burrow.client.dilation.aio import DILATION_VERSIONS, dilate
    from burrow.client.nat.hints import NatOptions
    from burrow.client.wormhole import Wormhole
    from harness.dilation import PEER, send_blob
    from harness.natlab.rig import inside

    topo = build(lab, "upnp")
    upnp.start(lab, topo)
    servers = services.start_servers(lab, topo)
    size = 2_000_000
    peer = subprocess.Popen(["ip", "netns", "exec", topo.hosts["b"].ns, sys.executable, str(PEER),
                             servers.mailbox_url, servers.transit, "--listen", "up", "--expect", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lab.procs.append(peer)
    code = peer.stdout.readline().split()[1]

    async def burrow_side() -> list[str]:
        w = Wormhole(servers.mailbox_url, transit_helper=servers.transit, versions_extra=DILATION_VERSIONS,
                     nat=NatOptions(portmap=True, upnp=False))
        await w.open()
        w.set_code(code)
        statuses = []
        d = await dilate(w, on_status=statuses.append)
        await asyncio.wait_for(d.when_connected(), 30)
        r, wr = await d.open("up")
        mine, answered = await asyncio.wait_for(send_blob(r, wr, size), 60)
        assert mine == answered
        await d.close()
        await w.close(mood="happy")
        return [s.path for s in statuses if s.state == "connected"]

    with inside(topo.hosts["a"].ns):
        paths = asyncio.run(burrow_side())
    lines = peer.stdout.read().split("\n")
    assert peer.wait(30) == 0, lines
    assert any(line.startswith("received up 2000000") for line in lines), lines
    assert paths and paths[0].startswith("direct"), paths


@pytest.mark.slow
def test_upnp_igd_maps_the_port_found_by_our_ssdp_search(lab):
    """UPnP IGD alone (NAT-PMP left out): our M-SEARCH finds miniupnpd, async-upnp-client maps the port, a
    peer behind the symmetric NAT connects to the mapped address, and the mapping is deleted again."""
    import asyncio
    import socket

    from burrow.client.nat import portmap
    from harness.natlab.rig import inside

    topo = build(lab, "upnp")
    upnp.start(lab, topo)
    with inside(topo.hosts["a"].ns):
        listener = socket.create_server(("0.0.0.0", 0))
        port = listener.getsockname()[1]
        found = asyncio.run(portmap.ssdp_search())
        mapping = asyncio.run(portmap.upnp_map("tcp", port, 600))
    with listener:
        assert found and found[0].startswith("http://192.168.1.1:"), found
        assert mapping is not None and mapping.method == "upnp" and mapping.external_port == port, mapping
        with inside(topo.hosts["b"].ns):
            socket.create_connection((mapping.external_ip, mapping.external_port), timeout=3).close()
    with inside(topo.hosts["a"].ns):
        asyncio.run(portmap.unmap(mapping))
