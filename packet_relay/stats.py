"""Relay counters, protocol-neutral, and their Prometheus view.

The hot path only bumps plain ints in dicts; a custom collector turns them into metrics at scrape
time, so forwarding a packet never touches prometheus_client. Labels carry the protocol (`derp`,
`iroh`), a reason or a transport, never keys or addresses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from burrow.common.metrics import labelled_counter, service_registry

PROTOCOLS = ("derp", "iroh")
# every label value the relay can produce, shown at 0 from the start (conn.py, iroh/, peer.py, registry.py,
# http_routes.py, access.py); a value counted that is not listed here still appears once counted
TRANSPORTS = {"derp": ("upgrade", "websocket"), "iroh": ("websocket",)}
DROP_REASONS = ("unknown_dest", "unknown_dest_on_fwd", "control_overflow", "queue_head", "gone_disconnected",
                "wrong_protocol")
CLOSE_REASONS = ("client", "protocol", "timeout", "denied", "shutdown", "duplicate")
ERROR_KINDS = {"derp": ("protocol", "frame_too_large", "malformed", "handshake", "websocket"),
               "iroh": ("iroh", "websocket", "malformed", "early_frames", "protocol", "auth_header")}
DENIED_SOURCES = {"derp": ("allow_list", "callout"), "iroh": ("token", "allow_list", "callout", "signature")}
HTTP_ENDPOINTS = ("probe", "generate_204", "robots", "status", "not_found", "bad_request", "no_upgrade",
                  "refused_limit", "iroh_ping", "iroh_relay")
# from the first byte after the HTTP upgrade to the relay's accept (ServerInfo): key exchange + access check
HANDSHAKE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def _per_protocol(values) -> list[tuple[str, str]]:
    return [(p, v) for p in PROTOCOLS for v in (values[p] if isinstance(values, dict) else values)]


class RelayStats:
    def __init__(self) -> None:
        self.clients: Counter[str] = Counter()          # protocol -> connected (registered) clients
        self.connections: Counter[tuple[str, str]] = Counter()  # (protocol, transport) -> accepted
        self.packets: Counter[str] = Counter()          # protocol of the sender -> packets forwarded
        self.bytes: Counter[str] = Counter()
        self.drops: Counter[tuple[str, str]] = Counter()  # (protocol, reason) -> packets dropped
        self.closes: Counter[tuple[str, str]] = Counter()  # (protocol, close_reason)
        self.errors: Counter[tuple[str, str]] = Counter()  # (protocol, kind) protocol errors
        self.denied: Counter[tuple[str, str]] = Counter()  # (protocol, source) access refusals
        self.http: Counter[str] = Counter()              # endpoint -> requests
        self.unknown_frames: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()         # protocol -> times reading paused
        self.dup_conns = 0
        self.mesh_out = 0                                # packets sent to mesh peers (ForwardPacket)
        self.mesh_in = 0                                 # packets received from mesh peers
        self.mesh_batches_out = 0                        # ForwardBatch frames sent (peers that announce it)
        self.mesh_batches_in = 0                         # ForwardBatch frames received
        self.mesh_held = 0                               # times a sender's reading paused for a slow mesh link
        self.stun_answered: Callable[[], int] = lambda: 0
        self.wake_holds: Callable[[], int] = lambda: 0   # polls held by wake-up coalescing (coalesce.py)
        self.handshake_seconds: Histogram | None = None  # set by make_registry; observed once per handshake
        # interval totals for the `stats` event
        self._last_packets = 0
        self._last_bytes = 0
        self._last_drops: Counter[str] = Counter()
        self._last_stun = 0

    def forwarded(self) -> int:
        """Packets forwarded so far, every protocol (what adaptive wake-up coalescing follows)."""
        return sum(self.packets.values())

    def drop(self, protocol: str, reason: str, n: int = 1) -> None:
        self.drops[(protocol, reason)] += n

    def handshake_done(self, protocol: str, seconds: float) -> None:
        if self.handshake_seconds is not None:
            self.handshake_seconds.labels(protocol).observe(seconds)

    def interval(self) -> dict:
        """Deltas since the previous call, shaped as the relay/stats event fields."""
        packets, nbytes = sum(self.packets.values()), sum(self.bytes.values())
        drops: Counter[str] = Counter()
        for (_proto, reason), n in self.drops.items():
            drops[reason] += n
        stun = self.stun_answered()
        out = {
            "clients": sum(self.clients.values()),
            "packets_interval": packets - self._last_packets,
            "bytes_interval": nbytes - self._last_bytes,
            "drops_interval": {r: n - self._last_drops.get(r, 0) for r, n in drops.items()
                               if n - self._last_drops.get(r, 0)},
            "stun_interval": max(0, stun - self._last_stun),
        }
        self._last_packets, self._last_bytes, self._last_drops, self._last_stun = packets, nbytes, drops, stun
        return out


class _Collector:
    def __init__(self, stats: RelayStats) -> None:
        self.stats = stats

    def collect(self):
        s = self.stats
        g = GaugeMetricFamily("burrow_relay_clients", "Connected relay clients", labels=["protocol"])
        for proto in ("derp", "iroh"):
            g.add_metric([proto], s.clients.get(proto, 0))
        yield g
        yield labelled_counter("burrow_relay_connections_accepted", "Relay connections accepted (after upgrade)",
                               ["protocol", "transport"], s.connections, _per_protocol(TRANSPORTS))
        per_protocol = [(p,) for p in PROTOCOLS]
        yield labelled_counter("burrow_relay_packets_forwarded", "Packets forwarded to a local client",
                               ["protocol"], {(k,): v for k, v in s.packets.items()}, per_protocol)
        yield labelled_counter("burrow_relay_forwarded_bytes", "Payload bytes forwarded",
                               ["protocol"], {(k,): v for k, v in s.bytes.items()}, per_protocol)
        yield labelled_counter("burrow_relay_packets_dropped", "Packets dropped, by reason",
                               ["protocol", "reason"], s.drops, _per_protocol(DROP_REASONS))
        yield labelled_counter("burrow_relay_closes", "Relay connections closed, by reason",
                               ["protocol", "reason"], s.closes, _per_protocol(CLOSE_REASONS))
        yield labelled_counter("burrow_relay_protocol_errors", "Connections closed for bad input, by kind",
                               ["protocol", "kind"], s.errors, _per_protocol(ERROR_KINDS))
        yield labelled_counter("burrow_relay_access_denied", "Clients refused by access control",
                               ["protocol", "source"], s.denied, _per_protocol(DENIED_SOURCES))
        yield labelled_counter("burrow_relay_http_requests", "Plain HTTP requests, by endpoint",
                               ["endpoint"], s.http, HTTP_ENDPOINTS)
        yield labelled_counter("burrow_relay_unknown_frames", "Unknown frame types skipped",
                               ["protocol"], {(k,): v for k, v in s.unknown_frames.items()}, per_protocol)
        yield labelled_counter("burrow_relay_throttled", "Times a client's reading was paused by its byte-rate limit",
                               ["protocol"], {(k,): v for k, v in s.throttled.items()}, per_protocol)
        stun = CounterMetricFamily("burrow_relay_stun_answered", "STUN binding requests answered")
        stun.add_metric([], s.stun_answered())
        yield stun
        holds = CounterMetricFamily("burrow_relay_wake_holds", "Times the relay held its poll to gather more "
                                    "packets per wake-up (--wake-coalesce-us)")
        holds.add_metric([], s.wake_holds())
        yield holds
        dup = CounterMetricFamily("burrow_relay_duplicate_connections", "Connections that duplicated a live key")
        dup.add_metric([], s.dup_conns)
        yield dup


def make_registry(stats: RelayStats) -> CollectorRegistry:
    registry = service_registry()
    registry.register(_Collector(stats))
    stats.handshake_seconds = Histogram(
        "burrow_relay_handshake_seconds", "DERP and iroh client handshakes, from the upgrade to the relay's accept",
        ["protocol"], buckets=HANDSHAKE_BUCKETS, registry=registry)
    for protocol in PROTOCOLS:
        stats.handshake_seconds.labels(protocol)
    return registry
