import os

import pytest

from tests.client.servers import start_servers


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Mailbox + transit relay on 127.0.0.1: the reference ones unless BURROW_DILATION_SERVERS=burrow."""
    kind = os.environ.get("BURROW_DILATION_SERVERS", "reference")
    s = start_servers(kind, tmp_path_factory.mktemp(f"servers-{kind}"))
    yield s
    s.stop()
