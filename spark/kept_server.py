"""A Spark Connect server that `burrow-report --keep-spark DURATION` starts itself and keeps for later runs.

Each `burrow-report` in local mode starts its own JVM and pays its warm-up: loading Spark, generating
code for every query, JIT-compiling it (docs/spark.md, Performance). With `--keep-spark` the first run
starts a Spark Connect server on 127.0.0.1 instead, guarded by a random token, and sends its report
there. Later runs find that server and join the session the earlier ones kept on it (spark/connect.py),
so they pay neither the start nor most of the warm-up. A small Python supervisor owns the server and
stops it once no report has used it for DURATION.

Its files, in the user's cache directory (`kept-spark/`, private to the user):
- `server.json`: the supervisor's and the server's pids, the port, the token and the server's options;
  written once the server listens, removed when it stops.
- `use`: touched when a report starts and when it ends; holds the latest DURATION in seconds.
- `busy.lock`: every running report holds a shared lock on it; the supervisor stops the server only when
  it can take the lock exclusively, so a report longer than DURATION is never cut off.
- `start.lock`: one run at a time starts a server.
- `server.log`: the server's output (warnings and errors) and the supervisor's lines.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from burrow.common.processes import alive

from .session import JAVA_OPTIONS, SESSION_SETTINGS, cache_directory, driver_java_options

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
START_TIMEOUT = 300.0  # seconds for the server's JVM to start listening (a busy machine)
PR_SET_PDEATHSIG = 1  # prctl(2)
STOP_TIMEOUT = 60.0  # seconds the JVM gets to exit after SIGTERM before SIGKILL


def state_directory() -> Path:
    return cache_directory() / "kept-spark"


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def spark_submit() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not path.exists():
        raise FileNotFoundError(f"the PySpark wheel has no {path}: pip install 'burrow[spark]'")
    return path


def server_argv(port: int, master: str = "local[*]", driver_memory: str = "2g",
                java_options: str = JAVA_OPTIONS, conf: dict[str, str] | None = None) -> list[str]:
    """spark-submit of a Spark Connect server on 127.0.0.1:`port`, with local mode's driver options and the
    session settings a server needs to keep a report's generated code."""
    argv = [str(spark_submit()), "--class", SERVER_CLASS, "--name", "Spark Connect server", "--master", master,
            "--driver-memory", driver_memory, "--driver-java-options", java_options,
            "--conf", "spark.ui.enabled=false", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}"]
    settings = {**SESSION_SETTINGS, **(conf or {})}
    return argv + [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int, timeout: float = 1.0) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[IO[str]]:
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_info(d: Path) -> dict | None:
    try:
        info = json.loads((d / "server.json").read_text())
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None


def _write_info(d: Path, info: dict) -> None:
    tmp = d / ".server.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the token
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, d / "server.json")


def _touch_use(d: Path, keep: float) -> None:
    (d / "use").write_text(f"{keep:g}\n")


def _keep_seconds(d: Path) -> tuple[float, float]:
    """(the latest DURATION, seconds since the last use)."""
    path = d / "use"
    try:
        keep = float(path.read_text().strip() or 0)
        return keep, time.time() - path.stat().st_mtime
    except (OSError, ValueError):
        return 0.0, float("inf")


def running() -> dict | None:
    """The kept server's record if it is up: its supervisor alive and its port answering."""
    info = _read_info(state_directory())
    if info and alive(int(info.get("supervisor", 0)) or -1) and _listening(int(info.get("port", 0))):
        return info
    return None


def url(info: dict) -> str:
    # the client sends a token in the clear only to the host named `localhost`
    return f"sc://localhost:{info['port']}/;token={info['token']}"


class Use:
    """A report's use of the kept server: holds the busy lock until `done()`."""

    def __init__(self, d: Path, keep: float, busy: IO[str], info: dict):
        self.d, self.keep, self.busy = d, keep, busy
        self.url = url(info)

    def done(self) -> None:
        _touch_use(self.d, self.keep)
        self.busy.close()  # releases the shared lock


def attach(keep: float, master: str | None, driver_memory: str, log: Callable[[str], None]) -> Use:
    """Use the kept server, starting it first if none is up. `keep`: seconds it stays after this use."""
    d = state_directory()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    busy = open(d / "busy.lock", "a")
    fcntl.flock(busy, fcntl.LOCK_SH)  # before reading server.json: the supervisor stops only with none held
    try:
        _touch_use(d, keep)
        wanted = {"master": master or "local[*]", "driver_memory": driver_memory,
                  "java_options": driver_java_options(), "pyspark": _pyspark_version()}
        with _flock(d / "start.lock", fcntl.LOCK_EX):
            info = running()
            if info is None:
                log(f"starting a Spark server to keep for later runs (log: {d / 'server.log'})")
                info = _start(d, wanted)
            else:
                log(f"using the kept Spark server (pid {info['server']}, port {info['port']})")
                differ = [k for k, v in wanted.items() if info.get(k) != v]
                if differ:
                    log(f"note: it was started with other {', '.join(differ).replace('_', ' ')} "
                        f"({', '.join(str(info.get(k)) for k in differ)}); it keeps them until it stops "
                        f"(python -m burrow.spark.kept_server stop)")
        return Use(d, keep, busy, info)
    except BaseException:
        busy.close()
        raise


def _start(d: Path, wanted: dict[str, str]) -> dict:
    (d / "server.json").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "burrow.spark.kept_server", "serve", "--master", wanted["master"],
            "--driver-memory", wanted["driver_memory"], "--java-options", wanted["java_options"]]
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(d / "server.log", "w") as log_file:
        supervisor = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                      cwd=d, env=env, start_new_session=True)  # outlives this run
    deadline = time.monotonic() + START_TIMEOUT + 30
    while time.monotonic() < deadline:
        info = _read_info(d)
        if info and info.get("supervisor") == supervisor.pid:
            return info
        if supervisor.poll() is not None:
            tail = (d / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the Spark server did not start:\n{tail}")
        time.sleep(0.2)
    supervisor.terminate()
    raise RuntimeError(f"the Spark server did not start within {START_TIMEOUT:.0f} s (see {d / 'server.log'})")


# --- the supervisor: `python -m burrow.spark.kept_server serve` ---------------------------------------

def _say(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} kept-spark: {msg}", flush=True)


def _stop_jvm(jvm: subprocess.Popen) -> None:
    if jvm.poll() is None:
        jvm.terminate()
        try:
            jvm.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()


def _try_lock(f: IO[str]) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _die_with_parent() -> None:
    """In the server's process before it runs Java: a supervisor killed outright takes its server along
    (Linux's parent-death signal; elsewhere the server outlives it until stopped by hand)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def serve(master: str, driver_memory: str, java_options: str) -> int:
    d = state_directory()
    token, port = secrets.token_urlsafe(32), _free_port()
    # the session a report keeps must last as long as the server; its log only grows with errors (each
    # report says what went wrong itself)
    conf = {"spark.connect.session.manager.defaultSessionTimeout": "365d", "spark.log.level": "ERROR"}
    env = dict(os.environ, SPARK_CONNECT_MODE="0", **{TOKEN_ENV: token})  # this JVM is the server
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    jvm = subprocess.Popen(server_argv(port, master, driver_memory, java_options, conf), stdin=subprocess.DEVNULL,
                           env=env, preexec_fn=_die_with_parent)
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.monotonic() + START_TIMEOUT
    while not _listening(port, timeout=0.5):
        if jvm.poll() is not None or stopping or time.monotonic() > deadline:
            _say("the server did not start" if jvm.poll() is not None else "stopped before it listened")
            _stop_jvm(jvm)
            return 1
        time.sleep(0.2)
    _write_info(d, {"supervisor": os.getpid(), "server": jvm.pid, "port": port, "token": token, "master": master,
                    "driver_memory": driver_memory, "java_options": java_options, "pyspark": _pyspark_version(),
                    "started": time.time()})
    _say(f"server pid {jvm.pid} listening on 127.0.0.1:{port}")
    try:
        while True:
            keep, idle = _keep_seconds(d)
            if jvm.poll() is not None:
                _say(f"the server exited ({jvm.returncode})")
                return 1
            if stopping or idle >= keep:
                with open(d / "busy.lock", "a") as busy:
                    # a running report holds the lock (and touches `use` when it ends); `stop` waits for it
                    if stopping or _try_lock(busy):
                        fcntl.flock(busy, fcntl.LOCK_EX)
                        (d / "server.json").unlink(missing_ok=True)  # new runs start their own from here
                        _say("stopping: asked to" if stopping else f"stopping: unused for {idle:.0f} s")
                        _stop_jvm(jvm)
                        return 0
            time.sleep(min(5.0, max(0.5, keep / 10)))
    finally:
        _stop_jvm(jvm)
        info = _read_info(d)
        if info and info.get("supervisor") == os.getpid():
            (d / "server.json").unlink(missing_ok=True)


def stop(timeout: float = 600.0) -> str:
    """Stop the kept server once the reports using it have finished."""
    info = _read_info(state_directory())
    if not info or not alive(int(info.get("supervisor", 0)) or -1):
        return "no kept Spark server is running"
    os.kill(info["supervisor"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(info["supervisor"]) or alive(info["server"]):
        if time.monotonic() > deadline:
            return f"the kept Spark server (pid {info['server']}) has not stopped within {timeout:.0f} s"
        time.sleep(0.2)
    return f"stopped the kept Spark server (pid {info['server']})"


def status() -> str:
    info = running()
    if info is None:
        return "no kept Spark server is running"
    keep, idle = _keep_seconds(state_directory())
    return (f"kept Spark server: pid {info['server']}, 127.0.0.1:{info['port']}, master {info['master']}, "
            f"driver memory {info['driver_memory']}; last used {idle:.0f} s ago, stops after {keep:.0f} s unused")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m burrow.spark.kept_server",
                                     description="The Spark server burrow-report --keep-spark keeps: status or stop.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{status,stop}")
    sub.add_parser("status", help="whether it runs, where, and when it stops")
    sub.add_parser("stop", help="stop it once the reports using it have finished")
    serve_parser = sub.add_parser("serve")  # the supervisor, started by burrow-report (not listed)
    serve_parser.add_argument("--master", default="local[*]")
    serve_parser.add_argument("--driver-memory", default="2g")
    serve_parser.add_argument("--java-options", default=JAVA_OPTIONS)
    args = parser.parse_args(argv)
    if args.command == "serve":
        sys.exit(serve(args.master, args.driver_memory, args.java_options))
    print(stop() if args.command == "stop" else status())


if __name__ == "__main__":
    main()
