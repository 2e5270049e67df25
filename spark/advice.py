"""The report's "what to do": one short verdict per service from the capacity plan's rows.

Plain data in (the collected `capacity_plan` rows, the daily peaks, the capacity assumptions), plain
sentences out; no Spark. A verdict is one of:

- `over`: an observed peak already exceeds the usable capacity of today's nodes;
- `soon`: with enough history, a resource's trend reaches it within the horizon;
- `ok`: with enough history, nothing reaches it within the horizon;
- `unknown`: too little history for a trend; today's use only, and no node count as a forecast;
- `idle`: no sessions from this service in the logs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from .units import count, days, percent, resource_name, resource_value

SERVICES = ("mailbox", "transit", "relay")
CLOSE = 0.8  # a share of usable capacity worth a word even without a trend
ROUGH_FIT = 0.3  # r² below this: the daily peaks scatter too much for a precise date


@dataclass(frozen=True)
class Verdict:
    service: str
    level: str  # over, soon, ok, unknown, idle
    headline: str
    detail: str


def _nodes(n: float | None) -> str:
    n = int(n or 0)
    return f"{n:,} node" + ("" if n == 1 else "s")


def history(daily: list[dict], service: str) -> tuple[int, int, dt.date | None]:
    """(complete days, all days, last day) of a service's daily peaks."""
    rows = [r for r in daily if r["service"] == service]
    return (sum(1 for r in rows if r["complete"]), len(rows), max((r["day"] for r in rows), default=None))


def history_text(daily: list[dict], service: str, needed: int) -> str:
    complete, total, _ = history(daily, service)
    partial = total - complete
    have = f"{complete} complete day" + ("" if complete == 1 else "s")
    if partial:
        have += f" (and {partial} partial)"
    return have if complete >= needed else f"{have} of the {needed} a trend needs"


def verdicts(plan: list[dict], daily: list[dict], horizon_days: int, min_history_days: int) -> list[Verdict]:
    """One verdict per service that has logs or a plan, mailbox, transit, relay first."""
    services = sorted({r["service"] for r in plan} | {r["service"] for r in daily},
                      key=lambda s: (SERVICES.index(s) if s in SERVICES else len(SERVICES), s))
    return [_verdict(svc, [r for r in plan if r["service"] == svc], daily, horizon_days, min_history_days)
            for svc in services]


def _verdict(svc: str, rows: list[dict], daily: list[dict], horizon: int, min_days: int) -> Verdict:
    if not rows:
        return Verdict(svc, "idle", "No sessions in these logs.",
                       "Nothing to plan until clients use it (a session is logged when it ends).")
    _, _, last_day = history(daily, svc)
    horizon_on = (last_day + dt.timedelta(days=horizon)).isoformat() if last_day else f"{horizon} days"
    busiest = max(rows, key=lambda r: (r["utilisation"] or 0.0, r["resource"]))
    nodes = busiest["nodes"]
    use = (f"Busiest today: {resource_name(busiest['resource'])} at {percent(busiest['utilisation'])} of the usable "
           f"capacity of {_nodes(nodes)} (peak {resource_value(busiest['resource'], busiest['peak'])})")
    over = [r for r in rows if r["days_until_full"] == 0]
    enough = all(r["enough_history"] for r in rows)
    if over:
        r = max(over, key=lambda r: (r["utilisation"] or 0.0, r["resource"]))
        need = max(x["nodes_needed"] for x in rows)
        detail = (f"{resource_name(r['resource']).capitalize()} peaked at {resource_value(r['resource'], r['peak'])}, "
                  f"{percent(r['utilisation'])} of what {_nodes(nodes)} can carry with headroom. "
                  f"Run {_nodes(need)} for the peak already seen")
        if enough:
            detail += f"; {_nodes(max(x['nodes_needed_horizon'] for x in rows))} by {horizon_on} if the trend holds."
        else:
            detail += f". No forecast yet: {history_text(daily, svc, min_days)}."
        return Verdict(svc, "over", f"Over capacity now: add nodes ({count(need)} needed, {count(nodes)} running).",
                       detail)
    if not enough:
        state = "Close to full" if (busiest["utilisation"] or 0) >= CLOSE else "Nothing is close"
        head = f"{state} today; no forecast yet."
        return Verdict(svc, "unknown", head,
                       f"{history_text(daily, svc, min_days).capitalize()}. {use}; the observed peak needs "
                       f"{_nodes(max(r['nodes_needed'] for r in rows))}.")
    need_h = max(r["nodes_needed_horizon"] for r in rows)
    filling = sorted((r for r in rows if r["days_until_full"] is not None and r["days_until_full"] <= horizon),
                     key=lambda r: (r["days_until_full"], r["resource"]))
    if filling:
        r = filling[0]
        rough = (f" The days scatter widely around the line (r² {r['r2']:.2f}): treat the date as rough."
                 if r["r2"] is not None and r["r2"] < ROUGH_FIT else "")
        return Verdict(svc, "soon",
                       f"First to fill: {resource_name(r['resource'])}, around {r['full_on'].isoformat()} "
                       f"(in {days(r['days_until_full'])}). Plan {_nodes(need_h)} by {horizon_on}.",
                       f"Its daily peak grows by {resource_value(r['resource'], r['slope_per_day'])} a day and "
                       f"reaches the usable capacity of {_nodes(nodes)} then.{rough} {use}.")
    later = [r for r in rows if r["days_until_full"] is not None]
    trend = (f"the first resource to fill, {resource_name(min(later, key=lambda r: r['days_until_full'])['resource'])}, "
             f"gets there after the {horizon}-day horizon" if later else "no resource's daily peak is growing")
    verb = "is" if int(nodes) == 1 else "are"
    return Verdict(svc, "ok", f"Nothing is close: the {_nodes(nodes)} running today {verb} enough to {horizon_on}.",
                   f"{use}; {trend}.")
