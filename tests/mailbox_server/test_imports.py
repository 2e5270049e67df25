"""The mailbox package's modules import each other without a cycle, type-only imports included."""

from __future__ import annotations

from harness.imports import find_cycle, import_graph


def test_no_import_cycle():
    graph = import_graph("mailbox_server")
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph) or [])
    assert graph["protocol"].isdisjoint({"store", "server", "wsconn", "metrics"})
