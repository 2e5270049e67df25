"""A small terminal progress bar with rate and ETA (stderr; redrawn at most every REDRAW seconds).

Only on a terminal (a log file or pipe gets none); the rate is timed from the first call (the first byte
moved, not the question before it); each redraw erases to the end of the line; finish() ends the line.
"""

from __future__ import annotations

import sys
import time

REDRAW = 0.1  # seconds between redraws
WIDTH = 30  # characters of bar
ERASE_TO_END = "\x1b[K"  # ANSI: clear what a longer earlier line left behind


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
    def __init__(self, stream=None, enabled: bool | None = None, clock=time.monotonic):
        """`enabled=None`: draw only if `stream` is a terminal; True/False force it."""
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.clock = clock
        self.start: float | None = None  # set by the first call: the transfer's start, not the bar's creation
        self._base = 0  # bytes already done at that first call
        self._last = 0.0
        self._drawn = False

    def render(self, done: int, total: int, now: float) -> str:
        if self.start is None:
            self.start, self._base = now, done
        elapsed = now - self.start
        rate = (done - self._base) / elapsed if elapsed > 0 else 0.0
        frac = done / total if total else 1.0
        filled = int(WIDTH * frac)
        left = eta((total - done) / rate) if rate > 0 else "-:--:--"
        return (f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {frac * 100:5.1f}% {human(done)}/{human(total)} "
                f"{human(rate)}/s ETA {left}{ERASE_TO_END}")

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self.start is None:
            self.start, self._base = now, done
        if done < total and now - self._last < REDRAW:
            return
        self._last = now
        self.stream.write(self.render(done, total, now))
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        """End the bar's line (also after an error, so the message starts on its own line); idempotent."""
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
