"""Explicit Spark schemas for the event log, built from `common.events` (never inferred).

One StructType per (service, event, version) for readers that want a single event type, and one wide
`LINE_SCHEMA` (the envelope plus the union of every field) that the ingest job parses each line with
in a single `from_json` pass. A line is valid for its type when the envelope and every non-nullable
field of its (service, event) are present with the right kind; `required_fields` gives that list.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from burrow.common.events import ENVELOPE, SCHEMA_VERSION, SCHEMAS, Field

# Schema versions this code understands; lines with another `v` are quarantined and reported.
KNOWN_VERSIONS: tuple[int, ...] = (SCHEMA_VERSION,)


def spark_type(kind: str) -> DataType:
    """Spark type for a field kind of docs/events.md."""
    if kind == "int":
        return LongType()
    if kind == "float":
        return DoubleType()
    if kind == "str":
        return StringType()
    if kind == "bool":
        return BooleanType()
    if kind == "counts":
        return MapType(StringType(), LongType())
    raise ValueError(f"unknown field kind {kind!r}")


def _struct(fields: tuple[Field, ...], all_nullable: bool = False) -> StructType:
    return StructType([StructField(f.name, spark_type(f.kind), all_nullable or f.nullable) for f in fields])


def event_schema(service: str, event: str, version: int = SCHEMA_VERSION) -> StructType:
    """The full line schema (envelope + fields) of one event type and version."""
    if version not in KNOWN_VERSIONS:
        raise KeyError(f"unknown schema version {version}")
    return _struct(ENVELOPE + SCHEMAS[(service, event)])


EVENT_SCHEMAS: dict[tuple[str, str, int], StructType] = {
    (service, event, v): event_schema(service, event, v) for (service, event) in SCHEMAS for v in KNOWN_VERSIONS
}


def _union_fields() -> tuple[Field, ...]:
    """Envelope plus every event field once; a name must keep one kind across event types."""
    seen: dict[str, Field] = {f.name: f for f in ENVELOPE}
    for fields in SCHEMAS.values():
        for f in fields:
            prior = seen.get(f.name)
            if prior is None:
                seen[f.name] = f
            elif prior.kind != f.kind:
                raise TypeError(f"field {f.name} has kinds {prior.kind} and {f.kind}: the wide schema needs one")
    return tuple(seen.values())


UNION_FIELDS: tuple[Field, ...] = _union_fields()
# Every column nullable: a line of one type leaves the other types' columns empty.
LINE_SCHEMA: StructType = _struct(UNION_FIELDS, all_nullable=True)
ENVELOPE_NAMES: tuple[str, ...] = tuple(f.name for f in ENVELOPE)


def required_fields(service: str, event: str) -> tuple[str, ...]:
    """Names that must be non-null in a valid line of this type (envelope included)."""
    return ENVELOPE_NAMES + tuple(f.name for f in SCHEMAS[(service, event)] if not f.nullable)


def event_types() -> tuple[tuple[str, str], ...]:
    return tuple(SCHEMAS)
