"""Every chart value is documented in values.yaml, typed in values.schema.json and listed in docs/deploy.md."""

from __future__ import annotations

import json

from tests.deploy.chart_util import CHART, REPO
from tests.deploy.values_doc import markdown, rows

SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def schema_node(dotted: str) -> dict:
    node = SCHEMA
    for part in dotted.split("."):
        assert "properties" in node and part in node["properties"], f"{dotted}: not in values.schema.json"
        node = node["properties"][part]
    return node


def test_every_value_has_a_description():
    documented, undocumented = rows()
    assert not undocumented, f"values without a `# --` comment: {undocumented}"
    assert len(documented) > 50
    for row in documented:
        assert row.description, row.key


def test_every_value_is_in_the_schema():
    for row in rows()[0]:
        node = schema_node(row.key)
        assert node.get("description"), f"{row.key}: schema entry without a description"
        assert "type" in node, f"{row.key}: schema entry without a type"


def test_schema_has_no_stale_keys():
    keys = {row.key for row in rows()[0]}

    def walk(node: dict, prefix: str) -> None:
        for name, child in node.get("properties", {}).items():
            dotted = f"{prefix}{name}"
            if dotted == "global":
                continue
            if dotted in keys:
                continue
            assert any(k.startswith(dotted + ".") for k in keys), f"schema key {dotted} is not a chart value"
            walk(child, dotted + ".")

    walk(SCHEMA, "")


def test_docs_carry_the_current_values_table():
    docs = (REPO / "docs" / "deploy.md").read_text()
    assert markdown() in docs, ("docs/deploy.md's values table is stale: regenerate it with "
                                "`python -m tests.deploy.values_doc`")
