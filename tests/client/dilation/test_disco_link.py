"""Dilation over a punched UDP path: two burrow peers that both name a real burrow-relay (DERP) offer the
`derp-disco-v1` hint, punch with Disco and carry L2 over QUIC on the Disco socket, through a real mailbox."""

from __future__ import annotations

import asyncio
import socket

import pytest

from burrow.client.dilation.disco_link import HINT_TYPE, make_hint, parse_hint
from burrow.client.nat.hints import NatOptions
from burrow.client.wormhole import Wormhole
from harness.dilation import paced_until, send_blob, sink_blob
from tests.packet_relay.derp_util import ca, running_relay, url

pytestmark = pytest.mark.timeout(120)

DEAD_RELAY = "tcp:127.0.0.1:1"  # nothing listens: the transit relay is unreachable


async def dilated_pair(wormhole_servers, server, *, listen: bool, transit: str, sides=("f" * 16, "0" * 16),
                       **dilate_kwargs):
    nat = NatOptions(portmap=False, derp_url=url(server), derp_ca_file=ca(server))
    ws = [Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True) for _ in range(2)]
    for w in ws:
        await w.open()
    ws[0].allocate_code()
    ws[1].set_code(await ws[0].get_code())
    statuses = ([], [])
    hints = ([], [])
    ds = await asyncio.gather(*(
        w.dilate(listen=listen, listen_addresses=["127.0.0.1"], side=side, on_status=st.append, nat=nat,
                 **dilate_kwargs)
        for w, side, st in zip(ws, sides, statuses, strict=True)))
    for d, seen in zip(ds, hints, strict=True):  # what each side publishes
        send = d.send_hints
        d.send_hints = lambda h, send=send, seen=seen: (seen.extend(h), send(h))
    await asyncio.wait_for(asyncio.gather(*(d.when_connected() for d in ds)), 60)

    async def close():
        await asyncio.gather(*(d.close() for d in ds))
        await asyncio.gather(*(w.close() for w in ws), return_exceptions=True)

    return ds, statuses, hints, close


async def bulk_both_ways(da, db, size: int, name: str = "blob") -> None:
    la, lb = da.listen(name), db.listen(name)

    async def accept_and_sink(listener):
        return await sink_blob(*await listener.accept())

    (r1, w1), (r2, w2) = await asyncio.gather(da.open(name), db.open(name))
    (mine1, ans1), (mine2, ans2), *_ = await asyncio.wait_for(asyncio.gather(
        send_blob(r1, w1, size), send_blob(r2, w2, size), accept_and_sink(la), accept_and_sink(lb)), 90)
    assert mine1 == ans1 and mine2 == ans2


def connected_paths(statuses) -> list[str]:
    return [s.path for s in statuses if s.state == "connected"]


async def test_no_tcp_path_dilation_runs_over_quic_on_the_punched_udp_path(wormhole_servers, tmp_path):
    async with running_relay(tmp_path) as server:
        (da, db), (sa, sb), _, close = await dilated_pair(wormhole_servers, server, listen=False,
                                                          transit=DEAD_RELAY)
        try:
            assert connected_paths(sa)[0].startswith("direct quic:")
            assert connected_paths(sb)[0].startswith("direct quic:")
            await bulk_both_ways(da, db, 8_000_000)
            assert da.counters["bad_connections"] == db.counters["bad_connections"] == 0
            # a QUIC Initial from an address that is no Disco candidate is refused and counted
            link = await db.disco_link()
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with stranger:
                stranger.sendto(b"\xc0\x00\x00\x00\x01" + bytes(1195), ("127.0.0.1", link.endpoint.port))
                for _ in range(100):  # bounded: the datagram crosses loopback
                    if link.endpoint.stats["quic_refused"]:
                        break
                    await asyncio.sleep(0.02)
            assert link.endpoint.stats["quic_refused"] == 1
            await bulk_both_ways(da, db, 1_000_000, "again")  # the real connection is unharmed
        finally:
            await close()


async def test_tcp_wins_when_it_connects_and_both_sides_offer_the_disco_hint(wormhole_servers, tmp_path):
    async with running_relay(tmp_path) as server:
        (da, db), (sa, sb), _, close = await dilated_pair(wormhole_servers, server, listen=True,
                                                          transit=wormhole_servers.transit_helper)
        try:
            async with asyncio.timeout(30):  # the relay may carry the first bytes; a direct TCP path takes over
                while not connected_paths(sa)[-1].startswith(("direct tcp:", "direct inbound")):
                    await asyncio.sleep(0.02)
            assert not any(p.startswith("direct quic:") for p in connected_paths(sa))
            await bulk_both_ways(da, db, 2_000_000)
            link = await da.disco_link()
            assert link is not None and link.hint()["type"] == HINT_TYPE
        finally:
            await close()


async def test_relay_is_left_for_quic_only_when_its_rate_probe_measures_it_faster(wormhole_servers, tmp_path):
    # no direct TCP (nobody listens): the relay wins, and the Leader's upgrade looks measure the punched UDP
    # path's QUIC rate against the relay's. A margin of 0 makes any measured QUIC rate the faster one, so the
    # transfer moves to QUIC mid-stream; no byte is lost
    async with running_relay(tmp_path) as server:
        (da, db), (sa, sb), _, close = await dilated_pair(
            wormhole_servers, server, listen=False, transit=wormhole_servers.transit_helper,
            upgrade_interval=0.3, quic_margin=0.0)
        try:
            leader, statuses = (da, sa) if da.leader else (db, sb)
            assert connected_paths(statuses)[0].startswith("relay tcp:")
            def on_quic() -> bool:
                return any(p.startswith("direct quic:") for p in connected_paths(statuses))

            sent, got = await paced_until(da, db, on_quic)
            assert sent == got
            assert on_quic(), (connected_paths(statuses), leader.counters, leader.rates)
            assert leader.counters["quic_probes"] >= 1 and leader.counters["upgrades"] == 1
            assert leader.rates["quic"] > 0 and leader.rates["relay"] > 0
            follower_link = await (db if leader is da else da).disco_link()
            assert follower_link.endpoint.stats["quic_probes"] >= 1
        finally:
            await close()


async def test_rate_probe_keeps_the_relay_when_quic_is_not_measured_faster(wormhole_servers, tmp_path):
    # the default margin: QUIC must move 1.25 times the relay's bytes per second; the relay stays unless a
    # probe measured that (whatever the rates, the path follows the rule)
    async with running_relay(tmp_path) as server:
        (da, db), (sa, sb), _, close = await dilated_pair(
            wormhole_servers, server, listen=False, transit=wormhole_servers.transit_helper, upgrade_interval=0.3)
        try:
            leader, statuses = (da, sa) if da.leader else (db, sb)
            sent, got = await paced_until(da, db, lambda: leader.counters["quic_probes"] >= 2 and leader.rates["quic"])
            assert sent == got
            # the last look's rates (read with the counter, no await between): the look that moved the
            # transfer, or one that kept it on the relay
            rates, upgraded = leader.rates, leader.counters["upgrades"] == 1
            faster = rates["relay"] is not None and rates["quic"] >= 1.25 * rates["relay"]
            assert upgraded == faster, (rates, connected_paths(statuses))
            if not upgraded:
                assert [p.startswith("relay tcp:") for p in connected_paths(statuses)] == [True]
        finally:
            await close()


def test_hint_round_trip_and_malformed_hints_are_ignored():
    h = make_hint("https://relay.example:8443", b"\1" * 32, b"\2" * 32, [("192.0.2.7", 41641)])
    assert parse_hint(h) == ("https://relay.example:8443", b"\1" * 32, b"\2" * 32, [("192.0.2.7", 41641)])
    odd = {**h, "endpoints": ["192.0.2.7:0", "x:1", 5, "[2001:db8::1]:5", "192.0.2.8:9"]}
    assert parse_hint(odd)[3] == [("192.0.2.8", 9)]  # bad endpoints are skipped, the hint still counts
    assert parse_hint({**h, "endpoints": "192.0.2.7:1"})[3] == []
    for bad in ({**h, "derp-key": "zz"}, {**h, "disco-key": "00"}, {**h, "url": 5}, {"type": HINT_TYPE}, "x",
                {**h, "type": "direct-tcp-v1"}):
        assert parse_hint(bad) is None
