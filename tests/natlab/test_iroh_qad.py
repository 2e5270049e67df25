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

import pytest

from harness.natlab.iroh_pair import iroh_pair

NBYTES = 2 * 1024 * 1024
DIRECT_WAIT = 15.0  # s the dialler waits for a direct path before sending (an upper bound, not a measurement)


@pytest.mark.slow
def test_iroh_endpoints_behind_eim_nats_go_direct_with_qad(lab):
    r = iroh_pair(lab, "eim", qad=True, nbytes=NBYTES, direct_wait=DIRECT_WAIT)
    a, b = r.a, r.b
    assert a["iroh"].startswith(str(r.trust)) and b["iroh"].startswith(str(r.trust))  # the patched copy ran
    # QAD: each endpoint knows its NAT's public address (its router's WAN address; the NAT keeps ports)
    a_public = [x for x in a["addrs"] if x.startswith(r.public["a"] + ":")]
    b_public = [x for x in b["addrs"] if x.startswith(r.public["b"] + ":")]
    assert a_public and b_public, (a["addrs"], b["addrs"])
    # the connection runs on a direct path to b's NAT mapping, and the payload went that way
    path = r.selected
    assert path["ip"] and not path["relay"] and path["remote"] in b_public, a["paths"]
    assert path["tx_bytes"] >= NBYTES and path["rx_bytes"] >= NBYTES, path
    assert r.bytes_ok, a


@pytest.mark.slow
def test_iroh_endpoints_stay_relayed_without_qad(lab):
    r = iroh_pair(lab, "eim", qad=False, nbytes=NBYTES, direct_wait=DIRECT_WAIT)
    a, b = r.a, r.b
    # no public address learnt: only the LAN addresses, which the other side cannot reach
    assert all(x.startswith("192.168.") for x in a["addrs"] + b["addrs"]), (a["addrs"], b["addrs"])
    assert r.selected["relay"] and not r.selected["ip"], a["paths"]
    assert not any(p["ip"] and p["tx_bytes"] >= NBYTES for p in a["paths"]), a["paths"]
    assert r.bytes_ok, a


@pytest.mark.slow
def test_iroh_endpoints_behind_symmetric_nats_stay_relayed(lab):
    r = iroh_pair(lab, "symmetric", qad=True, nbytes=NBYTES, direct_wait=DIRECT_WAIT)
    for me, name in ((r.a, "a"), (r.b, "b")):  # QAD answered: the NAT's public address, at a port of its choosing
        assert any(x.startswith(r.public[name] + ":") for x in me["addrs"]), me["addrs"]
    assert r.selected["relay"] and not r.selected["ip"], r.a["paths"]
    assert r.bytes_ok, r.a
