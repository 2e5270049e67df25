"""The packet relay's modules import each other without a cycle, type-only imports included; the
pieces a connection uses know the server only through packet_relay/interfaces.py; and the objects
that implement those interfaces really have every member they declare."""

from __future__ import annotations

import typing

from burrow.packet_relay import interfaces
from burrow.packet_relay.conn import RelayConn
from burrow.packet_relay.iroh.conn import IrohConn
from burrow.packet_relay.iroh.service import IrohService
from harness.imports import find_cycle, import_graph, imports_of

from .derp_util import running_relay


def graph() -> dict[str, set[str]]:
    return import_graph("packet_relay")


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


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
    assert "server" in imports_of(tmp_path / "m.py", "iroh.m", "burrow.packet_relay.")


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
