"""Wake-up coalescing: while traffic is dense, the relay wakes up less often and serves more per wake-up.

At a modest steady rate every arriving burst wakes the relay on its own: one poll, one read and TLS
record in, one TLS record and send out, shared by the few packets of that burst. Holding the loop's poll
for a moment after such a wake-up lets the next one read everything that arrived from every client
meanwhile, and the flush after it sends one TLS record per receiver for all of it. The price is latency:
a packet that arrives during the hold waits for it.

- adaptive (the default): the poll is held only after a wake-up that forwarded at least DENSE_PACKETS
  packets, and only as long as the rate seen then needs to gather about TARGET_PACKETS, at most
  ADAPTIVE_WINDOW_US. A ping, a ping-pong flow or any sparse traffic (a few packets per wake-up) is never
  held; a saturated relay is not either (its wake-ups already carry more than the target).
- a fixed window (`--wake-coalesce-us W`): every wake-up with events is followed by a hold to W.
- `--wake-coalesce-us 0`: asyncio's own loop, never held.

A pass that follows a hold polls once: while it runs the loop asks again without blocking (its own
callbacks, the flush of what it read, are ready), and answering would read each sender again and flush
again for the few packets that arrived meanwhile, the per-wake-up cost once more. Those polls are answered
with nothing until the pass has run for the window; what arrived waits for the next wake-up, as it would
have had it arrived just before this pass polled.

Nothing else changes: every socket is still read in full each pass, queues and their bounds are the same.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable

MAX_WINDOW_US = 10_000  # a window this long already costs more latency than a tunnel should see
ADAPTIVE_WINDOW_US = 4_000  # the longest adaptive hold
DENSE_PACKETS = 16  # a wake-up that forwarded fewer is sparse traffic: the next poll is not held
TARGET_PACKETS = 128  # what a held wake-up should gather: the per-wake-up cost is then small per packet


class CoalescingSelector(selectors.DefaultSelector):
    """A selector that, before a poll that would block, sleeps until the hold after the last wake-up ends.

    It never delays a pass the loop wants at once (timeout 0: callbacks are ready) and never sleeps past
    the loop's own timeout (the next timer). `adaptive`: the hold follows the traffic (see the module
    text) as counted by `packets()`, the relay's forwarded-packet total (set by `attach`; without it the
    adaptive selector never holds)."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, *, adaptive: bool = False) -> None:
        super().__init__()
        self.window = window
        self.adaptive = adaptive
        self.packets: Callable[[], int] | None = None
        self.holds = 0  # polls delayed
        self.deferred = 0  # polls without blocking answered with nothing in a pass that followed a hold
        self._clock = clock
        self._sleep = sleep
        self._not_before = 0.0
        self._woke = 0.0  # when the last poll that could block returned: the start of the current pass
        self._held = False  # whether the current pass followed a hold
        self._cycle_start = 0.0  # when the previous pass ended (the loop was about to block), and
        self._cycle_count = 0  # the forwarded total then

    def select(self, timeout: float | None = None):
        if timeout is not None and timeout <= 0:
            if self._held and self._clock() < self._woke + self.window:
                self.deferred += 1
                return []
            ready = super().select(timeout)
        else:
            wait = (self._adaptive_until() if self.adaptive else self._not_before) - self._clock()
            self._held = wait > 0
            if wait > 0:
                if timeout is not None:
                    wait = min(wait, timeout)
                    timeout -= wait
                self.holds += 1
                self._sleep(wait)
            ready = super().select(timeout)
            self._woke = self._clock()
        if ready:
            self._not_before = self._clock() + self.window
        return ready

    def _adaptive_until(self) -> float:
        """The end of the hold after the pass now ending: none unless DENSE_PACKETS or more were forwarded
        since the previous pass ended; then long enough for TARGET_PACKETS at that rate, counted from
        the pass's start (a pass that outlasts it is not followed by a hold), at most the window."""
        if self.packets is None:
            return 0.0
        now, count = self._clock(), self.packets()
        n, elapsed = count - self._cycle_count, now - self._cycle_start
        self._cycle_start, self._cycle_count = now, count
        if n < DENSE_PACKETS:
            return 0.0
        return self._woke + min(self.window, TARGET_PACKETS * elapsed / n)


def loop_factory(window_us: int | None) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop for `--wake-coalesce-us`: None adaptive, 0 asyncio's own, else that fixed window."""
    if window_us is None:
        return lambda: asyncio.SelectorEventLoop(CoalescingSelector(ADAPTIVE_WINDOW_US / 1e6, adaptive=True))
    if not window_us:
        return asyncio.new_event_loop
    if not 0 < window_us <= MAX_WINDOW_US:
        raise ValueError(f"--wake-coalesce-us must be between 0 and {MAX_WINDOW_US}")
    return lambda: asyncio.SelectorEventLoop(CoalescingSelector(window_us / 1e6))


def attach(loop: asyncio.AbstractEventLoop, packets: Callable[[], int]) -> CoalescingSelector | None:
    """Give a coalescing loop's selector the relay's forwarded-packet total (what adaptive holds follow);
    returns the selector, or None on any other loop."""
    selector = getattr(loop, "_selector", None)  # asyncio.SelectorEventLoop keeps its selector here
    if not isinstance(selector, CoalescingSelector):
        return None
    selector.packets = packets
    return selector
