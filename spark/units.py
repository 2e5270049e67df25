"""Numbers as people read them: SI prefixes with units, durations in ms/s/min/h, counts with
separators, shares as percentages, and the human name and unit of every figure the report shows; and
durations as people type them.

The tables on disk keep their raw column names; only the HTML uses these.
"""

from __future__ import annotations

import datetime as dt
import math
import re

PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
NONE = "–"  # what an absent value reads as; the report says why next to it


def _sig(x: float, digits: int = 3) -> str:
    """3 significant digits without an exponent: 1.23, 12.3, 123, 1230."""
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def si(value: float | None, unit: str = "") -> str:
    """1234567, "B/s" -> "1.23 MB/s"; 155, "B" -> "155 B"; no unit -> "1.23M"."""
    if value is None:
        return NONE
    sep = " " if unit else ""
    for div, prefix in PREFIXES:
        if abs(value) >= div * 0.9995:  # 999.96 rounds to 1.00k, not 1000
            return f"{_sig(value / div)}{sep}{prefix}{unit}"
    return f"{_sig(value)}{sep}{unit}"


def count(value: float | None) -> str:
    """Whole numbers with thousands separators; fractional counts (means) to 3 digits."""
    if value is None:
        return NONE
    if float(value).is_integer():
        return f"{int(value):,}"
    return _sig(float(value)) if abs(value) < 1000 else f"{round(value):,}"


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1d' (a bare number is seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r} (say 90s, 30m, 2h or 1d)")
    return float(m.group(1)) * DURATION_UNITS[m.group(2)]


def duration(seconds: float | None) -> str:
    """0.45 -> "450 ms", 2.52 -> "2.52 s", 754 -> "12.6 min", 9000 -> "2.5 h"."""
    if seconds is None:
        return NONE
    s = float(seconds)
    if s == 0:
        return "0 s"
    if abs(s) < 1:
        return f"{_sig(s * 1000)} ms"
    if abs(s) < 120:
        return f"{_sig(s)} s"
    if abs(s) < 7200:
        return f"{_sig(s / 60)} min"
    if abs(s) < 172800:
        return f"{_sig(s / 3600)} h"
    return f"{_sig(s / 86400)} days"


def short_duration(seconds: float) -> str:
    """Bucket edges: 0 -> "0 s", 30 -> "30 s", 60 -> "1 min", 3600 -> "1 h"."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{_sig(seconds)} s"


def percent(share: float | None) -> str:
    if share is None:
        return NONE
    p = share * 100
    return f"{p:.0f} %" if p >= 99.95 or p == 0 else f"{_sig(p)} %" if p >= 1 else f"{p:.2g} %"


def days(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 1:
        return "now" if value == 0 else "under a day"
    n = math.floor(value)
    return f"{n:,} day" + ("" if n == 1 else "s")


def date(value) -> str:
    if value is None:
        return NONE
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return value.isoformat() if isinstance(value, dt.date) else str(value)


def ratio(value: float | None) -> str:
    return NONE if value is None else f"{value:.2f}"


# A resource's human name and how its values read.
RESOURCES = {
    "sessions": ("concurrent sessions", count),
    "connections": ("concurrent connections", count),
    "bytes_per_s": ("throughput", lambda v: si(v, "B/s")),
}


def resource_name(resource: str) -> str:
    return RESOURCES.get(resource, (resource.replace("_", " "), None))[0]


def resource_value(resource: str, value: float | None) -> str:
    return RESOURCES.get(resource, (None, count))[1](value)


def resource_rate(resource: str, per_day: float | None) -> str:
    """Growth of a daily peak in a day: "+12", "−1.5 MB/s", "±0"."""
    if per_day is None:
        return NONE
    sign = "+" if per_day > 0 else "−" if per_day < 0 else "±"
    return f"{sign}{resource_value(resource, abs(per_day))}"
