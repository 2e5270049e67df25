"""The Spark schemas are built from common.events, kind for kind, and nothing is inferred."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BooleanType, DoubleType, LongType, MapType, StringType

from burrow.common.events import ENVELOPE, SCHEMA_VERSION, SCHEMAS
from burrow.spark.schemas import EVENT_SCHEMAS, LINE_SCHEMA, event_schema, required_fields, spark_type


def test_one_struct_per_event_type_and_version():
    assert set(EVENT_SCHEMAS) == {(s, e, SCHEMA_VERSION) for s, e in SCHEMAS}
    for (service, event, _), struct in EVENT_SCHEMAS.items():
        fields = ENVELOPE + SCHEMAS[(service, event)]
        assert [f.name for f in struct.fields] == [f.name for f in fields]
        for sf, f in zip(struct.fields, fields, strict=True):
            assert sf.dataType == spark_type(f.kind)
            assert sf.nullable == f.nullable


def test_kinds():
    assert spark_type("int") == LongType()
    assert spark_type("float") == DoubleType()
    assert spark_type("str") == StringType()
    assert spark_type("bool") == BooleanType()
    assert spark_type("counts") == MapType(StringType(), LongType())
    with pytest.raises(ValueError):
        spark_type("decimal")


def test_relay_connection_drops_is_a_map_and_unknown_versions_are_refused():
    struct = event_schema("relay", "connection")
    assert struct["drops"].dataType == MapType(StringType(), LongType())
    with pytest.raises(KeyError):
        event_schema("relay", "connection", version=SCHEMA_VERSION + 1)


def test_wide_line_schema_and_required_fields():
    names = LINE_SCHEMA.fieldNames()
    assert names[:5] == ["v", "ts", "service", "event", "node"]
    assert len(names) == len(set(names))
    assert all(f.nullable for f in LINE_SCHEMA.fields)
    req = required_fields("transit", "session")
    assert "waiting_time" not in req and "total_bytes" in req and "node" in req
