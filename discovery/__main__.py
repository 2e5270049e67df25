"""burrow-discovery: parse flags, start the discovery, run until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from burrow.common.config import describe, load_config
from burrow.common.service import run_until_signalled, setup_logging, startup_errors

from .config import DiscoveryConfig
from .server import DiscoveryServer

log = logging.getLogger("discovery")


def main(argv: list[str] | None = None) -> None:
    config = load_config(DiscoveryConfig, "discovery", sys.argv[1:] if argv is None else argv)
    setup_logging(config.verbose)
    log.debug("configuration:\n%s", describe(config))
    with startup_errors("burrow-discovery"):
        server = DiscoveryServer(config)
        asyncio.run(run_until_signalled(server.start, server.stop))


if __name__ == "__main__":
    main()
