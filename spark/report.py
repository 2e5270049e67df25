"""The self-contained HTML report: inline CSS and SVG only, so it opens offline from a file.

`render(data)` takes plain Python rows (dicts) that `spark.job` collected from the small result tables;
it needs no Spark and no network.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from html import escape

from .sessions import SIZE_EDGES, TIME_EDGES
from .svg import bar_chart, human, line_chart

CSS = """body{font-family:sans-serif;margin:24px;color:#222;background:#fff}h1{font-size:22px}
h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}.grid{display:flex;flex-wrap:wrap;gap:12px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}.note{color:#555;font-size:12px}.warn{color:#a40}"""


def _epoch(value) -> float:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).timestamp() if value.tzinfo is None else value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    return float(value)


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return human(value) if abs(value) >= 1000 else f"{value:.3g}"
    return escape(str(value))


def _table(rows: list[dict], columns: list[str], left: tuple[str, ...] = ()) -> str:
    head = "".join(f'<th class="{"l" if c in left else ""}">{escape(c)}</th>' for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="{"l" if c in left else ""}">{_fmt(r.get(c))}</td>'
                                    for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _bucket_label(lo: float, edges: tuple[int, ...], unit: str) -> str:
    return f"{human(lo)}{unit}+" if lo == edges[-1] else f"{human(lo)}{unit}"


def _load_charts(hours: list[dict]) -> list[str]:
    by_service: dict[str, list[dict]] = defaultdict(list)
    for r in hours:
        by_service[r["service"]].append(r)
    charts = []
    for svc in sorted(by_service):
        rows = sorted(by_service[svc], key=lambda r: r["hour"])

        def pts(col: str, rows=rows) -> list[tuple[float, float]]:
            return [(_epoch(r["hour"]), float(r[col] or 0)) for r in rows]

        charts.append(line_chart(f"{svc}: concurrent sessions per hour",
                                 [("peak", pts("sessions_peak")), ("p95", pts("sessions_p95")),
                                  ("p50", pts("sessions_p50"))]))
        charts.append(line_chart(f"{svc}: concurrent connections per hour",
                                 [("peak", pts("connections_peak")), ("p95", pts("connections_p95")),
                                  ("p50", pts("connections_p50"))]))
        charts.append(line_chart(f"{svc}: bytes relayed per second",
                                 [("peak minute", pts("bytes_per_s_peak")), ("p95", pts("bytes_per_s_p95")),
                                  ("p50", pts("bytes_per_s_p50"))]))
    return charts


def _outcome_charts(outcomes: list[dict]) -> list[str]:
    totals: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in outcomes:
        totals[(r["service"], r["kind"])][r["outcome"]] += r["sessions"]
    return [bar_chart(f"{svc} {kind}: outcomes", sorted(counts.items(), key=lambda kv: -kv[1]))
            for (svc, kind), counts in sorted(totals.items())]


def _distribution_charts(dists: list[dict]) -> list[str]:
    hist: dict[tuple[str, str, str], dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for r in dists:
        hist[(r["service"], r["kind"], r["metric"])][r["bucket"]] += r["sessions"]
    charts = []
    for (svc, kind, metric), counts in sorted(hist.items()):
        edges, unit = (SIZE_EDGES, "B") if metric == "bytes" else (TIME_EDGES, "s")
        bars = [(_bucket_label(lo, edges, unit), counts.get(float(lo), 0)) for lo in edges]
        while bars and bars[-1][1] == 0:  # trim empty buckets at the top
            bars.pop()
        charts.append(bar_chart(f"{svc} {kind}: {metric.replace('_', ' ')}", bars))
    return charts


def _capacity_charts(forecast: list[dict], plan: list[dict]) -> list[str]:
    usable = {(p["service"], p["resource"]): p["usable_per_node"] * p["nodes"] for p in plan}
    series: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in forecast:
        if (r["service"], r["resource"]) in usable:
            series[(r["service"], r["resource"])].append(r)
    charts = []
    for (svc, res), rows in sorted(series.items()):
        rows.sort(key=lambda r: r["day"])
        cap = usable[(svc, res)]
        charts.append(line_chart(f"{svc}: daily peak {res.replace('_', ' ')} and forecast", [
            ("observed peak", [(_epoch(r["day"]), r["peak"]) for r in rows]),
            ("trend", [(_epoch(r["day"]), r["trend"]) for r in rows if r["trend"] is not None]),
            ("usable capacity", [(_epoch(rows[0]["day"]), cap), (_epoch(rows[-1]["day"]), cap)]),
        ], dashed=("trend", "usable capacity")))
    return charts


def render(data: dict) -> str:
    """data: meta (dict), load_hour, outcomes, summary, distributions, plan, plan_by_service, forecast."""
    meta = data["meta"]
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>Burrow report</title>"
             f"<style>{CSS}</style></head><body>",
             "<h1>Burrow: relay load, sessions and capacity</h1>",
             f'<p class="note">Generated {escape(meta["generated"])} from {escape(", ".join(meta["logs"]))}: '
             f'{meta["events"]:,} events from {escape(str(meta["first_day"]))} to {escape(str(meta["last_day"]))}. '
             f'{escape(meta["ingest"])}</p>']
    if meta.get("rejected"):
        parts.append('<p class="warn">Lines kept aside in quarantine/: '
                     + escape(", ".join(f"{k}: {v}" for k, v in sorted(meta["rejected"].items()))) + "</p>")
    if meta.get("unknown_versions"):
        parts.append('<p class="warn">Unknown schema versions: '
                     + escape(", ".join(f"v={k}: {v} lines" for k, v in sorted(meta["unknown_versions"].items())))
                     + "</p>")
    parts.append("<h2>Capacity plan</h2>")
    parts.append(_table(data["plan_by_service"], ["service", "nodes", "nodes_needed", "nodes_needed_horizon",
                                                  "days_until_full", "full_on", "limiting_resource"],
                        left=("service", "limiting_resource")))
    parts.append(_table(data["plan"], ["service", "resource", "days", "peak", "slope_per_day", "r2",
                                       "capacity_per_node", "usable_per_node", "nodes", "nodes_needed",
                                       "days_until_full", "full_on"], left=("service", "resource")))
    parts.append(f'<p class="note">Headroom {meta["headroom"]:.0%}: a node is full at '
                 f'{1 - meta["headroom"]:.0%} of its capacity. Trend: least squares over the daily peaks; '
                 f'forecast {meta["horizon_days"]} days ahead.</p>')
    parts.append('<div class="grid">' + "".join(_capacity_charts(data["forecast"], data["plan"])) + "</div>")
    parts.append("<h2>Load over time</h2>")
    parts.append('<div class="grid">' + "".join(_load_charts(data["load_hour"])) + "</div>")
    parts.append("<h2>Sessions</h2>")
    parts.append(_table(data["summary"], ["service", "kind", "app_id", "sessions", "happy_rate", "pairing_rate",
                                          "waiting_time_p50", "waiting_time_p95", "duration_p50", "duration_p95",
                                          "bytes", "bytes_p50", "bytes_p95"], left=("service", "kind", "app_id")))
    parts.append('<div class="grid">' + "".join(_outcome_charts(data["outcomes"])) + "</div>")
    parts.append("<h2>Distributions</h2>")
    parts.append('<div class="grid">' + "".join(_distribution_charts(data["distributions"])) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
