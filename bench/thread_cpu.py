"""CPU time of a process tree by thread group: where a fresh Spark job's CPU goes (its task threads,
the JIT compilers, the driver's planning and code generation, GC, Python) without a profiler.

Linux only: /proc is sampled every `interval` seconds, so a thread that ends between two samples loses
at most its last interval. The groups are matched on the thread name the kernel keeps (15 characters).
"""

from __future__ import annotations

import os
import threading
from collections import Counter

# (group, thread-name prefix): the first match wins; everything else in the tree is "other".
GROUPS = (("tasks", "Executor task"), ("jit_c2", "C2 Compiler"), ("jit_c1", "C1 Compiler"),
          ("gc", "GC Thread"), ("gc", "VM Thread"), ("python", "python"))
TICK = os.sysconf("SC_CLK_TCK")


def group_of(name: str) -> str:
    return next((g for g, prefix in GROUPS if name.startswith(prefix)), "other")


def _tree(root: int) -> list[int]:
    """root and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _threads(pid: int) -> dict[tuple[int, str], tuple[str, float]]:
    """(pid, tid) -> (thread name, CPU seconds so far) for one process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[(pid, tid)] = (stat[stat.index("(") + 1:stat.rindex(")")], (int(fields[11]) + int(fields[12])) / TICK)
    return out


class ThreadCpu:
    """Sample the tree under `pid` in a background thread until `stop()`, which returns CPU seconds
    per group."""

    def __init__(self, pid: int, interval: float = 0.5, since_now: bool = False) -> None:
        """`since_now`: count only CPU spent from now on (a long-running server's share of one job)."""
        self._root, self._interval = pid, interval
        self._seen: dict[tuple[int, str], tuple[str, float]] = {}
        self._base: dict[tuple[int, str], float] = {}
        if since_now:
            self._sample()
            self._base = {key: cpu for key, (_, cpu) in self._seen.items()}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for pid in _tree(self._root):
            self._seen.update(_threads(pid))

    def _run(self) -> None:
        while not self._done.is_set():
            self._sample()
            self._done.wait(self._interval)

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        groups: Counter[str] = Counter()
        for key, (name, cpu) in self._seen.items():
            groups[group_of(name)] += cpu - self._base.get(key, 0.0)
        return dict(groups)


def summary(groups: dict[str, float]) -> str:
    """One line: total, then each group's CPU seconds and share."""
    total = sum(groups.values()) or 1.0
    jit = groups.get("jit_c1", 0.0) + groups.get("jit_c2", 0.0)
    parts = [("Spark tasks", groups.get("tasks", 0.0)), ("JIT compilers", jit),
             ("driver and other JVM threads", groups.get("other", 0.0)), ("GC", groups.get("gc", 0.0)),
             ("Python", groups.get("python", 0.0))]
    return f"CPU {sum(groups.values()):.1f} s: " + ", ".join(f"{n} {s:.1f} s ({s / total:.0%})" for n, s in parts)
