"""The SparkSession every job uses: embedded `local[*]` by default, or whatever spark-submit gave. A
session on a standing Spark Connect server comes from spark/connect.py, with `connect_settings()`."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# Whole-stage code for the wide event rows makes methods above HotSpot's 8000-byte JIT limit; let the
# JIT compile them anyway. The parallel collector suits a batch job's throughput.
JAVA_OPTIONS = "-XX:+UseParallelGC -XX:-DontCompileHugeMethods"
JAVA_OPTIONS_ENV = "BURROW_SPARK_JAVA_OPTIONS"  # replaces JAVA_OPTIONS for the local-mode driver


def driver_java_options() -> str:
    return os.environ.get(JAVA_OPTIONS_ENV, JAVA_OPTIONS)


def cache_directory() -> Path:
    """Where burrow-report keeps what outlives a run (the JVM cache, kept Spark Connect sessions)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "burrow"


def submitted() -> bool:
    """Under spark-submit, whose command line gives the driver JVM its master and resources."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# PySpark records the Python call site of every DataFrame function call, for error messages: about ten
# more py4j round trips per call (15,000 of a report's 26,000).
# Spark keeps the classes it generates for queries in an LRU cache of 100 by default; one report uses more,
# so a JVM that runs several (a Spark Connect server) would generate and JIT-compile them all again each
# time. Static settings: only a new session (or a server's command line) takes them.
SESSION_SETTINGS = {"spark.python.sql.dataFrameDebugging.enabled": "false",
                    "spark.sql.codegen.cache.maxEntries": "2000"}

# several input splits per core keep both cores busy to the end of the parse (local mode and Spark
# Connect; a cluster under spark-submit keeps its own)
SCAN_SETTINGS = {"spark.sql.files.maxPartitionBytes": str(32 << 20)}


def job_settings(shuffle_partitions: int | None = None) -> dict[str, str]:
    """The SQL settings the job needs wherever it runs."""
    cores = os.cpu_count() or 2
    return {"spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(shuffle_partitions or max(4, 2 * cores)),
            "spark.sql.adaptive.enabled": "true",
            "spark.sql.sources.partitionOverwriteMode": "dynamic",
            "spark.sql.parquet.compression.codec": "snappy",
            # write each task's day partitions side by side instead of sorting rows by day first
            "spark.sql.maxConcurrentOutputFileWriters": "32",
            "spark.sql.optimizer.plannedWrite.enabled": "false"}


def connect_settings(shuffle_partitions: int | None = None) -> dict[str, str]:
    """What a report sets for its own session on a Spark Connect server (whose JVM, memory and master are
    the server's)."""
    return {**job_settings(shuffle_partitions), **SCAN_SETTINGS}


def spark_session(master: str | None = None, app_name: str = "burrow-report",
                  shuffle_partitions: int | None = None, driver_memory: str = "2g",
                  extra_java_options: str = "") -> SparkSession:
    """Build (or join) the session.

    Under spark-submit (PYSPARK_GATEWAY_PORT is set) the master and resources come from the
    command line, so `master=None` leaves them alone; run directly, `master=None` means local[*].
    `extra_java_options` are added to a driver JVM this call starts (spark/jvm_cache.py).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master or not submitted():
        builder = builder.master(master or DEFAULT_MASTER)
    if not submitted():
        builder = (builder.config("spark.driver.memory", driver_memory).config("spark.ui.enabled", "false")
                   .config("spark.driver.extraJavaOptions", f"{driver_java_options()} {extra_java_options}".strip())
                   .config("spark.ui.showConsoleProgress", "false"))
        for key, value in SCAN_SETTINGS.items():
            builder = builder.config(key, value)
    for key, value in {**job_settings(shuffle_partitions), **SESSION_SETTINGS}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
