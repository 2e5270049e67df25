"""--wake-coalesce-us: the selector sleeps out the window after a wake-up, never past the loop's timeout
nor when callbacks are ready, and a relay running on it forwards every packet in order."""

import asyncio
import socket

import pytest

from burrow.packet_relay.coalesce import CoalescingSelector, loop_factory

from .derp_util import TIMEOUT, client, running_relay


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
        assert sel.select(0) and len(clock.slept) == 1     # callbacks ready: never delayed
        clock.now += 0.001
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
