"""The seams between the packet relay's modules, declared as typing.Protocols.

A client connection, an HTTP route or the iroh service never sees the whole RelayServer: each is
given the few attributes and calls it uses, named here. RelayServer (server.py) implements them all.
This module imports only configuration, counters, the registry, access control and the wire codecs,
never a connection or the server, so nothing that imports it can form a cycle through it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import Counter
from collections.abc import Callable, MutableSet
from typing import Protocol

from prometheus_client import CollectorRegistry

from burrow.common.limits import ConnectionCaps, TokenBucket
from burrow.wire.derp.handshake import ServerInfoJSON
from burrow.wire.http import Request

from .access import AccessControl
from .config import RelayConfig
from .registry import Registry, RegistryPeer
from .stats import RelayStats

__all__ = ["ClosedConnection", "DerpHost", "HttpConnection", "IrohConnHost", "IrohHost", "MeshHost", "PeerHost",
           "RegistryPeer", "Route", "RouteHost"]


class ClosedConnection(Protocol):
    """What the event log's `connection` line reads from a finished connection."""

    protocol: str
    kind: str
    started: float
    tls: object
    home: bool
    packets_in: int
    packets_out: int
    bytes_in: int
    bytes_out: int
    drops: dict[str, int] | None
    close_reason: str


class PeerHost(Protocol):
    """What the shared send side of every client connection (peer.py) needs from the relay."""

    config: RelayConfig
    stats: RelayStats
    caps: ConnectionCaps
    conns: MutableSet  # live connections, for graceful stop

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def mark_dirty(self, peer) -> None:
        """Flush `peer` once at the end of this loop pass (writes are batched)."""

    def connection_closed(self, conn: ClosedConnection) -> None:
        """Count the close and write the event-log line."""


class HttpConnection(Protocol):
    """A relay connection still in its HTTP phase, as a route sees it (conn.RelayConn)."""

    server: RouteHost
    transport: asyncio.Transport | None
    tls: object
    peer_ip: str
    phase: str
    paused: bool
    admitted_cap: bool

    def write_raw(self, data: bytes) -> None: ...
    def close(self, reason: str, abort: bool = False) -> None: ...
    def start_derp(self, kind: str, rest: bytes, ws) -> None: ...


Route = Callable[[HttpConnection, Request, bytes], None]


class RouteHost(PeerHost, Protocol):
    """What the HTTP routes (http_routes.py) read: counters, key, access and the extra routes."""

    public_key: bytes
    access: AccessControl
    extra_routes: dict[str, Route]
    stun_port: int


class DerpHost(RouteHost, Protocol):
    """What a DERP client connection (conn.py) needs: TLS, the handshake keys, the registry."""

    ssl_context: ssl.SSLContext | None
    private_key: bytes
    server_info: ServerInfoJSON
    registry: Registry

    def is_mesh_key(self, text: str) -> bool:
        """Whether a ClientInfo's meshKey is this relay's mesh key (constant time)."""

    def new_rate_bucket(self) -> TokenBucket | None:
        """A fresh per-client receive budget, or None when the rate limit is off."""


class IrohHost(PeerHost, Protocol):
    """What the iroh service and its connections (iroh/) need from the relay."""

    registry: Registry
    access: AccessControl
    extra_routes: dict[str, Route]
    prometheus: CollectorRegistry

    def new_rate_bucket(self) -> TokenBucket | None: ...


class MeshHost(Protocol):
    """What the mesh links (mesh.py) need: this relay's keys, the registry, the counters, batching."""

    private_key: bytes
    public_key: bytes
    mesh_key: bytes | None
    registry: Registry
    stats: RelayStats

    def mark_dirty(self, peer) -> None: ...


class IrohTimers(Protocol):
    """The iroh settings a connection reads (iroh.service.IrohSettings)."""

    ping_interval: float
    pong_timeout: float
    handshake_timeout: float


class IrohConnHost(Protocol):
    """What one iroh connection (iroh/conn.py) needs from the iroh service (iroh/service.py)."""

    server: IrohHost
    settings: IrohTimers
    logins: Counter[str]

    async def check_access(self, conn) -> tuple[str, str] | None:
        """None when admitted, else (metric source, denial text)."""

    def register(self, conn) -> None: ...
    def unregister(self, conn) -> None: ...

    def forward(self, sender, dst: bytes, kind: int, body: bytes, payload: int) -> None:
        """Route one datagram frame from `sender` to endpoint `dst`."""
