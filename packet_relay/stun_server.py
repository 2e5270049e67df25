"""STUN over UDP: the thin asyncio adapter around `wire.stun`.

One non-blocking UDP socket; when the event loop reports it readable we drain up to
`DRAIN_BATCH` datagrams in one wake-up (asyncio's DatagramProtocol pays a full selector round
per datagram, which is most of the cost of a 20-byte request). Each datagram is decoded; malformed
ones are counted and get no answer; well-formed requests are answered to the address they came from.
Nothing here blocks and nothing is queued: UDP answers that the kernel cannot take right away are
dropped and counted.

Rate policy: a carrier-grade NAT puts thousands of people behind one address, so a per-address limit
at all times would refuse some of them. Instead every well-formed request is answered while the server
as a whole stays under `capacity` requests/s; only above it (pressure: a flood, or a reflection attempt
that spoofs one victim's address) does each source address get its share (`rate_per_source`,
`burst`), so the heaviest sources are refused first and light ones keep their answers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from itertools import islice
from time import monotonic

from burrow.common.limits import TokenBucket
from burrow.wire.stun import (
    DEFAULT_SOFTWARE,
    NotBindingRequest,
    Responder,
    StunError,
    pack_ip,
    parse_request,
)

log = logging.getLogger(__name__)

MAX_DATAGRAM = 2048          # bytes read per datagram; longer ones are truncated and fail the length check
DRAIN_BATCH = 64             # datagrams handled per readable event before yielding to other tasks
RECV_BUFFER = 1 << 20        # requested SO_RCVBUF, bytes (the kernel may cap it at rmem_max)
DEFAULT_MAX_SOURCES = 65536  # rate-limit table entries before pruning
DEFAULT_CAPACITY = 20000.0   # requests/s answered with no per-source limit (one core answers about 100,000)

RESULTS = ("answered", "malformed", "rate_limited", "ignored", "unknown_attribute", "send_failed")


class SourceLimiter:
    """Per-source token buckets in a table that never exceeds `max_sources` entries.

    Keys are IPv4 addresses, and IPv6 /64 prefixes (one host usually owns a whole /64). When the
    table is full, buckets that have refilled (idle sources, which carry no information) are
    dropped; if that frees less than a quarter, the oldest entries go too, so pruning is amortised
    O(1) per new source even when every source is spoofed and fresh. A rate of 0 disables limiting.
    """

    def __init__(self, rate: float, burst: int, max_sources: int = DEFAULT_MAX_SOURCES) -> None:
        if max_sources < 4:
            raise ValueError("max_sources must be at least 4")
        self.rate = rate
        self.burst = max(1, burst)
        self.max_sources = max_sources
        self._buckets: dict[bytes, TokenBucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, key: bytes, now: float) -> bool:
        if self.rate <= 0:
            return True
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_sources:
                self._prune(now)
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, now)
        return bucket.take(1, now)

    def _prune(self, now: float) -> None:
        rate, burst = self.rate, self.burst
        idle = [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * rate >= burst]
        for key in idle:
            del self._buckets[key]
        target = self.max_sources * 3 // 4
        excess = len(self._buckets) - target
        if excess > 0:
            for key in list(islice(self._buckets, excess)):  # dicts iterate oldest first
                del self._buckets[key]


class Pressure:
    """Whether the server as a whole answers more than `capacity` requests/s (0: always under pressure).

    A token bucket holding one second of capacity: while it has tokens the server is not under pressure.
    """

    def __init__(self, capacity: float, now: float) -> None:
        self.capacity = capacity
        self._bucket = TokenBucket(capacity, capacity, now) if capacity > 0 else None

    def on(self, now: float) -> bool:
        return self._bucket is None or not self._bucket.take(1, now)


class StunServer:
    """A bound STUN socket. `.port` is the bound port, `.answered` the success answers sent."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, limiter: SourceLimiter,
                 responder: Responder, pressure: Pressure | None = None) -> None:
        self._sock = sock
        self._loop = loop
        self.port: int = sock.getsockname()[1]
        self.limiter = limiter
        self.pressure = pressure or Pressure(0, monotonic())
        self.responder = responder
        self.answered = 0
        self.malformed = 0
        self.rate_limited = 0
        self.ignored = 0
        self.unknown_attribute = 0
        self.send_failed = 0
        self.closed = False
        self._registry = None
        self._collector: _Collector | None = None
        loop.add_reader(sock.fileno(), self._on_readable)

    def counts(self) -> dict[str, int]:
        return {result: getattr(self, result) for result in RESULTS}

    def _on_readable(self) -> None:
        recvfrom = self._sock.recvfrom
        for _ in range(DRAIN_BATCH):
            try:
                data, addr = recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ICMP errors reported on the socket; keep serving
                log.debug("stun recvfrom: %s", exc)
                return
            self.handle(data, addr)

    def handle(self, data: bytes, addr: tuple) -> None:
        try:
            txid, unknown = parse_request(data)
        except NotBindingRequest:
            self.ignored += 1
            return
        except StunError:
            self.malformed += 1
            return
        packed = pack_ip(addr[0])
        # Only well-formed requests reach the limiter, and only under pressure: garbage never gets an
        # answer, so it need not cost a table entry, and a busy NAT's address is never limited in
        # ordinary times.
        now = monotonic()
        if self.pressure.on(now) and not self.limiter.allow(packed if len(packed) == 4 else packed[:8], now):
            self.rate_limited += 1
            return
        answer = self.responder.answer(txid, unknown, packed, addr[1])
        try:
            self._sock.sendto(answer, addr)
        except OSError:
            self.send_failed += 1
            return
        if unknown:
            self.unknown_attribute += 1
        else:
            self.answered += 1

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._collector is not None and self._registry is not None:
            self._registry.unregister(self._collector)
        try:
            self._loop.remove_reader(self._sock.fileno())
        except (RuntimeError, ValueError):  # loop already closed
            pass
        self._sock.close()


class _Collector:
    """Exposes the server's plain int counters at scrape time, so the hot path never locks."""

    def __init__(self, server: StunServer, prefix: str) -> None:
        self.server, self.prefix = server, prefix

    def describe(self) -> list:
        return list(self.collect())

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        requests = CounterMetricFamily(
            f"{self.prefix}_requests", "STUN datagrams received, by what became of them",
            labels=["result"])
        for result, value in self.server.counts().items():
            requests.add_metric([result], value)
        yield requests
        yield GaugeMetricFamily(f"{self.prefix}_rate_limit_sources",
                                "sources tracked by the STUN per-source rate limiter",
                                value=len(self.server.limiter))


def _bind(host: str, port: int) -> socket.socket:
    if host in ("", "::"):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual-stack: IPv4 arrives mapped
        address: tuple = ("::", port)
    else:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        sock.setblocking(False)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def start_stun_server(host: str, port: int, *, rate_per_source: float, burst: int, registry,
                            capacity: float = DEFAULT_CAPACITY, max_sources: int = DEFAULT_MAX_SOURCES,
                            software: str | None = DEFAULT_SOFTWARE,
                            metric_prefix: str = "burrow_relay_stun") -> StunServer:
    """Bind UDP `host:port` ("::" means dual-stack) and answer Binding requests until `.close()`.

    `registry` is a prometheus_client CollectorRegistry (or None) that receives
    <metric_prefix>_requests_total{result=...} (burrow_relay_stun2_... for --stun-port2). Above
    `capacity` requests/s in all (0: always), `rate_per_source` (requests/s, 0 = unlimited) and `burst`
    configure each source's token bucket.
    """
    loop = asyncio.get_running_loop()
    sock = _bind(host, port)
    server = StunServer(sock, loop, SourceLimiter(rate_per_source, burst, max_sources), Responder(software),
                        Pressure(capacity, monotonic()))
    if registry is not None:
        collector = _Collector(server, metric_prefix)
        try:
            registry.register(collector)
        except Exception:
            server.close()
            raise
        server._registry, server._collector = registry, collector
    return server
