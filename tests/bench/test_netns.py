"""bench/netns.py: `--congestion` really moves a benchmark into its own namespace with that TCP congestion
control, and leaves the host's untouched (the Dilation figures depend on it; see bench/netns.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs in a child: enter the private namespace, then report what a loopback TCP connection there uses.
CHILD = """
import json, os, socket, sys
sys.path.insert(0, "bench")
from netns import congestion_control, private_loopback
before = os.readlink("/proc/self/ns/net")
private_loopback(sys.argv[1])
ls = socket.create_server(("127.0.0.1", 0))
c = socket.create_connection(ls.getsockname())
s, _ = ls.accept()
used = [x.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode() for x in (c, s)]
moved = before != os.readlink("/proc/self/ns/net")
print(json.dumps({"default": congestion_control(), "used": used, "moved": moved}))
"""


def _host_congestion() -> str:
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


def test_private_loopback_uses_the_asked_congestion_control_and_leaves_the_host_alone():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("this test needs root and ip (see .ci/run)")
    host = _host_congestion()
    other = "reno" if host != "reno" else "cubic"  # both are always built in
    out = subprocess.run([sys.executable, "-c", CHILD, other], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got == {"default": other, "used": [other, other], "moved": True}
    assert _host_congestion() == host


def test_an_unknown_congestion_control_is_a_clear_error():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("this test needs root and ip (see .ci/run)")
    out = subprocess.run([sys.executable, "-c", CHILD, "no-such-cc"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "cannot use TCP congestion control 'no-such-cc'" in out.stderr
