"""Joining a standing Spark Connect server: every `burrow-report --remote` with the same settings joins
one session there, which outlives the run.

Spark keeps the classes it generates for queries in a cache whose key includes the session's class
loader, and the JVM compiles their methods to machine code per class. A new session per report would
generate, compile and JIT-compile all of them again (about 700 methods and 20-30 CPU-s per report); a
kept session's later reports reuse them.

The session's id is kept in the user's cache directory, one per server, user and settings. The server
closes a session that has been idle for `spark.connect.session.manager.defaultSessionTimeout` (60 min
unless the server says otherwise) and refuses its id from then on, so a refused id is replaced by a new
one. An id given in the URL (`;session_id=`) is used as it is and also kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from .session import cache_directory

SESSIONS_FILE = "spark-connect-sessions.json"
SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
MAX_SESSIONS = 64  # servers x settings remembered; the oldest entries go first


def sessions_file() -> Path:
    return cache_directory() / SESSIONS_FILE


def _server(remote: str) -> str:
    """The URL without its parameters: sc://HOST:PORT."""
    return remote.split(";", 1)[0].rstrip("/")


def url_params(remote: str) -> dict[str, str]:
    """The `;key=value` parameters of an sc:// URL."""
    return dict(p.split("=", 1) for p in remote.split(";")[1:] if "=" in p)


def with_session(remote: str, session_id: str) -> str:
    params = {**url_params(remote), "session_id": session_id}
    return _server(remote) + "/;" + ";".join(f"{k}={v}" for k, v in params.items())


def session_key(remote: str, settings: dict[str, str]) -> str:
    """Which kept session a run joins: the server, the user and the SQL settings (runs with other settings
    at the same time must not change each other's)."""
    user = url_params(remote).get("user_id", "")
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return f"{_server(remote)} {user} {digest}"


def _load(path: Path) -> dict[str, str]:
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(kept, dict) else {}


def _save(path: Path, kept: dict[str, str]) -> bool:
    """Write atomically (runs may start at the same time); False when the directory is not writable."""
    kept = dict(list(kept.items())[-MAX_SESSIONS:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".sessions.")
        with os.fdopen(fd, "w") as f:
            json.dump(kept, f, indent=1)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def _unique_plan_ids() -> bool:
    """Number this run's query plans apart from every other run's.

    A Connect session caches the resolved plan of each query it is sent (file listings included), keyed
    by the plan's message, which holds the client's plan ids. The client numbers plans from 0 in every
    process, so a later report in a kept session would send the same messages as an earlier one and be
    given its plans: it would read the files the earlier report listed, which may since be gone. Starting
    the numbering at a random 62-bit offset keeps every report's plans its own."""
    from pyspark.sql.connect.plan import LogicalPlan

    if not isinstance(getattr(LogicalPlan, "_nextPlanId", None), int):
        return False  # another PySpark: do not keep the session
    LogicalPlan._nextPlanId = secrets.randbits(62)
    return True


def _open(remote: str, settings: dict[str, str]) -> SparkSession:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    try:
        for key, value in settings.items():  # the first calls to the server: a refused session fails here
            spark.conf.set(key, value)
    except Exception:
        close(spark, keep=True)
        raise
    return spark


def _closed_session(exc: Exception) -> bool:
    condition = getattr(exc, "getCondition", None)
    return callable(condition) and condition() == SESSION_CLOSED


def connect(remote: str, settings: dict[str, str],
            log: Callable[[str], None] = lambda msg: None) -> tuple[SparkSession, bool]:
    """The session on the server at `remote` with `settings` set, and whether to keep it after the run."""
    # the client imports pandas for conversions this job never makes (it collects rows, never
    # DataFrames); its "pandas >= 3 not yet fully supported" warning is noise here
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    unique = _unique_plan_ids()
    if "session_id" in url_params(remote):
        return _open(remote, settings), True
    if not unique:
        return _open(remote, settings), False
    path, key = sessions_file(), session_key(remote, settings)
    kept = _load(path)
    earlier = kept.pop(key, None)  # popped and put back last: the file keeps the most recently used
    session_id = earlier or str(uuid.uuid4())
    try:
        spark = _open(with_session(remote, session_id), settings)
    except Exception as exc:
        if not (earlier and _closed_session(exc)):
            raise
        log("the server has closed the kept session (idle too long); starting a new one")
        session_id = str(uuid.uuid4())
        spark = _open(with_session(remote, session_id), settings)
    kept[key] = session_id
    # kept only if its id is written down: a session nobody can join again would only hold the
    # server's memory until it times out
    return spark, _save(path, kept)


def close(spark: SparkSession, keep: bool) -> None:
    """Disconnect; release the session on the server unless it is kept."""
    spark.release_session_on_close = not keep
    spark.stop()
