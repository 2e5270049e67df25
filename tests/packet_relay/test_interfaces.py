"""The packet relay's modules import each other without a cycle, type-only imports included; the
pieces a connection uses know the server only through packet_relay/interfaces.py; and the objects
that implement those interfaces really have every member they declare."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from burrow.packet_relay import interfaces
from burrow.packet_relay.conn import RelayConn
from burrow.packet_relay.iroh.conn import IrohConn
from burrow.packet_relay.iroh.service import IrohService

from .derp_util import running_relay

PACKAGE = Path(__file__).resolve().parents[2] / "packet_relay"
PREFIX = "burrow.packet_relay."


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Modules of the package that `path` (module `name`) imports, at run time or under TYPE_CHECKING."""
    package = name.split(".")[:-1] if not path.name == "__init__.py" else name.split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                targets = [node.module] if node.module else [a.name for a in node.names]
                found.update(".".join([*base, t]) for t in targets)
                if node.module:  # `from .pkg import module` names a module too
                    found.update(".".join([*base, node.module, a.name]) for a in node.names)
            elif node.module and node.module.startswith(PREFIX):
                found.add(node.module[len(PREFIX):])
                found.update(node.module[len(PREFIX):] + "." + a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name[len(PREFIX):] for a in node.names if a.name.startswith(PREFIX))
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = {n.removesuffix(".__init__") for n in paths}
    return {n.removesuffix(".__init__"): imports_of(p, n.removesuffix(".__init__")) & modules - {n}
            for n, p in paths.items()}


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
    for module in ("conn", "peer", "http_routes", "interfaces", "iroh.conn", "iroh.service", "registry", "mesh",
                   "mesh_table", "mesh_session"):
        assert "server" not in deps[module], f"{module} must use the interfaces, not the server"
    assert not {"conn", "peer", "http_routes", "iroh.conn", "iroh.service"} & deps["interfaces"]


def test_the_cycle_check_can_fail(tmp_path):
    # the walker sees type-only and relative imports, so a cycle hidden under TYPE_CHECKING is caught
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..server import X\n"
    (tmp_path / "m.py").write_text(src)
    assert "server" in imports_of(tmp_path / "m.py", "iroh.m")


def members(proto: type) -> set[str]:
    """Every attribute and method a Protocol declares, its bases' included."""
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls in (typing.Protocol, typing.Generic, object) or not getattr(cls, "_is_protocol", False):
            continue
        names.update(cls.__dict__.get("__annotations__", {}))
        names.update(k for k, v in cls.__dict__.items() if callable(v) or isinstance(v, property))
    return {n for n in names if not n.startswith("_")}


def missing(obj: object, proto: type) -> set[str]:
    return {n for n in members(proto) if not hasattr(obj, n)}


async def test_the_server_and_its_parts_have_what_the_interfaces_declare(tmp_path):
    async with running_relay(tmp_path) as server:
        for proto in (interfaces.DerpHost, interfaces.IrohHost, interfaces.RouteHost, interfaces.PeerHost,
                      interfaces.MeshHost):
            assert missing(server, proto) == set(), proto.__name__
        assert missing(server.iroh, interfaces.IrohConnHost) == set()
        assert isinstance(server.iroh, IrohService)
    # connections: the class must provide every member (slots count as attributes of the class)
    for cls, proto in ((RelayConn, interfaces.HttpConnection), (RelayConn, interfaces.RegistryPeer),
                       (RelayConn, interfaces.ClosedConnection), (IrohConn, interfaces.RegistryPeer),
                       (IrohConn, interfaces.ClosedConnection)):
        assert missing(cls, proto) == set(), (cls.__name__, proto.__name__)
    assert members(interfaces.DerpHost) >= {"registry", "mark_dirty", "loop", "extra_routes"}
