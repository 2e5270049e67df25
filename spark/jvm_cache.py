"""The local-mode driver JVM's ahead-of-time cache (Java 25 and newer, JEPs 483 and 515).

A fresh JVM spends a large share of a report loading Spark's classes and profiling its methods before
the JIT compiles them. On Java 25+ a run that finds no cache records what its JVM loads and runs, and
builds the cache from that record after the report (about half a minute more, once); later runs start
from it: classes already loaded and linked, and the methods' profiles known, so the JIT compiles the hot
code at once. The cache belongs to one Java, one PySpark
and one set of JVM options; the file name carries a digest of them, so a change makes a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .session import cache_directory

CACHE_ENV = "BURROW_SPARK_JVM_CACHE"  # a directory, or "off"
MIN_JAVA = 25
EXIT_TIMEOUT = 600.0  # seconds for the recording JVM to exit, and again for building the cache
STALE_RECORDING = 6 * 3600  # a half-written file older than this was left by a run that died
MAIN_CLASS = "org.apache.spark.deploy.SparkSubmit"  # what PySpark's gateway JVM runs
# the cache's own notices (for example a stub it cannot reuse) would go to the report's stdout; its
# errors go to stderr
LOG_OPTIONS = "-Xlog:aot*=off -Xlog:cds*=off -Xlog:aot*=error:stderr -Xlog:cds*=error:stderr"


@dataclass
class JvmCache:
    path: Path             # the cache this configuration uses
    recording: Path | None  # where this run's JVM records what it loads and runs, when there is no cache yet

    @property
    def failed(self) -> Path:
        """Left where a build failed: no more attempts for this configuration while it exists."""
        return self.path.with_suffix(".failed")

    def java_options(self) -> str:
        if self.recording:
            # the JVM says where it recorded on its stdout, which is the report's: send that to stderr
            return (f"-XX:AOTMode=record -XX:AOTConfiguration={self.recording} -XX:+DisplayVMOutputToStderr "
                    f"{LOG_OPTIONS}")
        return f"-XX:AOTCache={self.path} {LOG_OPTIONS}"


def default_directory() -> Path:
    return cache_directory() / "spark-jvm"


def java_home() -> Path | None:
    """The Java that PySpark's launcher runs: $JAVA_HOME, else `java` on the PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def java_release(home: Path | None) -> dict[str, str]:
    """The fields of a Java runtime's `release` file (JAVA_VERSION, IMPLEMENTOR ...); {} if none."""
    try:
        text = (home / "release").read_text() if home else ""
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def feature_version(release: dict[str, str]) -> int:
    try:
        return int(release.get("JAVA_VERSION", "").split(".")[0])
    except ValueError:
        return 0


def plan(java_options: str, driver_memory: str, setting: str | None = None) -> JvmCache | None:
    """The cache for this driver, or None: Java older than 25, or the cache turned off (`setting` or
    $BURROW_SPARK_JVM_CACHE is "off"; otherwise either names the directory)."""
    setting = setting or os.environ.get(CACHE_ENV) or ""
    if setting.lower() == "off":
        return None
    home = java_home()
    release = java_release(home)
    if feature_version(release) < MIN_JAVA:
        return None
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    jars = sorted(p.name for p in (spark_home / "jars").glob("*.jar"))
    digest = hashlib.sha256("\n".join([
        str(home), *(f"{k}={v}" for k, v in sorted(release.items())), pyspark.__version__, str(spark_home),
        *jars, java_options, driver_memory]).encode()).hexdigest()[:16]
    directory = Path(setting) if setting else default_directory()
    path = directory / f"spark-{pyspark.__version__}-java{release['JAVA_VERSION']}-{digest}.aot"
    existing = JvmCache(path, None)
    if path.exists():
        return existing
    if existing.failed.exists():
        return None
    work = directory / "tmp"  # this run's record and the cache being built, until it is complete
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    _remove_stale(work)
    return JvmCache(path, work / f"{path.stem}.{os.getpid()}.aotconf")


def _remove_stale(work: Path) -> None:
    for old in work.iterdir():
        try:
            if time.time() - old.stat().st_mtime > STALE_RECORDING:
                old.unlink()
        except OSError:
            pass


def finish(cache: JvmCache | None, log) -> None:
    """After the session stopped: let a recording JVM exit (it writes what it recorded as it does), then
    build the cache from that record with the same Java, class path and options, and put it in place.
    Each step is bounded; a cache is an optimisation, so a failure is reported and the report stands."""
    if cache is None or cache.recording is None:
        return
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return
    t = time.monotonic()
    log("building the JVM cache for later runs (once per Java and PySpark version)")
    building = cache.recording.with_suffix(".aot")
    try:
        command = create_command(_command_line(proc.pid), cache.recording, building)
        proc.stdin.close()  # the gateway JVM exits when its stdin closes
        proc.wait(timeout=EXIT_TIMEOUT)
        if not cache.recording.exists():
            raise RuntimeError(f"the JVM exited with status {proc.returncode} and recorded nothing")
        built = subprocess.run(command, capture_output=True, text=True, timeout=EXIT_TIMEOUT)
        if built.returncode != 0 or not building.exists():
            raise RuntimeError(f"status {built.returncode}: {built.stderr.strip()[-500:]}")
        os.replace(building, cache.path)
    except Exception as exc:  # noqa: BLE001 - never fail the report for the cache
        building.unlink(missing_ok=True)
        try:
            cache.failed.write_text(f"{exc}\n")
        except OSError:
            pass
        log(f"warning: no JVM cache ({exc}); later runs go without it until {cache.failed} is removed")
    else:
        log(f"JVM cache built: {cache.path} ({cache.path.stat().st_size / 1e6:.0f} MB, "
            f"{time.monotonic() - t:.1f} s)")
    finally:
        cache.recording.unlink(missing_ok=True)


def _command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [arg.decode() for arg in f.read().split(b"\0") if arg]


def create_command(recorded: list[str], config: Path, output: Path) -> list[str]:
    """The command that builds a cache from a recording JVM's command line: its java and options up to
    the main class, with the recording options swapped for the create ones."""
    if MAIN_CLASS not in recorded:
        raise RuntimeError(f"the JVM's command line has no {MAIN_CLASS}")
    options = [a for a in recorded[:recorded.index(MAIN_CLASS)]
               if not a.startswith(("-XX:AOTMode=", "-XX:AOTConfiguration="))]
    return [*options, "-XX:AOTMode=create", f"-XX:AOTConfiguration={config}", f"-XX:AOTCache={output}"]
