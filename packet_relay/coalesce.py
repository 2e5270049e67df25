"""Wake-up coalescing (`--wake-coalesce-us`): at most one event-loop wake-up per window while traffic flows.

At a modest steady rate every arriving burst wakes the relay on its own: one poll, one read and TLS
record in, one TLS record and send out, shared by the few packets of that burst. With a window W the
loop's selector, woken less than W after its previous wake-up, first sleeps out the rest of W, so one
wake-up reads everything that arrived from every client meanwhile and the flush after it sends one TLS
record per receiver for all of it. The price is latency: a packet waits up to W longer. Nothing else
changes: every socket is still read in full each pass, queues and their bounds are the same.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable

MAX_WINDOW_US = 10_000  # a window this long already costs more latency than a tunnel should see


class CoalescingSelector(selectors.DefaultSelector):
    """A selector whose select() returns no sooner than `window` seconds after the last one that had events.

    It never delays a pass the loop wants at once (timeout 0: callbacks are ready) and never sleeps
    past the loop's own timeout (the next timer)."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._sleep = sleep
        self._not_before = 0.0

    def select(self, timeout: float | None = None):
        if timeout is None or timeout > 0:
            wait = self._not_before - self._clock()
            if wait > 0:
                if timeout is not None:
                    wait = min(wait, timeout)
                    timeout -= wait
                self._sleep(wait)
        ready = super().select(timeout)
        if ready:
            self._not_before = self._clock() + self.window
        return ready


def loop_factory(window_us: int) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop for `--wake-coalesce-us` (0: asyncio's own)."""
    if not window_us:
        return asyncio.new_event_loop
    if not 0 < window_us <= MAX_WINDOW_US:
        raise ValueError(f"--wake-coalesce-us must be between 0 and {MAX_WINDOW_US}")
    return lambda: asyncio.SelectorEventLoop(CoalescingSelector(window_us / 1e6))
