"""The asyncio Transit connector and record pipe, on 127.0.0.1, with the real transit relay."""

import asyncio
import os

import pytest

from burrow.client.errors import TransitError
from burrow.client.nat import SIMOPEN_ABILITY
from burrow.client.transit.aio import Transit, local_addresses

pytestmark = pytest.mark.timeout(60)


async def connect_pair(s: Transit, r: Transit, key_s: bytes, key_r: bytes | None = None, timeout: float = 20):
    hs, hr = await s.get_hints(), await r.get_hints()
    s.add_peer_hints(hr)
    r.add_peer_hints(hs)
    s.set_key(key_s)
    r.set_key(key_r or key_s)
    try:
        return await asyncio.gather(s.connect(timeout), r.connect(timeout))
    finally:
        await s.close()
        await r.close()


async def exchange(ps, pr):
    big = os.urandom(1_000_000)
    await ps.send_record(big)
    assert await pr.receive_record() == big
    await pr.send_record(b"ack")
    assert await ps.receive_record() == b"ack"
    await ps.close()
    await pr.close()


async def test_direct():
    ps, pr = await connect_pair(Transit("sender"), Transit("receiver"), os.urandom(32))
    assert ps.description.startswith("direct") and pr.description.startswith("direct")
    await exchange(ps, pr)


async def test_relay_only(wormhole_servers):
    s = Transit("sender", transit_helper=wormhole_servers.transit_helper, no_listen=True)
    r = Transit("receiver", transit_helper=wormhole_servers.transit_helper, no_listen=True)
    ps, pr = await connect_pair(s, r, os.urandom(32))
    assert ps.description.startswith("relay") and pr.description.startswith("relay")
    await exchange(ps, pr)


async def test_dead_direct_hint_falls_back_to_relay(wormhole_servers):
    s = Transit("sender", transit_helper=wormhole_servers.transit_helper, no_listen=True, relay_delay=0.2)
    r = Transit("receiver", transit_helper=wormhole_servers.transit_helper, no_listen=True, relay_delay=0.2)
    s.add_peer_hints([{"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": 1, "priority": 0.0}])
    ps, pr = await connect_pair(s, r, os.urandom(32))
    assert ps.description.startswith("relay")
    await exchange(ps, pr)


@pytest.mark.parametrize("burrow_peer", [True, False], ids=["burrow-peer", "other-peer"])
async def test_relay_head_start_ends_once_every_direct_dial_failed_with_a_burrow_peer(wormhole_servers, burrow_peer):
    # the only direct hint is refused at once; with a burrow peer (it offers simultaneous open) the relay is
    # dialled then, not after the head start; with another client the head start stays whole
    s = Transit("sender", transit_helper=wormhole_servers.transit_helper, no_listen=True, relay_delay=60)
    r = Transit("receiver", transit_helper=wormhole_servers.transit_helper, no_listen=True, relay_delay=60)
    for t in (s, r):
        t.add_peer_transit({"abilities-v1": [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]
                            + ([SIMOPEN_ABILITY] if burrow_peer else []),
                            "hints-v1": [{"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": 1}]})
    if burrow_peer:
        ps, pr = await connect_pair(s, r, os.urandom(32), timeout=20)  # well inside the 60 s head start
        assert ps.description.startswith("relay") and pr.description.startswith("relay")
        await exchange(ps, pr)
    else:
        with pytest.raises(TransitError):
            await connect_pair(s, r, os.urandom(32), timeout=3)


async def test_different_keys_never_connect():
    with pytest.raises(TransitError):
        await connect_pair(Transit("sender"), Transit("receiver"), os.urandom(32), os.urandom(32), timeout=2)


async def test_no_hints_at_all_is_an_error():
    t = Transit("sender", no_listen=True)
    t.set_key(os.urandom(32))
    with pytest.raises(TransitError):
        await t.connect(1)


def test_local_addresses_include_loopback_last():
    addrs = local_addresses()
    assert addrs[-1] == "127.0.0.1" and all(a.count(".") == 3 for a in addrs)
