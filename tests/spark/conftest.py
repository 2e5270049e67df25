"""One local SparkSession for the whole run (start-up costs 10-15 s), and builders of small,
explicit event DataFrames."""

from __future__ import annotations

import os

import pytest

from burrow.spark.schemas import LINE_SCHEMA, UNION_FIELDS  # needs PySpark: pip install 'burrow[spark]'


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from burrow.spark.session import spark_session

    session = spark_session("local[2]", app_name="burrow-tests", shuffle_partitions=4, driver_memory="1g")
    yield session
    session.stop()


def event(service: str, event: str, ts: float | None = None, node: str = "n1", **fields) -> dict:
    """A full wide-schema row: envelope + fields, every other column null."""
    row = {f.name: None for f in UNION_FIELDS}
    if ts is None and "started" in fields:
        ts = fields["started"] + fields["duration"]
    row.update(v=1, ts=float(ts if ts is not None else 0.0), service=service, event=event, node=node)
    for name, value in fields.items():
        assert name in row, name
        row[name] = value
    return row


def events_df(spark, rows: list[dict]):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([tuple(r[f.name] for f in UNION_FIELDS) for r in rows], LINE_SCHEMA)
    return df.withColumn("day", F.to_date(F.timestamp_seconds("ts"))).withColumn("_id", F.xxhash64("ts", "node"))
