"""burrow-relay: parse flags, start the relay, run until SIGINT/SIGTERM; SIGHUP reloads the allow-list."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from burrow.common.config import describe, load_config
from burrow.common.service import raise_nofile_limit, run_until_signalled, setup_logging, startup_errors

from .coalesce import loop_factory
from .config import RelayConfig
from .server import RelayServer

log = logging.getLogger("packet_relay")


def main(argv: list[str] | None = None) -> None:
    config = load_config(RelayConfig, "relay", sys.argv[1:] if argv is None else argv)
    setup_logging(config.verbose)
    raise_nofile_limit()
    log.debug("configuration:\n%s", describe(config))
    with startup_errors("burrow-relay"):
        factory = loop_factory(config.wake_coalesce_us)
        server = RelayServer(config)
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run_until_signalled(server.start, server.stop, {signal.SIGHUP: server.reload}))


if __name__ == "__main__":
    main()
