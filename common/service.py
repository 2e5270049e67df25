"""Start-up and shutdown shared by the servers' `__main__` modules.

`run_until_signalled(start, stop)` runs `start()`, waits for SIGINT or SIGTERM, then runs `stop()`
(which drains gracefully: e.g. the packet relay sends Restarting to every client first).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
from collections.abc import Awaitable, Callable


def raise_nofile_limit(wanted: int = 65536) -> int:
    """Raise the soft open-files limit towards `wanted` (relays hold many sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft


# libraries that log every connection at INFO; a server's log says what the service does, the event log
# and the metrics count connections
CHATTY_LOGGERS = ("websockets.server", "websockets.client", "aiohttp.access")


def setup_logging(verbose: bool = False) -> None:
    """INFO for start-up, shutdown and trouble; DEBUG (the configuration, every connection) with --verbose."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


async def run_until_signalled(start: Callable[[], Awaitable[None]],
                              stop: Callable[[], Awaitable[None]],
                              extra_signals: dict[int, Callable[[], None]] | None = None) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    for sig, handler in (extra_signals or {}).items():
        loop.add_signal_handler(sig, handler)
    await start()
    try:
        await stopping.wait()
    finally:
        await stop()
