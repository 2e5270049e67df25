"""Discovery counters and their Prometheus view (labels are reasons and endpoints, never keys)."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from burrow.common.metrics import labelled_counter, service_registry

# every label value the API can produce (api.py, rules.py, store_redis.py), shown at 0 from the start
ENDPOINTS = ("get_entry", "post_entry", "available_servers")
WRITE_KINDS = ("new", "iteration")
REFUSED_REASONS = ("bad_key", "too_large", "store", "bad_json", "bad_entry", "invalid", "bad_signature",
                   "stale_time", "future_time", "sequence", "timestamp")


class DiscoveryStats:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # endpoint -> requests
        self.writes: Counter[str] = Counter()    # "new" / "iteration"
        self.refused: Counter[str] = Counter()   # reason -> refused POSTs (and bad GETs)
        self.entries = 0                          # gauges, refreshed by the stats loop and at scrape time
        self.servers = 0
        self.store_errors = 0
        self._last_writes = 0
        self._last_refused = 0

    def interval(self) -> dict:
        writes, refused = sum(self.writes.values()), sum(self.refused.values())
        out = {"entries": self.entries, "servers": self.servers, "writes_interval": writes - self._last_writes,
               "refused_interval": refused - self._last_refused}
        self._last_writes, self._last_refused = writes, refused
        return out


class _Collector:
    def __init__(self, stats: DiscoveryStats) -> None:
        self.stats = stats

    def collect(self):
        s = self.stats
        yield labelled_counter("burrow_discovery_requests", "HTTP API requests, by endpoint", ["endpoint"],
                               s.requests, ENDPOINTS)
        yield labelled_counter("burrow_discovery_writes", "Entries written, new or a next iteration", ["kind"],
                               s.writes, WRITE_KINDS)
        yield labelled_counter("burrow_discovery_refused", "Requests refused, by reason", ["reason"], s.refused,
                               REFUSED_REASONS)
        g = GaugeMetricFamily("burrow_discovery_entries", "Live entries (as of the last count)", labels=["kind"])
        g.add_metric(["all"], s.entries)
        g.add_metric(["server"], s.servers)
        yield g
        c = CounterMetricFamily("burrow_discovery_store_errors", "Requests that failed because the store did")
        c.add_metric([], s.store_errors)
        yield c


def make_registry(stats: DiscoveryStats) -> CollectorRegistry:
    """The admin port's registry; the Redis store adds common/redis.py's series to it."""
    registry = service_registry()
    registry.register(_Collector(stats))
    return registry
