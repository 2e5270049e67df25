"""bench/thread_cpu.py: the Spark benchmark's CPU breakdown finds every thread of the process tree (the
JVM is a child of the Python driver) and files its CPU under the group its name says."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from thread_cpu import ThreadCpu, group_of, summary  # noqa: E402

# A thread named like the JVM's, which burns `cpu` seconds of its own CPU time, then idles until told.
BURNER = """
import ctypes, sys, threading, time
def burn(name, cpu, ready):
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's name
    while time.thread_time() < cpu:
        pass
    ready.set()
    threading.Event().wait(30)
ready = threading.Event()
threading.Thread(target=burn, args=(sys.argv[1], float(sys.argv[2]), ready), daemon=True).start()
ready.wait(60)
sys.stdout.write("burnt\\n"); sys.stdout.flush()
sys.stdin.readline()
"""

# The parent starts the burner as its child (like PySpark starting the JVM), then burns under its own name.
PARENT = BURNER.replace("ready.wait(60)", "ready.wait(60)\nimport subprocess\n"
                        "kid = subprocess.Popen([sys.executable, '-c', SRC, 'C2 CompilerThre', '0.3'], "
                        "stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\nkid.stdout.readline()")


def test_cpu_of_the_whole_tree_by_thread_group():
    code = f"SRC = {BURNER!r}\n" + PARENT
    proc = subprocess.Popen([sys.executable, "-c", code, "Executor task 0", "0.3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    cpu = ThreadCpu(proc.pid, interval=0.05)
    try:
        assert proc.stdout.readline() == "burnt\n"  # both burners are done and idle
        time.sleep(0.3)  # a few more samples see their final CPU time
    finally:
        groups = cpu.stop()
        proc.communicate("\n", timeout=60)
    assert groups["tasks"] >= 0.25, groups
    assert groups["jit_c2"] >= 0.25, groups  # in the grandchild
    assert "JIT compilers" in summary(groups)


def test_since_now_leaves_out_cpu_spent_before():
    """A standing server's share of one job: what its threads burnt before the job is not counted."""
    proc = subprocess.Popen([sys.executable, "-c", BURNER, "Executor task 0", "0.3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "burnt\n"
        whole, later = ThreadCpu(proc.pid, interval=0.05), ThreadCpu(proc.pid, interval=0.05, since_now=True)
        time.sleep(0.3)
    finally:
        groups, since = whole.stop(), later.stop()
        proc.communicate("\n", timeout=60)
    assert groups["tasks"] >= 0.25, groups
    assert since.get("tasks", 0.0) < 0.1, since


@pytest.mark.parametrize(("name", "group"), [("Executor task l", "tasks"), ("C1 CompilerThre", "jit_c1"),
                                             ("GC Thread#0", "gc"), ("python", "python"), ("Thread-3", "other")])
def test_group_of_thread_names(name, group):
    assert group_of(name) == group
