"""HTML tables with human column names and formatted values; each header's tooltip names the raw
column (`table.column`) so a reader can find the figure in tables/*.csv."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from .units import NONE


@dataclass(frozen=True)
class Column:
    key: str  # the row's field (the raw column name)
    label: str  # what the reader sees, with its unit
    fmt: Callable[[object, dict], str] | None = None  # (value, row) -> text; default: str, or NONE
    left: bool = False
    merge: bool = False  # neighbouring merge columns with the same words become one cell ("no forecast")


def _cell(col: Column, row: dict) -> str:
    value = row.get(col.key)
    if col.fmt is not None:
        return col.fmt(value, row)
    return NONE if value is None else str(value)


def table(rows: list[dict], columns: list[Column], raw: str = "") -> str:
    """rows -> <table>; `raw` is the table's name on disk, for the headers' tooltips."""
    def th(c: Column) -> str:
        known = any(c.key in r for r in rows)
        title = f' title="{escape(f"{raw}.{c.key}" if raw else c.key)}"' if known else ""
        return f'<th class="{"l" if c.left else ""}"{title}>{escape(c.label)}</th>'

    head = "".join(th(c) for c in columns)
    body = "".join("<tr>" + _row(r, columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _words(text: str) -> bool:
    return bool(text) and not (text[0].isdigit() or text[0] in "+−-±")


def _row(row: dict, columns: list[Column]) -> str:
    cells: list[list] = []  # [text, colspan, left]
    for c in columns:
        text = _cell(c, row)
        prev = cells[-1] if cells else None
        if c.merge and prev and prev[3] and prev[0] == text and _words(text):
            prev[1] += 1
        else:
            cells.append([text, 1, c.left, c.merge])
    return "".join(f'<td class="{"l" if left or span > 1 else ""}"{f" colspan={span}" if span > 1 else ""}>'
                   f"{escape(text)}</td>" for text, span, left, _ in cells)


def epoch(value) -> float:
    """A date, datetime (naive = UTC) or number -> epoch seconds."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).timestamp() if value.tzinfo is None else value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    return float(value)
