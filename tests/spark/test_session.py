"""The driver JVM's options: BURROW_SPARK_JAVA_OPTIONS replaces the built-in ones (a fresh process, since
JVM options only take effect when the JVM starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
from burrow.spark.session import spark_session
spark = spark_session("local[1]", app_name="burrow-jvm-options")
bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(__import__("json").dumps(list(bean.getInputArguments())))
spark.stop()
"""


def _jvm_arguments(**env: str) -> list[str]:
    run_env = {k: v for k, v in os.environ.items() if k != "BURROW_SPARK_JAVA_OPTIONS"}
    run_env.update(SPARK_LOCAL_IP="127.0.0.1", **env)
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=run_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_java_options_from_the_environment_replace_the_defaults():
    from burrow.spark.session import JAVA_OPTIONS

    args = _jvm_arguments(BURROW_SPARK_JAVA_OPTIONS="-XX:+UseSerialGC -XX:ReservedCodeCacheSize=200m")
    assert "-XX:+UseSerialGC" in args and "-XX:ReservedCodeCacheSize=200m" in args
    assert not set(JAVA_OPTIONS.split()) & set(args)
