"""Session metrics on a small explicit DataFrame with hand-computed results."""

from __future__ import annotations

import datetime as dt

import pytest

from burrow.spark.sessions import daily, distributions, outcomes, session_facts, summary

from .conftest import event, events_df

DAY2 = 86400.0


def _mb(app, mood, sides, waiting, duration, nbytes, started=0.0):
    return event("mailbox", "mailbox", app_id=app, started=started, duration=duration, waiting_time=waiting,
                 mood=mood, for_nameplate=True, sides=sides, messages=2, bytes=nbytes)


@pytest.fixture(scope="module")
def facts(spark):
    rows = [
        _mb("a", "happy", 2, 2.0, 10.0, 1000),
        _mb("a", "happy", 2, 4.0, 30.0, 3000),
        _mb("a", "lonely", 1, None, 100.0, 500),
        _mb("b", "scary", 2, 1.0, 5.0, 0),
        event("mailbox", "nameplate", app_id="a", started=0.0, duration=3.0, waiting_time=3.0, mood="happy"),
        event("mailbox", "nameplate", app_id="a", started=0.0, duration=60.0, waiting_time=None, mood="lonely"),
        event("transit", "session", started=0.0, duration=20.0, waiting_time=0.5, mood="happy", transport="tcp",
              bytes_from_first=9000, bytes_from_second=1000, total_bytes=10_000),
        event("transit", "session", started=DAY2, duration=45.0, waiting_time=None, mood="lonely",
              transport="tcp", bytes_from_first=0, bytes_from_second=0, total_bytes=0),
        event("relay", "connection", started=0.0, duration=600.0, protocol="derp", transport="upgrade", tls=True,
              home=True, packets_in=2, packets_out=1, bytes_in=100, bytes_out=50, drops={}, close_reason="client"),
        event("relay", "connection", started=0.0, duration=30.0, protocol="derp", transport="upgrade", tls=True,
              home=False, packets_in=0, packets_out=0, bytes_in=0, bytes_out=0, drops={}, close_reason="timeout"),
        # not sessions: a WebSocket connection and a stats line
        event("mailbox", "connection", started=0.0, duration=9.0, app_id="a", client_impl="python",
              client_version="0.24.0", messages_in=3, errors=0, close_reason="client"),
        event("transit", "stats", ts=60.0, interval=60.0, pending=0, active_pairs=1, bytes_interval=5),
    ]
    return session_facts(events_df(spark, rows)).cache()


def _key(r):
    return (r["service"], r["kind"], r["app_id"])


def test_facts(facts):
    assert facts.count() == 10
    relay = {r["outcome"]: r for r in facts.where("service = 'relay'").collect()}
    assert relay["client"]["bytes"] == 150 and relay["client"]["paired"] is None
    assert {r["app_id"] for r in facts.where("service != 'mailbox'").collect()} == {None}


def test_outcomes_by_mood(facts):
    got = {(*_key(r), r["outcome"]): (r["sessions"], r["share"]) for r in outcomes(facts).collect()}
    assert got == {
        ("mailbox", "mailbox", "a", "happy"): (2, pytest.approx(2 / 3)),
        ("mailbox", "mailbox", "a", "lonely"): (1, pytest.approx(1 / 3)),
        ("mailbox", "mailbox", "b", "scary"): (1, 1.0),
        ("mailbox", "nameplate", "a", "happy"): (1, 0.5),
        ("mailbox", "nameplate", "a", "lonely"): (1, 0.5),
        ("transit", "session", None, "happy"): (1, 0.5),
        ("transit", "session", None, "lonely"): (1, 0.5),
        ("relay", "connection", None, "client"): (1, 0.5),
        ("relay", "connection", None, "timeout"): (1, 0.5),
    }


def test_summary(facts):
    got = {_key(r): r for r in summary(facts).collect()}
    a = got[("mailbox", "mailbox", "a")]
    assert (a["sessions"], a["happy"], a["paired"]) == (3, 2, 2)
    assert a["pairing_rate"] == pytest.approx(2 / 3) and a["happy_rate"] == pytest.approx(2 / 3)
    assert (a["duration_p50"], a["duration_mean"]) == (30.0, pytest.approx(140 / 3))
    # nearest-rank percentiles (an observed value): p50 of [2, 4] is 2, p95 of [10, 30, 100] is 100
    assert (a["waiting_time_p50"], a["waiting_time_mean"]) == (2.0, 3.0)
    assert (a["bytes"], a["bytes_p50"]) == (4500, 1000)
    assert a["duration_p95"] == 100.0
    t = got[("transit", "session", None)]
    assert (t["sessions"], t["paired"], t["pairing_rate"], t["bytes"]) == (2, 1, 0.5, 10_000)
    r = got[("relay", "connection", None)]
    assert r["pairing_rate"] is None and r["happy_rate"] == 0.5 and r["bytes"] == 150


def test_distributions(facts):
    got = {(*_key(r), r["metric"], r["bucket"]): r["sessions"] for r in distributions(facts).collect()}
    a = {k[3:]: v for k, v in got.items() if k[:3] == ("mailbox", "mailbox", "a")}
    assert a == {("duration", 10.0): 1, ("duration", 30.0): 1, ("duration", 60.0): 1,
                 ("waiting_time", 2.0): 2, ("bytes", 1000.0): 2, ("bytes", 0.0): 1}
    assert got[("relay", "connection", None, "duration", 600.0)] == 1
    assert ("mailbox", "nameplate", "a", "bytes", 0.0) not in got  # nameplates carry no size


def test_daily_trend(facts):
    got = {(*_key(r), r["day"]): r for r in daily(facts).collect()}
    d1, d2 = dt.date(1970, 1, 1), dt.date(1970, 1, 2)
    assert got[("transit", "session", None, d1)]["sessions"] == 1
    assert got[("transit", "session", None, d1)]["happy"] == 1
    assert got[("transit", "session", None, d2)]["happy"] == 0
    assert got[("transit", "session", None, d2)]["waiting_time_p50"] is None
    assert got[("mailbox", "mailbox", "a", d1)]["bytes"] == 4500
