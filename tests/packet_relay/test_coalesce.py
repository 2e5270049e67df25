"""Wake-up coalescing: the selector sleeps out the window after a wake-up, never past the loop's timeout
nor when callbacks are ready, and a relay running on it forwards every packet in order. By default
(adaptive) it holds only after wake-ups that forwarded many packets: a ping-pong flow is never held, a
dense flow is."""

import asyncio
import contextlib
import socket
import threading

import pytest
from prometheus_client import generate_latest

from burrow.packet_relay.coalesce import DENSE_PACKETS, TARGET_PACKETS, CoalescingSelector, loop_factory
from burrow.wire.derp import frames as f

from .derp_util import TIMEOUT, RawClient, client, running_relay


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_selector_waits_out_the_window_within_the_loop_timeout():
    clock = FakeClock()
    a, b = socket.socketpair()
    sel = CoalescingSelector(0.002, clock=clock, sleep=clock.sleep)
    try:
        sel.register(a, 1)  # EVENT_READ
        b.send(b"x")
        assert sel.select(None) and clock.slept == []      # the first wake-up is not delayed
        clock.now += 0.0005
        assert sel.select(None) and clock.slept == [pytest.approx(0.0015)]  # the rest of the window
        assert sel.select(0) == [] and len(clock.slept) == 1  # callbacks ready: never delayed (a held
        clock.now += 0.001                                 # pass does not poll again within the window)
        assert sel.select(0.0005) and clock.slept[-1] == pytest.approx(0.0005)  # a timer due first wins
        a.recv(10)
        clock.now += 0.01                                  # quiet for longer than the window
        assert sel.select(0.0) == [] and len(clock.slept) == 2
        assert sel.select(0.001) == [] and len(clock.slept) == 2  # no wake-up with events: no sleep
        assert all(s <= 0.002 for s in clock.slept)
    finally:
        sel.close()
        a.close()
        b.close()


@contextlib.contextmanager
def adaptive_selector():
    """An adaptive selector with a 3 ms window on a fake clock, counting `forwarded[0]`, and a socket of
    it readable."""
    clock = FakeClock()
    forwarded = [0]
    a, b = socket.socketpair()
    sel = CoalescingSelector(0.003, clock=clock, sleep=clock.sleep, adaptive=True)
    sel.packets = lambda: forwarded[0]
    try:
        sel.register(a, 1)  # EVENT_READ
        b.send(b"x")
        yield sel, clock, forwarded
    finally:
        sel.close()
        a.close()
        b.close()


def test_adaptive_selector_holds_only_after_dense_passes_and_for_the_rate_seen():
    with adaptive_selector() as (sel, clock, forwarded):
        for _ in range(3):                                 # sparse: fewer than DENSE_PACKETS per pass
            assert sel.select(None)
            forwarded[0] += DENSE_PACKETS - 1
            clock.now += 0.0002
        assert sel.holds == 0 and clock.slept == []
        assert sel.select(None)                            # a pass starts at t0
        t0 = clock.now
        forwarded[0] += TARGET_PACKETS // 3                # a third of the target in 2 ms: the window caps it
        clock.now += 0.002
        assert sel.select(None) and clock.slept == [pytest.approx(0.001)]  # until t0 + 3 ms
        forwarded[0] += 2 * TARGET_PACKETS                 # twice the target in 1.2 ms: a 0.6 ms hold
        clock.now += 0.0002
        assert sel.select(None) and clock.slept[-1] == pytest.approx(t0 + 0.0036 - (t0 + 0.0032))
        forwarded[0] += 50 * TARGET_PACKETS                # saturated: the pass outlasts its hold
        clock.now += 0.002
        assert sel.select(None) and len(clock.slept) == 2 and sel.holds == 2
        forwarded[0] += TARGET_PACKETS
        assert sel.select(0) and len(clock.slept) == 2     # callbacks ready: never delayed
        assert all(s <= 0.003 for s in clock.slept)
        sel.packets = None                                 # not attached to a relay: never holds
        forwarded[0] += 10 * TARGET_PACKETS
        assert sel.select(None) and sel.holds == 2


def test_a_pass_after_a_hold_polls_once_within_the_window():
    """Data that arrives while a held pass runs waits for the next wake-up: the loop's polls without
    blocking (its flush is ready) get nothing until the pass has run for the window; a pass that followed
    no hold polls as asked."""
    with adaptive_selector() as (sel, clock, forwarded):
        assert sel.select(None)                            # a sparse pass: not held
        assert sel.select(0) and sel.deferred == 0         # its polls without blocking see the data
        forwarded[0] += DENSE_PACKETS
        clock.now += 0.001
        assert sel.select(None) and sel.holds == 1         # a dense pass: the next poll was held
        clock.now += 0.001
        assert sel.select(0) == [] and sel.select(0.0) == [] and sel.deferred == 2  # readable, not polled
        clock.now += 0.002                                 # the pass has run for the window
        assert sel.select(0) and sel.deferred == 2


def test_window_is_bounded():
    assert loop_factory(0) is asyncio.new_event_loop
    for bad in (-1, 10_001):
        with pytest.raises(ValueError, match="wake-coalesce-us"):
            loop_factory(bad)


def test_relay_on_a_coalescing_loop_forwards_every_packet_in_order(tmp_path):
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        __import__("time").sleep(seconds)

    async def scenario() -> None:
        async with running_relay(tmp_path, wake_coalesce_us=2000) as server:
            a, b = await client(server), await client(server)
            for i in range(300):
                await a.send(b.public_key, i.to_bytes(2, "big") * 600)
            got = [await b.recv(TIMEOUT) for _ in range(300)]
            assert [int.from_bytes(p[:2], "big") for _, p in got] == list(range(300))
            assert sum(n for (proto, _), n in server.stats.drops.items() if proto == "derp") == 0
            await a.close()
            await b.close()

    runner = asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(CoalescingSelector(0.002, sleep=sleep)))
    with runner:
        runner.run(scenario())
    assert slept and max(slept) <= 0.002



@contextlib.contextmanager
def relay_in_its_own_thread(tmp_path):
    """The relay on the default (adaptive) loop in a thread of its own, as in its own process: its passes
    are its own work only, while the clients run on the test's loop."""
    up, box = threading.Event(), {}

    async def serve() -> None:
        async with running_relay(tmp_path) as server:
            box["server"], box["stop"], box["loop"] = server, asyncio.Event(), asyncio.get_running_loop()
            up.set()
            await box["stop"].wait()

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory(None)) as runner:
                runner.run(serve())
        finally:
            up.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert up.wait(TIMEOUT) and "server" in box
    try:
        yield box["server"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(TIMEOUT)


def test_adaptive_default_never_holds_a_ping_pong_flow_and_holds_a_dense_one(tmp_path):
    """200 single-packet round trips through the relay's default loop are never held; bursts of 32 packets
    (4 senders in turn) are, and every packet arrives in order."""

    async def scenario(server) -> None:
        sel = server.coalescing
        a, b = await client(server), await client(server)
        for i in range(200):
            await a.send(b.public_key, i.to_bytes(2, "big") * 600)
            src, got = await b.recv(TIMEOUT)
            await b.send(src, got)
            assert await a.recv(TIMEOUT) == (b.public_key, got)
        assert server.stats.forwarded() == 400 and sel.holds == 0 and sel.deferred == 0
        senders = [await RawClient.open(server) for _ in range(4)]
        receivers = [await client(server) for _ in range(4)]
        # A burst of 32 read in one pass is dense (>= DENSE_PACKETS) and short of the target, so the next poll
        # is held; a burst the kernel splits into sparse reads is not, hence a bounded number of rounds.
        rounds = 0
        while rounds < 10 or (sel.holds == 0 and rounds < 200):
            s, r = senders[rounds % 4], receivers[rounds % 4]
            s.writer.write(b"".join(f.header(f.SEND_PACKET, 32 + 1200) + r.public_key + i.to_bytes(2, "big") * 600
                                    for i in range(32)))
            got = [await r.recv(TIMEOUT) for _ in range(32)]
            assert [int.from_bytes(p[:2], "big") for _, p in got] == list(range(32))
            rounds += 1
        assert sel.holds > 0 and sel.deferred > 0  # a held pass flushes without polling again
        assert server.stats.forwarded() == 400 + rounds * 32
        scrape = generate_latest(server.prometheus).decode()
        assert f"burrow_relay_wake_holds_total {float(sel.holds)}" in scrape
        for c in (a, b, *receivers):
            await c.close()
        for s in senders:
            s.close()

    with relay_in_its_own_thread(tmp_path) as server:
        assert server.config.wake_coalesce_us is None
        asyncio.run(scenario(server))
