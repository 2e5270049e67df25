"""Read helm/burrow/values.yaml's `# --` comments (helm-docs style) into (key, default, description) rows.

A key with a `# --` comment is documented as a whole (its default may be a map or list); a key without
one must be a section whose children are documented. `python -m tests.deploy.values_doc` prints the
Markdown table that docs/deploy.md carries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tests.deploy.chart_util import CHART

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")


@dataclass
class Row:
    key: str
    default: Any
    description: str


def lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def rows() -> tuple[list[Row], list[str]]:
    """(documented rows, keys that are neither documented nor sections)."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    out: list[Row] = []
    undocumented: list[str] = []
    path: list[tuple[int, str]] = []
    comment: list[str] | None = None
    documented_prefix: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if comment is not None:
                comment.append(stripped[1:].strip())
            continue
        m = KEY.match(line)
        if not m:
            continue  # list items and continuation lines belong to the key above
        indent = len(m.group("indent"))
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, m.group("key")))
        dotted = ".".join(k for _, k in path)
        if documented_prefix and dotted.startswith(documented_prefix + "."):
            comment = None
            continue  # inside a value documented as a whole
        documented_prefix = None
        default = lookup(values, dotted)
        if comment is not None:
            out.append(Row(dotted, default, " ".join(comment)))
            if isinstance(default, dict | list):
                documented_prefix = dotted
        elif not isinstance(default, dict) or not default:
            undocumented.append(dotted)
        comment = None
    return out, undocumented


def markdown() -> str:
    lines = ["| Value | Default | Description |", "|---|---|---|"]
    for row in rows()[0]:
        description = row.description.replace("|", "\\|")
        lines.append(f"| `{row.key}` | `{json.dumps(row.default)}` | {description} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
