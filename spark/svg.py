"""Tiny inline-SVG charts (no JavaScript, no fonts or files from elsewhere): line, bar, histogram."""

from __future__ import annotations

import datetime as dt
import math
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
W, H = 560, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 28, 40


def human(x: float) -> str:
    """1234567 -> 1.23M; keeps axis labels short."""
    ax = abs(x)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}" if ax else "0"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _frame(title: str, ymax: float, x_labels: list[tuple[float, str]], body: list[str], legend: list[str]) -> str:
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
           f'<rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold" font-family="sans-serif">{escape(title)}</text>']
    for i in range(5):
        v = ymax * i / 4
        y = TOP + ph - ph * i / 4
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end" '
                   f'font-family="sans-serif">{human(v)}</text>')
    for frac, label in x_labels:
        x = LEFT + pw * frac
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" font-size="10" text-anchor="middle" '
                   f'font-family="sans-serif">{escape(label)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{W - RIGHT}" y2="{TOP + ph}" stroke="#333"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#333"/>')
    out.extend(body)
    x = LEFT
    for i, name in enumerate(legend):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x}" y="{H - 14}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14}" y="{H - 5}" font-size="10" font-family="sans-serif">{escape(name)}</text>')
        x += 22 + 6 * len(name)
    out.append("</svg>")
    return "\n".join(out)


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float | None]]]],
               dashed: tuple[str, ...] = (), time_axis: bool = True) -> str:
    """Series of (x, y) points; x is epoch seconds when `time_axis`. None y values break the line;
    a series named in `dashed` is drawn dashed, one whose points are isolated as dots."""
    xs = [x for _, pts in series for x, y in pts if y is not None]
    ys = [y for _, pts in series for _, y in pts if y is not None]
    if not xs:
        return _frame(title + " (no data)", 1.0, [], [], [])
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    ymax = _nice_max(max(ys))
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
    labels = []
    for i in range(5):
        x = x0 + span * i / 4
        text = (dt.datetime.fromtimestamp(x, dt.UTC).strftime("%m-%d %H:%M" if span < 3 * 86400 else "%Y-%m-%d")
                if time_axis else human(x))
        labels.append((i / 4, text))
    return _frame(title, ymax, labels, body, [name for name, _ in series])


def bar_chart(title: str, bars: list[tuple[str, float]]) -> str:
    """Vertical bars with their label under each and the value above."""
    if not bars:
        return _frame(title + " (no data)", 1.0, [], [], [])
    ymax = _nice_max(max(v for _, v in bars))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    slot = pw / len(bars)
    body, labels = [], []
    for i, (label, v) in enumerate(bars):
        h = ph * v / ymax
        x = LEFT + slot * i + slot * 0.15
        body.append(f'<rect x="{x:.1f}" y="{TOP + ph - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                    f'fill="{PALETTE[0]}"><title>{escape(label)}: {v:g}</title></rect>')
        body.append(f'<text x="{x + slot * 0.35:.1f}" y="{TOP + ph - h - 3:.1f}" font-size="9" '
                    f'text-anchor="middle" font-family="sans-serif">{human(v)}</text>')
        labels.append(((i + 0.5) / len(bars), label))
    return _frame(title, ymax, labels, body, [])
