"""Progress of a campaign while it runs: which run of how many, the time so far, and the time left.

Plain lines (no cursor movement), so that a log file, a pipe or a terminal all read them alike: one when a
run starts, one when it ends, and one every `every` seconds while runs are going, naming each running run's
step (read from its metrics.csv). The time left is estimated from the steps: the steps still to make at the
rate of those made since steps were first logged, counting only the runs this campaign trains. A write to a closed
or broken stream is dropped: progress never stops a campaign.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from falcon_lab.reproduce.jobs import Job, Outcome, outcome_line
from falcon_lab.runs import run_dir_for
from falcon_lab.train.callbacks import read_metrics


def clock(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour on)."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def safe_writer(stream: TextIO | None = None) -> Callable[[str], None]:
    """A function that writes a line to `stream` (sys.stdout as it is now) and flushes it, and does nothing
    where there is no stdout (`>&-`), once the stream is closed or once its reader is gone."""
    stream = stream if stream is not None else sys.stdout

    def write(line: str) -> None:
        if stream is None:
            return
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stdout (ValueError) or a pipe whose reader left (OSError)
            pass

    return write


class CampaignProgress:
    """Reports a campaign's runs as they start and end, and every `every` seconds in between (see the
    module docstring). `begin(jobs, results)` before the first run, `end()` after the last."""

    def __init__(self, write: Callable[[str], None] | None = None, every: float = 15.0,
                 clock_fn: Callable[[], float] = time.monotonic) -> None:
        self.write = write if write is not None else safe_writer()
        self.every, self.now = every, clock_fn
        self.jobs: list[Job] = []
        self.results = None
        self.number: dict[str, int] = {}
        self.running: dict[str, Job] = {}
        self.finished: set[str] = set()
        self.t0 = self.now()
        self._first: tuple[float, int] | None = None  # (time, steps made) when steps were first logged
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, jobs: Sequence[Job], results) -> None:
        """The runs to make (those not finished before) and the results folder holding their run folders."""
        self.jobs, self.results = list(jobs), results
        self.number = {j.run_id: i + 1 for i, j in enumerate(self.jobs)}
        self.t0 = self.now()
        if self.jobs and self.every > 0:
            self._thread = threading.Thread(target=self._tick, name="campaign-progress", daemon=True)
            self._thread.start()

    def end(self) -> None:
        """Stop the periodic lines."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def started(self, job: Job) -> None:
        with self._lock:
            self.running[job.run_id] = job
        self.write(f"[{clock(self.now() - self.t0)}] run {self._of(job)} started: {job.label or job.cfg.mixer} "
                   f"seed {job.cfg.train.seed} (run {job.run_id})")

    def done(self, outcome: Outcome) -> None:
        """A line for a run that ended (or was finished before, without a number)."""
        job = outcome.job
        if job.run_id not in self.number:
            self.write(outcome_line(outcome))
            return
        with self._lock:
            self.running.pop(job.run_id, None)
            self.finished.add(job.run_id)
        left = self.eta()
        eta = "" if left is None or len(self.finished) == len(self.jobs) else f"; ETA {clock(left)}"
        self.write(f"[{clock(self.now() - self.t0)}] run {self._of(job)} {outcome_line(outcome)}{eta}")

    def _of(self, job: Job) -> str:
        return f"{self.number.get(job.run_id, '?')} of {len(self.jobs)}"

    def step_of(self, job: Job) -> int:
        """The last step a run has logged (0 before its first metrics.csv)."""
        if job.run_id in self.finished:
            return job.cfg.train.max_steps
        if self.results is None:
            return 0
        try:
            rows = read_metrics(run_dir_for(job.run_id, results=self.results).root / "metrics.csv")
        except (OSError, ValueError, KeyError):  # a file being replaced, or cut short
            return 0
        return min(rows[-1]["step"], job.cfg.train.max_steps) if rows else 0

    def eta(self) -> float | None:
        """Seconds left at the rate of the steps made since the first ones were logged (so that the start of
        the processes does not count as steps); None until a second reading of the steps."""
        total = sum(j.cfg.train.max_steps for j in self.jobs)
        made, now = sum(self.step_of(j) for j in self.jobs), self.now()
        if made <= 0:
            return None
        if self._first is None:
            self._first = (now, made)
            return None
        since, before = self._first
        if made <= before or now <= since:
            return None
        return (now - since) * (total - made) / (made - before)

    def line(self) -> str:
        """The periodic line: runs done, the step of each running run, the time so far and left."""
        with self._lock:
            running = list(self.running.values())
            finished = len(self.finished)
        steps = ", ".join(f"run {self._of(j).split()[0]} {j.label or j.cfg.mixer} step {self.step_of(j)}/"
                          f"{j.cfg.train.max_steps}" for j in running)
        left = self.eta()
        eta = "ETA —" if left is None else f"ETA {clock(left)}"
        return (f"[{clock(self.now() - self.t0)}] {finished} of {len(self.jobs)} runs done"
                f"{f'; running: {steps}' if steps else ''}; {eta}")

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self.write(self.line())
