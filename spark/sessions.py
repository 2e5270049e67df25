"""Session metrics per service and app id: outcomes, pairing, waiting time, duration, size, trends.

Sessions are mailbox/mailbox, mailbox/nameplate, transit/session and relay/connection events (the
`kind` column keeps mailboxes and nameplates apart). The outcome is the mood; relay connections have
no mood, so their close reason stands in. `paired` means both sides arrived (mailbox: sides >= 2;
nameplate and transit: a waiting time is known); relay connections are not paired (null). `bytes`
is mailbox message bytes, transit total_bytes, relay bytes_in + bytes_out; nameplates carry none.
App ids exist only on the mailbox; other services group under a null app id.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# Histogram bucket lower bounds; each bucket is [edge, next edge).
TIME_EDGES = (0, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
SIZE_EDGES = (0, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000)
GROUP = ["service", "kind", "app_id"]
PERCENTILES = (0.5, 0.95, 0.99)


def session_facts(events: DataFrame) -> DataFrame:
    """Events -> service, kind, app_id, day, started, duration, waiting_time, outcome, paired, bytes."""
    svc, ev = F.col("service"), F.col("event")
    is_mailbox = (svc == "mailbox") & (ev == "mailbox")
    is_nameplate = (svc == "mailbox") & (ev == "nameplate")
    is_transit = (svc == "transit") & (ev == "session")
    is_relay = (svc == "relay") & (ev == "connection")
    paired = (F.when(is_mailbox, F.col("sides") >= 2)
              .when(is_nameplate | is_transit, F.col("waiting_time").isNotNull()))
    nbytes = (F.when(is_mailbox, F.col("bytes")).when(is_transit, F.col("total_bytes"))
              .when(is_relay, F.col("bytes_in") + F.col("bytes_out")))
    return (events.where(is_mailbox | is_nameplate | is_transit | is_relay)
            .select("service", ev.alias("kind"), F.when(svc == "mailbox", F.col("app_id")).alias("app_id"),
                    F.to_date(F.timestamp_seconds("started")).alias("day"), "started", "duration", "waiting_time",
                    F.when(is_relay, F.col("close_reason")).otherwise(F.col("mood")).alias("outcome"),
                    paired.alias("paired"), nbytes.cast("long").alias("bytes")))


def _bucket(col: Column, edges: tuple[int, ...]) -> Column:
    expr = F.lit(float(edges[-1]))
    for lo in reversed(edges[:-1]):
        nxt = edges[edges.index(lo) + 1]
        expr = F.when(col < nxt, F.lit(float(lo))).otherwise(expr)
    return expr


def session_cube(facts: DataFrame) -> DataFrame:
    """Sessions counted per group, outcome and histogram bucket of each metric (null: no value).

    A few thousand rows at most, whatever the input: outcomes and distributions are both sums over it,
    so one plain (codegen, map-side combined) aggregation over the facts serves the two tables."""
    return facts.groupBy(
        *GROUP, "outcome",
        F.when(F.col("duration").isNotNull(), _bucket(F.col("duration"), TIME_EDGES)).alias("b_duration"),
        F.when(F.col("waiting_time").isNotNull(), _bucket(F.col("waiting_time"), TIME_EDGES)).alias("b_waiting_time"),
        F.when(F.col("bytes").isNotNull(), _bucket(F.col("bytes"), SIZE_EDGES)).alias("b_bytes"),
    ).agg(F.count(F.lit(1)).alias("n"))


def outcomes_of(cube: DataFrame) -> DataFrame:
    """service, kind, app_id, outcome, sessions, share (of the group's sessions), from `session_cube`."""
    group = Window.partitionBy(*GROUP)
    return (cube.groupBy(*GROUP, "outcome").agg(F.sum("n").alias("sessions"))
            .select(*GROUP, "outcome", "sessions", (F.col("sessions") / F.sum("sessions").over(group)).alias("share")))


def outcomes(facts: DataFrame) -> DataFrame:
    return outcomes_of(session_cube(facts))


def distributions_of(cube: DataFrame) -> DataFrame:
    """Histograms: service, kind, app_id, metric (waiting_time, duration, bytes), bucket (lower bound),
    sessions. Times in seconds, sizes in bytes, buckets as TIME_EDGES / SIZE_EDGES."""
    long = cube.select(*GROUP, "n", F.explode(F.array(*[
        F.struct(F.lit(m).alias("metric"), F.col(f"b_{m}").alias("bucket"))
        for m in ("waiting_time", "duration", "bytes")])).alias("d"))
    return (long.where(F.col("d.bucket").isNotNull())
            .groupBy(*GROUP, "d.metric", "d.bucket").agg(F.sum("n").alias("sessions")))


def distributions(facts: DataFrame) -> DataFrame:
    return distributions_of(session_cube(facts))


# Distributions over millions of sessions use percentile_approx: exact (an observed value, nearest
# rank) for groups up to about ACCURACY values, within 1/ACCURACY of the rank beyond.
ACCURACY = 10_000


def _pct(col: Column) -> Column:
    """One sketch per column serves all three percentiles (three calls would build three)."""
    return F.percentile_approx(col, list(PERCENTILES), ACCURACY)


def group_stats(facts: DataFrame) -> DataFrame:
    """One aggregation for session_summary and session_daily: every session counts once for its group
    (`all`, day null) and once for its group and day. The bytes sketch is only built for the former."""
    happy = F.col("outcome").isin("happy", "client")
    both = F.explode(F.array(F.struct(F.lit(True).alias("all"), F.lit(None).cast("date").alias("day")),
                             F.struct(F.lit(False).alias("all"), F.col("day").alias("day")))).alias("g")
    cols = [*GROUP, "duration", "waiting_time", "bytes", "paired", "happy"]
    return (facts.select(*GROUP, "duration", "waiting_time", "bytes", "paired", happy.cast("long").alias("happy"), both)
            .select(*cols, "g.*").groupBy(*GROUP, "all", "day").agg(
                F.count(F.lit(1)).alias("sessions"), F.sum("happy").alias("happy"),
                F.sum(F.col("paired").cast("long")).alias("paired"), F.count("paired").alias("pairable"),
                F.avg("duration").alias("duration_mean"), _pct(F.col("duration")).alias("_duration_p"),
                F.avg("waiting_time").alias("waiting_time_mean"), _pct(F.col("waiting_time")).alias("_waiting_time_p"),
                F.sum("bytes").alias("bytes"), _pct(F.when(F.col("all"), F.col("bytes"))).alias("_bytes_p")))


def summary_of(stats: DataFrame) -> DataFrame:
    """Per group: sessions, happy share, pairing success rate, and the distributions' percentiles."""
    pcts = [F.col(f"_{c}_p")[i].alias(f"{c}_p{int(p * 100)}")
            for c in ("duration", "waiting_time", "bytes") for i, p in enumerate(PERCENTILES)]
    return stats.where(F.col("all")).select(
        *GROUP, "sessions", "happy", "paired", "duration_mean", "waiting_time_mean", "bytes",
        (F.col("happy") / F.col("sessions")).alias("happy_rate"),
        F.when(F.col("pairable") > 0, F.col("paired") / F.col("pairable")).alias("pairing_rate"), *pcts)


def summary(facts: DataFrame) -> DataFrame:
    return summary_of(group_stats(facts))


def daily_of(stats: DataFrame) -> DataFrame:
    """Daily trend per group: sessions, happy, paired, bytes, median duration and waiting time."""
    return stats.where(~F.col("all")).select(
        *GROUP, "day", "sessions", "happy", "paired", "bytes",
        F.col("_duration_p")[0].alias("duration_p50"), F.col("_waiting_time_p")[0].alias("waiting_time_p50"))


def daily(facts: DataFrame) -> DataFrame:
    return daily_of(group_stats(facts))
