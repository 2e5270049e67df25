"""What every service's Prometheus registry holds besides its own series, and the helpers they share.

`service_registry()` is where each service starts its registry: it adds the standard `process_*` series
(CPU seconds, resident memory, open file descriptors, start time), `python_info`, and
`burrow_build_info{version=...}` (always 1; the version is the installed burrow's). Importing this module
turns off prometheus_client's `*_created` samples for the whole process: they double the series count of
every counter and histogram and no dashboard or alert reads them.

`labelled_counter()` builds a counter family from a dict of counts and a list of every label value the
service knows, so a scrape shows each known series at 0 before its first event (rate() and alerts then
see a series from the start instead of a gap).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

disable_created_metrics()


def burrow_version() -> str:
    try:
        return metadata.version("burrow")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class BuildInfo:
    """`burrow_build_info{version="..."} 1`: which release each process runs (join on it in queries)."""

    def __init__(self, version: str | None = None) -> None:
        self.version = version or burrow_version()

    def collect(self):
        g = GaugeMetricFamily("burrow_build_info", "Always 1; the version label names the running burrow release",
                              labels=["version"])
        g.add_metric([self.version], 1)
        yield g


def service_registry() -> CollectorRegistry:
    """A fresh registry with process_*, python_info and burrow_build_info already in it."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(BuildInfo())
    return registry


def labelled_counter(name: str, doc: str, labels: list[str], counts: Mapping,
                     known: Iterable = ()) -> CounterMetricFamily:
    """A counter family with one sample per label tuple in `known` (0 until counted) and in `counts`.

    Keys of `counts` and items of `known` are tuples of label values, or plain strings for one label.
    """
    values = dict.fromkeys(known, 0)
    values.update(counts)
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, n in values.items():
        family.add_metric([key] if isinstance(key, str) else list(key), n)
    return family
