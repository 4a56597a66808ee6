"""A progress line on a terminal for long runs: `[#####     ] 120/363 summarising`, on standard error.

Shown only after `delay` seconds (a short run prints nothing) and redrawn at most ten times a
second; the line is erased when the step ends, so the report that follows starts on a clean line.
"""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 24


class Progress:
    def __init__(self, stream: TextIO, *, delay: float = 2.0) -> None:
        self.stream = stream
        self.delay = delay
        self.started = time.monotonic()  # the run's start: the delay counts from there
        self.label, self.total, self.done = "", 0, 0
        self._drawn_at = 0.0
        self._shown = False

    def step(self, label: str, total: int) -> Progress:
        self.label, self.total, self.done = label, total, 0
        return self

    def update(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.started < self.delay or (now - self._drawn_at < 0.1 and self.done < self.total):
            return
        self._drawn_at = now
        filled = WIDTH * self.done // max(self.total, 1)
        self.stream.write(f"\r[{'#' * filled}{' ' * (WIDTH - filled)}] {self.done}/{self.total} {self.label}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * (WIDTH + 2 * len(str(self.total)) + len(self.label) + 5) + "\r")
            self.stream.flush()
            self._shown = False
