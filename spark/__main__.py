"""burrow-report: event logs -> Parquet and CSV tables + report.html (see docs/spark.md)."""

from __future__ import annotations

import argparse
import glob
import os
import re
import socket
import sys
import time
import urllib.parse

REMOTE_ENV = "BURROW_SPARK_REMOTE"
KEEP_ENV = "BURROW_SPARK_KEEP"
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # a URI (hdfs:, s3a:, file: ...), not a plain path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from burrow.common.config import VersionAction

    parser = argparse.ArgumentParser(
        prog="burrow-report",
        description="Relay load, session metrics and a capacity plan from Burrow event logs (PySpark).")
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument("--logs", action="append", required=True, metavar="GLOB",
                        help="event log files: a path, directory, glob or any Hadoop URI (hdfs://, s3a://); "
                             "repeat the flag or separate with commas for several")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (local path or Hadoop URI); re-runs ingest only new input")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default local[*]; under spark-submit, the one it was given)")
    parser.add_argument("--remote", default=os.environ.get(REMOTE_ENV) or None, metavar="sc://HOST:PORT",
                        help=f"run on a standing Spark Connect server (default ${REMOTE_ENV}); --logs and --out "
                             "must then be paths the server can read and this machine can write (the same "
                             "machine, or storage mounted at the same path on both). The run's session stays "
                             "on the server for the next run to join, with the code Spark compiled for it")
    parser.add_argument("--keep-spark", default=os.environ.get(KEEP_ENV) or None, metavar="DURATION",
                        help=f"keep Spark running for later runs (default ${KEEP_ENV}): the first run starts a "
                             "Spark server on 127.0.0.1 and reports through it; later runs use it and skip the "
                             "JVM's start and most of its warm-up. It stops once unused for DURATION (90s, "
                             "30m, 2h, 1d). `python -m burrow.spark.kept_server status|stop`")
    parser.add_argument("--capacity", default=None, metavar="FILE",
                        help="per-node capacity figures, TOML or JSON (defaults: see docs/spark.md)")
    parser.add_argument("--shuffle-partitions", type=int, default=None,
                        help="spark.sql.shuffle.partitions (default 2 x cores, at least 4)")
    parser.add_argument("--driver-memory", default="2g",
                        help="driver memory in local mode, and of the server a --keep-spark run starts (default 2g)")
    parser.add_argument("--jvm-cache", default=None, metavar="DIR|off",
                        help="on Java 25+, where the driver JVM's ahead-of-time cache is kept (default "
                             "$BURROW_SPARK_JVM_CACHE, else ~/.cache/burrow/spark-jvm); 'off' runs without")
    args = parser.parse_args(argv)
    args.logs = [p.strip() for item in args.logs for p in item.split(",") if p.strip()]
    if args.keep_spark:
        from .units import parse_duration

        if args.remote:
            parser.error("--keep-spark and --remote exclude each other (--remote names a server of your own)")
        try:
            args.keep_spark = parse_duration(args.keep_spark)
        except ValueError as exc:
            parser.error(f"--keep-spark: {exc}")
    if args.remote and args.master:
        parser.error("--master and --remote exclude each other (the server has its own master)")
    if args.remote or args.keep_spark:  # a server on this machine, but with a working directory of its own
        if SCHEME.match(args.out) and not args.out.startswith("file:"):
            parser.error("with --remote or --keep-spark, --out must be a local path (this machine writes its "
                         "small files)")
        # the server resolves relative paths against its own working directory
        args.logs = [p if SCHEME.match(p) else os.path.abspath(os.path.expanduser(p)) for p in args.logs]
        args.out = args.out if SCHEME.match(args.out) else os.path.abspath(os.path.expanduser(args.out))
    return args


def local_input_problem(patterns: list[str]) -> str | None:
    """For plain local paths: nothing matches, or every match is empty. URIs are left to Spark."""
    if any(SCHEME.match(p) for p in patterns):
        return None
    files = []
    for p in patterns:
        matches = glob.glob(os.path.expanduser(p), recursive=True)
        for m in matches:
            if os.path.isdir(m):
                files += [os.path.join(d, f) for d, _, fs in os.walk(m) for f in fs if not f.startswith((".", "_"))]
            else:
                files.append(m)
    if not files:
        return f"no log files match {', '.join(patterns)}"
    if all(os.path.getsize(f) == 0 for f in files):
        return f"the input is empty: {len(files)} file(s), all of zero length ({files[0]}{', ...' if len(files) > 1 else ''})"
    return None


def unreachable(remote: str, timeout: float = 10.0) -> str | None:
    """Why the Spark Connect server cannot be reached, if it cannot: the client itself would retry for
    minutes before giving up."""
    url = urllib.parse.urlparse(remote.split(";", 1)[0].rstrip("/"))
    host, port = url.hostname or "localhost", url.port or 15002
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return f"cannot reach the Spark Connect server at {host}:{port}: {exc.strerror or exc}"
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    def say(msg: str) -> None:
        print(f"burrow-report: {msg}", file=sys.stderr, flush=True)

    try:
        import pyspark  # noqa: F401
    except ImportError:
        say("PySpark is not installed: pip install 'burrow[spark]' (needs Java 17+)")
        sys.exit(2)
    from . import jvm_cache
    from .capacity import CapacityConfigError, load_capacity
    from .ingest import IngestError
    from .job import run_report
    from .session import connect_settings, driver_java_options, spark_session, submitted

    try:
        cfg = load_capacity(args.capacity)
    except CapacityConfigError as exc:
        say(f"error: {exc}")
        sys.exit(2)
    problem = local_input_problem(args.logs) or (args.remote and unreachable(args.remote))
    if problem:  # answer at once, before paying for a JVM
        say(f"error: {problem}")
        sys.exit(2)
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    kept_use = None
    if args.keep_spark:
        from . import kept_server

        try:
            kept_use = kept_server.attach(args.keep_spark, args.master, args.driver_memory, log=say)
        except (RuntimeError, OSError) as exc:
            say(f"error: {exc}")
            sys.exit(1)
        args.remote = kept_use.url
    else:
        say(f"connecting to Spark Connect at {re.sub(r'token=[^;]*', 'token=...', args.remote)}" if args.remote else
            "starting Spark" + (f" on {args.master}" if args.master else ""))
    joined = SparkSession.getActiveSession() is not None  # e.g. tests: leave their session running
    starts_jvm = not (joined or args.remote or submitted())  # only a driver JVM this run starts itself
    cache = jvm_cache.plan(driver_java_options(), args.driver_memory, args.jvm_cache) if starts_jvm else None
    if args.remote:
        from . import connect

        # keep: whether the session stays on the server for the next run (spark/connect.py)
        try:
            spark, keep = connect.connect(args.remote, connect_settings(args.shuffle_partitions), log=say)
        except BaseException:
            if kept_use:
                kept_use.done()
            raise
    else:
        spark = spark_session(args.master, shuffle_partitions=args.shuffle_partitions,
                              driver_memory=args.driver_memory, extra_java_options=cache.java_options() if cache else "")
    started = time.monotonic() - t0
    try:
        result = run_report(spark, args.logs, args.out, cfg, log=say)
        say(f"{result.events:,} events in the dataset; tables in {args.out}/tables; report {result.html} "
            f"({time.monotonic() - t0:.1f} s)")
        say(f"timing: spark start {started:.2f} s, ingest {result.seconds['ingest']:.2f} s, "
            f"analysis {result.seconds['total'] - result.seconds['ingest']:.2f} s, total {time.monotonic() - t0:.2f} s")
    except IngestError as exc:
        say(f"error: {exc}")
        sys.exit(2)
    finally:
        if args.remote:
            try:
                connect.close(spark, keep)
            finally:
                if kept_use:
                    kept_use.done()
        elif not joined:
            spark.stop()
            jvm_cache.finish(cache, say)


if __name__ == "__main__":
    main()
