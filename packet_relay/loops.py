"""The relay's event loop (`--event-loop`, `--wake-coalesce-us`).

uvloop (libuv, written in C) is the default: below saturation every wake-up pays the loop's own work (the
poll, dispatching each ready socket, the read, the write), and in asyncio's loop that is Python code run
once per wake-up and per socket. `--wake-coalesce-us` needs asyncio's selector loop (coalesce.py) and
uses it whatever `--event-loop` says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .coalesce import CoalescingSelector

MAX_WINDOW_US = 10_000  # a window this long already costs more latency than a tunnel should see
KINDS = ("uvloop", "asyncio")


def loop_factory(kind: str = "uvloop", window_us: int = 0) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop for `--event-loop KIND` and `--wake-coalesce-us WINDOW_US` (0: no coalescing)."""
    if kind not in KINDS:
        raise ValueError(f"--event-loop must be one of {', '.join(KINDS)}, not {kind!r}")
    if window_us:
        if not 0 < window_us <= MAX_WINDOW_US:
            raise ValueError(f"--wake-coalesce-us must be between 0 and {MAX_WINDOW_US}")
        return lambda: asyncio.SelectorEventLoop(CoalescingSelector(window_us / 1e6))
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop
