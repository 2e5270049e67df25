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
the time they can have moved: a transit pair's bytes over the time both sides were there (from
started + waiting_time), everything else over its whole interval (a zero-length interval puts them
in its start instant). The logs carry each session's total, not when within it the bytes moved, so
an even spread is the finest honest assumption.

Per minute: `sessions_peak` / `connections_peak` are the exact maximum concurrency inside the
minute (a sweep over +1/-1 steps), `*_avg` the time-weighted mean (overlap seconds / 60),
`bytes` the bytes spread into the minute and `bytes_per_s` = bytes / 60 (the minute's mean rate),
`bytes_per_s_peak` the busiest one-second window of the minute (or of `window` seconds when the
logs' times are rounded more coarsely, see `time_resolution`), `starts` the sessions that began in
it. Per hour: peaks, and p50/p95/p99 over the hour's minutes (exact `percentile`).
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
    connection's (which carries the pair's bytes: nothing is relayed before both sides are there);
    an explode of that two-element array keeps the plan free of unions."""
    svc, kind = F.col("service"), F.col("event")
    is_mailbox = (svc == "mailbox") & (kind == "mailbox")
    is_conn = (svc == "mailbox") & (kind == "connection")
    is_transit = (svc == "transit") & (kind == "session")
    is_relay = (svc == "relay") & (kind == "connection")
    paired = is_transit & F.col("waiting_time").isNotNull()
    end = F.col("started") + F.col("duration")
    nbytes = (F.when(is_mailbox, F.col("bytes")).when(is_transit, F.col("total_bytes"))
              .when(is_relay, F.col("bytes_in")).otherwise(0)).cast("double")
    first = F.struct(F.col("started").alias("start"), end.alias("end"),
                     F.when(is_conn, 0).otherwise(1).alias("w_sess"), F.when(is_mailbox, 0).otherwise(1).alias("w_conn"),
                     F.when(paired, F.lit(0.0)).otherwise(nbytes).alias("bytes"))
    second = F.when(paired, F.struct(
        (F.col("started") + F.col("waiting_time")).alias("start"), end.alias("end"), F.lit(0).alias("w_sess"),
        F.lit(1).alias("w_conn"), nbytes.alias("bytes")))
    return (events.where(is_mailbox | is_conn | is_transit | is_relay)
            .select(_service_code(svc).alias("svc"), F.explode(F.array(first, second)).alias("i"))
            .where(F.col("i").isNotNull()).select("svc", "i.*"))


def _minute_of(t: Column) -> Column:
    return F.floor(t / MINUTE).cast("long")


def _step(t: Column, ds: Column, dc: Column, dr: Column, pb: Column) -> Column:
    return F.struct(t.cast("double").alias("t"), ds.alias("ds"), dc.alias("dc"),
                    dr.cast("double").alias("dr"), pb.cast("double").alias("pb"))


def _byte_steps(window: int) -> list[Column]:
    """An interval's bytes as rows of the sweep, in slots of `window` seconds (slot k is [k w, (k+1) w)):
    the partial first slot, a +bytes-per-slot step at the first slot it fills, a - step and the partial
    last slot. The bytes of slot k are then the sum of the steps up to k plus the partials in k, and
    never less in a slot with rows than in the empty slots after it (partials are never negative)."""
    s, e, b = F.col("start"), F.col("end"), F.col("bytes")
    first, last = F.floor(s / window), F.ceil(e / window) - 1
    one_slot = (e <= s) | (last <= first)
    rate = b / (e - s)  # bytes per second, even over the interval
    full = rate * window  # bytes in a slot it fills
    zero = F.lit(0)
    spans = (b > 0) & ~one_slot
    return [
        F.when(b > 0, _step(first * window, zero, zero, zero,
                            F.when(one_slot, b).otherwise(rate * ((first + 1) * window - s)))),
        F.when(spans, _step((first + 1) * window, zero, zero, full, zero)),
        F.when(spans, _step(last * window, zero, zero, -full, rate * (e - last * window))),
    ]


def _peaks(iv: DataFrame, window: int) -> DataFrame:
    """Exact in-minute maxima: a sweep of +w at start and -w at end. The running sum over a RANGE
    frame applies every step at the same instant together, so each prefix is a real concurrency.
    The same sort serves the busiest byte slot: its rows sit at the slot's first instant.

    The sort and its shuffle carry only what cannot be derived after them: a session step changes
    sessions or connections (never both weights 0) and a byte step neither, so `ds = dc = 0` marks
    byte steps; a start is the positive part of `ds`; a step's tail is a function of its time."""
    zero = F.lit(0)
    steps = iv.select("svc", F.explode(F.array(
        _step(F.col("start"), F.col("w_sess"), F.col("w_conn"), zero, zero),
        _step(F.col("end"), -F.col("w_sess"), -F.col("w_conn"), zero, zero),
        *_byte_steps(window))).alias("s")).where(F.col("s").isNotNull()).select("svc", "s.*")
    steps = steps.select(_key(F.col("svc"), _minute_of(F.col("t"))).alias("key"), "t", "ds", "dc", "dr", "pb")
    is_bytes = (F.col("ds") == 0) & (F.col("dc") == 0)
    # seconds from the step to the end of its minute: a step's share of the minute's integral
    tail = (_minute_of(F.col("t")) + 1) * MINUTE - F.col("t")
    w = Window.partitionBy("key").orderBy("t")
    upto = w.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    slot_bytes = F.sum("dr").over(upto) + F.sum("pb").over(w.rangeBetween(Window.currentRow, Window.currentRow))
    return (steps.select("key", "t", "ds", "dc", "dr", "pb", F.sum("ds").over(upto).alias("ps"),
                         F.sum("dc").over(upto).alias("pc"), F.when(is_bytes, slot_bytes).alias("pr"))
            .groupBy("key")
            .agg(F.sum("ds").alias("net_s"), F.sum("dc").alias("net_c"), F.max("ps").alias("max_ps"),
                 F.max("pc").alias("max_pc"), F.sum(F.greatest("ds", zero)).alias("starts"), F.min("t").alias("t_first"),
                 F.sum("dr").alias("net_r"), F.max("pr").alias("max_pr"),
                 F.min(F.when(is_bytes, F.col("t"))).alias("tb_first"),
                 # the in-minute part of the overlap seconds and bytes (see `load_per_minute`)
                 F.sum(F.col("ds") * tail).alias("sess_in"), F.sum(F.col("dc") * tail).alias("conn_in"),
                 F.sum(F.col("dr") * tail / window + F.col("pb")).alias("bytes_in")))


def _with_carry(max_prefix: str, carry: str = "carry") -> Column:
    return F.when(F.col(carry), F.greatest(F.col(max_prefix), F.lit(0))).otherwise(F.col(max_prefix))


def load_per_minute(events: DataFrame, held: list[DataFrame] | None = None, window: int = 1) -> DataFrame:
    """service, minute (timestamp), sessions_peak, sessions_avg, connections_peak, connections_avg,
    bytes, bytes_per_s, bytes_per_s_peak, starts: one row for every minute from each service's first
    to last. `window` (seconds, a divisor of 60) is the slot of `bytes_per_s_peak`.

    With `held`, the sweep's result (a row per service-minute) is cached and appended there for the
    caller to unpersist: without the cache the optimiser prunes the sweep out of the grid's branch
    and reads every event a third time just for each service's first and last minute."""
    if window <= 0 or MINUTE % window:
        raise ValueError(f"window must divide {MINUTE} s, got {window}")
    iv = intervals(events).where(F.col("end") >= F.col("start"))
    peaks = _peaks(iv, window)
    if held is not None:
        peaks = peaks.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(peaks)
    # every interval has a step in its first and its last minute, so the peaks' keys span the grid
    # (no second pass over the intervals)
    grid = (peaks.groupBy(_code_of(F.col("key")).alias("svc")).agg(F.min("key").alias("lo"), F.max("key").alias("hi"))
            .select("svc", F.explode(F.sequence("lo", "hi")).alias("key")))
    table = (grid.join(peaks, "key", "left")
             .withColumn("minute", F.col("key") - F.shiftleft(F.col("svc"), KEY_BITS))
             # the level carried in from the previous minute is only reached if nothing happens
             # exactly at the minute's first instant (the same for the byte rate and its first slot)
             .withColumn("carry", F.coalesce(F.col("t_first") > F.col("minute") * MINUTE, F.lit(True)))
             .withColumn("carry_r", F.coalesce(F.col("tb_first") > F.col("minute") * MINUTE, F.lit(True)))
             .withColumn("byte_steps", F.col("tb_first").isNotNull())
             .fillna(0))
    before = Window.partitionBy("svc").orderBy("key").rowsBetween(Window.unboundedPreceding, -1)
    level_s = F.coalesce(F.sum("net_s").over(before), F.lit(0))
    level_c = F.coalesce(F.sum("net_c").over(before), F.lit(0))
    level_r = F.coalesce(F.sum("net_r").over(before), F.lit(0.0))
    # +rate and -rate steps cancel only up to rounding: never report a tiny negative rate
    slot_peak = F.greatest(level_r + _with_carry("max_pr", "carry_r"), F.lit(0.0))
    # The overlap seconds (and bytes) of a minute are the integral of the sweep's level over it: the
    # level carried in for the whole minute plus each step's delta for the rest of the minute after it.
    # So the sweep's one sort serves the means too, with no explode of every interval into its minutes.
    # The terms cancel only up to rounding: never report a tiny negative.
    sess_s = F.greatest(level_s * MINUTE + F.col("sess_in"), F.lit(0.0))
    conn_s = F.greatest(level_c * MINUTE + F.col("conn_in"), F.lit(0.0))
    # Every interval with bytes lies inside a session's, so with no session carried in and no byte step
    # in the minute it moved nothing: exactly 0, not the running sum's rounding residue.
    idle = (level_s == 0) & ~F.col("byte_steps")
    nbytes = F.when(idle, F.lit(0.0)).otherwise(
        F.greatest(level_r * (MINUTE // window) + F.col("bytes_in"), F.lit(0.0)))
    return (table.select(
        _service_name(F.col("svc")).alias("service"),
        F.timestamp_seconds(F.col("minute") * MINUTE).alias("minute"),
        (level_s + _with_carry("max_ps")).cast("long").alias("sessions_peak"),
        (sess_s / MINUTE).alias("sessions_avg"),
        (level_c + _with_carry("max_pc")).cast("long").alias("connections_peak"),
        (conn_s / MINUTE).alias("connections_avg"),
        nbytes.alias("bytes"),
        (nbytes / MINUTE).alias("bytes_per_s"),
        (slot_peak / window).alias("bytes_per_s_peak"),
        F.col("starts").cast("long").alias("starts")))


# Steps (seconds) that every session start may be a multiple of: --blur-usage rounds `started` down
# to its interval. The busiest-slot rate uses the finest one that divides a minute.
RESOLUTIONS = (86400, 3600, 1800, 900, 600, 300, 60, 30, 15, 10, 5, 2, 1)


def time_resolution(events: DataFrame) -> float | None:
    """The coarsest of RESOLUTIONS that every session start is a multiple of, 0.0 when starts carry
    fractions of a second, None when there are no sessions. One small job over one column."""
    started = F.col("started")
    row = events.where(started.isNotNull() & (F.col("event") != "stats")).agg(
        F.count(started).alias("n"), *[F.min((started % n == 0).cast("int")).alias(f"r{n}") for n in RESOLUTIONS]
    ).first()
    if not row or not row["n"]:
        return None
    return next((float(n) for n in RESOLUTIONS if row[f"r{n}"] == 1), 0.0)


def rate_window(resolution: float | None) -> int:
    """The slot of `bytes_per_s_peak` for logs of that time resolution: 1 s, the rounding step when
    it divides a minute, else the minute itself."""
    if not resolution or resolution <= 1:
        return 1
    return int(resolution) if resolution < MINUTE and MINUTE % resolution == 0 else MINUTE


def load_per_hour(per_minute: DataFrame) -> DataFrame:
    """Hourly peaks and exact p50/p95/p99 over the hour's minutes, per service. `bytes_per_s_peak`
    is the busiest slot (second) of the hour, `bytes_per_s_busiest_minute` the highest minute mean,
    `bytes_per_s_p50/95/99` percentiles of the minute means."""
    aggs = [F.max("sessions_peak").alias("sessions_peak"), F.avg("sessions_avg").alias("sessions_avg"),
            F.max("connections_peak").alias("connections_peak"), F.avg("connections_avg").alias("connections_avg"),
            F.sum("bytes").alias("bytes"), F.max("bytes_per_s_peak").alias("bytes_per_s_peak"),
            F.max("bytes_per_s").alias("bytes_per_s_busiest_minute"), F.sum("starts").alias("starts")]
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
    """service, day, the day's peak concurrency and peak bytes/s (busiest slot: the capacity plan's
    input), the busiest minute's mean rate, and `complete`: the service's logs cover at least 23
    hours of that day."""
    return (per_minute.groupBy("service", F.to_date("minute").alias("day"))
            .agg(F.max("sessions_peak").alias("sessions_peak"), F.max("connections_peak").alias("connections_peak"),
                 F.max("bytes_per_s_peak").alias("bytes_per_s_peak"),
                 F.max("bytes_per_s").alias("bytes_per_s_busiest_minute"), F.sum("bytes").alias("bytes"),
                 F.sum("starts").alias("sessions"), F.count(F.lit(1)).alias("minutes"))
            .withColumn("complete", F.col("minutes") >= COMPLETE_DAY_MINUTES))
