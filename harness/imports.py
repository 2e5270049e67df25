"""A package's import graph read from its source (run-time and TYPE_CHECKING imports alike), for the tests
that keep the packages free of import cycles and keep connections away from their server module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(package: Path, path: Path) -> str:
    """`conn` for packet_relay/conn.py, `iroh.conn` for packet_relay/iroh/conn.py, `iroh` for its __init__."""
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def imports_of(path: Path, name: str, prefix: str) -> set[str]:
    """Names (relative to the package) that module `name` at `path` imports; `prefix` is the package's
    absolute import path with a trailing dot (`burrow.packet_relay.`)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                targets = [node.module] if node.module else [a.name for a in node.names]
                found.update(".".join([*base, t]) for t in targets)
                if node.module:  # `from .pkg import module` names a module too
                    found.update(".".join([*base, node.module, a.name]) for a in node.names)
            elif node.module and node.module.startswith(prefix):
                found.add(node.module[len(prefix):])
                found.update(node.module[len(prefix):] + "." + a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name[len(prefix):] for a in node.names if a.name.startswith(prefix))
    return found


def import_graph(folder: str) -> dict[str, set[str]]:
    """{module: modules of the same package it imports} for the repository folder installed as
    `burrow.<folder>`."""
    package = ROOT / folder
    prefix = f"burrow.{folder}."
    paths = {module_name(package, p): p for p in package.rglob("*.py")}
    return {n: imports_of(p, n, prefix) & set(paths) - {n} for n, p in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return None
        for dep in sorted(graph.get(name, ())):
            if cycle := visit(dep, [*path, name]):
                return cycle
        done.add(name)
        return None

    for name in sorted(graph):
        if cycle := visit(name, []):
            return cycle
    return None
