"""The session a fresh process builds (each test runs one): the driver JVM's options (BURROW_SPARK_JAVA_OPTIONS
replaces the built-in ones; they only take effect when the JVM starts) and its static settings."""

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


COUNT_ROUND_TRIPS = """
import json
from py4j import clientserver
from burrow.spark.session import spark_session
spark = spark_session("local[1]", app_name="burrow-call-sites")
from pyspark.sql import functions as F
F.col("first")  # the first call also reads the session's settings
trips = [0]
send = clientserver.ClientServerConnection.send_command
def counted(self, command):
    if not command.startswith("m\\n"):  # memory commands release garbage-collected objects whenever they go
        trips[0] += 1
    return send(self, command)
clientserver.ClientServerConnection.send_command = counted
for i in range(50):
    F.col(f"c{i}")
print(json.dumps({"trips": trips[0], "debugging": spark.conf.get("spark.python.sql.dataFrameDebugging.enabled")}))
"""


def test_dataframe_calls_skip_pysparks_call_site_capture():
    """PySpark's DataFrame debugging costs ~10 more py4j round trips per function call (13 against 3)."""
    run_env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run([sys.executable, "-c", COUNT_ROUND_TRIPS], capture_output=True, text=True, env=run_env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["debugging"] == "false"
    assert seen["trips"] <= 5 * 50, seen
