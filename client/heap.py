"""Heap policy for bulk transfers: keep freed memory for reuse instead of handing it back to the kernel.

With glibc's defaults, once more than 128 KiB-2 MiB (its dynamic trim threshold) is free at the top of the
heap, free() returns it to the kernel, and the next allocation faults the pages back in, each one zeroed. A
transfer allocates and frees 64 KiB-1 MiB buffers continuously (plaintexts, sealed frames, what readers
return), so a Dilation receiver took about 43,000 page faults per GB and both peers spent about 15% more CPU.
Raising the trim threshold (and fixing the mmap threshold, since glibc stops adapting it once either is set)
keeps up to TRIM_THRESHOLD of freed heap mapped for reuse.

Process-wide and glibc only; a no-op elsewhere. The burrow CLI and `dilate()` call it once.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 64 * 1024 * 1024  # freed bytes kept at the top of the heap before any goes back
MMAP_THRESHOLD = 32 * 1024 * 1024  # allocations below this come from the heap (glibc's largest value)

_applied = False


def glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")  # "glibc 2.36"; musl has no such name
    except (ValueError, OSError):
        return False


def retain_freed_memory() -> bool:
    """Apply the policy once per process; True if it is in force."""
    global _applied
    if _applied:
        return True
    if not glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return _applied
