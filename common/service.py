"""Start-up and shutdown shared by the servers' `__main__` modules.

`startup_errors(prog)` turns what an operator can fix (port in use, unreadable file, bad value) into one
line on stderr and exit status 1 instead of a traceback.

`run_until_signalled(start, stop)` runs `start()`, freezes the start-up objects out of the garbage
collector, waits for SIGINT or SIGTERM, then runs `stop()`
(which drains gracefully: e.g. the packet relay sends Restarting to every client first).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import re
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator


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


def freeze_startup_objects() -> int:
    """Move everything alive now (modules, configuration, metrics: kept for the whole run) out of the
    cyclic garbage collector's reach; returns how many objects were frozen.

    A full collection walks every tracked object; after start-up that is some 50 000 objects and ~30 ms
    of CPU during which no connection is served, which shows as the pairing latency's tail. Frozen, a
    full collection only walks what was made since (connections, pairs). Garbage is collected first so
    that no unreachable cycle is kept forever."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


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
    freeze_startup_objects()  # a full collection then skips them instead of stalling connections
    try:
        await stopping.wait()
    finally:
        await stop()


def explain(exc: BaseException) -> str:
    """One line an operator can act on, for an error raised while a server starts."""
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        text = re.sub(r"error while attempting to bind on address \('([^']*)', (\d+)[^)]*\)",
                      lambda m: f"cannot listen on {m[1]}:{m[2]}", _strip_errno(exc))
        return f"{text} (another process has this port; choose another)"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot use {exc.filename}: {exc.strerror or exc}"
    return _strip_errno(exc) or type(exc).__name__


def _strip_errno(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, OSError) and exc.errno is not None and text.startswith(f"[Errno {exc.errno}] "):
        text = text[len(f"[Errno {exc.errno}] "):]
    return text


@contextlib.contextmanager
def startup_errors(prog: str) -> Iterator[None]:
    """Run a server's main body; an OSError or ValueError ends it with `PROG: error: ...` and status 1."""
    try:
        yield
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError) as exc:
        logging.getLogger(prog).debug("start-up failed", exc_info=True)
        print(f"{prog}: error: {explain(exc)}", file=sys.stderr, flush=True)
        sys.exit(1)
