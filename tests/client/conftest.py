"""Fixtures for client tests: a mailbox + transit relay on 127.0.0.1 (reference servers by default).

Set BURROW_CLIENT_TEST_SERVERS=burrow to run the same tests through our mailbox_server/transit_relay.
"""

import os

import pytest

from tests.client.servers import start_servers


@pytest.fixture(scope="session")
def wormhole_servers(tmp_path_factory):
    kind = os.environ.get("BURROW_CLIENT_TEST_SERVERS", "reference")
    servers = start_servers(kind, tmp_path_factory.mktemp(f"servers-{kind}"))
    yield servers
    servers.stop()
