"""Every test here runs in the NAT lab (harness/natlab): root, network namespaces, iptables, miniupnpd.
They carry the `natlab` marker so `-m "not natlab"` leaves them out where root is not available."""

import pytest

from harness.natlab.rig import Lab, missing_requirements


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/natlab/" in str(item.path):
            item.add_marker(pytest.mark.natlab)


@pytest.fixture
def lab(tmp_path):
    problem = missing_requirements()
    if problem:
        pytest.fail(problem)
    with Lab(tmp_path) as lab:
        yield lab
