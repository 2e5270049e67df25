"""Session metrics per service and app id: outcomes, pairing, waiting time, duration, size, trends.

Sessions are mailbox/mailbox, mailbox/nameplate, transit/session and relay/connection events (the
`kind` column keeps mailboxes and nameplates apart). The outcome is the mood; relay connections have
no mood, so their close reason stands in. `paired` means both sides arrived (mailbox: sides >= 2;
nameplate and transit: a waiting time is known); relay connections are not paired (null). `bytes`
is mailbox message bytes, transit total_bytes, relay bytes_in + bytes_out; nameplates carry none.
App ids exist only on the mailbox; other services group under a null app id.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
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


def outcomes(facts: DataFrame) -> DataFrame:
    """service, kind, app_id, outcome, sessions, share (of the group's sessions)."""
    counts = facts.groupBy(*GROUP, "outcome").agg(F.count(F.lit(1)).alias("sessions"))
    totals = facts.groupBy(*GROUP).agg(F.count(F.lit(1)).alias("total"))
    return (counts.join(totals, on=[counts[c].eqNullSafe(totals[c]) for c in GROUP])
            .select(*[counts[c] for c in GROUP], "outcome", "sessions",
                    (F.col("sessions") / F.col("total")).alias("share"))
            )


# Distributions over millions of sessions use percentile_approx: exact (an observed value, nearest
# rank) for groups up to about ACCURACY values, within 1/ACCURACY of the rank beyond.
ACCURACY = 10_000


def _pcts(col: str) -> list[Column]:
    """One sketch per column for all three percentiles (three calls would build three)."""
    return [F.percentile_approx(col, list(PERCENTILES), ACCURACY).alias(f"_{col}_p")]


def _unpack(df: DataFrame, cols: tuple[str, ...]) -> DataFrame:
    out = df
    for col in cols:
        for i, p in enumerate(PERCENTILES):
            out = out.withColumn(f"{col}_p{int(p * 100)}", F.col(f"_{col}_p")[i])
        out = out.drop(f"_{col}_p")
    return out


def summary(facts: DataFrame) -> DataFrame:
    """Per group: sessions, happy share, pairing success rate, and the distributions' percentiles."""
    happy = F.col("outcome").isin("happy", "client")
    return _unpack(facts.groupBy(*GROUP).agg(
        F.count(F.lit(1)).alias("sessions"),
        F.sum(happy.cast("long")).alias("happy"),
        F.sum(F.col("paired").cast("long")).alias("paired"),
        F.count("paired").alias("pairable"),
        F.avg("duration").alias("duration_mean"), *_pcts("duration"),
        F.avg("waiting_time").alias("waiting_time_mean"), *_pcts("waiting_time"),
        F.sum("bytes").alias("bytes"), *_pcts("bytes"))
        .withColumn("happy_rate", F.col("happy") / F.col("sessions"))
        .withColumn("pairing_rate", F.when(F.col("pairable") > 0, F.col("paired") / F.col("pairable")))
        .drop("pairable"), ("duration", "waiting_time", "bytes"))


def _bucket(col: Column, edges: tuple[int, ...]) -> Column:
    expr = F.lit(float(edges[-1]))
    for lo in reversed(edges[:-1]):
        nxt = edges[edges.index(lo) + 1]
        expr = F.when(col < nxt, F.lit(float(lo))).otherwise(expr)
    return expr


def distributions(facts: DataFrame) -> DataFrame:
    """Histograms: service, kind, app_id, metric (waiting_time, duration, bytes), bucket (lower bound),
    sessions. Times in seconds, sizes in bytes, buckets as TIME_EDGES / SIZE_EDGES."""
    long = facts.select(*GROUP, F.explode(F.array(
        F.struct(F.lit("waiting_time").alias("metric"), _bucket(F.col("waiting_time"), TIME_EDGES).alias("bucket"),
                 F.col("waiting_time").isNotNull().alias("has")),
        F.struct(F.lit("duration").alias("metric"), _bucket(F.col("duration"), TIME_EDGES).alias("bucket"),
                 F.col("duration").isNotNull().alias("has")),
        F.struct(F.lit("bytes").alias("metric"), _bucket(F.col("bytes"), SIZE_EDGES).alias("bucket"),
                 F.col("bytes").isNotNull().alias("has")))).alias("d"))
    return long.where("d.has").groupBy(*GROUP, "d.metric", "d.bucket").agg(F.count(F.lit(1)).alias("sessions"))


def daily(facts: DataFrame) -> DataFrame:
    """Daily trend per group: sessions, happy, paired, bytes, median duration and waiting time."""
    return (facts.groupBy(*GROUP, "day").agg(
        F.count(F.lit(1)).alias("sessions"),
        F.sum(F.col("outcome").isin("happy", "client").cast("long")).alias("happy"),
        F.sum(F.col("paired").cast("long")).alias("paired"),
        F.sum("bytes").alias("bytes"),
        F.percentile_approx("duration", 0.5, ACCURACY).alias("duration_p50"),
        F.percentile_approx("waiting_time", 0.5, ACCURACY).alias("waiting_time_p50")))
