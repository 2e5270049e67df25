"""The token registry's round trips: a cross-replica pair costs one claim script per side and nothing
after it forms (transit_relay/cluster.py, `_CLAIM`). Real redis-server, replicas in this process."""

from __future__ import annotations

import asyncio

from burrow.common.redis import key
from tests.transit_relay.conftest import hs, wait_for
from tests.transit_relay.test_cluster import TIMEOUT, tcp_side, token


def commands(redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO commandstats)."""
    out = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line.partition(":")
            out[name[len("cmdstat_"):]] = int(fields.split(",")[0].split("=")[1])
    return out


async def cross_pair(r0, r1, tok: bytes):
    """Side a waits on r0 (its claim registered), side b reaches r1 and hops: both get `ok`; the writers."""
    a_r, a_w = await tcp_side(r0, hs(b"a", tok))
    await wait_for(lambda: tok in r0.cluster.claimed)
    b_r, b_w = await tcp_side(r1, hs(b"b", tok))
    assert await asyncio.wait_for(a_r.readexactly(3), TIMEOUT) == b"ok\n"
    assert await asyncio.wait_for(b_r.readexactly(3), TIMEOUT) == b"ok\n"
    return a_w, b_w


async def test_a_cross_replica_pair_leaves_no_claim_and_needs_no_release(cluster, redis):
    r0, r1 = await cluster(2)
    redis.cli("CONFIG", "RESETSTAT")
    for n in range(5):
        a_w, b_w = await cross_pair(r0, r1, token(40 + n))
        # the claim went with the second side's script: a side arriving now waits instead of hopping
        assert redis.cli("EXISTS", key("transit", token(40 + n).decode(), "waiting")) == "0"
        a_w.close()
        b_w.close()
        await wait_for(lambda: not r0.relay.pairs and not r1.relay.pairs)
    await asyncio.sleep(0.1)
    assert not r0.cluster.claimed and not r1.cluster.claimed
    calls = commands(redis)
    assert calls.get("eval", 0) == 10  # two claim scripts per pair (one per side), no release
    assert r0.registry.get_sample_value("burrow_transit_cluster_hops_in_total", {"result": "paired"}) == 5


async def test_claims_travel_on_the_lean_connection(cluster, redis):
    """The claim scripts go over common/resp.py's pipelined connection, not redis-py's pool (which keeps
    the health PINGs): Redis sees each replica's claims come from that connection."""
    r0, r1 = await cluster(2)
    for n in range(3):
        a_w, b_w = await cross_pair(r0, r1, token(60 + n))
        a_w.close()
        b_w.close()
    last_command = {}  # client port -> its last command, as Redis reports it
    for line in redis.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        last_command[int(fields["addr"].rpartition(":")[2])] = fields["cmd"]
    for replica in (r0, r1):
        port = replica.cluster.lean.conn.transport.get_extra_info("sockname")[1]
        assert last_command[port] == "eval", last_command
    assert list(last_command.values()).count("eval") == 2, last_command
