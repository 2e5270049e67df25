"""The self-contained HTML report: inline CSS and SVG only, so it opens offline from a file.

`render(data)` takes plain Python rows (dicts) that `spark.job` collected from the small result tables;
it needs no Spark and no network. Figures carry human names and units here; the tables on disk keep
their raw column names (each header's tooltip gives it).
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

from .report_plan import assumptions, capacity_section, what_to_do
from .sessions import SIZE_EDGES, TIME_EDGES
from .svg import HOUR, bar_chart, histogram, line_chart
from .table import Column, epoch, table
from .units import count, duration, percent, short_duration, si

CSS = """body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:1180px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
.grid{display:flex;flex-wrap:wrap;gap:12px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f0f0f0;font-weight:600}th[title]{cursor:help}td.l,th.l{text-align:left}
.note{color:#555;font-size:12px;max-width:1100px}.warn{color:#a40}.lead{font-size:14px;margin-top:0}
.empty{background:#f7f7f7;border-left:4px solid #999;padding:8px 12px;font-size:13px;max-width:1100px}
.box,.todo{border:1px solid #ccc;border-radius:4px;padding:4px 16px;font-size:13px;max-width:1100px}
.todo ul{list-style:none;padding:0}.todo li{margin:8px 0;line-height:1.5}.why{color:#444}
.badge{display:inline-block;min-width:150px;font-size:11px;font-weight:600;padding:1px 6px;border-radius:3px;
color:#fff;text-align:center;margin-right:6px}.badge.over{background:#c0392b}.badge.soon{background:#d68910}
.badge.ok{background:#1e8449}.badge.unknown{background:#5d6d7e}.badge.idle{background:#aab7b8}
pre{background:#f7f7f7;padding:8px;font-size:12px;display:inline-block;min-width:320px}"""

SERVICES = ("mailbox", "transit", "relay")
KINDS = {("mailbox", "mailbox"): "mailboxes", ("mailbox", "nameplate"): "nameplates",
         ("transit", "session"): "sessions", ("relay", "connection"): "connections"}
METRICS = {"waiting_time": "waiting time", "duration": "duration", "bytes": "bytes per session"}


def _service_order(svc: str) -> int:
    return SERVICES.index(svc) if svc in SERVICES else len(SERVICES)


def bucket_labels(edges: tuple[int, ...], metric: str) -> list[str]:
    """Each bucket as the range it counts, [edge, next edge): "0–1 kB", "30 s–1 min", "≥ 10 GB"."""
    def fmt(v: float) -> str:
        return si(v, "B") if metric == "bytes" else short_duration(v)

    labels = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        a, b = fmt(lo), fmt(hi)
        unit = b.split(" ", 1)[1]
        a_num, _, a_unit = a.partition(" ")
        labels.append(f"{a_num}–{b}" if a_unit == unit or lo == 0 else f"{a}–{b}")
    labels.append(f"≥ {fmt(edges[-1])}")
    return labels


def _header(meta: dict, empty: bool) -> list[str]:
    days = meta.get("days") or []
    if days:
        span = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"
        n = len(days)
        cover = f"Logs from {span} ({n} day{'' if n == 1 else 's'} with events)"
    else:
        cover = "No events in the logs"
    parts = [f'<p class="lead">{escape(cover)}: {meta["events"]:,} events. Times are UTC.</p>',
             f'<p class="note">Generated {escape(meta["generated"])} from {escape(", ".join(meta["logs"]))}. '
             f'{escape(meta["ingest"])}. Every figure is also in <code>tables/*.csv</code> and Parquet under its '
             f'raw column name (hover a column header to see it).</p>']
    if meta.get("rejected"):
        parts.append('<p class="warn">Lines kept aside in quarantine/: '
                     + escape(", ".join(f"{k}: {v}" for k, v in sorted(meta["rejected"].items()))) + "</p>")
    if meta.get("unknown_versions"):
        parts.append('<p class="warn">Unknown schema versions: '
                     + escape(", ".join(f"v={k}: {v} lines" for k, v in sorted(meta["unknown_versions"].items())))
                     + "</p>")
    if empty:
        parts.append(f'<p class="empty"><b>No finished sessions or connections in these logs yet.</b> The '
                     f'{meta["events"]:,} events read are periodic stats lines: they show the servers '
                     f'running, but there is no session to measure load, sessions or capacity from. A session is '
                     f'logged when it ends; run the report again once clients have used the servers.</p>')
    return parts


def resolution_note(meta: dict) -> str:
    res, window = meta.get("time_resolution"), meta.get("rate_window", 1)
    exact = ("Session times in these logs carry fractions of a second" if not res else
             f"Session start times in these logs are rounded down to {short_duration(res)} (<code>--blur-usage</code>)")
    conc = ("Concurrency peaks are exact: the count of sessions open at any instant, checked at every start and end."
            if not res else "Concurrency peaks are counted at every start and end, but with rounded start times "
                            f"sessions may sit up to {short_duration(res)} earlier than they were: treat them as "
                            "approximate.")
    slot = "second" if window == 1 else f"{short_duration(window)} window" if window < 60 else "minute"
    rate = (f"Throughput peaks are the busiest {slot}: the logs record each session's total bytes with its start "
            "and end, not when within the session the bytes moved, so each session counts at its own average rate "
            "(a transit transfer from the moment both sides are there). A burst inside a long relay connection is "
            "spread over that connection's life; the stats lines' per-minute byte counters are coarser still.")
    if window == 60:
        rate += " With times rounded to a minute or more, the busiest minute's mean is the finest honest figure."
    return f'<p class="note">{exact}. {conc} {rate} The per-minute means are shown beside the peaks.</p>'


def _peaks_table(hours: list[dict], window: int) -> str:
    per: dict[str, dict] = {}
    for r in hours:
        p = per.setdefault(r["service"], {"service": r["service"], "sessions_peak": 0, "connections_peak": 0,
                                          "bytes_per_s_peak": 0.0, "bytes_per_s_busiest_minute": 0.0,
                                          "sessions_avg": 0.0, "bytes": 0.0, "starts": 0})
        for k in ("sessions_peak", "connections_peak", "bytes_per_s_peak", "bytes_per_s_busiest_minute",
                  "sessions_avg"):
            p[k] = max(p[k], r.get(k) or 0)
        p["bytes"] += r["bytes"] or 0
        p["starts"] += r["starts"] or 0
    slot = "second" if window == 1 else f"{window} s" if window < 60 else "minute"
    cols = [Column("service", "Service", left=True),
            Column("sessions_peak", "Peak concurrent sessions (any instant)", lambda v, r: count(v)),
            Column("sessions_avg", "Busiest hour's mean concurrent sessions", lambda v, r: count(round(v, 1))),
            Column("connections_peak", "Peak concurrent connections (any instant)", lambda v, r: count(v)),
            Column("bytes_per_s_peak", f"Peak throughput (busiest {slot})", lambda v, r: si(v, "B/s")),
            Column("bytes_per_s_busiest_minute", "Busiest minute's mean throughput", lambda v, r: si(v, "B/s")),
            Column("bytes", "Relayed in total", lambda v, r: si(v, "B")),
            Column("starts", "Sessions started", lambda v, r: count(v))]
    return table(sorted(per.values(), key=lambda p: _service_order(p["service"])), cols, raw="load_hour")


DAILY_AFTER = 7 * 86400  # longer spans are drawn a point a day: 24 hourly points a day blur into a band


def _by_day(rows: list[dict]) -> list[dict]:
    """Hourly rows -> one per day: the peaks' maxima and the mean of the hourly means."""
    days: dict[object, list[dict]] = defaultdict(list)
    for r in rows:
        days[r["hour"].date() if hasattr(r["hour"], "date") else r["hour"]].append(r)
    out = []
    for day, hs in sorted(days.items()):
        out.append({"hour": day, **{k: max(h[k] or 0 for h in hs) for k in (
            "sessions_peak", "connections_peak", "bytes_per_s_peak", "bytes_per_s_busiest_minute")},
            **{k: sum(h[k] or 0 for h in hs) / len(hs) for k in ("sessions_avg", "connections_avg")},
            "bytes_per_s_mean": sum(h["bytes"] or 0 for h in hs) / (3600 * len(hs))})
    return out


def _load_charts(hours: list[dict], window: int) -> list[str]:
    by_service: dict[str, list[dict]] = defaultdict(list)
    for r in hours:
        by_service[r["service"]].append(r)
    slot = "second" if window == 1 else f"{window} s" if window < 60 else "minute"
    times = [epoch(r["hour"]) for r in hours]
    daily = max(times) - min(times) > DAILY_AFTER
    charts = []
    for svc in sorted(by_service, key=_service_order):
        rows = sorted(by_service[svc], key=lambda r: r["hour"])
        if daily:
            rows = _by_day(rows)

        def pts(col: str, rows=rows) -> list[tuple[float, float]]:
            return [(epoch(r["hour"]), float(r[col] or 0)) for r in rows]

        step, per = (86400, "per day") if daily else (HOUR, "per hour")
        for what in ("sessions", "connections"):
            lines = ([("peak (any instant)", pts(f"{what}_peak")), ("mean", pts(f"{what}_avg"))] if daily else
                     [("peak (any instant)", pts(f"{what}_peak")), ("p95 of minute peaks", pts(f"{what}_p95")),
                      ("median minute peak", pts(f"{what}_p50"))])
            charts.append(line_chart(f"{svc}: concurrent {what}, {per}", lines, fmt=count, step=step, integer=True))
        third = ("mean", pts("bytes_per_s_mean")) if daily else ("median minute (mean)", pts("bytes_per_s_p50"))
        charts.append(line_chart(f"{svc}: throughput, {per}", [
            (f"busiest {slot}", pts("bytes_per_s_peak")), ("busiest minute (mean)", pts("bytes_per_s_busiest_minute")),
            third], fmt=lambda v: si(v, "B/s"), step=step))
    return charts


def load_section(data: dict) -> str:
    hours, meta = data["load_hour"], data["meta"]
    if not hours:
        return '<p class="empty">No load to show: no finished session or connection in these logs yet.</p>'
    window = meta.get("rate_window", 1)
    return "\n".join([_peaks_table(hours, window), resolution_note(meta),
                      '<div class="grid">' + "".join(_load_charts(hours, window)) + "</div>"])


def _summary_table(summary: list[dict]) -> str:
    def kind(v, r):
        return KINDS.get((r["service"], v), v)

    cols = [Column("service", "Service", left=True), Column("kind", "Kind", kind, left=True),
            Column("app_id", "App id", lambda v, r: v if v is not None else "n/a", left=True),
            Column("sessions", "Sessions", lambda v, r: count(v)),
            Column("happy_rate", "Happy", lambda v, r: percent(v)),
            Column("pairing_rate", "Paired", lambda v, r: percent(v) if v is not None else "n/a"),
            Column("waiting_time_p50", "Wait, median", lambda v, r: duration(v) if v is not None else "n/a"),
            Column("waiting_time_p95", "Wait, p95", lambda v, r: duration(v) if v is not None else "n/a"),
            Column("duration_p50", "Duration, median", lambda v, r: duration(v)),
            Column("duration_p95", "Duration, p95", lambda v, r: duration(v)),
            Column("bytes", "Relayed in total", lambda v, r: si(v, "B") if v is not None else "n/a"),
            Column("bytes_p50", "Size, median", lambda v, r: si(v, "B") if v is not None else "n/a"),
            Column("bytes_p95", "Size, p95", lambda v, r: si(v, "B") if v is not None else "n/a")]
    rows = sorted(summary, key=lambda r: (_service_order(r["service"]), r["kind"], r["app_id"] or ""))
    return table(rows, cols, raw="session_summary")


def sessions_section(data: dict) -> str:
    if not data["summary"]:
        return '<p class="empty">No sessions to describe: no finished session or connection in these logs yet.</p>'
    totals: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in data["outcomes"]:
        totals[(r["service"], r["kind"])][r["outcome"]] += r["sessions"]
    charts = [bar_chart(f"{svc} {KINDS.get((svc, kind), kind)}: "
                        + ("how they closed" if svc == "relay" else "outcomes (mood)"),
                        sorted(counts.items(), key=lambda kv: -kv[1]), fmt=count)
              for (svc, kind), counts in sorted(totals.items(), key=lambda kv: (_service_order(kv[0][0]), kv[0][1]))]
    return "\n".join([
        _summary_table(data["summary"]),
        '<p class="note">Happy: the mood was "happy" (relay: the client closed the connection). Paired: both sides '
        'arrived. Wait: time until the second side arrived. Size: bytes relayed per session. p95: 95 % of sessions '
        'were at or below it. "n/a": the figure does not exist for that kind (app ids and waits are only logged '
        'where the protocol has them).</p>',
        '<div class="grid">' + "".join(charts) + "</div>" if charts else ""])


def distributions_section(data: dict) -> str:
    hist: dict[tuple[str, str, str], dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for r in data["distributions"]:
        hist[(r["service"], r["kind"], r["metric"])][r["bucket"]] += r["sessions"]
    if not hist:
        return '<p class="empty">No distributions: no finished session or connection in these logs yet.</p>'
    charts = []
    for (svc, kind, metric), counts in sorted(hist.items(), key=lambda kv: (_service_order(kv[0][0]), kv[0][1:])):
        edges = SIZE_EDGES if metric == "bytes" else TIME_EDGES
        bars = list(zip(bucket_labels(edges, metric), [counts.get(float(lo), 0) for lo in edges], strict=True))
        while bars and bars[-1][1] == 0:  # trim empty buckets at the top
            bars.pop()
        charts.append(histogram(f"{svc} {KINDS.get((svc, kind), kind)}: {METRICS.get(metric, metric)}", bars,
                                f"{KINDS.get((svc, kind), kind)} in each range (lower bound included, upper "
                                f"excluded)", fmt=count))
    return '<div class="grid">' + "".join(charts) + "</div>"


def render(data: dict) -> str:
    """data: meta (dict), load_hour, outcomes, summary, distributions, plan, plan_by_service, forecast,
    daily (the daily peaks)."""
    meta = data["meta"]
    empty = not data["load_hour"] and not data["summary"]
    parts = ["<!doctype html><html lang=en><head><meta charset=utf-8>"
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>Burrow capacity report</title><style>{CSS}</style></head><body>",
             "<h1>Burrow: capacity, load and sessions</h1>", *_header(meta, empty),
             '<h2 id="todo">What to do</h2>', what_to_do(data),
             '<h2 id="assumptions">Assumptions</h2>', assumptions(meta),
             '<h2 id="capacity">Capacity plan</h2>', capacity_section(data),
             '<h2 id="load">Load</h2>', load_section(data),
             '<h2 id="sessions">Sessions</h2>', sessions_section(data),
             '<h2 id="distributions">Distributions</h2>', distributions_section(data),
             "</body></html>"]
    return "\n".join(parts)
