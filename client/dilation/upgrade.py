"""The search for a better path while a generation runs over the transit relay (peers that list upgrade-v1):
relay-first generations keep their own direct attempts going behind the relay for a while (take_direct,
end_search); then the Leader probes the peer's direct TCP hints and measures a punched UDP path's QUIC rate
against the relay's (look_for_direct).

in:  the runtime (runtime.Dilation) with its selected relayed connection, the generation's Connector
out: the relayed connection dropped when a better path exists (the next generation races again, and L4
     re-sends every unacknowledged record on the winner, so no byte is lost); counters and rates updated
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .l2protocol import L2Protocol
from .transport import Connector, probe_direct

if TYPE_CHECKING:
    from .runtime import Dilation

log = logging.getLogger(__name__)

PROBE_PUNCH_TIMEOUT = 3.0  # seconds an upgrade look waits for a direct UDP path before its QUIC rate probe
MIN_RATE_BYTES = 1024 * 1024  # bytes the relay must have moved since the last look for its rate to count
# seconds a relay-first generation searches for a direct path behind its relayed connection (the Follower a
# little longer: the Leader decides, and the Follower's half of the new connection must still be there)
SEARCH_BEHIND = 10.0
FOLLOWER_SEARCH_MARGIN = 5.0


async def look_for_direct(d: Dilation, p: L2Protocol, connector: Connector) -> None:
    """Leader over the relay: on the policy's schedule, probe the peer's direct hints, then (with a DERP
    relay on both sides) measure a punched UDP path's QUIC rate against the relay's observed rate. When a
    direct TCP hint connects, or QUIC is measured faster, drop the relayed connection: the next generation
    races again (direct TCP wins at once; a measured-faster QUIC beats the relay), and L3 re-sends every
    unacknowledged record on it, so the subchannels lose no byte."""
    policy, loop = d._upgrade, asyncio.get_running_loop()
    mark = (loop.time(), p.moved)
    while d.connection is p and policy.next_probe() is not None:
        await asyncio.sleep(max(0.0, policy.next_probe() - loop.time()))
        if d.connection is not p or not policy.due(loop.time()):
            continue
        now = loop.time()
        moved = p.moved - mark[1]  # the relay's rate since the last look; too few bytes: not known
        relay_rate = moved / (now - mark[0]) if moved >= MIN_RATE_BYTES and now > mark[0] else None
        if await probe_direct(connector.peer_direct) and d.connection is p and policy.better(quic=False):
            log.info("dilation: a direct path answers; leaving %s for a new generation", p.attempt.description)
            d.counters["upgrades"] += 1
            p.drop()
            return
        quic_rate = await probe_quic(d)
        d.rates = {"relay": relay_rate, "quic": quic_rate}
        if quic_rate is not None and d.connection is p and policy.better(
                quic=True, candidate_rate=quic_rate, current_rate=relay_rate):
            log.info("dilation: QUIC measured %.0f B/s against the relay's %.0f; leaving %s", quic_rate,
                     relay_rate, p.attempt.description)
            d._prefer_quic = True
            d.counters["upgrades"] += 1
            p.drop()
            return
        mark = (loop.time(), p.moved)


async def probe_quic(d: Dilation) -> float | None:
    """Bytes per second of a bounded QUIC burst on the punched UDP path to the peer, or None (no DERP
    relay on both sides, no direct UDP path, or no answer in time)."""
    hint, disco = d._peer_disco, d._disco
    if hint is None or disco is None or not disco.done() or disco.cancelled() or disco.exception() is not None:
        return None
    link = disco.result()
    addr = await link.punch(hint, timeout=PROBE_PUNCH_TIMEOUT)
    if addr is None or d.connection is None:
        return None
    d.counters["quic_probes"] += 1
    return await link.measure(addr)


def take_direct(d: Dilation, c: Connector, p: L2Protocol) -> None:
    """Leader, relay-first: a direct attempt completed its handshake behind the relayed connection. Leave
    the relay once: the next generation adopts this attempt and selects it at once, and L4 re-sends every
    unacknowledged record on it. Refused (the relay runs on) past UpgradePolicy's moves."""
    cur = d.connection
    if c is not d._probed or cur is None or cur is not c.winner or not d._upgrade.better(quic=False):
        return
    log.info("dilation: %s is ready; leaving %s for it", p.attempt.description, cur.attempt.description)
    d.counters["upgrades"] += 1
    cur.drop()


def end_search(d: Dilation, c: Connector) -> None:
    """The relay-first search found nothing in time: stop dialling (a Follower keeps its listeners for the
    Leader's upgrade probes, as after any relayed win)."""
    if d._probed is c and c.searching:
        c.stop(keep=c.winner)
        if not (c.keep_listening and c.winner is d.connection):
            c.close_listeners()
            d._probed = None
