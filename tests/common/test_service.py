"""Start-up helpers shared by the servers' `__main__` modules (common/service.py)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# run in a child: freezing is for the whole process and would keep the test runner's objects forever
_CHILD = """
import gc, weakref
import burrow.transit_relay.server  # what a server has alive after start-up
from burrow.common.service import freeze_startup_objects

class Node: pass
a, b = Node(), Node()
a.b, b.a = b, a  # a reference cycle that is garbage already: collected, not frozen
dead = weakref.ref(a)
del a, b
before = len(gc.get_objects())
frozen = freeze_startup_objects()
assert dead() is None, "garbage was frozen instead of collected"
assert frozen == gc.get_freeze_count() and frozen > 10000, frozen
assert len(gc.get_objects()) < before // 10, (len(gc.get_objects()), before)  # out of every collection's walk
print("ok")
"""


def test_freeze_startup_objects_takes_them_out_of_every_collection_and_frees_garbage_first():
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
