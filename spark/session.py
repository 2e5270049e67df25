"""The SparkSession every job uses: embedded `local[*]` by default, or whatever spark-submit gave."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# Whole-stage code for the wide event rows makes methods above HotSpot's 8000-byte JIT limit; let the
# JIT compile them anyway. The parallel collector suits a batch job's throughput.
JAVA_OPTIONS = "-XX:+UseParallelGC -XX:-DontCompileHugeMethods"
JAVA_OPTIONS_ENV = "BURROW_SPARK_JAVA_OPTIONS"  # replaces JAVA_OPTIONS for the local-mode driver


def spark_session(master: str | None = None, app_name: str = "burrow-report",
                  shuffle_partitions: int | None = None, driver_memory: str = "2g") -> SparkSession:
    """Build (or join) the session.

    Under spark-submit (PYSPARK_GATEWAY_PORT is set) the master and resources come from the
    command line, so `master=None` leaves them alone; run directly, `master=None` means local[*].
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    builder = SparkSession.builder.appName(app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not submitted:
        builder = builder.master(master or DEFAULT_MASTER)
    if not submitted:
        builder = (builder.config("spark.driver.memory", driver_memory).config("spark.ui.enabled", "false")
                   .config("spark.driver.extraJavaOptions", os.environ.get(JAVA_OPTIONS_ENV, JAVA_OPTIONS))
                   .config("spark.ui.showConsoleProgress", "false")
                   # several input splits per core keep both cores busy to the end of the parse
                   .config("spark.sql.files.maxPartitionBytes", str(32 << 20)))
    cores = os.cpu_count() or 2
    builder = (builder
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(4, 2 * cores)))
               .config("spark.sql.adaptive.enabled", "true")
               .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
               .config("spark.sql.parquet.compression.codec", "snappy")
               # write each task's day partitions side by side instead of sorting rows by day first
               .config("spark.sql.maxConcurrentOutputFileWriters", "32")
               .config("spark.sql.optimizer.plannedWrite.enabled", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
