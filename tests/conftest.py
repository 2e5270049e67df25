"""Fixtures shared by every test package; the pieces behind them live in harness/."""

import pytest

from harness.wormhole_servers import servers_kind, start_servers


@pytest.fixture(scope="session")
def wormhole_servers(tmp_path_factory):
    """A mailbox + transit relay on 127.0.0.1: the reference ones unless BURROW_TEST_SERVERS=burrow."""
    kind = servers_kind()
    servers = start_servers(kind, tmp_path_factory.mktemp(f"servers-{kind}"))
    yield servers
    servers.stop()
