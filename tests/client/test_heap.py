"""client/heap.py: with the policy in force, reusing freed heap memory costs no page faults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from burrow.client.heap import glibc

ROOT = Path(__file__).resolve().parents[2]

# 16 MiB in 1 MiB buffers allocated and freed 20 times, as a transfer's plaintexts and frames come and go
CHURN = """
import resource, sys
from burrow.client.heap import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory() and retain_freed_memory()  # idempotent
def churn(rounds):
    for _ in range(rounds):
        bufs = [bytearray(1 << 20) for _ in range(16)]
        del bufs
churn(3)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn(20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    return int(out.stdout)


@pytest.mark.skipif(not glibc(), reason="the policy is glibc's mallopt; elsewhere a no-op")
def test_retained_heap_is_reused_without_page_faults():
    default, retained = faults("default"), faults("retain")
    assert default > 20 * 1000  # glibc's defaults hand the 16 MiB back and fault it in again each round
    assert retained < default / 20
