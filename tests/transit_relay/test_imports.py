"""The transit relay's modules import each other without a cycle, type-only imports included, and the
pieces a connection uses know the server only through transit_relay/interfaces.py."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "transit_relay"
PREFIX = "burrow.transit_relay."


def imports_of(path: Path) -> set[str]:
    """Sibling modules `path` imports, at run time or under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.module and node.module.startswith(PREFIX):
                found.add(node.module[len(PREFIX):].split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name[len(PREFIX):].split(".")[0] for a in node.names if a.name.startswith(PREFIX))
    return found


def graph() -> dict[str, set[str]]:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    return {p.stem: imports_of(p) & modules for p in PACKAGE.glob("*.py")}


def test_no_import_cycle():
    deps = graph()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, "import cycle: " + " -> ".join([*path[path.index(name):], name])
        if name in done:
            return
        for dep in sorted(deps[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(deps):
        visit(name, [])


def test_layers():
    deps = graph()
    assert deps["protocol"] == set()  # the sans-IO core imports nothing of the relay
    for module in ("websocket", "forwarding", "interfaces"):
        assert "server" not in deps[module], f"{module} must use the interfaces, not the server"


def test_the_cycle_check_can_fail(tmp_path):
    # the walker sees type-only imports, so a cycle hidden under TYPE_CHECKING would be caught
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from burrow.transit_relay.server import X\n"
    (tmp_path / "m.py").write_text(src)
    assert imports_of(tmp_path / "m.py") == {"server"}
