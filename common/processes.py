"""Whether a process is still running, by pid (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while `pid` runs: not after it exits, even before its parent reaps it (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
