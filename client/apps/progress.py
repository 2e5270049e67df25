"""A small terminal progress bar with rate and ETA (stderr; redrawn at most every REDRAW seconds)."""

from __future__ import annotations

import sys
import time

REDRAW = 0.1  # seconds between redraws
WIDTH = 30  # characters of bar


def human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    def __init__(self, stream=None, enabled: bool = True, clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.clock = clock
        self.start = clock()
        self._last = 0.0
        self._drawn = False

    def render(self, done: int, total: int, now: float) -> str:
        elapsed = max(now - self.start, 1e-6)
        rate = done / elapsed
        frac = done / total if total else 1.0
        filled = int(WIDTH * frac)
        remaining = (total - done) / rate if rate > 0 else 0.0
        return (f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {frac * 100:5.1f}% {human(done)}/{human(total)} "
                f"{human(rate)}/s ETA {eta(remaining)}")

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if done < total and now - self._last < REDRAW:
            return
        self._last = now
        self.stream.write(self.render(done, total, now))
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
