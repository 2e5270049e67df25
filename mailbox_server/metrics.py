"""Prometheus metrics of the mailbox server.

Counters kept by the sans-IO core (messages, errors, refusals, moods) are read at scrape time by a
collector from a `MetricsSnapshot` the server hands over, so the hot path only bumps plain integers
and the metrics know nothing of the server's insides. Labels are bounded: error texts are the fixed
set in `messages.py`, limits and moods are fixed names; no label carries a side, code or address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

P = "burrow_mailbox_"


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The server's figures at one scrape."""
    connections: int
    mailboxes: int
    nameplates: int
    messages_total: int
    stored_bytes: int
    moods: Mapping[str, int]  # "<mood>" for mailboxes, "nameplate:<mood>" for nameplates
    errors: Mapping[str, int]  # `error` replies by text
    refusals: Mapping[str, int]  # by limit name
    commits: int
    store_errors: int


class _CoreCollector(Collector):
    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        snap = self.snapshot()
        yield GaugeMetricFamily(P + "connections", "open WebSocket connections", value=snap.connections)
        yield GaugeMetricFamily(P + "mailboxes", "mailboxes stored (open channels)", value=snap.mailboxes)
        yield GaugeMetricFamily(P + "nameplates", "nameplates claimed", value=snap.nameplates)
        yield CounterMetricFamily(P + "messages_total", "messages added", value=snap.messages_total)
        yield GaugeMetricFamily(P + "stored_bytes", "message body bytes held", value=snap.stored_bytes)
        moods = CounterMetricFamily(P + "sessions_total", "finished mailboxes by mood (usage result)",
                                    labels=["mood"])
        np_moods = CounterMetricFamily(P + "nameplate_sessions_total", "finished nameplates by mood",
                                       labels=["mood"])
        for key, n in sorted(snap.moods.items()):
            if key.startswith("nameplate:"):
                np_moods.add_metric([key.split(":", 1)[1]], n)
            else:
                moods.add_metric([key], n)
        yield moods
        yield np_moods
        errors = CounterMetricFamily(P + "errors_total", "`error` replies sent, by error text", labels=["reason"])
        for text, n in sorted(snap.errors.items()):
            errors.add_metric([text], n)
        yield errors
        refusals = CounterMetricFamily(P + "refusals_total", "requests refused by a limit", labels=["limit"])
        for name, n in sorted(snap.refusals.items()):
            refusals.add_metric([name], n)
        yield refusals
        yield CounterMetricFamily(P + "commits_total", "database transactions committed",
                                  value=snap.commits)
        yield CounterMetricFamily(P + "store_errors_total", "failed database transactions",
                                  value=snap.store_errors)


class Metrics:
    def __init__(self, snapshot: Callable[[], MetricsSnapshot], replica: str = "") -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(snapshot))
        self.replica = replica
        Info(P + "replica", "this process's replica id (the `replica` label of the Redis series)",
             registry=self.registry).info({"replica": replica})
        self.connections_total = Counter(P + "connections_total", "WebSocket connections accepted",
                                         registry=self.registry)
        self.latency = Histogram(
            P + "delivery_latency_seconds", "from receiving an `add` to writing it to a subscriber",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry)
        self.commit_seconds = Histogram(
            P + "commit_seconds", "duration of one grouped database transaction",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1),
            registry=self.registry)
