"""Relay load transforms on small explicit DataFrames with hand-computed results."""

from __future__ import annotations

import datetime as dt
import math
import random
import re

import pytest

from burrow.spark.load import daily_peaks, load_per_hour, load_per_minute, rate_window, time_resolution

from .conftest import event, events_df

T0 = dt.datetime(1970, 1, 1)


def minute(m: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=m)


@pytest.fixture(scope="module")
def per_minute(spark):
    rows = [
        # mailbox sessions A [0, 90) with 900 bytes and B [30, 90) with 600 bytes
        event("mailbox", "mailbox", app_id="a", started=0.0, duration=90.0, waiting_time=5.0, mood="happy",
              for_nameplate=True, sides=2, messages=4, bytes=900),
        event("mailbox", "mailbox", app_id="a", started=30.0, duration=60.0, waiting_time=None, mood="lonely",
              for_nameplate=True, sides=1, messages=1, bytes=600),
        # connections [10, 30) and [30, 40): touching, never concurrent
        event("mailbox", "connection", started=10.0, duration=20.0, app_id="a", client_impl="python",
              client_version="0.24.0", messages_in=3, errors=0, close_reason="client"),
        event("mailbox", "connection", started=30.0, duration=10.0, app_id="a", client_impl="python",
              client_version="0.24.0", messages_in=3, errors=0, close_reason="client"),
        event("mailbox", "stats", ts=60.0, interval=60.0, connections=1, mailboxes=1, nameplates=0,
              messages_interval=5),
        # transit pair [120, 180), second side from 140, 1200 bytes
        event("transit", "session", started=120.0, duration=60.0, waiting_time=20.0, mood="happy",
              transport="tcp", bytes_from_first=1000, bytes_from_second=200, total_bytes=1200),
        # relay: three connections ending exactly at 300, when a fourth starts
        *[event("relay", "connection", started=float(s), duration=300.0 - s, protocol="derp",
                transport="upgrade", tls=True, home=True, packets_in=1, packets_out=1, bytes_in=b,
                bytes_out=0, drops={}, close_reason="client")
          for s, b in ((200, 100), (250, 50), (290, 10))],
        event("relay", "connection", started=300.0, duration=30.0, protocol="iroh", transport="websocket",
              tls=False, home=False, packets_in=1, packets_out=1, bytes_in=30, bytes_out=5,
              drops={"queue_full": 2}, close_reason="timeout"),
    ]
    table = load_per_minute(events_df(spark, rows))
    return {(r["service"], r["minute"]): r.asDict() for r in table.collect()}


def test_mailbox_minutes(per_minute):
    m0 = per_minute[("mailbox", minute(0))]
    assert (m0["sessions_peak"], m0["sessions_avg"], m0["connections_peak"], m0["connections_avg"]) == (2, 1.5, 1, 0.5)
    assert m0["bytes"] == pytest.approx(900.0) and m0["starts"] == 2
    assert m0["bytes_per_s"] == pytest.approx(15.0)
    # the busiest second: 10 B/s from A alone until 30, then 20 B/s with B
    assert m0["bytes_per_s_peak"] == pytest.approx(20.0)
    m1 = per_minute[("mailbox", minute(1))]
    assert (m1["sessions_peak"], m1["sessions_avg"], m1["connections_peak"], m1["connections_avg"]) == (2, 1.0, 0, 0.0)
    assert m1["bytes"] == pytest.approx(600.0) and m1["starts"] == 0
    assert {k[1] for k in per_minute if k[0] == "mailbox"} == {minute(0), minute(1)}


def test_transit_counts_both_connections_of_a_pair(per_minute):
    m2 = per_minute[("transit", minute(2))]
    assert (m2["sessions_peak"], m2["connections_peak"]) == (1, 2)
    assert m2["connections_avg"] == pytest.approx(100 / 60)
    assert m2["bytes"] == pytest.approx(1200.0)
    # the pair's bytes move once both sides are there: 1200 B over [140, 180) is 30 B/s, not 20
    assert m2["bytes_per_s_peak"] == pytest.approx(30.0) and m2["bytes_per_s"] == pytest.approx(20.0)
    # the pair ended exactly at 180: nothing is open in minute 3
    m3 = per_minute[("transit", minute(3))]
    assert (m3["sessions_peak"], m3["connections_peak"], m3["bytes"]) == (0, 0, 0.0)


def test_relay_ends_at_the_minute_boundary_are_not_counted(per_minute):
    m3 = per_minute[("relay", minute(3))]
    assert m3["sessions_peak"] == 1  # [180, 240): only the one from 200
    m4 = per_minute[("relay", minute(4))]
    assert m4["sessions_peak"] == 3 and m4["starts"] == 2  # 250 and 290 join the one from 200
    # at 300 three end and one starts: minute 5 never sees more than one
    assert per_minute[("relay", minute(3))]["bytes_per_s_peak"] == pytest.approx(1.0)
    assert m4["bytes_per_s_peak"] == pytest.approx(3.0)  # 1 B/s each, all three in [290, 300)
    m5 = per_minute[("relay", minute(5))]
    assert m5["sessions_peak"] == 1 and m5["sessions_avg"] == pytest.approx(0.5)
    assert m5["bytes"] == pytest.approx(30.0)
    total = sum(r["bytes"] for (svc, _), r in per_minute.items() if svc == "relay")
    assert total == pytest.approx(190.0)


def test_hourly_percentiles_and_daily_peaks(spark, per_minute):
    from pyspark.sql import Row

    rows = [Row(service="relay", minute=minute(m), sessions_peak=m, sessions_avg=float(m), connections_peak=2 * m,
                connections_avg=0.0, bytes=60.0 * m, bytes_per_s=float(m), bytes_per_s_peak=2.0 * m, starts=1)
            for m in range(60)]
    rows.append(Row(service="relay", minute=minute(60), sessions_peak=500, sessions_avg=1.0, connections_peak=7,
                    connections_avg=0.0, bytes=6000.0, bytes_per_s=100.0, bytes_per_s_peak=250.0, starts=3))
    df = spark.createDataFrame(rows)
    hours = load_per_hour(df).collect()
    h0 = hours[0]
    assert h0["sessions_peak"] == 59 and h0["connections_peak"] == 118 and h0["starts"] == 60
    # exact percentile of 0..59 with linear interpolation: p50 = 29.5, p95 = 56.05, p99 = 58.41
    assert h0["sessions_p50"] == pytest.approx(29.5)
    assert h0["sessions_p95"] == pytest.approx(56.05)
    assert h0["sessions_p99"] == pytest.approx(58.41)
    assert h0["bytes_per_s_p50"] == pytest.approx(29.5)  # percentiles of the minute means
    assert (h0["bytes_per_s_peak"], h0["bytes_per_s_busiest_minute"]) == (118.0, 59.0)
    assert hours[1]["sessions_peak"] == 500 and hours[1]["sessions_p99"] == 500
    day = daily_peaks(df).collect()
    assert len(day) == 1
    assert (day[0]["sessions_peak"], day[0]["connections_peak"], day[0]["bytes_per_s_peak"], day[0]["sessions"]) == (
        500, 118, 250.0, 63)
    assert day[0]["bytes_per_s_busiest_minute"] == 100.0


def _relay(started: float, duration: float, nbytes: int) -> dict:
    return event("relay", "connection", started=started, duration=duration, protocol="derp", transport="upgrade",
                 tls=True, home=True, packets_in=1, packets_out=1, bytes_in=nbytes, bytes_out=0, drops={},
                 close_reason="client")


def _brute_force_peaks(spans: list[tuple[float, float, int]], window: int) -> dict[int, float]:
    """minute -> the busiest slot's bytes / window, by summing every interval's even share into
    every slot it touches (a zero-length interval: all of it in its start slot)."""
    slots: dict[int, float] = {}
    for s, d, b in spans:
        e = s + d
        k = math.floor(s / window)
        while k * window < e or (d == 0 and k == math.floor(s / window)):
            share = b if d == 0 else b * (min(e, (k + 1) * window) - max(s, k * window)) / d
            slots[k] = slots.get(k, 0.0) + share
            k += 1
            if d == 0:
                break
    lo = min(math.floor(s / 60) for s, _, _ in spans)
    hi = max(math.floor((s + d) / 60) for s, d, _ in spans)
    return {m: max(slots.get(k, 0.0) for k in range(m * 60 // window, (m + 1) * 60 // window)) / window
            for m in range(lo, hi + 1)}


@pytest.mark.parametrize("window", [1, 10, 60])
def test_busiest_slot_matches_a_brute_force_sum(spark, window):
    """Random intervals (sub-second, zero-length, on slot and minute boundaries, hours long) against a
    slot-by-slot sum; with a 60 s slot the peak is the minute's mean."""
    rnd = random.Random(window)
    spans = []
    for _ in range(120):
        s = rnd.choice([rnd.uniform(0, 900), float(rnd.randint(0, 900)), 60.0 * rnd.randint(0, 15)])
        d = rnd.choice([0.0, rnd.uniform(0, 0.9), rnd.uniform(0, 30), rnd.uniform(0, 400), float(rnd.randint(1, 90))])
        spans.append((s, d, rnd.randint(0, 10_000_000)))
    table = load_per_minute(events_df(spark, [_relay(s, d, b) for s, d, b in spans]), window=window).collect()
    got = {int(r["minute"].timestamp()) // 60: r for r in table}
    want = _brute_force_peaks(spans, window)
    assert set(got) == set(want)
    for m, peak in want.items():
        assert got[m]["bytes_per_s_peak"] == pytest.approx(peak, rel=1e-9, abs=1e-6), m
        assert got[m]["bytes_per_s_peak"] >= got[m]["bytes_per_s"] - 1e-6
        if window == 60:
            assert got[m]["bytes_per_s_peak"] == pytest.approx(got[m]["bytes_per_s"], rel=1e-9, abs=1e-6)


def test_a_burst_shows_at_its_own_rate_beside_the_minute_mean(spark):
    """1 GB relayed in 4 s is 250 MB/s in each of those seconds, and a 16.7 MB/s minute mean."""
    burst = event("transit", "session", started=600.0, duration=10.0, waiting_time=6.0, mood="happy",
                  transport="tcp", bytes_from_first=10**9, bytes_from_second=0, total_bytes=10**9)
    (row,) = load_per_minute(events_df(spark, [burst])).collect()
    assert row["bytes_per_s_peak"] == pytest.approx(250e6)
    assert row["bytes_per_s"] == pytest.approx(1e9 / 60)


def test_time_resolution_of_blurred_and_exact_logs(spark):
    exact = [_relay(1000.25, 5.0, 10), _relay(2000.0, 1.0, 10)]
    assert time_resolution(events_df(spark, exact)) == 0.0
    blurred = [_relay(3600.0 * k, 5.0, 10) for k in (1, 2)] + [_relay(3600.0 * 3 + 60, 1.0, 1)]
    assert time_resolution(events_df(spark, blurred)) == 60.0
    assert time_resolution(events_df(spark, [event("relay", "stats", ts=5.0, interval=60.0, clients=1,
                                                   packets_interval=1, bytes_interval=1, drops_interval={},
                                                   stun_interval=0)])) is None
    assert [rate_window(r) for r in (None, 0.0, 1.0, 10.0, 60.0, 3600.0)] == [1, 1, 1, 10, 60, 60]


# ---------------------------------------------------------------- the sweep's narrow shuffle

def _reference_peaks(iv, window: int):
    """The sweep as first written: every step carries its start count, byte flag and tail through the
    shuffle and sort. `load._peaks` derives those after the sort and must give the same table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from burrow.spark import load

    def step(t, ds, dc, st, dr, pb, is_bytes):
        return F.struct(t.cast("double").alias("t"), ds.alias("ds"), dc.alias("dc"), st.alias("st"),
                        dr.cast("double").alias("dr"), pb.cast("double").alias("pb"), F.lit(is_bytes).alias("b"))

    s, e, b, zero = F.col("start"), F.col("end"), F.col("bytes"), F.lit(0)
    first, last = F.floor(s / window), F.ceil(e / window) - 1
    one_slot, rate = (e <= s) | (last <= first), b / (e - s)
    spans = (b > 0) & ~one_slot
    steps = iv.select("svc", F.explode(F.array(
        step(s, F.col("w_sess"), F.col("w_conn"), F.col("w_sess"), zero, zero, False),
        step(e, -F.col("w_sess"), -F.col("w_conn"), zero, zero, zero, False),
        F.when(b > 0, step(first * window, zero, zero, zero, zero,
                           F.when(one_slot, b).otherwise(rate * ((first + 1) * window - s)), True)),
        F.when(spans, step((first + 1) * window, zero, zero, zero, rate * window, zero, True)),
        F.when(spans, step(last * window, zero, zero, zero, -rate * window, rate * (e - last * window), True)),
    )).alias("s")).where(F.col("s").isNotNull()).select("svc", "s.*")
    minute = load._minute_of(F.col("t"))
    tail = ((minute + 1) * load.MINUTE - F.col("t")).alias("tail")
    steps = steps.select(load._key(F.col("svc"), minute).alias("key"), "t", "ds", "dc", "st", "dr", "pb", "b", tail)
    w = Window.partitionBy("key").orderBy("t")
    upto = w.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    slot_bytes = F.sum("dr").over(upto) + F.sum("pb").over(w.rangeBetween(Window.currentRow, Window.currentRow))
    return (steps.select("*", F.sum("ds").over(upto).alias("ps"), F.sum("dc").over(upto).alias("pc"),
                         F.when(F.col("b"), slot_bytes).alias("pr"))
            .groupBy("key")
            .agg(F.sum("ds").alias("net_s"), F.sum("dc").alias("net_c"), F.max("ps").alias("max_ps"),
                 F.max("pc").alias("max_pc"), F.sum("st").alias("starts"), F.min("t").alias("t_first"),
                 F.sum("dr").alias("net_r"), F.max("pr").alias("max_pr"),
                 F.min(F.when(F.col("b"), F.col("t"))).alias("tb_first"),
                 F.sum(F.col("ds") * F.col("tail")).alias("sess_in"), F.sum(F.col("dc") * F.col("tail")).alias("conn_in"),
                 F.sum(F.col("dr") * F.col("tail") / window + F.col("pb")).alias("bytes_in")))


def _edge_events(spark, tmp_path):
    """Generated logs with malformed lines, ingested, plus sessions of every kind that span minutes,
    start and end at the same instants (on slot and minute boundaries), or last no time at all."""
    from burrow.spark.generate import generate
    from burrow.spark.ingest import ingest
    from burrow.spark.schemas import UNION_FIELDS

    generate(str(tmp_path / "logs"), events=3000, days=1, nodes=2, malformed=3)
    assert ingest(spark, [str(tmp_path / "logs")], str(tmp_path / "out"), log=lambda *a: None).rejected
    rnd, rows, t0 = random.Random(5), [], 1_767_225_600.0  # the generated logs' first minute
    for _ in range(150):
        s = t0 + rnd.choice([60.0 * rnd.randint(0, 5), float(rnd.randint(0, 300)), 120.5, rnd.uniform(0, 300)])
        d = rnd.choice([0.0, 60.0, 180.0 - s % 60, float(rnd.randint(0, 200)), rnd.uniform(0, 200)])
        kind = rnd.randrange(4)
        if kind == 0:
            rows.append(_relay(s, d, rnd.choice([0, rnd.randint(1, 10**6)])))
        elif kind == 1:
            rows.append(event("transit", "session", started=s, duration=d, waiting_time=rnd.choice([None, 0.0, d / 2]),
                              mood="happy", transport="tcp", bytes_from_first=1, bytes_from_second=1, total_bytes=2))
        else:
            rows.append(event("mailbox", ("mailbox", "connection")[kind - 2], started=s, duration=d, app_id="a",
                              sides=2, bytes=rnd.randint(0, 5000)))
    names = [f.name for f in UNION_FIELDS]
    return spark.read.parquet(str(tmp_path / "out/events")).select(*names).unionByName(
        events_df(spark, rows).select(*names))


@pytest.mark.parametrize("window", [1, 10])
def test_the_sweep_equals_the_reference_formulation(spark, tmp_path, monkeypatch, window):
    from burrow.spark import load

    events = _edge_events(spark, tmp_path)
    got = {(r["service"], r["minute"]): r.asDict() for r in load_per_minute(events, window=window).collect()}
    monkeypatch.setattr(load, "_peaks", _reference_peaks)
    want = {(r["service"], r["minute"]): r.asDict() for r in load_per_minute(events, window=window).collect()}
    assert got.keys() == want.keys() and len(got) > 1000
    for key, row in want.items():
        for name, value in row.items():
            assert got[key][name] == (pytest.approx(value, rel=1e-12, abs=1e-9) if isinstance(value, float)
                                      else value), (key, name)


def test_the_sweep_shuffles_only_the_step_columns(spark):
    """The sort's shuffle carries key, t, ds, dc, dr and pb: nothing that can be derived after it."""
    from burrow.spark import load

    iv = load.intervals(events_df(spark, [_relay(10.0, 100.0, 500)]))
    plan = load._peaks(iv, 1)._jdf.queryExecution().executedPlan().toString()
    lines = plan.splitlines()
    at = next(i for i, line in enumerate(lines) if "Exchange hashpartitioning(key" in line)
    assert "Project [" in lines[at + 1]
    assert re.findall(r" AS (\w+)#\d+", lines[at + 1]) == ["key", "t", "ds", "dc", "dr", "pb"]
