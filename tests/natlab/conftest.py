"""Every test here runs in the NAT lab (harness/natlab): root, network namespaces, iptables, miniupnpd.
They carry the `natlab` marker so `-m "not natlab"` leaves them out where root is not available."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/natlab/" in str(item.path):
            item.add_marker(pytest.mark.natlab)
