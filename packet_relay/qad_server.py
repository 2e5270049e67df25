"""QUIC Address Discovery on UDP (iroh's QAD): the thin asyncio adapter around `wire.qad_quic`.

iroh endpoints (0.90 and newer) learn their public address from their home relay this way instead of
STUN: they keep one QUIC connection (ALPN `/iroh-qad/0`, TLS 1.3 with the relay's certificate) open, and
the relay reports the address their packets arrive from in OBSERVED_ADDRESS frames, again whenever it
changes (a NAT rebinding). The connection carries no streams; it ends when the client closes it or after
IDLE_TIMEOUT of silence (iroh clients send keep-alives every 25 s).

One UDP socket; datagrams are routed to their connection by destination connection ID. A new connection
needs a full-size Initial packet (QUIC's own anti-amplification rules then bound what we send to an
unvalidated address), room under `max_connections`, and, while new connections arrive faster than
NEW_CONNECTION_CAPACITY per second, the source address's share of them (the STUN server's limiter).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from time import monotonic

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent
from aioquic.quic.packet import (
    QuicErrorCode,
    QuicPacketType,
    encode_quic_version_negotiation,
    pull_quic_header,
)

from burrow.wire.qad import ALPN, Role
from burrow.wire.qad_quic import QadConnection
from burrow.wire.stun import pack_ip

from .stun_server import Pressure, SourceLimiter

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 60.0               # s without a packet before a connection is dropped (clients ping every 25 s)
NEW_CONNECTION_CAPACITY = 1000.0  # new connections/s accepted from anyone before per-source limits apply
RATE_PER_SOURCE = 20.0            # new connections/s per source address while above that
BURST_PER_SOURCE = 40

DATAGRAMS = ("handled", "malformed", "not_initial", "version_negotiation")
REFUSALS = ("capacity", "rate_limited")


class _Connection(QuicConnectionProtocol):
    """One client's QAD connection: counts its life for the server."""

    def __init__(self, quic: QadConnection, server: QadServer) -> None:
        super().__init__(quic)
        self._server = server
        self.handshake_done = False

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.handshake_done = True
            self._server.handshakes += 1
        elif isinstance(event, ConnectionTerminated):  # a clean close or the idle timeout after a handshake
            clean = self.handshake_done and event.error_code == QuicErrorCode.NO_ERROR
            self._server.closed["ok" if clean else "error"] += 1


class QadServer(asyncio.DatagramProtocol):
    """Serves QAD on a bound UDP socket. `.port` is the bound port."""

    def __init__(self, configuration: QuicConfiguration, max_connections: int) -> None:
        self.configuration = configuration
        self.max_connections = max_connections
        self.port = 0
        self.handshakes = 0
        self.datagrams = dict.fromkeys(DATAGRAMS, 0)
        self.refused = dict.fromkeys(REFUSALS, 0)
        self.closed = {"ok": 0, "error": 0}
        self.reports_done = 0  # reports of connections already gone
        self._routes: dict[bytes, _Connection] = {}
        self._live: set[_Connection] = set()
        self._limiter = SourceLimiter(RATE_PER_SOURCE, BURST_PER_SOURCE)
        self._pressure = Pressure(NEW_CONNECTION_CAPACITY, monotonic())
        self._transport: asyncio.DatagramTransport | None = None

    @property
    def connections(self) -> int:
        return len(self._live)

    def reports_sent(self) -> int:
        return self.reports_done + sum(c._quic.reports_sent for c in self._live)

    def connection_made(self, transport) -> None:
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=self.configuration.connection_id_length)
        except ValueError:
            self.datagrams["malformed"] += 1
            return
        versions = self.configuration.supported_versions
        if (header.packet_type != QuicPacketType.VERSION_NEGOTIATION and header.version is not None
                and header.version not in versions):
            self.datagrams["version_negotiation"] += 1
            self._transport.sendto(encode_quic_version_negotiation(
                source_cid=header.destination_cid, destination_cid=header.source_cid,
                supported_versions=versions), addr)
            return
        conn = self._routes.get(header.destination_cid)
        if conn is None:
            if header.packet_type != QuicPacketType.INITIAL or len(data) < SMALLEST_MAX_DATAGRAM_SIZE:
                self.datagrams["not_initial"] += 1
                return
            conn = self._accept(header.destination_cid, addr)
            if conn is None:
                return
        self.datagrams["handled"] += 1
        conn.datagram_received(data, addr)

    def _accept(self, original_cid: bytes, addr: tuple) -> _Connection | None:
        if len(self._live) >= self.max_connections:
            self.refused["capacity"] += 1
            return None
        now = monotonic()
        packed = pack_ip(addr[0])
        if self._pressure.on(now) and not self._limiter.allow(packed if len(packed) == 4 else packed[:8], now):
            self.refused["rate_limited"] += 1
            return None
        quic = QadConnection(role=Role.PROVIDES, configuration=self.configuration, max_streams=0,
                             original_destination_connection_id=original_cid)
        conn = _Connection(quic, self)
        conn.connection_made(self._transport)
        conn._connection_id_issued_handler = lambda cid: self._routes.__setitem__(cid, conn)
        conn._connection_id_retired_handler = lambda cid: self._routes.pop(cid, None)
        conn._connection_terminated_handler = lambda: self._forget(conn)
        self._routes[original_cid] = self._routes[quic.host_cid] = conn
        self._live.add(conn)
        return conn

    def _forget(self, conn: _Connection) -> None:
        if conn in self._live:
            self._live.discard(conn)
            self.reports_done += conn._quic.reports_sent
        for cid in [cid for cid, c in self._routes.items() if c is conn]:
            del self._routes[cid]

    def close(self) -> None:
        """Close every connection (CONNECTION_CLOSE, best effort) and the socket."""
        for conn in list(self._live):
            conn.close()
            self._forget(conn)
        if self._transport is not None:
            self._transport.close()


class QadCollector:
    """burrow_relay_qad_* at scrape time."""

    def __init__(self, server: QadServer) -> None:
        self.server = server

    def describe(self) -> list:
        return list(self.collect())

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.server
        yield GaugeMetricFamily("burrow_relay_qad_connections", "QUIC address-discovery connections open",
                                value=s.connections)
        yield CounterMetricFamily("burrow_relay_qad_handshakes", "QUIC address-discovery handshakes completed",
                                  value=s.handshakes)
        yield CounterMetricFamily("burrow_relay_qad_reports", "OBSERVED_ADDRESS reports sent",
                                  value=s.reports_sent())
        closed = CounterMetricFamily("burrow_relay_qad_closed", "QUIC address-discovery connections ended, by "
                                     "whether they ended cleanly", labels=["result"])
        for result, value in s.closed.items():
            closed.add_metric([result], value)
        yield closed
        refused = CounterMetricFamily("burrow_relay_qad_refused", "new QUIC address-discovery connections "
                                      "refused, by reason", labels=["reason"])
        for reason, value in s.refused.items():
            refused.add_metric([reason], value)
        yield refused
        datagrams = CounterMetricFamily("burrow_relay_qad_datagrams", "UDP datagrams received on the QAD port, "
                                        "by what became of them", labels=["result"])
        for result, value in s.datagrams.items():
            datagrams.add_metric([result], value)
        yield datagrams


def server_configuration(cert: str, key: str) -> QuicConfiguration:
    config = QuicConfiguration(is_client=False, alpn_protocols=[ALPN], idle_timeout=IDLE_TIMEOUT)
    config.load_cert_chain(cert, key)
    return config


async def start_qad_server(host: str, port: int, cert: str, key: str, *, max_connections: int,
                           registry=None) -> QadServer:
    """Bind UDP `host:port` ("::" is dual-stack) and serve QAD until `.close()`."""
    loop = asyncio.get_running_loop()
    if host in ("", "::"):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address: tuple = ("::", port)
    else:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    server = QadServer(server_configuration(cert, key), max_connections)
    await loop.create_datagram_endpoint(lambda: server, sock=sock)
    if registry is not None:
        registry.register(QadCollector(server))
    return server
