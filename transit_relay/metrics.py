"""Prometheus view of the relay's counters, read at scrape time (nothing is counted twice on the hot path).

The one series observed as it happens is the pairing-wait histogram: once per pair, never per byte.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from burrow.common.metrics import labelled_counter, service_registry
from burrow.transit_relay.protocol import Relay

# from the first side's complete handshake to its partner's: seconds to minutes when people type codes
PAIRING_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
REFUSAL_LIMITS = ("total", "per_ip", "pending", "pairs")


class RelayCollector(Collector):
    def __init__(self, relay: Relay, buffered: Callable[[], int]) -> None:
        self.relay = relay
        self.buffered = buffered

    def collect(self):
        r = self.relay
        yield GaugeMetricFamily("burrow_transit_handshaking_connections",
                                "connections that have not sent a complete handshake", value=len(r.handshaking))
        yield GaugeMetricFamily("burrow_transit_pending_connections",
                                "connections waiting for a partner", value=len(r.pending))
        yield GaugeMetricFamily("burrow_transit_active_pairs", "pairs currently relaying", value=len(r.pairs))
        yield GaugeMetricFamily("burrow_transit_buffered_bytes",
                                "bytes held inside the relay (pipes and buffers of TCP<->TCP pairs) on their way to a reader",
                                value=self.buffered())
        yield CounterMetricFamily("burrow_transit_relayed_bytes", "payload bytes relayed, both directions",
                                  value=r.bytes_relayed())
        yield labelled_counter("burrow_transit_sessions", "finished pairing attempts by mood", ["mood"], r.moods)
        yield labelled_counter("burrow_transit_refusals",
                               "connections refused by a limit (total, per_ip, pending, pairs)", ["limit"],
                               r.refusals, REFUSAL_LIMITS)
        yield labelled_counter("burrow_transit_timeouts", "connections closed by a timeout", ["phase"],
                               r.timeouts)


def make_registry(relay: Relay, buffered: Callable[[], int]) -> CollectorRegistry:
    registry = service_registry()
    registry.register(RelayCollector(relay, buffered))
    return registry


def pairing_wait_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram("burrow_transit_pairing_wait_seconds",
                     "time from the first side's complete handshake to its partner's (pairing)",
                     buckets=PAIRING_WAIT_BUCKETS, registry=registry)


def draining_gauge(registry: CollectorRegistry) -> Gauge:
    return Gauge("burrow_transit_draining", "1 while the relay drains (SIGTERM with --drain-timeout): no new "
                 "client, pairs and waiting sides kept", registry=registry)
