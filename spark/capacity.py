"""Capacity plan: nodes needed at peak with headroom, growth of daily peaks, days until full.

Per-node capacity figures come from a TOML or JSON file (`--capacity FILE`); anything it leaves out
keeps the defaults below: conservative round numbers for one 2-core node, to be replaced by what
`make bench` (bench/*.py) measures on the operator's hardware (see docs/spark.md). Example:

    headroom = 0.3          # keep 30 % spare at peak
    [transit]
    nodes = 2               # nodes running today
    sessions = 4000         # concurrent sessions one node carries
    connections = 8000
    bytes_per_s = 80e6

For every service and resource (`sessions`, `connections`, `bytes_per_s`) the plan fits a least
squares line through the daily peaks (x = day, y = that day's peak), and reports:
`nodes_needed` = ceil(observed peak / (capacity x (1 - headroom))), the trend's slope per day, and
`days_until_full` = days until the trend line crosses the usable capacity of today's nodes (0 when it
already has, null when the trend is flat or falling).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field, replace

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

RESOURCES = ("sessions", "connections", "bytes_per_s")
SERVICES = ("mailbox", "transit", "relay")


@dataclass(frozen=True)
class NodeCapacity:
    nodes: int = 1
    sessions: float | None = None
    connections: float | None = None
    bytes_per_s: float | None = None


@dataclass(frozen=True)
class CapacityConfig:
    headroom: float = 0.3
    horizon_days: int = 90  # how far the forecast chart and nodes_needed_horizon look ahead
    services: dict[str, NodeCapacity] = field(default_factory=lambda: dict(DEFAULTS))


# Per-node defaults from our benchmarks on a 2-core node (README "Performance"), rounded down:
# mailbox: 490 pairs/s at ~2 KB of message bodies each (~1 MB/s), 4.9 KiB per idle connection;
# transit: 2.2-2.5 GB/s relayed, the default caps of 10,000 pairs and 30,000 connections;
# relay: 1.9-2.4 Gbit/s of 1200-byte packets on one core (~240 MB/s), 18 KiB per idle TLS connection.
DEFAULTS: dict[str, NodeCapacity] = {
    "mailbox": NodeCapacity(nodes=1, sessions=20_000, connections=40_000, bytes_per_s=1e6),
    "transit": NodeCapacity(nodes=1, sessions=10_000, connections=20_000, bytes_per_s=2e9),
    "relay": NodeCapacity(nodes=1, sessions=50_000, connections=50_000, bytes_per_s=240e6),
}


class CapacityConfigError(ValueError):
    pass


def load_capacity(path: str | None) -> CapacityConfig:
    """Defaults, overridden by the file's values (TOML, or JSON if the name ends in .json)."""
    cfg = CapacityConfig()
    if not path:
        return cfg
    try:
        with open(path, "rb") as fh:
            raw = json.load(fh) if path.endswith(".json") else tomllib.load(fh)
    except (OSError, ValueError) as exc:
        raise CapacityConfigError(f"cannot read capacity file {path}: {exc}") from exc
    services = dict(cfg.services)
    top = {}
    for key, value in raw.items():
        if key in SERVICES:
            if not isinstance(value, dict):
                raise CapacityConfigError(f"{path}: [{key}] must be a table")
            unknown = set(value) - {"nodes", *RESOURCES}
            if unknown:
                raise CapacityConfigError(f"{path}: [{key}] has unknown keys {sorted(unknown)}")
            services[key] = replace(services[key], **value)
        elif key in ("headroom", "horizon_days"):
            top[key] = value
        else:
            raise CapacityConfigError(f"{path}: unknown key {key!r} (expected headroom, horizon_days, "
                                      f"{', '.join(SERVICES)})")
    cfg = replace(cfg, services=services, **top)
    if not 0 <= cfg.headroom < 1:
        raise CapacityConfigError(f"{path}: headroom must be in [0, 1), got {cfg.headroom}")
    return cfg


def _long_peaks(daily: DataFrame) -> DataFrame:
    """daily peaks -> service, day, x (days since the epoch), resource, peak. Only complete days
    count, unless a service has none (logs spanning less than a day): then all of its days do."""
    any_complete = F.max(F.col("complete").cast("int")).over(Window.partitionBy("service"))
    daily = daily.withColumn("_any", any_complete).where(F.col("complete") | (F.col("_any") == 0))
    return daily.select("service", "day", F.unix_date("day").alias("x"), F.explode(F.array(*[
        F.struct(F.lit(r).alias("resource"), F.col(f"{r}_peak").cast("double").alias("peak")) for r in RESOURCES
    ])).alias("p")).select("service", "day", "x", "p.*")


def trends(daily: DataFrame) -> DataFrame:
    """Least squares of daily peaks: service, resource, days, slope_per_day, intercept, r2, last_day,
    last_x, peak (highest observed), trend_now (the line's value on the last day)."""
    return (_long_peaks(daily).groupBy("service", "resource").agg(
        F.count("peak").alias("days"),
        F.regr_slope("peak", "x").alias("slope_per_day"), F.regr_intercept("peak", "x").alias("intercept"),
        F.regr_r2("peak", "x").alias("r2"), F.max("day").alias("last_day"), F.max("x").alias("last_x"),
        F.max("peak").alias("peak"))
        .withColumn("trend_now", F.coalesce(F.col("intercept") + F.col("slope_per_day") * F.col("last_x"),
                                            F.col("peak"))))


def _capacity_rows(daily: DataFrame, cfg: CapacityConfig) -> DataFrame:
    """The config as rows, built from literals in the JVM: createDataFrame of a Python list would start
    Python workers (and need Python on a cluster's executors) just to unpickle a dozen rows."""
    def row(service, resource, nodes, capacity) -> Column:
        return F.struct(F.lit(service).cast("string").alias("service"), F.lit(resource).cast("string").alias("resource"),
                        F.lit(nodes).cast("double").alias("nodes"),
                        F.lit(capacity).cast("double").alias("capacity_per_node"))

    rows = [row(svc, r, cap.nodes, getattr(cap, r)) for svc, cap in cfg.services.items() for r in RESOURCES]
    table = daily.sparkSession.range(1).select(F.inline(F.array(*(rows or [row(None, None, None, None)]))))
    return table if rows else table.where(F.lit(False))


def plan(daily: DataFrame, cfg: CapacityConfig) -> DataFrame:
    """Per service and resource: the peak, capacity, nodes needed now and at the horizon, days until
    today's nodes run out of headroom, and the date that happens."""
    usable = F.col("capacity_per_node") * F.lit(1.0 - cfg.headroom)
    horizon_peak = F.greatest(F.col("peak"), F.coalesce(
        F.col("trend_now") + F.col("slope_per_day") * F.lit(cfg.horizon_days), F.col("peak")))
    until = (F.when(F.col("trend_now") >= F.col("usable_total"), F.lit(0.0))
             .when(F.col("slope_per_day") > 0,
                   (F.col("usable_total") - F.col("trend_now")) / F.col("slope_per_day")))
    return (trends(daily).join(_capacity_rows(daily, cfg), ["service", "resource"])
            .where(F.col("capacity_per_node").isNotNull() & (F.col("capacity_per_node") > 0))
            .withColumn("usable_per_node", usable)
            .withColumn("usable_total", F.col("usable_per_node") * F.col("nodes"))
            .withColumn("nodes_needed", F.greatest(F.lit(1), F.ceil(F.col("peak") / F.col("usable_per_node"))))
            .withColumn("nodes_needed_horizon", F.greatest(F.lit(1), F.ceil(horizon_peak / F.col("usable_per_node"))))
            .withColumn("days_until_full", until)
            .withColumn("full_on", F.date_add("last_day", F.floor(F.col("days_until_full")).cast("int")))
            .select("service", "resource", "days", "peak", "trend_now", "slope_per_day", "r2", "capacity_per_node",
                    "usable_per_node", "nodes", "nodes_needed", "nodes_needed_horizon", "days_until_full", "full_on"))


def plan_by_service(per_resource: DataFrame) -> DataFrame:
    """One line per service: the most nodes any resource needs, and the soonest it runs out."""
    first = Window.partitionBy("service").orderBy(F.col("days_until_full").asc_nulls_last(), "resource")
    return (per_resource.withColumn("rank", F.row_number().over(first))
            .groupBy("service").agg(
                F.max("nodes").cast("long").alias("nodes"), F.max("nodes_needed").alias("nodes_needed"),
                F.max("nodes_needed_horizon").alias("nodes_needed_horizon"),
                F.min("days_until_full").alias("days_until_full"), F.min("full_on").alias("full_on"),
                F.first(F.when(F.col("rank") == 1, F.col("resource")), ignorenulls=True).alias("limiting_resource")))


def forecast(daily: DataFrame, cfg: CapacityConfig) -> DataFrame:
    """service, resource, day, peak (observed or null), trend: from the first day to the horizon."""
    t = trends(daily)
    days = (_long_peaks(daily).groupBy("service", "resource").agg(F.min("day").alias("d0"))
            .join(t.select("service", "resource", "last_day", "slope_per_day", "intercept"), ["service", "resource"])
            .select("service", "resource", "slope_per_day", "intercept", F.explode(F.sequence(
                "d0", F.date_add("last_day", cfg.horizon_days))).alias("day")))
    observed = _long_peaks(daily).select("service", "resource", "day", "peak")
    trend = F.greatest(F.lit(0.0), F.col("intercept") + F.col("slope_per_day") * F.unix_date("day"))
    return (days.join(observed, ["service", "resource", "day"], "left")
            .select("service", "resource", "day", "peak", trend.alias("trend")))
