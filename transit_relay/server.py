"""The asyncio adapter: TCP accept loop, per-connection handshake reading, action dispatch, timers.

Connections are plain non-blocking sockets watched with loop.add_reader (no Protocol objects, no task
per connection), so pairing costs a few callbacks. Once paired, TCP<->TCP pairs are handed to
forwarding.TcpPairForwarder; pairs with a WebSocket side go through websocket.StreamPair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time

from burrow.common.admin import AdminServer
from burrow.common.events import EventLog
from burrow.common.listen import tcp_listener
from burrow.common.proxy_protocol import SocketGate, proxy_policy
from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.forwarding import HAVE_SPLICE, PipePool, TcpPairForwarder
from burrow.transit_relay.metrics import draining_gauge, make_registry, pairing_wait_histogram
from burrow.transit_relay.protocol import (
    Close,
    Pair,
    PairState,
    Record,
    Relay,
    Unwaited,
    Waiting,
    refusal_line,
)
from burrow.transit_relay.tcp import TcpEndpoint
from burrow.transit_relay.websocket import StreamPair, WebSocketListener

log = logging.getLogger("burrow.transit")
_ACCEPT_BURST = 64


class TransitServer:
    def __init__(self, config: TransitConfig, clock=time.time) -> None:
        self.config = config
        self.clock = clock
        self.relay = Relay(config.limits(), announce=config.redis_url is not None)
        self.events = EventLog(config.event_log, "transit", node=config.node_name, blur=config.blur_usage)
        self.pool = PipePool(config.pipe_size) if config.splice and HAVE_SPLICE else None
        self.copy_buffer = memoryview(bytearray(config.buffer_size))  # shared by all copy-path pairs
        self.forwarders: set[TcpPairForwarder] = set()
        self.threaded_pairs = 0  # forwarders moved by pump threads (at most config.splice_threads)
        self.streams: set[StreamPair] = set()
        self.registry = make_registry(self.relay, self.buffered)
        self.pairing_wait = pairing_wait_histogram(self.registry)
        self.draining = draining_gauge(self.registry)
        self.proxy = proxy_policy("transit", config.proxy_protocol, self.registry)
        self.cluster = None
        if config.redis_url:  # imported only when used: a single relay loads no Redis client
            from burrow.transit_relay.cluster import Cluster
            self.cluster = Cluster(self, self.registry, self.events.node)
        self.admin: AdminServer | None = None
        self.websocket: WebSocketListener | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.port: int | None = None
        self.websocket_port: int | None = None
        self.admin_port: int | None = None
        self._lsock: socket.socket | None = None
        self._tasks: list[asyncio.Task] = []
        self._ready = False

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        self._lsock = tcp_listener(cfg.host, cfg.port)
        self.port = self._lsock.getsockname()[1]
        self.loop.add_reader(self._lsock.fileno(), self._accept)
        if cfg.websocket_port >= 0:
            self.websocket = WebSocketListener(self, self.proxy)
            self.websocket_port = await self.websocket.start(cfg.host, cfg.websocket_port)
        if self.cluster is not None:
            await self.cluster.start()
        if cfg.admin_port >= 0:
            self.admin = AdminServer(self.registry, ready=lambda: self._ready, service="transit",
                                     detail=self.cluster.detail if self.cluster else None)
            self.admin_port = await self.admin.start(cfg.admin_host, cfg.admin_port)
        self._tasks = [asyncio.create_task(self._tick_loop()), asyncio.create_task(self._stats_loop())]
        self._ready = True
        log.info("transit relay on tcp %s:%s websocket %s admin %s splice %s", cfg.host, self.port,
                 self.websocket_port, self.admin_port, self.pool is not None)

    async def stop(self) -> None:
        self._ready = False  # /readyz fails at once: a balancer sends no new client here
        if self._lsock is not None:
            self._accept()  # connections the kernel completed already are served, not reset
            self.loop.remove_reader(self._lsock.fileno())
            self._lsock.close()
            self._lsock = None
        if self.config.drain_timeout > 0:
            await self._drain()
        if self.proxy is not None:
            self.proxy.close_all()
        self.dispatch(self.relay.shutdown(self.clock()))
        if self.cluster is not None:
            await self.cluster.stop()
        if self.websocket is not None:
            await self.websocket.stop()
        for _ in range(100):  # stream pairs and pump threads end asynchronously
            if not (self.streams or self.forwarders):
                break
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.admin is not None:
            await self.admin.stop()
        if self.pool is not None:
            self.pool.close()
        self.events.close()

    async def _drain(self) -> None:
        """Rolling upgrade: accept no new client, keep relaying the pairs in progress and keep the sides
        waiting for a partner, for at most drain_timeout. Connections already accepted finish their
        handshakes. With a cluster the peer port stays open, so a partner that the balancer now sends
        to another replica still joins its waiting side here by a hop; without one, a waiting side
        could only meet a partner already connected here, so it is closed once no handshake is left."""
        if self.websocket is not None:
            self.websocket.stop_accepting()
        relay = self.relay
        started, waiting, pairs = self.clock(), len(relay.pending), len(relay.pairs)
        self.draining.set(1)
        log.info("draining for up to %s s: %d sides waiting, %d pairs", self.config.drain_timeout, waiting, pairs)
        deadline = time.monotonic() + self.config.drain_timeout
        while time.monotonic() < deadline:
            reachable = self.cluster is not None and self.cluster.link.healthy  # by hops from other replicas
            if not reachable and relay.pending and not relay.handshaking and not self._gated():
                self.dispatch(relay.shutdown(self.clock(), pairs=False))
            if not (relay.pairs or relay.pending or relay.handshaking or self._gated()):
                break
            await asyncio.sleep(0.05)
        self.draining.set(0)
        left_waiting, left_pairs = len(relay.pending) + len(relay.handshaking), len(relay.pairs)
        ended = "deadline" if left_waiting or left_pairs else "done"
        self.events.emit("drain", started=started, duration=max(0.0, self.clock() - started),
                         waiting=waiting, pairs=pairs, left_waiting=left_waiting, left_pairs=left_pairs,
                         ended=ended)
        log.info("drain %s: %d unpaired and %d pairs left", ended, left_waiting, left_pairs)

    def _gated(self) -> bool:
        """Accepted connections still sending their PROXY header (their handshake follows)."""
        return self.proxy is not None and bool(self.proxy.sockets)

    # -- accepting ------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(_ACCEPT_BURST):
            try:
                sock, addr = self._lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: try again on the next wake-up
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if self.proxy is None:
                self._admit(sock, addr, b"")
            else:  # the client's address comes first, in the balancer's PROXY header
                SocketGate(self.loop, sock, addr, self.proxy, self._admit).start()

    def _admit(self, sock: socket.socket, addr: tuple, first: bytes) -> None:
        """A client connection from `addr`: counted against the limits, then read; `first`: bytes read already."""
        conn = self.relay.open(addr[0], "tcp", self.clock())
        if isinstance(conn, str):
            with contextlib.suppress(OSError):
                sock.send(refusal_line(conn))
            sock.close()
            return
        endpoint = TcpEndpoint(self, sock, conn)
        conn.handle = endpoint
        endpoint.start()
        if first:
            self.dispatch(self.relay.receive(conn, first, self.clock()))

    # -- actions --------------------------------------------------------------------------
    def dispatch(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Record):
                self.events.emit("session", **action.fields)
            elif isinstance(action, Close):
                action.conn.handle.close(action.reply)
            elif isinstance(action, Pair):
                if not action.state.hop:  # a hop pair's wait is observed where its session is
                    self.pairing_wait.observe(action.state.waited)
                self._start_pair(action.state)
            elif isinstance(action, (Waiting, Unwaited)):
                self.cluster.on_action(action)

    def _start_pair(self, pair: PairState) -> None:
        a, b = pair.first.handle, pair.second.handle
        if isinstance(a, TcpEndpoint) and isinstance(b, TcpEndpoint):
            a.take_over()
            b.take_over()
            fwd = TcpPairForwarder(self.loop, a.sock, b.sock, pair, lambda: self.pair_done(pair, fwd),
                                   self.pool, self.copy_buffer, self._grant_threads,
                                   self.config.splice_threads_after)
            a.forwarder = b.forwarder = fwd
            self.forwarders.add(fwd)
            fwd.start()
        else:
            stream = StreamPair(self, pair, a, b)
            self.streams.add(stream)
            stream.start()

    def _grant_threads(self) -> bool:
        if self.threaded_pairs >= self.config.splice_threads:
            return False
        self.threaded_pairs += 1
        return True

    def pair_done(self, pair: PairState, holder: object) -> None:
        if holder in self.forwarders:
            self.forwarders.discard(holder)
            self.threaded_pairs -= holder.threaded
        self.streams.discard(holder)
        self.dispatch(self.relay.finish(pair, self.clock()))

    def buffered(self) -> int:
        return sum(f.held for f in self.forwarders)

    # -- timers ---------------------------------------------------------------------------
    def _tick_interval(self) -> float:
        lim = self.relay.limits
        shortest = min(lim.handshake_timeout, lim.pending_timeout, lim.idle_timeout or float("inf"))
        return min(1.0, max(0.02, shortest / 4))

    async def _tick_loop(self) -> None:
        interval = self._tick_interval()
        while True:
            await asyncio.sleep(interval)
            try:
                self.dispatch(self.relay.tick(self.clock()))
            except Exception:  # a bug in one expiry must not stop all future expiries
                log.exception("tick failed")

    async def _stats_loop(self) -> None:
        interval = self.config.stats_interval
        last = self.relay.bytes_relayed()
        while True:
            await asyncio.sleep(interval)
            total = self.relay.bytes_relayed()
            self.events.emit("stats", interval=interval, pending=len(self.relay.pending),
                             active_pairs=len(self.relay.pairs), bytes_interval=max(0, total - last))
            last = total
