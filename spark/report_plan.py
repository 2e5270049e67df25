"""The planner's part of report.html: "what to do", the assumptions the plan rests on, and the
capacity plan with its forecasts (or, without enough history, why there are none)."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from .advice import history, history_text, verdicts
from .capacity import DEFAULTS, RESOURCES
from .svg import DAY, line_chart
from .table import Column, epoch, table
from .units import NONE, count, date, days, percent, ratio, resource_name, resource_rate, resource_value

LEVELS = {"over": "over capacity", "soon": "fills within the horizon", "ok": "nothing close",
          "unknown": "no forecast yet", "idle": "no sessions"}


def what_to_do(data: dict) -> str:
    meta = data["meta"]
    a = meta["assumptions"]
    items = verdicts(data["plan"], data.get("daily", []), a["horizon_days"]["value"], a["min_history_days"]["value"])
    if not items:
        return ('<div class="todo"><p class="empty">Nothing to plan yet: the logs hold no finished session or '
                'connection from any service.</p></div>')
    lines = [f'<li class="{v.level}"><span class="badge {v.level}">{escape(LEVELS[v.level])}</span> '
             f'<b>{escape(v.service)}</b>: {escape(v.headline)} <span class="why">{escape(v.detail)}</span></li>'
             for v in items]
    return '<div class="todo"><ul>' + "".join(lines) + "</ul></div>"


def _toml(a: dict) -> str:
    """The assumptions as a --capacity file: edit it and pass it back."""
    out = [f"headroom = {a['headroom']['value']}", f"horizon_days = {a['horizon_days']['value']}",
           f"min_history_days = {a['min_history_days']['value']}"]
    last = None
    for r in a["per_node"]:
        if r["service"] != last:
            out += ["", f"[{r['service']}]", f"nodes = {r['nodes']}  # running today"]
            last = r["service"]
        if r["capacity"] is not None:
            v = r["capacity"]
            out.append(f"{r['resource']} = {int(v):_}" if float(v).is_integer() else f"{r['resource']} = {v!r}")
    return "\n".join(out)


def assumptions(meta: dict) -> str:
    a = meta["assumptions"]
    head, hor, mind = a["headroom"], a["horizon_days"], a["min_history_days"]

    def src(s: str) -> str:
        return "built-in default" if s == "default" else f"from {s}"

    rows = [dict(r, usable=None if r["capacity"] is None else r["capacity"] * (1 - head["value"]),
                 default=getattr(DEFAULTS.get(r["service"]), r["resource"], None)) for r in a["per_node"]]
    cols = [Column("service", "Service", left=True),
            Column("resource", "Resource", lambda v, r: resource_name(v), left=True),
            Column("capacity", "Capacity per node", lambda v, r: resource_value(r["resource"], v)),
            Column("usable", f"Usable per node (at {percent(1 - head['value'])})",
                   lambda v, r: resource_value(r["resource"], v)),
            Column("source", "Capacity from", lambda v, r: src(v), left=True),
            Column("nodes", "Nodes running", lambda v, r: count(v)),
            Column("nodes_source", "Nodes from", lambda v, r: src(v), left=True)]
    given = (f"The figures below come from {escape(a['path'])} where it sets them, else from the built-in defaults"
             if a["path"] else "No <code>--capacity</code> file was given: every figure below is a built-in default")
    return f"""<div class="box">
<p>{given}. The defaults are what one 2-core node carried in Burrow's own benchmarks, rounded down; a node of
yours may carry more or less, so measure it (<code>make bench</code>) and write your figures down.</p>
<ul>
<li><b>Headroom {percent(head['value'])}</b> ({src(head['source'])}): a node counts as full at
{percent(1 - head['value'])} of its capacity, leaving room for bursts and for a node to fail.</li>
<li><b>Horizon {hor['value']} days</b> ({src(hor['source'])}): how far ahead "nodes needed" and the forecasts look.</li>
<li><b>Trend</b>: a least-squares straight line through each day's peak, over complete days only (at least 23 h
of logs), fitted once there are <b>{mind['value']} complete days</b> ({src(mind['source'])}); with fewer, the
report shows today's use and no forecast.</li>
</ul>
{table(rows, cols, raw="assumption")}
<p>To change them, save this as a file, edit it, and run <code>burrow-report --capacity FILE ...</code>
(TOML, or JSON if the name ends in <code>.json</code>; keys left out keep their defaults):</p>
<pre>{escape(_toml(a))}</pre>
</div>"""


def _full_on(r: dict, horizon: int) -> str:
    left = r["days_until_full"]
    if left is None:
        return "not filling"
    if left == 0:
        return "now"
    if left > horizon:
        return f"not within {horizon} days"
    return f"{date(r['full_on'])} (in {days(left)})"


def _forecast_cell(col: str, horizon: int):
    def fmt(v, r):
        if not r["enough_history"]:
            return "now (observed)" if col == "full_on" and r["days_until_full"] == 0 else "no forecast"
        if col == "full_on":
            return _full_on(r, horizon)
        if col == "slope_per_day":
            return resource_rate(r["resource"], v)
        if col == "r2":
            return ratio(v)
        if col == "peak_horizon":
            return resource_value(r["resource"], v)
        return count(v)
    return fmt


def _service_cell(col: str, horizon: int, min_days: int, daily: list[dict]):
    def fmt(v, r):
        if col == "history":
            return history_text(daily, r["service"], min_days)
        if col == "busiest_resource":
            return resource_name(v) if v else NONE
        if not r["enough_history"]:
            if col == "limiting_resource" and r["days_until_full"] == 0:
                return "over now (observed)"
            return "no forecast"
        if col == "limiting_resource":
            return resource_name(v) if v and r["days_until_full"] <= horizon else f"none within {horizon} days"
        if col == "full_on":
            return _full_on(r, horizon)
        return count(v)
    return fmt


def capacity_section(data: dict) -> str:
    meta, plan, by_service = data["meta"], data["plan"], data["plan_by_service"]
    daily = data.get("daily", [])
    if not plan:
        return ('<p class="empty">No capacity plan: it needs the daily peaks of finished sessions or connections, '
                'and these logs have none yet.</p>')
    a = meta["assumptions"]
    horizon, min_days = a["horizon_days"]["value"], a["min_history_days"]["value"]
    svc_cols = [Column("service", "Service", left=True), Column("nodes", "Nodes running", lambda v, r: count(v)),
                Column("busiest_resource", "Busiest resource today", _service_cell("busiest_resource", horizon,
                                                                                   min_days, daily), left=True),
                Column("utilisation", "Use of usable capacity", lambda v, r: percent(v)),
                Column("nodes_needed", "Nodes needed for the observed peak", lambda v, r: count(v)),
                Column("history", "History", _service_cell("history", horizon, min_days, daily), left=True),
                Column("limiting_resource", "Fills first", _service_cell("limiting_resource", horizon, min_days,
                                                                         daily), left=True, merge=True),
                Column("full_on", "Full on", _service_cell("full_on", horizon, min_days, daily), merge=True),
                Column("nodes_needed_horizon", f"Nodes needed in {horizon} days",
                       _service_cell("nodes_needed_horizon", horizon, min_days, daily), merge=True)]
    res_cols = [Column("service", "Service", left=True),
                Column("resource", "Resource", lambda v, r: resource_name(v), left=True),
                Column("peak", "Observed peak", lambda v, r: resource_value(r["resource"], v)),
                Column("usable_per_node", "Usable per node", lambda v, r: resource_value(r["resource"], v)),
                Column("nodes", "Nodes running", lambda v, r: count(v)),
                Column("utilisation", "Use today", lambda v, r: percent(v)),
                Column("nodes_needed", "Nodes needed now", lambda v, r: count(v)),
                Column("slope_per_day", "Trend, per day", _forecast_cell("slope_per_day", horizon), merge=True),
                Column("r2", "Trend fit (r²)", _forecast_cell("r2", horizon), merge=True),
                Column("peak_horizon", f"Peak in {horizon} days", _forecast_cell("peak_horizon", horizon),
                       merge=True),
                Column("nodes_needed_horizon", f"Nodes needed in {horizon} days", _forecast_cell("nodes", horizon),
                       merge=True),
                Column("full_on", "Full on", _forecast_cell("full_on", horizon), merge=True)]
    order = {s: i for i, s in enumerate(("mailbox", "transit", "relay"))}
    plan = sorted(plan, key=lambda r: (order.get(r["service"], 9), RESOURCES.index(r["resource"])))
    parts = [table(sorted(by_service, key=lambda r: order.get(r["service"], 9)), svc_cols, raw="capacity_by_service"),
             '<p class="note">"Observed peak" is the highest daily peak in the logs: concurrency at any instant, '
             'throughput in the busiest second. "Use" is that peak over the usable capacity of the nodes running '
             'today. "Trend" is how much the daily peak grows a day; r² near 1 means the days follow the line '
             'closely, near 0 that the line explains little of them.</p>',
             table(plan, res_cols, raw="capacity_plan"),
             _forecast_charts(data, plan, horizon, min_days, daily)]
    return "\n".join(parts)


def _forecast_charts(data: dict, plan: list[dict], horizon: int, min_days: int, daily: list[dict]) -> str:
    series: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in data["forecast"]:
        series[(r["service"], r["resource"])].append(r)
    charts, short = [], []
    for p in plan:
        key = (p["service"], p["resource"])
        rows = sorted(series.get(key, []), key=lambda r: r["day"])
        observed = [r for r in rows if r["peak"] is not None]
        if len(observed) < 2:
            if p["service"] not in short:
                short.append(p["service"])
            continue
        res = p["resource"]
        cap = p["usable_per_node"] * p["nodes"]
        title = f"{p['service']}: daily peak {resource_name(res)}"
        lines = [("observed daily peak", [(epoch(r["day"]), r["peak"]) for r in rows])]
        if p["enough_history"]:
            lines.append(("trend", [(epoch(r["day"]), r["trend"]) for r in rows if r["trend"] is not None]))
            title += f" and {horizon}-day trend"
        else:
            title += " (no trend yet)"
        top = max(y for _, pts in lines for _, y in pts if y is not None)
        note = ""
        if cap <= 2 * top:  # else the capacity line would flatten the data into the axis
            lines.append(("usable capacity today", [(epoch(rows[0]["day"]), cap), (epoch(rows[-1]["day"]), cap)]))
        else:
            note = (f"Usable capacity today, {resource_value(res, cap)}, is off this scale "
                    f"({percent(top / cap)} of it at the chart's top point).")
        charts.append(line_chart(title, lines, dashed=("trend", "usable capacity today"),
                                 fmt=lambda v, res=res: resource_value(res, v), step=DAY,
                                 integer=res != "bytes_per_s", note=note))
    note = ""
    if short:
        which = "; ".join(f"{svc}: {history_text(daily, svc, min_days)}" for svc in short)
        note = (f'<p class="empty">No forecast charts for {escape(", ".join(short))}: a chart needs at least two '
                f'days of daily peaks and a trend needs {min_days} complete days ({escape(which)}). Until then the plan '
                f'shows today\'s use only. The daily peaks so far are in <code>tables/daily_peaks.csv</code>.</p>')
    elif any(not p["enough_history"] for p in plan):
        note = (f'<p class="note">Charts without a trend line: fewer than {min_days} complete days of history; '
                f'the observed peaks and today\'s usable capacity are drawn alone.</p>')
    return note + ('<div class="grid">' + "".join(charts) + "</div>" if charts else "")


__all__ = ["assumptions", "capacity_section", "history", "what_to_do"]
