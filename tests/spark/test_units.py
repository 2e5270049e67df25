"""How the report writes numbers, ranges and time axes (no Spark needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from burrow.spark.report import bucket_labels
from burrow.spark.sessions import SIZE_EDGES, TIME_EDGES
from burrow.spark.svg import line_chart, time_ticks, value_ticks
from burrow.spark.table import Column, table
from burrow.spark.units import count, days, duration, percent, resource_rate, si

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(("value", "unit", "text"), [
    (0, "B", "0 B"), (155, "B", "155 B"), (999.96, "B", "1 kB"), (1234, "B", "1.23 kB"),
    (600_101_388, "B", "600 MB"), (5.2e6, "B/s", "5.2 MB/s"), (2.5e9, "B/s", "2.5 GB/s"), (240e6, "B/s", "240 MB/s"),
    (3.04e3, "B/s", "3.04 kB/s"), (0.5, "B/s", "0.5 B/s"), (1.5e12, "B", "1.5 TB"), (12_345, "", "12.3k"),
])
def test_si_prefixes_with_units(value, unit, text):
    assert si(value, unit) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (0.00045, "0.45 ms"), (0.45, "450 ms"), (2.52, "2.52 s"), (79.1, "79.1 s"), (754, "12.6 min"),
    (9000, "2.5 h"), (3 * 86400, "3 days"),
])
def test_durations_read_in_ms_s_min_h(seconds, text):
    assert duration(seconds) == text


def test_counts_shares_days_and_absent_values():
    assert (count(1_234_567), count(2.5), count(12_345.6), count(None)) == ("1,234,567", "2.5", "12,346", "–")
    assert (percent(0.837), percent(1.0), percent(0.0043), percent(0)) == ("83.7 %", "100 %", "0.43 %", "0 %")
    assert (days(0), days(0.4), days(1.9), days(58.2)) == ("now", "under a day", "1 day", "58 days")
    assert (resource_rate("bytes_per_s", -1.33e6), resource_rate("sessions", 0.0356)) == ("−1.33 MB/s", "+0.0356")


def test_histogram_buckets_are_labelled_as_ranges():
    assert bucket_labels(SIZE_EDGES, "bytes") == [
        "0–1 kB", "1–10 kB", "10–100 kB", "100 kB–1 MB", "1–10 MB", "10–100 MB", "100 MB–1 GB", "1–10 GB", "≥ 10 GB"]
    assert bucket_labels(TIME_EDGES, "duration") == [
        "0–1 s", "1–2 s", "2–5 s", "5–10 s", "10–30 s", "30 s–1 min", "1–2 min", "2–5 min", "5–10 min", "10–30 min",
        "30 min–1 h", "≥ 1 h"]


@pytest.mark.parametrize(("x0", "x1", "labels", "caption"), [
    # a day of hourly points: midnight is written as the date
    (T0, T0 + 23 * 3600, ["Jan 01", "06:00", "12:00", "18:00"], "UTC, 2026-01-01"),
    # 24 hours across midnight
    (T0 + 3600, T0 + 86400 + 3600, ["06:00", "12:00", "18:00", "Jan 02"], "UTC, 2026-01-01 to 2026-01-02"),
    # two days and a bit: hours carry their day
    (T0, T0 + 2 * 86400 + 7200, ["Jan 01", "Jan 01 12:00", "Jan 02", "Jan 02 12:00", "Jan 03"],
     "UTC, 2026-01-01 to 2026-01-03"),
    # 30 days: weekly ticks on Mondays
    (T0, T0 + 29 * 86400, ["Jan 05", "Jan 12", "Jan 19", "Jan 26"], "UTC, 2026"),
    # 30 days of history and a 90-day horizon: months
    (T0, T0 + 119 * 86400, ["Jan 2026", "Feb 2026", "Mar 2026", "Apr 2026"], "UTC"),
    # a few minutes
    (T0 + 600, T0 + 1500, ["00:10", "00:15", "00:20", "00:25"], "UTC, 2026-01-01"),
    # across a new year, days get their year
    (T0 - 4 * 86400, T0 + 4 * 86400, ["2025-12-28", "2025-12-30", "2026-01-01", "2026-01-03", "2026-01-05"], "UTC"),
])
def test_time_ticks_fit_the_span_and_never_repeat(x0, x1, labels, caption):
    ticks, cap = time_ticks(x0, x1)
    assert [label for _, label in ticks] == labels and cap == caption
    assert all(x0 <= t <= x1 for t, _ in ticks)


def test_one_point_gets_an_axis_around_it_with_distinct_labels():
    svg = line_chart("one hour", [("peak", [(T0 + 12 * 3600, 3.0)])], step=3600)
    ticks = [part.split(">", 1)[1].split("<", 1)[0] for part in svg.split('class="xtick"')[1:]]
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks) and "12:00" in ticks
    assert "<circle" in svg  # a lone point is a dot


def test_value_axes_use_round_steps():
    assert value_ticks(5) == [0, 1, 2, 3, 4, 5]
    assert value_ticks(23.7e6) == [0, 5e6, 10e6, 15e6, 20e6, 25e6]
    assert value_ticks(3, integer=True) == [0, 1, 2, 3]
    assert value_ticks(0.4, integer=True) == [0, 1]


def test_tables_merge_repeated_words_but_never_numbers():
    cols = [Column("a", "A", merge=True), Column("b", "B", merge=True), Column("c", "C", merge=True)]
    html = table([{"a": "no forecast", "b": "no forecast", "c": "1"}, {"a": "1", "b": "1", "c": "1"}], cols, raw="t")
    assert '<td class="l" colspan=2>no forecast</td><td class="">1</td>' in html
    assert html.count('<td class="">1</td>') == 4 and 'title="t.a"' in html
