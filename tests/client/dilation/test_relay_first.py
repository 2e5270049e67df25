"""Relay-first Dilation between burrow peers (relay-first-v1), with a real mailbox and transit relay on
127.0.0.1: the relay carries the first bytes, a direct path found behind it takes over in a new generation."""

from __future__ import annotations

import asyncio
import json

import pytest

from burrow.client.wormhole import Wormhole
from harness.dilation import paced_until

pytestmark = pytest.mark.timeout(120)

HINT_DELAY = 3.0  # seconds the Follower's direct hints are held back: past the 2 s head start of plain Dilation


def late_direct_hints(w: Wormhole, delay: float) -> None:
    """Send this wormhole's dilation messages that carry direct-tcp-v1 hints `delay` seconds late, as a peer
    whose only reachable address comes from a slow lookup (UPnP, STUN) would. The peer's wormhole delivers
    dilate-N in order, so later messages wait for them."""
    send, loop = w.send_phase, asyncio.get_running_loop()

    def send_phase(phase: str, plaintext: bytes) -> None:
        msg = json.loads(plaintext)
        if msg.get("type") == "connection-hints" and any(h.get("type") == "direct-tcp-v1" for h in msg["hints"]):
            loop.call_later(delay, send, phase, plaintext)
        else:
            send(phase, plaintext)

    w.send_phase = send_phase


async def dilated(wormhole_servers, *, follower_extensions=None, **kw):
    """A Leader that does not listen (side f...) and a listening Follower whose direct hints come late."""
    extra = {} if follower_extensions is None else {"burrow-dilation-extensions": follower_extensions}
    a = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, dilation=True)
    b = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, dilation=True,
                 versions_extra=extra)
    for w in (a, b):
        await w.open()
    a.allocate_code()
    b.set_code(await a.get_code())
    late_direct_hints(b, HINT_DELAY)
    statuses = ([], [])
    da, db = await asyncio.gather(
        a.dilate(listen=False, side="f" * 16, on_status=statuses[0].append, **kw),
        b.dilate(listen=True, listen_addresses=["127.0.0.1"], side="0" * 16, on_status=statuses[1].append, **kw))
    await asyncio.wait_for(asyncio.gather(da.when_connected(), db.when_connected()), 30)

    async def close():
        await asyncio.gather(da.close(), db.close())
        await asyncio.gather(a.close(), b.close(), return_exceptions=True)

    return da, db, statuses, close


def paths(statuses) -> list[str]:
    return [s.path for s in statuses if s.state == "connected"]


async def test_relay_carries_the_first_bytes_and_a_late_direct_path_takes_over_without_loss(wormhole_servers):
    # the direct hint arrives after the relay won: plain Dilation stays on the relay (its next upgrade look
    # is 30 s away); relay-first keeps searching behind the relay and moves once the direct path is ready
    da, db, (sa, sb), close = await dilated(wormhole_servers)
    try:
        assert paths(sa)[0].startswith("relay tcp:")
        def moved() -> bool:
            return paths(sa)[-1].startswith("direct")

        sent, got = await paced_until(da, db, moved)
        assert sent == got
        assert moved(), (paths(sa), da.counters)
        assert da.counters["upgrades"] == 1 and da.counters["connections"] == 2
        assert [p.split(" ")[0] for p in paths(sb)] == ["relay", "direct"]  # taken once: no flapping back
    finally:
        await close()


async def test_without_relay_first_on_the_peer_the_head_start_stays(wormhole_servers):
    # a peer that lists upgrade-v1 but not relay-first-v1 (as a magic-wormhole peer lists neither): no search
    # behind the relay, so the late direct hint only feeds the upgrade looks
    da, db, (sa, _sb), close = await dilated(wormhole_servers, follower_extensions=["stop-v1", "upgrade-v1"])
    try:
        await asyncio.sleep(HINT_DELAY + 1.0)
        assert [p.split(" ")[0] for p in paths(sa)] == ["relay"]
        assert da.counters["upgrades"] == 0
    finally:
        await close()
