"""Fixtures shared by every test package; the pieces behind them live in harness/."""

import os

import pytest

from harness.wormhole_servers import servers_kind, start_servers

# burrow clients started by tests on this host ask no router for a port mapping (NAT-PMP would go to the
# machine's real gateway); the NAT lab's peers (harness/natlab) drop this and use their lab router
os.environ.setdefault("BURROW_NO_PORTMAP", "1")


@pytest.fixture(scope="session")
def wormhole_servers(tmp_path_factory):
    """A mailbox + transit relay on 127.0.0.1: the reference ones unless BURROW_TEST_SERVERS=burrow."""
    kind = servers_kind()
    servers = start_servers(kind, tmp_path_factory.mktemp(f"servers-{kind}"))
    yield servers
    servers.stop()
