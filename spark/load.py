"""Relay load per minute and per hour, per service, from session intervals (never from samples).

A session or connection occupies [started, started + duration) (half-open, so one that ends at t
and one that starts at t never overlap). Each interval carries weights:

| service / event       | sessions | connections                                       | bytes       |
|-----------------------|----------|---------------------------------------------------|-------------|
| mailbox / mailbox     | 1        | 0                                                 | bytes       |
| mailbox / connection  | 0        | 1                                                 | 0           |
| transit / session     | 1        | 1, plus 1 from started + waiting_time when paired | total_bytes |
| relay / connection    | 1        | 1                                                 | bytes_in    |

Bytes count each relayed byte once (what clients sent into the relay) and are spread evenly over
the interval's lifetime (a zero-length interval puts them in its start minute).

Per minute: `sessions_peak` / `connections_peak` are the exact maximum concurrency inside the
minute (a sweep over +1/-1 steps), `*_avg` the time-weighted mean (overlap seconds / 60),
`bytes` the bytes spread into the minute and `bytes_per_s` = bytes / 60, `starts` the sessions that
began in it. Per hour: peaks, and p50/p95/p99 over the hour's minutes (exact `percentile`).
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

MINUTE = 60


# The three services as small codes, and (service, minute) as one long: sorting, shuffling and joining on
# one number is much cheaper than on a string and a number.
SERVICES = ("mailbox", "transit", "relay")
KEY_BITS = 40  # minutes since the epoch fit in 39 bits (either sign) for a million years


def _service_code(svc: Column) -> Column:
    return F.when(svc == SERVICES[0], 0).when(svc == SERVICES[1], 1).otherwise(2)


def _service_name(code: Column) -> Column:
    return F.when(code == 0, SERVICES[0]).when(code == 1, SERVICES[1]).otherwise(SERVICES[2])


def _key(code: Column, minute: Column) -> Column:
    return F.shiftleft(code.cast("long"), KEY_BITS) + minute


def _code_of(key: Column) -> Column:
    return F.shiftright(key + (1 << (KEY_BITS - 1)), KEY_BITS)


def intervals(events: DataFrame) -> DataFrame:
    """Events -> (svc, start, end, w_sess, w_conn, bytes): one row per occupied interval, `svc` the
    service's index in SERVICES.

    One scan: each event yields its own interval and, for a paired transit session, the second
    connection's; an explode of that two-element array keeps the plan free of unions."""
    svc, kind = F.col("service"), F.col("event")
    is_mailbox = (svc == "mailbox") & (kind == "mailbox")
    is_conn = (svc == "mailbox") & (kind == "connection")
    is_transit = (svc == "transit") & (kind == "session")
    is_relay = (svc == "relay") & (kind == "connection")
    end = F.col("started") + F.col("duration")
    nbytes = (F.when(is_mailbox, F.col("bytes")).when(is_transit, F.col("total_bytes"))
              .when(is_relay, F.col("bytes_in")).otherwise(0)).cast("double")
    first = F.struct(F.col("started").alias("start"), end.alias("end"),
                     F.when(is_conn, 0).otherwise(1).alias("w_sess"), F.when(is_mailbox, 0).otherwise(1).alias("w_conn"),
                     nbytes.alias("bytes"))
    second = F.when(is_transit & F.col("waiting_time").isNotNull(), F.struct(
        (F.col("started") + F.col("waiting_time")).alias("start"), end.alias("end"), F.lit(0).alias("w_sess"),
        F.lit(1).alias("w_conn"), F.lit(0.0).alias("bytes")))
    return (events.where(is_mailbox | is_conn | is_transit | is_relay)
            .select(_service_code(svc).alias("svc"), F.explode(F.array(first, second)).alias("i"))
            .where(F.col("i").isNotNull()).select("svc", "i.*"))


def _minute_of(t: Column) -> Column:
    return F.floor(t / MINUTE).cast("long")


def _peaks(iv: DataFrame) -> DataFrame:
    """Exact in-minute maxima: a sweep of +w at start and -w at end. The running sum over a RANGE
    frame applies every step at the same instant together, so each prefix is a real concurrency."""
    steps = iv.select("svc", F.explode(F.array(
        F.struct(F.col("start").alias("t"), F.col("w_sess").alias("ds"), F.col("w_conn").alias("dc"),
                 F.col("w_sess").alias("st")),
        F.struct(F.col("end").alias("t"), (-F.col("w_sess")).alias("ds"), (-F.col("w_conn")).alias("dc"),
                 F.lit(0).alias("st")))).alias("s")).select("svc", "s.*")
    steps = steps.select(_key(F.col("svc"), _minute_of(F.col("t"))).alias("key"), "t", "ds", "dc", "st")
    w = Window.partitionBy("key").orderBy("t").rangeBetween(Window.unboundedPreceding, Window.currentRow)
    return (steps.select("key", "t", "ds", "dc", "st", F.sum("ds").over(w).alias("ps"), F.sum("dc").over(w).alias("pc"))
            .groupBy("key")
            .agg(F.sum("ds").alias("net_s"), F.sum("dc").alias("net_c"), F.max("ps").alias("max_ps"),
                 F.max("pc").alias("max_pc"), F.sum("st").alias("starts"), F.min("t").alias("t_first")))


def _spread(iv: DataFrame) -> DataFrame:
    """Overlap seconds and bytes of every interval in every minute it touches."""
    m = F.col("m")
    lo = F.greatest(F.col("start"), (m * MINUTE).cast("double"))
    hi = F.least(F.col("end"), ((m + 1) * MINUTE).cast("double"))
    length = F.col("end") - F.col("start")
    overlap = F.greatest(hi - lo, F.lit(0.0))
    share = F.when(length > 0, F.col("bytes") * overlap / length).otherwise(F.col("bytes"))
    return (iv.select("*", F.explode(F.sequence(_minute_of(F.col("start")), _minute_of(F.col("end")))).alias("m"))
            .groupBy(_key(F.col("svc"), m).alias("key"))
            .agg(F.sum(overlap * F.col("w_sess")).alias("sess_s"), F.sum(overlap * F.col("w_conn")).alias("conn_s"),
                 F.sum(share).alias("bytes")))


def _with_carry(max_prefix: str) -> Column:
    return F.when(F.col("carry"), F.greatest(F.col(max_prefix), F.lit(0))).otherwise(F.col(max_prefix))


def load_per_minute(events: DataFrame, held: list[DataFrame] | None = None) -> DataFrame:
    """service, minute (timestamp), sessions_peak, sessions_avg, connections_peak, connections_avg,
    bytes, bytes_per_s, starts: one row for every minute from each service's first to last.

    With `held`, the sweep's result (a row per service-minute) is cached and appended there for the
    caller to unpersist: without the cache the optimiser prunes the sweep out of the grid's branch
    and reads every event a third time just for each service's first and last minute."""
    iv = intervals(events).where(F.col("end") >= F.col("start"))
    peaks = _peaks(iv)
    if held is not None:
        peaks = peaks.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(peaks)
    spread = _spread(iv)
    # every interval has a step in its first and its last minute, so the peaks' keys span the grid
    # (no third pass over the intervals)
    grid = (peaks.groupBy(_code_of(F.col("key")).alias("svc")).agg(F.min("key").alias("lo"), F.max("key").alias("hi"))
            .select("svc", F.explode(F.sequence("lo", "hi")).alias("key")))
    table = (grid.join(peaks, "key", "left").join(spread, "key", "left")
             .withColumn("minute", F.col("key") - F.shiftleft(F.col("svc"), KEY_BITS))
             # the level carried in from the previous minute is only reached if nothing happens
             # exactly at the minute's first instant
             .withColumn("carry", F.coalesce(F.col("t_first") > F.col("minute") * MINUTE, F.lit(True)))
             .fillna(0))
    before = Window.partitionBy("svc").orderBy("key").rowsBetween(Window.unboundedPreceding, -1)
    level_s = F.coalesce(F.sum("net_s").over(before), F.lit(0))
    level_c = F.coalesce(F.sum("net_c").over(before), F.lit(0))
    return (table.select(
        _service_name(F.col("svc")).alias("service"),
        F.timestamp_seconds(F.col("minute") * MINUTE).alias("minute"),
        (level_s + _with_carry("max_ps")).cast("long").alias("sessions_peak"),
        (F.col("sess_s") / MINUTE).alias("sessions_avg"),
        (level_c + _with_carry("max_pc")).cast("long").alias("connections_peak"),
        (F.col("conn_s") / MINUTE).alias("connections_avg"),
        F.col("bytes").cast("double").alias("bytes"),
        (F.col("bytes") / MINUTE).alias("bytes_per_s"),
        F.col("starts").cast("long").alias("starts")))


def load_per_hour(per_minute: DataFrame) -> DataFrame:
    """Hourly peaks and exact p50/p95/p99 over the hour's minutes, per service."""
    aggs = [F.max("sessions_peak").alias("sessions_peak"), F.avg("sessions_avg").alias("sessions_avg"),
            F.max("connections_peak").alias("connections_peak"), F.avg("connections_avg").alias("connections_avg"),
            F.sum("bytes").alias("bytes"), F.max("bytes_per_s").alias("bytes_per_s_peak"),
            F.sum("starts").alias("starts")]
    cols = ("sessions_peak", "connections_peak", "bytes_per_s")
    for col in cols:  # one aggregate per column for all three percentiles
        aggs.append(F.percentile(col, [0.5, 0.95, 0.99]).alias(f"_{col}"))
    out = per_minute.groupBy("service", F.date_trunc("hour", "minute").alias("hour")).agg(*aggs)
    for col in cols:
        for i, p in enumerate((50, 95, 99)):
            out = out.withColumn(f"{col.removesuffix('_peak')}_p{p}", F.col(f"_{col}")[i])
        out = out.drop(f"_{col}")
    return out


COMPLETE_DAY_MINUTES = 23 * 60  # a day with less coverage is a partial first or last day


def daily_peaks(per_minute: DataFrame) -> DataFrame:
    """service, day, the day's peak concurrency and peak bytes/s (the capacity plan's input), and
    `complete`: the service's logs cover at least 23 hours of that day."""
    return (per_minute.groupBy("service", F.to_date("minute").alias("day"))
            .agg(F.max("sessions_peak").alias("sessions_peak"), F.max("connections_peak").alias("connections_peak"),
                 F.max("bytes_per_s").alias("bytes_per_s_peak"), F.sum("bytes").alias("bytes"),
                 F.sum("starts").alias("sessions"), F.count(F.lit(1)).alias("minutes"))
            .withColumn("complete", F.col("minutes") >= COMPLETE_DAY_MINUTES))
