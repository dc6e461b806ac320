"""The progress display of a scenario run: the step, a bar and an ETA on a terminal; one
line per step otherwise (CI logs)."""

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from .spec import Step

WIDTH = 24


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k} {v:,.2f}" for k, v in metrics.items())


class Progress:
    def __init__(self, scenario: str, steps: Sequence[Step], stream: TextIO | None = None):
        self.scenario = scenario
        self.total = len(steps)
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._step: tuple[int, str] | None = None
        self._begin = time.monotonic()

    def note(self, text: str) -> None:
        self._line(f"{self.scenario}: {text}")

    def begin(self, i: int, step: Step) -> None:
        self._step = (i + 1, step.name)
        self._begin = time.monotonic()
        if not self.live:
            self._line(f"{self.scenario} [{i + 1}/{self.total}] {step.name} ...")

    def tick(self, elapsed: float, done: int | None, of: float) -> None:
        """elapsed seconds into the current iteration; `done` iterations of `of` (a
        repeated step), or done None and `of` the expected seconds (a timed step)."""
        if not self.live or self._step is None:
            return
        spent = time.monotonic() - self._begin
        eta: float | None
        if done is None:
            share, eta = min(elapsed / of, 1.0), max(of - elapsed, 0.0)
        else:
            share = (done - 1) / of
            eta = (spent - elapsed) / (done - 1) * (of - done + 1) - elapsed if done > 1 else None
        bar = "#" * int(share * WIDTH) + "-" * (WIDTH - int(share * WIDTH))
        eta_text = f"ETA {eta:4.0f} s" if eta is not None else "ETA    ? s"
        n, name = self._step
        self.stream.write(f"\r{self.scenario} [{n}/{self.total}] {name[:28]:<28} [{bar}] {spent:5.0f} s {eta_text} ")
        self.stream.flush()

    def end(self, i: int, step: Step, metrics: dict) -> None:
        took = time.monotonic() - self._begin
        if self.live:
            self.stream.write("\r" + " " * 100 + "\r")
        self._line(f"{self.scenario} [{i + 1}/{self.total}] {step.name}: {_fmt(metrics)} ({took:.1f} s)")

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
