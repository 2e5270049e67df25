"""burrow-transit: parse flags and environment, start the relay, run until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from burrow.common.config import describe, load_config
from burrow.common.service import raise_nofile_limit, run_until_signalled, setup_logging, startup_errors
from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.server import TransitServer


def main(argv: list[str] | None = None) -> None:
    config = load_config(TransitConfig, "transit", sys.argv[1:] if argv is None else argv)
    setup_logging(config.verbose)
    raise_nofile_limit()
    logging.getLogger("burrow.transit").debug("configuration:\n%s", describe(config))
    with startup_errors("burrow-transit"):
        server = TransitServer(config)
        asyncio.run(run_until_signalled(server.start, server.stop))


if __name__ == "__main__":
    main()
