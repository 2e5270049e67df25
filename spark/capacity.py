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
`nodes_needed` = ceil(observed peak / (capacity x (1 - headroom))), `utilisation` = observed peak /
usable capacity of today's nodes, the trend's slope per day, and `days_until_full` = days until the
trend line crosses the usable capacity of today's nodes (0 when the observed peak or the line
already has, null when the trend is flat or falling).

A trend needs history: with fewer than `min_history_days` complete days the plan forecasts
nothing (`enough_history` false; `nodes_needed_horizon`, `peak_horizon` and the forecast's trend
null; `days_until_full` only 0 when the observed peak is already over).
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
    min_history_days: int = 14  # complete days of daily peaks before a trend is fitted and believed
    services: dict[str, NodeCapacity] = field(default_factory=lambda: dict(DEFAULTS))
    path: str | None = None  # the --capacity file, if any
    from_file: frozenset[str] = frozenset()  # keys the file set: "headroom", "transit.sessions", ...

    def source(self, key: str) -> str:
        """Where a figure came from: the file's name, or "default"."""
        return self.path if key in self.from_file and self.path else "default"

    def assumptions(self) -> dict:
        """Every figure the plan rests on, with where it came from (plain data for the report)."""
        top = {k: {"value": getattr(self, k), "source": self.source(k)}
               for k in ("headroom", "horizon_days", "min_history_days")}
        per_node = [{"service": svc, "resource": res, "nodes": cap.nodes, "nodes_source": self.source(f"{svc}.nodes"),
                     "capacity": getattr(cap, res), "source": self.source(f"{svc}.{res}")}
                    for svc, cap in sorted(self.services.items(), key=lambda kv: SERVICES.index(kv[0])
                                           if kv[0] in SERVICES else len(SERVICES)) for res in RESOURCES]
        return {**top, "path": self.path, "per_node": per_node}


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


TOP_KEYS = ("headroom", "horizon_days", "min_history_days")


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
    top, keys = {}, set()
    for key, value in raw.items():
        if key in SERVICES:
            if not isinstance(value, dict):
                raise CapacityConfigError(f"{path}: [{key}] must be a table")
            unknown = set(value) - {"nodes", *RESOURCES}
            if unknown:
                raise CapacityConfigError(f"{path}: [{key}] has unknown keys {sorted(unknown)}")
            for k, v in value.items():
                ok = isinstance(v, int) and v >= 1 if k == "nodes" else isinstance(v, int | float) and v > 0
                if isinstance(v, bool) or not ok:
                    raise CapacityConfigError(f"{path}: [{key}] {k} must be a positive "
                                              f"{'whole number' if k == 'nodes' else 'number'}, got {v!r}")
            services[key] = replace(services[key], **value)
            keys |= {f"{key}.{k}" for k in value}
        elif key in TOP_KEYS:
            top[key] = value
            keys.add(key)
        else:
            raise CapacityConfigError(f"{path}: unknown key {key!r} (expected {', '.join(TOP_KEYS)}, "
                                      f"{', '.join(SERVICES)})")
    cfg = replace(cfg, services=services, path=path, from_file=frozenset(keys), **top)
    if not 0 <= cfg.headroom < 1:
        raise CapacityConfigError(f"{path}: headroom must be in [0, 1), got {cfg.headroom}")
    for key in ("horizon_days", "min_history_days"):
        if not isinstance(getattr(cfg, key), int) or getattr(cfg, key) < 1:
            raise CapacityConfigError(f"{path}: {key} must be a whole number of days >= 1, got {getattr(cfg, key)!r}")
    if cfg.min_history_days < 2:
        raise CapacityConfigError(f"{path}: min_history_days must be at least 2 (a line needs two days)")
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
    """Per service and resource: the peak, capacity, use of today's nodes, nodes needed now and at
    the horizon, days until today's nodes run out of headroom, and the date that happens. Only with
    `min_history_days` of history does anything come from the trend."""
    usable = F.col("capacity_per_node") * F.lit(1.0 - cfg.headroom)
    enough = F.col("enough_history")
    trend_at_horizon = F.col("trend_now") + F.col("slope_per_day") * F.lit(cfg.horizon_days)
    peak_horizon = F.when(enough, F.greatest(F.col("peak"), F.coalesce(trend_at_horizon, F.col("peak"))))
    over_now = (F.col("peak") >= F.col("usable_total")) | (enough & (F.col("trend_now") >= F.col("usable_total")))
    until = (F.when(over_now, F.lit(0.0))
             .when(enough & (F.col("slope_per_day") > 0),
                   (F.col("usable_total") - F.col("trend_now")) / F.col("slope_per_day")))
    return (trends(daily).join(_capacity_rows(daily, cfg), ["service", "resource"])
            .where(F.col("capacity_per_node").isNotNull() & (F.col("capacity_per_node") > 0))
            .withColumn("enough_history", F.col("days") >= F.lit(cfg.min_history_days))
            .withColumn("usable_per_node", usable)
            .withColumn("usable_total", F.col("usable_per_node") * F.col("nodes"))
            .withColumn("utilisation", F.col("peak") / F.col("usable_total"))
            .withColumn("nodes_needed", F.greatest(F.lit(1), F.ceil(F.col("peak") / F.col("usable_per_node"))))
            .withColumn("peak_horizon", peak_horizon)
            .withColumn("nodes_needed_horizon", F.when(  # greatest() skips nulls: keep "no forecast" null
                enough, F.greatest(F.lit(1), F.ceil(F.col("peak_horizon") / F.col("usable_per_node")))))
            .withColumn("days_until_full", until)
            .withColumn("full_on", F.date_add("last_day", F.floor(F.col("days_until_full")).cast("int")))
            .select("service", "resource", "days", "enough_history", "peak", "trend_now", "slope_per_day", "r2",
                    "capacity_per_node", "usable_per_node", "nodes", "utilisation", "nodes_needed", "peak_horizon",
                    "nodes_needed_horizon", "days_until_full", "full_on"))


def plan_by_service(per_resource: DataFrame) -> DataFrame:
    """One line per service: the most nodes any resource needs, the soonest one fills and which
    (`limiting_resource`, null when none fills), and the most used resource today (`busiest_resource`)."""
    first = Window.partitionBy("service").orderBy(F.col("days_until_full").asc_nulls_last(), "resource")
    busiest = Window.partitionBy("service").orderBy(F.col("utilisation").desc_nulls_last(), "resource")
    return (per_resource.withColumn("rank", F.row_number().over(first))
            .withColumn("use_rank", F.row_number().over(busiest))
            .groupBy("service").agg(
                F.max("nodes").cast("long").alias("nodes"), F.min("days").alias("days"),
                F.bool_and("enough_history").alias("enough_history"),
                F.max("nodes_needed").alias("nodes_needed"),
                F.max("nodes_needed_horizon").alias("nodes_needed_horizon"),
                F.min("days_until_full").alias("days_until_full"), F.min("full_on").alias("full_on"),
                F.first(F.when((F.col("rank") == 1) & F.col("days_until_full").isNotNull(), F.col("resource")),
                        ignorenulls=True).alias("limiting_resource"),
                F.max("utilisation").alias("utilisation"),
                F.first(F.when(F.col("use_rank") == 1, F.col("resource")), ignorenulls=True).alias("busiest_resource")))


def forecast(daily: DataFrame, cfg: CapacityConfig) -> DataFrame:
    """service, resource, day, peak (observed or null), trend: from the first day to the horizon when
    there is enough history, else the observed days only with a null trend."""
    t = trends(daily).withColumn("enough", F.col("days") >= F.lit(cfg.min_history_days))
    days = (_long_peaks(daily).groupBy("service", "resource").agg(F.min("day").alias("d0"))
            .join(t.select("service", "resource", "last_day", "slope_per_day", "intercept", "enough"),
                  ["service", "resource"])
            .select("service", "resource", "slope_per_day", "intercept", "enough", F.explode(F.sequence(
                "d0", F.date_add("last_day", F.when(F.col("enough"), cfg.horizon_days).otherwise(0)))).alias("day")))
    observed = _long_peaks(daily).select("service", "resource", "day", "peak")
    trend = F.when(F.col("enough"), F.greatest(F.lit(0.0), F.col("intercept") + F.col("slope_per_day")
                                               * F.unix_date("day")))
    return (days.join(observed, ["service", "resource", "day"], "left")
            .select("service", "resource", "day", "peak", trend.alias("trend")))
