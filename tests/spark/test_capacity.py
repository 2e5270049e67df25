"""Capacity plan on explicit daily peaks: regression, nodes needed, days until full."""

from __future__ import annotations

import datetime as dt

import pytest

from burrow.spark.capacity import (
    CapacityConfig,
    CapacityConfigError,
    NodeCapacity,
    forecast,
    load_capacity,
    plan,
    plan_by_service,
    trends,
)

D0 = dt.date(2026, 1, 1)


@pytest.fixture(scope="module")
def daily(spark):
    rows = [("transit", D0 + dt.timedelta(days=i), 100 * (i + 1), 10, 1000.0, 1440, True) for i in range(4)]
    rows.append(("transit", D0 + dt.timedelta(days=4), 5, 1, 1.0, 30, False))  # partial last day: ignored
    rows.append(("relay", D0, 50, 50, 10.0, 600, False))  # only partial days: used
    return spark.createDataFrame(rows, "service string, day date, sessions_peak long, connections_peak long, "
                                       "bytes_per_s_peak double, minutes long, complete boolean")


CFG = CapacityConfig(headroom=0.5, horizon_days=10, min_history_days=3, services={
    "transit": NodeCapacity(nodes=1, sessions=1000, connections=100, bytes_per_s=None),
    "relay": NodeCapacity(nodes=2, sessions=40, connections=None, bytes_per_s=None),
})


def test_trend_is_a_least_squares_line_over_complete_days(daily):
    got = {(r["service"], r["resource"]): r for r in trends(daily).collect()}
    s = got[("transit", "sessions")]
    assert (s["days"], s["slope_per_day"], s["r2"], s["peak"], s["trend_now"]) == (
        4, pytest.approx(100.0), pytest.approx(1.0), 400.0, pytest.approx(400.0))
    assert got[("transit", "connections")]["slope_per_day"] == 0.0
    assert got[("relay", "sessions")]["days"] == 1 and got[("relay", "sessions")]["slope_per_day"] is None


def test_plan(daily):
    got = {(r["service"], r["resource"]): r for r in plan(daily, CFG).collect()}
    assert set(got) == {("transit", "sessions"), ("transit", "connections"), ("relay", "sessions")}
    s = got[("transit", "sessions")]
    assert (s["usable_per_node"], s["nodes_needed"]) == (500.0, 1)
    assert s["days_until_full"] == pytest.approx(1.0) and s["full_on"] == dt.date(2026, 1, 5)
    assert s["nodes_needed_horizon"] == 3  # 400 + 10 days x 100 = 1400 over 500 usable
    assert (s["enough_history"], s["peak_horizon"], s["utilisation"]) == (True, pytest.approx(1400.0), 0.8)
    c = got[("transit", "connections")]
    assert c["days_until_full"] is None and c["nodes_needed"] == 1  # flat trend never fills
    r = got[("relay", "sessions")]  # 50 at peak, 2 nodes x 20 usable: already over
    assert (r["nodes_needed"], r["days_until_full"]) == (3, 0.0)
    # one partial day is no history: no forecast, but over capacity is an observation
    assert (r["enough_history"], r["nodes_needed_horizon"], r["peak_horizon"]) == (False, None, None)
    by = {x["service"]: x for x in plan_by_service(plan(daily, CFG)).collect()}
    assert by["transit"]["limiting_resource"] == "sessions" and by["transit"]["days_until_full"] == 1.0
    assert by["relay"]["nodes_needed"] == 3 and by["relay"]["nodes"] == 2
    assert by["relay"]["limiting_resource"] == "sessions" and by["relay"]["enough_history"] is False


def test_without_enough_history_nothing_is_forecast(daily):
    short = CapacityConfig(headroom=0.5, horizon_days=10, min_history_days=14, services=CFG.services)
    got = {(r["service"], r["resource"]): r for r in plan(daily, short).collect()}
    s = got[("transit", "sessions")]  # 4 days of a rising line, but 14 are needed
    assert (s["enough_history"], s["days"], s["nodes_needed"]) == (False, 4, 1)
    assert (s["days_until_full"], s["full_on"], s["nodes_needed_horizon"], s["peak_horizon"]) == (None,) * 4
    by = {x["service"]: x for x in plan_by_service(plan(daily, short)).collect()}
    assert by["transit"]["limiting_resource"] is None and by["transit"]["nodes_needed_horizon"] is None
    assert by["transit"]["busiest_resource"] == "sessions" and by["transit"]["utilisation"] == 0.8
    rows = [r for r in forecast(daily, short).collect() if (r["service"], r["resource"]) == ("transit", "sessions")]
    assert sorted(r["peak"] for r in rows) == [100, 200, 300, 400] and {r["trend"] for r in rows} == {None}


def test_forecast_runs_to_the_horizon(daily):
    rows = [r for r in forecast(daily, CFG).collect() if (r["service"], r["resource"]) == ("transit", "sessions")]
    assert len(rows) == 4 + 10
    last = max(rows, key=lambda r: r["day"])
    assert last["day"] == dt.date(2026, 1, 14) and last["peak"] is None
    assert last["trend"] == pytest.approx(1400.0)


def test_config_file(tmp_path):
    f = tmp_path / "cap.toml"
    f.write_text("headroom = 0.25\n[relay]\nnodes = 3\nbytes_per_s = 5e8\n")
    cfg = load_capacity(str(f))
    assert cfg.headroom == 0.25 and cfg.services["relay"].nodes == 3 and cfg.services["relay"].bytes_per_s == 5e8
    assert cfg.services["relay"].sessions == load_capacity(None).services["relay"].sessions  # default kept
    f.write_text("[relay]\nbandwidth = 1\n")
    with pytest.raises(CapacityConfigError, match="bandwidth"):
        load_capacity(str(f))
    f.write_text("headroom = 1.5\n")
    with pytest.raises(CapacityConfigError, match="headroom"):
        load_capacity(str(f))
    for bad in ("[relay]\nsessions = -5\n", "[relay]\nnodes = 1.5\n", "[relay]\nsessions = 'many'\n",
                "min_history_days = 1\n", "horizon_days = 0\n"):
        f.write_text(bad)
        with pytest.raises(CapacityConfigError):
            load_capacity(str(f))


def test_assumptions_say_where_each_figure_came_from(tmp_path):
    f = tmp_path / "cap.toml"
    f.write_text("min_history_days = 7\n[transit]\nnodes = 2\nbytes_per_s = 1e9\n")
    a = load_capacity(str(f)).assumptions()
    assert a["min_history_days"] == {"value": 7, "source": str(f)}
    assert a["headroom"] == {"value": 0.3, "source": "default"} and a["path"] == str(f)
    rows = {(r["service"], r["resource"]): r for r in a["per_node"]}
    assert rows[("transit", "bytes_per_s")] | {} == {"service": "transit", "resource": "bytes_per_s", "nodes": 2,
                                                     "nodes_source": str(f), "capacity": 1e9, "source": str(f)}
    assert rows[("transit", "sessions")]["source"] == "default"
    assert [r["service"] for r in a["per_node"]][::3] == ["mailbox", "transit", "relay"]
    assert load_capacity(None).assumptions()["path"] is None


def test_config_rows_are_jvm_literals_and_may_be_empty(daily):
    """The capacity figures enter the plan as literals (no Python worker unpickles them), and a config
    without services gives an empty plan rather than an error."""
    plan_text = plan(daily, CFG)._jdf.queryExecution().toString()
    from_python = [line for line in plan_text.splitlines()  # what createDataFrame(list) would make
                   if ("ExistingRDD" in line or "LogicalRDD" in line) and "capacity_per_node" in line]
    assert from_python == []
    assert plan(daily, CapacityConfig(services={})).collect() == []
