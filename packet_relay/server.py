"""RelayServer: listeners, shared state, timers, start-up and graceful stop.

Owns the registry, stats, access control, event log, STUN server and admin server; each client is a
RelayConn (conn.py), which sees the server only through the interfaces in interfaces.py (the server
implements DerpHost, IrohHost and RouteHost). Stop sends Restarting to every client, lets it drain
briefly, then closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from pathlib import Path

from burrow.common.admin import AdminServer
from burrow.common.events import EventLog
from burrow.common.limits import ConnectionCaps, TokenBucket
from burrow.common.listen import tcp_listener
from burrow.common.proxy_protocol import gate_factory, proxy_policy, refusal_none
from burrow.wire.derp import frames as f
from burrow.wire.derp.handshake import ServerInfoJSON, public_key

from . import keys
from .access import AccessControl
from .coalesce import attach
from .config import RelayConfig
from .conn import RelayConn
from .interfaces import ClosedConnection, Route
from .iroh.service import IrohService, IrohSettings
from .mesh import Mesh, MeshCollector
from .messaging_server.service import MessagingService, MessagingSettings
from .peer import Peer
from .registry import Registry
from .stats import RelayStats, make_registry
from .tls import generate_self_signed, server_context

log = logging.getLogger(__name__)
MIN_RATE_BURST = f.MAX_PACKET_SIZE + 32


class RelayServer:
    def __init__(self, config: RelayConfig, *, private_key: bytes | None = None,
                 stun_ephemeral: bool = False, http_ephemeral: bool = False) -> None:
        """`*_ephemeral` bind STUN / plain HTTP on a free port even though their config port is 0 (tests)."""
        self.config = config
        self.private_key = private_key or keys.load_or_create(config.key_file)
        self.public_key = public_key(self.private_key)
        self.stats = RelayStats()
        self.registry = Registry(self.stats, config.max_dups_per_key)
        self.access = AccessControl(config.allow_list, config.access_callout_url, config.access_callout_timeout)
        self.caps = ConnectionCaps(config.max_connections, config.max_connections_per_ip)
        self.events = EventLog(config.event_log, "relay", config.node_name, config.blur_usage)
        self.mesh_key = self._load_mesh_key(config.mesh_key_file)
        self.server_info = ServerInfoJSON()
        self.mesh_server_info = ServerInfoJSON(forward_batch=True)  # what peer relays are told: send ForwardBatch
        self.extra_routes: dict[str, Route] = {}
        self.conns: set[Peer] = set()
        self.ssl_context = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.coalescing = None  # the loop's CoalescingSelector while the relay runs on one
        self.https_port = self.http_port = self.stun_port = self.admin_port = 0
        self.ready = False
        self._stun_ephemeral = stun_ephemeral
        self._http_ephemeral = http_ephemeral
        self._servers: list[asyncio.base_events.Server] = []
        self._dirty: list[Peer] = []
        self._flush_scheduled = False
        self._stats_task: asyncio.Task | None = None
        self._stun = self._stun2 = None
        self.stun_port2 = 0
        self.qad = None  # QadServer while --qad-port is on
        self.qad_port = 0
        self._admin: AdminServer | None = None
        self.prometheus = make_registry(self.stats)
        self.proxy = proxy_policy("relay", config.proxy_protocol, self.prometheus)
        self.iroh = IrohService(self, IrohSettings.from_config(config))  # claims /relay and /ping
        if config.mesh_with and self.mesh_key is None:
            raise ValueError("--mesh-with needs --mesh-key-file (the same key on every node)")
        self.mesh = Mesh(self, config.mesh_with, config.mesh_ca_file, config.mesh_resolve_interval,
                         proxy_header=config.proxy_protocol)
        if self.mesh.enabled:
            self.registry.attach_mesh(self.mesh.table)
            self.prometheus.register(MeshCollector(self.mesh))
        self.messaging = MessagingService(MessagingSettings.from_config(config), self.events)
        self.prometheus.register(_MessagingMetrics(self.messaging))

    @staticmethod
    def _load_mesh_key(path: str | None) -> bytes | None:
        if not path:
            return None
        raw = bytes.fromhex(Path(path).read_text().strip())
        if len(raw) != 32:
            raise ValueError("mesh key must be 64 hex digits")
        return raw

    def is_mesh_key(self, text: str) -> bool:
        if self.mesh_key is None:
            return False
        try:
            return hmac.compare_digest(bytes.fromhex(text), self.mesh_key)
        except ValueError:
            return False

    def new_rate_bucket(self) -> TokenBucket | None:
        rate = self.config.rate_limit_bytes_per_sec
        if rate <= 0:
            return None
        burst = max(self.config.rate_limit_burst_bytes, MIN_RATE_BURST)
        return TokenBucket(rate, burst, time.monotonic())

    # ---- batching of writes: one flush pass per loop iteration
    def mark_dirty(self, conn: Peer) -> None:
        self._dirty.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_dirty)

    def _flush_dirty(self) -> None:
        dirty, self._dirty = self._dirty, []
        self._flush_scheduled = False
        for conn in dirty:
            conn.flush()

    # ---- life cycle
    async def start(self) -> None:
        cfg = self.config
        self.loop = asyncio.get_running_loop()
        self.coalescing = attach(self.loop, self.stats.forwarded)  # None unless on a coalescing loop
        if self.coalescing is not None:
            self.stats.wake_holds = lambda: self.coalescing.holds
        if cfg.https_port >= 0:
            cert, key = cfg.tls_cert, cfg.tls_key
            if cfg.dev_tls and not (cert and key):
                cert, key = generate_self_signed(cfg.tls_dir)
            if not (cert and key):
                raise ValueError("HTTPS needs --tls-cert and --tls-key, or --dev-tls (or --https-port -1)")
            self.ssl_context = server_context(cert, key)
            if cfg.qad_port > 0:
                await self._start_qad(cert, key)
            srv = await self.loop.create_server(gate_factory(lambda: RelayConn(self, True), self.proxy,
                                                             refusal_none),
                                                sock=tcp_listener(cfg.host, cfg.https_port))
            self._servers.append(srv)
            self.https_port = srv.sockets[0].getsockname()[1]
        if cfg.http_port > 0 or self._http_ephemeral:
            srv = await self.loop.create_server(gate_factory(lambda: RelayConn(self, False), self.proxy),
                                                sock=tcp_listener(cfg.host, cfg.http_port))
            self._servers.append(srv)
            self.http_port = srv.sockets[0].getsockname()[1]
        if cfg.qad_port > 0 and self.qad is None:
            raise ValueError("--qad-port needs HTTPS's certificate (--tls-cert and --tls-key, or --dev-tls)")
        if cfg.stun_port > 0 or self._stun_ephemeral:
            await self._start_stun()
        await self.messaging.start()
        if self.mesh.enabled:
            self.mesh.start()
        self._admin = AdminServer(self.prometheus, ready=lambda: self.ready, service="relay",
                                  detail=self.mesh.describe if self.mesh.enabled else None)
        self.admin_port = await self._admin.start(cfg.admin_host, cfg.admin_port)
        self._stats_task = self.loop.create_task(self._stats_loop())
        self.ready = True
        log.info("relay up: https %s http %s stun %s qad %s admin %s key nodekey:%s", self.https_port or "off",
                 self.http_port or "off", self.stun_port or "off", self.qad_port or "off", self.admin_port,
                 self.public_key.hex())

    async def _start_qad(self, cert: str, key: str) -> None:
        from .qad_server import start_qad_server  # aioquic is loaded only when QAD is on

        cfg = self.config
        self.qad = await start_qad_server(cfg.host, cfg.qad_port, cert, key, max_connections=cfg.qad_max_connections,
                                          registry=self.prometheus)
        self.qad_port = self.qad.port

    async def _start_stun(self) -> None:
        try:
            from .stun_server import start_stun_server
        except ImportError:
            log.warning("STUN server module not available; STUN is off")
            return
        cfg = self.config
        self._stun = await start_stun_server(cfg.host, cfg.stun_port, rate_per_source=cfg.stun_rate_per_source,
                                             burst=cfg.stun_burst, capacity=cfg.stun_capacity,
                                             registry=self.prometheus)
        self.stun_port = self._stun.port
        self.stats.stun_answered = lambda: self._stun.answered
        if cfg.stun_port2 > 0:  # same code and limits, its own counters (burrow_relay_stun2_*)
            self._stun2 = await start_stun_server(cfg.host, cfg.stun_port2, rate_per_source=cfg.stun_rate_per_source,
                                                  burst=cfg.stun_burst, capacity=cfg.stun_capacity,
                                                  registry=self.prometheus, metric_prefix="burrow_relay_stun2")
            self.stun_port2 = self._stun2.port

    def reload(self) -> None:
        """SIGHUP: re-read the allow-list and close clients it no longer admits."""
        if self.access.reload() and self.access.allowed is not None:
            for peer in self.registry.peers():
                key = getattr(peer, "endpoint_id", peer.key)  # iroh peers register as ("iroh", id)
                if not getattr(peer, "mesh", False) and not self.access.listed(key):
                    self.stats.denied[(peer.protocol, "allow_list")] += 1
                    peer.close("denied")
        self.iroh.reload()

    def _restart_ms(self) -> tuple[int, int]:
        """The Restarting frame's two durations, in the milliseconds the wire uses (flags are in seconds)."""
        return round(self.config.restart_reconnect * 1000), round(self.config.restart_try_for * 1000)

    async def stop(self) -> None:
        self.ready = False
        for srv in self._servers:
            srv.close()
        await self.messaging.stop()
        await self.mesh.stop()
        restarting = f.Restarting(*self._restart_ms()).encode()
        live = [c for c in self.conns if c.phase == "derp" and c.registered]
        for c in live:
            c.control(restarting)
            c.flush()
        live += self.iroh.restarting(*self._restart_ms())
        deadline = time.monotonic() + self.config.shutdown_grace
        while time.monotonic() < deadline and any(
                c.transport.get_write_buffer_size() for c in live if not c.transport.is_closing()):
            await asyncio.sleep(0.02)
        for c in list(self.conns):
            if c.transport is not None and c.transport.get_write_buffer_size() > 0:
                c.transport.abort()  # a client that stopped reading must not hold us up
            c.close("shutdown")
        for srv in self._servers:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(srv.wait_closed(), self.config.shutdown_grace + 1.0)
        if self._stats_task is not None:
            self._stats_task.cancel()
        for udp in (self._stun, self._stun2, self.qad):
            if udp is not None:
                udp.close()
        if self._admin is not None:
            await self._admin.stop()
        await self.access.close()
        await self.iroh.close()
        self._emit_stats()
        self.events.close()

    # ---- event log
    def connection_closed(self, conn: ClosedConnection) -> None:
        self.stats.closes[(conn.protocol, conn.close_reason)] += 1
        self.events.emit(
            "connection", started=conn.started, duration=max(0.0, time.time() - conn.started),
            protocol=conn.protocol, transport=conn.kind, tls=conn.tls is not None, home=conn.home,
            packets_in=conn.packets_in, packets_out=conn.packets_out, bytes_in=conn.bytes_in,
            bytes_out=conn.bytes_out, drops=dict(conn.drops or {}), close_reason=conn.close_reason)

    def _emit_stats(self) -> None:
        fields = self.stats.interval()
        self.events.emit("stats", interval=float(time.monotonic() - self._last_stats), **fields)
        self._last_stats = time.monotonic()

    _last_stats = time.monotonic()

    async def _stats_loop(self) -> None:
        self._last_stats = time.monotonic()
        self.stats.interval()  # start the interval counters from now
        while True:
            await asyncio.sleep(self.config.stats_interval)
            self._emit_stats()


class _MessagingMetrics:
    """Prometheus view of the messaging service (nothing while it is off)."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    def collect(self):
        if self.service.enabled:
            yield from self.service.collect()
