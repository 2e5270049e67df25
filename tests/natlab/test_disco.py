"""Disco hole punching in the NAT lab: two Disco endpoints (client/nat/disco.py), each in its own thread
inside its peer's namespace, know only each other's DERP and disco keys. They meet on the lab's
burrow-relay (DERP), learn their public addresses by STUN, and punch with CallMeMaybe over the relay
and pings over UDP: behind endpoint-independent NATs they find the direct path (each at the other's
NAT mapping); behind symmetric NATs nothing answers and the path stays the relay."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import pytest

from burrow.client.derp import DerpClient
from burrow.client.nat.disco import DiscoEndpoint
from burrow.client.nat.disco_paths import DIRECT, RELAY, Path
from burrow.wire import disco as d
from burrow.wire.derp.handshake import generate_private_key, public_key
from harness.natlab import services
from harness.natlab.rig import Lab, inside
from harness.natlab.topology import build

DIRECT_WAIT = 20.0  # seconds a peer waits for a direct path (an upper bound, not a measurement)
PUNCH_FOR = 3.0     # seconds of punching per CallMeMaybe in the symmetric case, which waits past it


@dataclass
class Keys:
    node: bytes
    disco: bytes

    @classmethod
    def new(cls) -> Keys:
        return cls(generate_private_key(), d.generate_private_key())


@dataclass
class Outcome:
    path: Path
    seconds: float  # from the CallMeMaybe (both peers on the relay) to the path reported
    mapped: tuple[str, int] | None
    stats: dict


async def _peer(host: str, me: Keys, other: Keys, call: bool, wait: float, ready: threading.Barrier,
                done: threading.Barrier) -> Outcome:
    derp = DerpClient(f"https://{host}:{services.RELAY_HTTPS}", me.node, insecure=True)
    await derp.start()
    ep = DiscoEndpoint(derp, me.disco, stun_server=(host, services.STUN_PORT), punch_for=PUNCH_FOR)
    try:
        await ep.start()
        peer = ep.add_peer(public_key(other.node), d.public_key(other.disco))  # keys only
        await asyncio.to_thread(ready.wait, 30)  # both on the relay before the first CallMeMaybe
        t0 = time.monotonic()
        if call:
            await ep.call(peer)
        try:
            path = await ep.wait_direct(peer, wait)
        except TimeoutError:
            path = ep.path(peer)
        seconds = time.monotonic() - t0
        await asyncio.to_thread(done.wait, wait + 30)  # keep answering until the other side is done too
        return Outcome(path, seconds, ep.mapped, dict(ep.stats))
    finally:
        await ep.close()
        await derp.close()


def punch(lab: Lab, scenario: str, wait: float) -> dict[str, Outcome]:
    topo = build(lab, scenario)
    servers = services.start_servers(lab, topo)
    keys = {"a": Keys.new(), "b": Keys.new()}
    ready, done = threading.Barrier(2), threading.Barrier(2)
    out: dict[str, Outcome | BaseException] = {}

    def run(name: str, other: str) -> None:
        try:
            with inside(topo.hosts[name].ns):
                out[name] = asyncio.run(_peer(servers.host, keys[name], keys[other], name == "a", wait,
                                                 ready, done))
        except BaseException as exc:  # reported by the test thread
            ready.abort()
            done.abort()
            out[name] = exc

    threads = [threading.Thread(target=run, args=pair, daemon=True) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(wait + 60)
    for name, res in out.items():
        if isinstance(res, BaseException):
            raise AssertionError(f"peer {name} failed") from res
    assert set(out) == {"a", "b"}, out
    return out


@pytest.mark.slow
def test_eim_nats_punch_a_direct_udp_path(lab):
    out = punch(lab, "eim", DIRECT_WAIT)
    a, b = out["a"], out["b"]
    assert a.mapped and b.mapped and a.mapped[0] != b.mapped[0], (a, b)  # two public addresses (two NATs)
    assert (a.path.kind, a.path.endpoint) == (DIRECT, b.mapped), (a, b)
    assert (b.path.kind, b.path.endpoint) == (DIRECT, a.mapped), (a, b)
    assert a.stats["call_me_maybe_sent"] >= 1 and b.stats["call_me_maybe_received"] >= 1, (a, b)


@pytest.mark.slow
def test_symmetric_nats_stay_on_the_relay(lab):
    out = punch(lab, "symmetric", PUNCH_FOR + 3.0)
    a, b = out["a"], out["b"]
    for me in (a, b):
        assert me.path.kind == RELAY, (a, b)
        assert me.stats["call_me_maybe_received"] >= 1 and me.stats["pings_sent"] >= 1, (a, b)
        assert me.stats.get("pongs_sent", 0) == 0, (a, b)  # no ping got through either NAT
