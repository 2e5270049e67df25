"""Tiny inline-SVG charts (no JavaScript, no fonts or files from elsewhere): line, bar, histogram.

Time axes put their ticks on round instants (minutes, hours, days, weeks, months) chosen from the
data's span, so every label is different; value axes carry the unit.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from html import escape

from .units import si

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
W, H = 560, 250
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 44, 40
FONT = 'font-family="sans-serif"'
HOUR, DAY = 3600, 86400
# Candidate tick steps in seconds, finest first; beyond the last, whole months.
TIME_STEPS = (60, 300, 900, 1800, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY)
MONDAY = 4 * DAY  # 1970-01-05, so weekly ticks fall on Mondays


def human(x: float) -> str:
    """1234567 -> 1.23M; keeps axis labels short."""
    return si(x)


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp * (1 + 1e-9):
            return m * exp
    return 10 * exp


def value_ticks(vmax: float, integer: bool = False, most: int = 5) -> list[float]:
    """0 and round steps (1, 2 or 5 x 10^k) up to the first at or above vmax: at most `most` steps.
    `integer`: no step below 1 (counts of sessions are whole)."""
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / most
    exp = 10 ** math.floor(math.log10(raw))
    step = next(m * exp for m in (1, 2, 5, 10) if m * exp >= raw * (1 - 1e-9))
    if integer:
        step = max(step, 1.0)
    n = math.ceil(vmax / step - 1e-9)
    return [step * i for i in range(n + 1)]


def _utc(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def _month_ticks(x0: float, x1: float, most: int) -> list[float]:
    d = _utc(x0)
    months = (_utc(x1).year - d.year) * 12 + _utc(x1).month - d.month + 1
    every = next(n for n in (1, 2, 3, 6, 12, 24, 60) if months / n <= most)
    y, m = d.year, d.month
    out = []
    while True:
        t = dt.datetime(y, m, 1, tzinfo=dt.UTC).timestamp()
        if t > x1:
            return out
        if t >= x0 and (m - 1) % every == 0:
            out.append(t)
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)


def time_ticks(x0: float, x1: float, most: int = 6) -> tuple[list[tuple[float, str]], str]:
    """Round instants in [x0, x1] (epoch seconds) with distinct labels, and a caption for the axis."""
    span = max(x1 - x0, 1.0)
    step = next((s for s in TIME_STEPS if span / s <= most - 1), None)
    if step is None:
        ticks = _month_ticks(x0, x1, most)
        return [(t, _utc(t).strftime("%b %Y")) for t in ticks], "UTC"
    base = MONDAY if step >= 7 * DAY else 0
    first = math.ceil((x0 - base) / step) * step + base
    ticks = [first + i * step for i in range(int((x1 - first) // step) + 1)]
    years = {_utc(x0).year, _utc(x1).year}
    if step >= DAY:
        fmt = "%Y-%m-%d" if len(years) > 1 else "%b %d"
        return [(t, _utc(t).strftime(fmt)) for t in ticks], "UTC" if len(years) > 1 else f"UTC, {years.pop()}"
    one_day = x1 - x0 <= DAY
    labels = []
    for t in ticks:
        u = _utc(t)
        if u.hour == 0 and u.minute == 0:
            labels.append(u.strftime("%b %d"))
        else:
            labels.append(u.strftime("%H:%M" if one_day else "%b %d %H:%M"))
    d0, d1 = _utc(x0).date(), _utc(x1).date()
    caption = f"UTC, {d0.isoformat()}" + ("" if d0 == d1 else f" to {d1.isoformat()}")
    return list(zip(ticks, labels, strict=True)), caption


def _legend(names: list[str], x: float, y: float) -> list[str]:
    out = []
    for i, name in enumerate(names):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x:.0f}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.0f}" y="{y}" font-size="10" {FONT}>{escape(name)}</text>')
        x += 24 + 5.6 * len(name)
    return out


def _frame(title: str, yticks: list[float], x_labels: list[tuple[float, str]], body: list[str], legend: list[str],
           fmt: Callable[[float], str] = human, caption: str = "", note: str = "") -> str:
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
           f'<rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="8" y="16" font-size="13" font-weight="bold" {FONT}>{escape(title)}</text>']
    for v in yticks:
        y = TOP + ph - ph * v / yticks[-1]
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text class="ytick" x="{LEFT - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end" '
                   f'{FONT}>{escape(fmt(v))}</text>')
    for frac, label in x_labels:
        x = LEFT + pw * frac
        out.append(f'<line x1="{x:.1f}" y1="{TOP + ph}" x2="{x:.1f}" y2="{TOP + ph + 4}" stroke="#333"/>')
        out.append(f'<text class="xtick" x="{x:.1f}" y="{TOP + ph + 15}" font-size="10" text-anchor="middle" '
                   f'{FONT}>{escape(label)}</text>')
    if note:
        out.append(f'<text x="8" y="{H - 6}" font-size="10" fill="#555" {FONT}>{escape(note)}</text>')
    if caption:
        out.append(f'<text x="{W - RIGHT}" y="{H - 6}" font-size="10" text-anchor="end" fill="#555" '
                   f'{FONT}>{escape(caption)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{W - RIGHT}" y2="{TOP + ph}" stroke="#333"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#333"/>')
    out.extend(body)
    out.extend(_legend(legend, 8, 32))
    out.append("</svg>")
    return "\n".join(out)


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float | None]]]],
               dashed: tuple[str, ...] = (), time_axis: bool = True, fmt: Callable[[float], str] = human,
               step: float = 0.0, integer: bool = False, note: str = "") -> str:
    """Series of (x, y) points; x is epoch seconds when `time_axis`, `step` the data's spacing (a
    single point then gets a step-wide axis around it). None y values break the line; a series named
    in `dashed` is drawn dashed; a point with no neighbour is a dot. `fmt` formats the value axis,
    `integer` keeps its steps whole; `note` is written under the chart."""
    xs = [x for _, pts in series for x, y in pts if y is not None]
    ys = [y for _, pts in series for _, y in pts if y is not None]
    if not xs:
        return _frame(title + " (no data)", [0.0, 1.0], [], [], [], fmt, note=note)
    x0, x1 = min(xs), max(xs)
    if x1 - x0 < step:
        x0, x1 = x0 - step / 2, x1 + step / 2
    span = (x1 - x0) or 1.0
    yticks = value_ticks(max(ys), integer)
    ymax = yticks[-1]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float, y: float) -> str:
        return f"{LEFT + pw * (x - x0) / span:.1f},{TOP + ph - ph * y / ymax:.1f}"

    body = []
    for i, (name, pts) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        runs: list[list[str]] = [[]]
        for x, y in pts:
            if y is None:
                runs.append([])
            else:
                runs[-1].append(px(x, y))
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                body.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            elif run:
                dash = ' stroke-dasharray="6 4"' if name in dashed else ""
                body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
                            f'points="{" ".join(run)}"/>')
    if time_axis:
        ticks, caption = time_ticks(x0, x1)
        labels = [((t - x0) / span, text) for t, text in ticks]
    else:
        labels, caption = [(i / 4, human(x0 + span * i / 4)) for i in range(5)], ""
    return _frame(title, yticks, labels, body, [name for name, _ in series], fmt, caption, note)


def bar_chart(title: str, bars: list[tuple[str, float]], fmt: Callable[[float], str] = human,
              integer: bool = True) -> str:
    """Vertical bars with their label under each and the value above."""
    if not bars:
        return _frame(title + " (no data)", [0.0, 1.0], [], [], [], fmt)
    yticks = value_ticks(max(v for _, v in bars), integer)
    ymax = yticks[-1]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    slot = pw / len(bars)
    body, labels = [], []
    for i, (label, v) in enumerate(bars):
        h = ph * v / ymax
        x = LEFT + slot * i + slot * 0.15
        body.append(f'<rect x="{x:.1f}" y="{TOP + ph - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                    f'fill="{PALETTE[0]}"><title>{escape(label)}: {escape(fmt(v))}</title></rect>')
        body.append(f'<text x="{x + slot * 0.35:.1f}" y="{TOP + ph - h - 3:.1f}" font-size="9" '
                    f'text-anchor="middle" {FONT}>{escape(fmt(v))}</text>')
        labels.append(((i + 0.5) / len(bars), label))
    return _frame(title, yticks, labels, body, [], fmt)


def histogram(title: str, bars: list[tuple[str, float]], axis: str, fmt: Callable[[float], str] = human) -> str:
    """Horizontal bars, one per bucket, the bucket's range written on its left and its count at its
    end: range labels stay readable however many buckets there are. `axis` names what is counted."""
    label_w, row_h, top = 96, 17, 30
    height = top + row_h * max(len(bars), 1) + 26
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{W}" height="{height}" '
           f'viewBox="0 0 {W} {height}" role="img" aria-label="{escape(title)}">',
           f'<rect width="{W}" height="{height}" fill="#fff"/>',
           f'<text x="8" y="16" font-size="13" font-weight="bold" {FONT}>{escape(title)}</text>']
    vmax = _nice_max(max((v for _, v in bars), default=0))
    pw = W - label_w - RIGHT - 48
    for i, (label, v) in enumerate(bars):
        y = top + row_h * i
        w = pw * v / vmax
        out.append(f'<text class="bucket" x="{label_w - 6}" y="{y + 12}" font-size="10" text-anchor="end" '
                   f'{FONT}>{escape(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" fill="{PALETTE[0]}">'
                   f'<title>{escape(label)}: {escape(fmt(v))}</title></rect>')
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="10" {FONT}>{escape(fmt(v))}</text>')
    y_axis = top + row_h * len(bars)
    out.append(f'<line x1="{label_w}" y1="{top}" x2="{label_w}" y2="{y_axis}" stroke="#333"/>')
    out.append(f'<text x="{W - RIGHT}" y="{height - 8}" font-size="10" text-anchor="end" fill="#555" '
               f'{FONT}>{escape(axis)}</text>')
    out.append("</svg>")
    return "\n".join(out)
