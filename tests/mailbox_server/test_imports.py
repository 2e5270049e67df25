"""The mailbox package's modules import each other without a cycle, type-only imports included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mailbox_server"


def imports_of(path: Path) -> set[str]:
    """Sibling modules `path` imports, at run time or under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(a.name for a in node.names)
            elif node.module and node.module.startswith("burrow.mailbox_server."):
                found.add(node.module.split(".")[2])
    return found


def test_no_import_cycle():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph = {p.stem: imports_of(p) & modules for p in PACKAGE.glob("*.py")}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, "import cycle: " + " -> ".join([*path[path.index(name):], name])
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert graph["protocol"].isdisjoint({"store", "server", "wsconn", "metrics"})
