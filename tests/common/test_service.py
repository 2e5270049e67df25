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


_SERVE = """
import asyncio, gc, os, signal
from burrow.common.service import run_until_signalled

seen = {}

async def start():
    seen["at_start"] = gc.get_freeze_count()
    asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)

async def stop():
    seen["serving"] = gc.get_freeze_count()

asyncio.run(run_until_signalled(start, stop))
print(seen["at_start"], seen["serving"])
"""


def test_every_server_freezes_its_start_up_objects_once_started():
    out = subprocess.run([sys.executable, "-c", _SERVE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    at_start, serving = map(int, out.stdout.split())
    assert at_start == 0 and serving > 1000, (at_start, serving)
