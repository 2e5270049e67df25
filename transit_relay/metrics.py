"""Prometheus view of the relay's counters, read at scrape time (nothing is counted twice on the hot path)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from burrow.transit_relay.protocol import Relay


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
        moods = CounterMetricFamily("burrow_transit_sessions", "finished pairing attempts by mood",
                                    labels=["mood"])
        for mood, n in r.moods.items():
            moods.add_metric([mood], n)
        yield moods
        refusals = CounterMetricFamily("burrow_transit_refusals",
                                       "connections refused by a limit (total, per_ip, pending, pairs)",
                                       labels=["limit"])
        for limit in ("total", "per_ip", "pending", "pairs"):
            refusals.add_metric([limit], r.refusals.get(limit, 0))
        yield refusals
        timeouts = CounterMetricFamily("burrow_transit_timeouts", "connections closed by a timeout",
                                       labels=["phase"])
        for phase, n in r.timeouts.items():
            timeouts.add_metric([phase], n)
        yield timeouts


def make_registry(relay: Relay, buffered: Callable[[], int]) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(RelayCollector(relay, buffered))
    return registry
