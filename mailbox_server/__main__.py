"""`burrow-mailbox` / `python -m burrow.mailbox_server`: parse the configuration and run until signalled."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

from burrow.common.config import describe, load_config
from burrow.common.service import raise_nofile_limit, run_until_signalled, setup_logging, startup_errors

from .config import MailboxConfig
from .server import MailboxServer


async def _run(config: MailboxConfig) -> None:
    server = MailboxServer(config)

    async def start() -> None:
        port = await server.start()
        # one parseable line so scripts and tests that pass --port 0 learn the real port
        print(f"mailbox listening on port {port} admin port {server.admin_port}", flush=True)

    await run_until_signalled(start, server.stop)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop `--loop` names: uvloop (libuv: fewer Python steps per wake-up and system call, which
    dominate at a client's pace) or asyncio's own."""
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    raise ValueError(f"--loop must be uvloop or asyncio, not {name!r}")


def main(argv: list[str] | None = None) -> None:
    config = load_config(MailboxConfig, "mailbox", argv)
    setup_logging(config.verbose)
    logging.getLogger("mailbox_server").debug("configuration:\n%s", describe(config))
    raise_nofile_limit()
    with startup_errors("burrow-mailbox"):
        with asyncio.Runner(loop_factory=loop_factory(config.loop)) as runner:
            runner.run(_run(config))
    sys.exit(0)


if __name__ == "__main__":
    main()
