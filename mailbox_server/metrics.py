"""Prometheus metrics of the mailbox server.

Counters kept by the sans-IO core (messages, errors, refusals, moods) are read at scrape time by a
collector from a `MetricsSnapshot` the server hands over, so the hot path only bumps plain integers
and the metrics know nothing of the server's insides. Labels are bounded: error texts are the fixed
set in `messages.py`, limits and moods are fixed names; no label carries a side, code or address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from burrow.common.metrics import labelled_counter, service_registry

from . import messages

P = "burrow_mailbox_"

# every label value the server can produce, shown at 0 from the start (state.py, protocol.py, memory.py,
# redis_lua.py, store_redis.py, redis_batch.py, wsconn.py, server.py)
MAILBOX_MOODS = ("happy", "lonely", "quiet", "errory", "scary", "pruney", "crowded")
NAMEPLATE_MOODS = ("happy", "lonely", "pruney", "crowded")
ERROR_TEXTS = tuple(v for k, v in vars(messages).items() if k.isupper() and isinstance(v, str)) + (
    "bad websocket frame",)
REFUSAL_LIMITS = ("bind_deadline", "message_bytes", "message_rate", "nameplates", "messages_per_mailbox",
                  "mailbox_bytes", "stored_bytes", "mailboxes_per_connection", "mailboxes", "write_buffer",
                  "connections_total", "connections_per_ip", "store")


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
        yield GaugeMetricFamily(P + "open_connections", "open WebSocket connections", value=snap.connections)
        yield GaugeMetricFamily(P + "mailboxes", "mailboxes stored (open channels)", value=snap.mailboxes)
        yield GaugeMetricFamily(P + "nameplates", "nameplates claimed", value=snap.nameplates)
        yield CounterMetricFamily(P + "messages_total", "messages added", value=snap.messages_total)
        yield GaugeMetricFamily(P + "stored_bytes", "message body bytes held", value=snap.stored_bytes)
        moods: dict[str, int] = {}
        np_moods: dict[str, int] = {}
        for key, n in snap.moods.items():
            if key.startswith("nameplate:"):
                np_moods[key.split(":", 1)[1]] = n
            else:
                moods[key] = n
        yield labelled_counter(P + "sessions", "finished mailboxes by mood (usage result)", ["mood"], moods,
                               MAILBOX_MOODS)
        yield labelled_counter(P + "nameplate_sessions", "finished nameplates by mood", ["mood"], np_moods,
                               NAMEPLATE_MOODS)
        yield labelled_counter(P + "errors", "`error` replies sent, by error text", ["reason"], snap.errors,
                               ERROR_TEXTS)
        yield labelled_counter(P + "refusals", "requests refused by a limit", ["limit"], snap.refusals,
                               REFUSAL_LIMITS)
        yield CounterMetricFamily(P + "commits_total", "database transactions committed",
                                  value=snap.commits)
        yield CounterMetricFamily(P + "store_errors_total", "failed database transactions",
                                  value=snap.store_errors)


class Metrics:
    def __init__(self, snapshot: Callable[[], MetricsSnapshot], replica: str = "") -> None:
        self.registry = service_registry()
        self.registry.register(_CoreCollector(snapshot))
        self.replica = replica
        Info(P + "replica", "this process's replica id (the `replica` label of the Redis series)",
             registry=self.registry).info({"replica": replica})
        self.connections_total = Counter(P + "connections_accepted_total", "WebSocket connections accepted",
                                         registry=self.registry)
        self.latency = Histogram(
            P + "delivery_latency_seconds", "from receiving an `add` to writing it to a subscriber",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry)
        self.commit_seconds = Histogram(
            P + "commit_seconds", "duration of one grouped database transaction",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1),
            registry=self.registry)
