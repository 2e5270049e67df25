"""The transit relay's modules import each other without a cycle, type-only imports included, and the
pieces a connection uses know the server only through transit_relay/interfaces.py."""

from __future__ import annotations

from harness.imports import find_cycle, import_graph, imports_of


def graph() -> dict[str, set[str]]:
    return import_graph("transit_relay")


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_layers():
    deps = graph()
    assert deps["protocol"] == set()  # the sans-IO core imports nothing of the relay
    for module in ("websocket", "forwarding", "interfaces"):
        assert "server" not in deps[module], f"{module} must use the interfaces, not the server"


def test_the_cycle_check_can_fail(tmp_path):
    # the walker sees type-only imports, so a cycle hidden under TYPE_CHECKING would be caught
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from burrow.transit_relay.server import X\n"
    (tmp_path / "m.py").write_text(src)
    assert "server" in imports_of(tmp_path / "m.py", "m", "burrow.transit_relay.")
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
