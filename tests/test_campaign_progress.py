"""Progress lines of a campaign: run k of N as runs start and end, the time so far and the time left from the
steps the runs have logged, and nothing raised when the stream it writes to is closed."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from falcon_lab.reproduce.addition import parse_rows, plan
from falcon_lab.reproduce.jobs import Outcome
from falcon_lab.reproduce.progress import CampaignProgress, clock, safe_writer
from falcon_lab.runs import run_dir_for


def test_clock_reads_minutes_and_hours() -> None:
    assert (clock(0), clock(65.4), clock(3725)) == ("0:00", "1:05", "1:02:05")


def test_lines_name_the_run_its_number_the_time_so_far_and_left(tmp_path: Path) -> None:
    jobs = plan("tiny", parse_rows("transformer,falcon-1.3"), seeds=1, max_steps=100)
    now = [0.0]
    lines: list[str] = []
    progress = CampaignProgress(write=lines.append, every=0, clock_fn=lambda: now[0])
    progress.begin(jobs, tmp_path)
    for job in jobs:
        progress.started(job)
    assert lines == [f"[0:00] run 1 of 2 started: transformer seed 0 (run {jobs[0].run_id})",
                     f"[0:00] run 2 of 2 started: falcon-1.3 seed 0 (run {jobs[1].run_id})"]
    assert progress.eta() is None and progress.line().endswith("ETA —")

    def logged(*steps: int) -> None:
        for job, step in zip(jobs, steps):
            folder = run_dir_for(job.run_id, results=tmp_path).root
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "metrics.csv").write_text(f"step,loss\n1,2.0\n{step},1.0\n")

    # the first steps logged at 20 s (the processes' start is no step): no rate yet
    logged(10, 0)
    now[0] = 20.0
    assert progress.line().endswith("ETA —")
    # 40 steps more in the 10 s since, 150 of 200 to make: 38 s left
    logged(30, 20)
    now[0] = 30.0
    assert progress.line() == ("[0:30] 0 of 2 runs done; running: run 1 transformer step 30/100, "
                               "run 2 falcon-1.3 step 20/100; ETA 0:38")
    now[0] = 40.0
    progress.done(Outcome(jobs[0], "finished", 40.0, metrics={"best_val_acc": 97.5, "best_step": 100}))
    # 110 steps in the 20 s since, 80 to make: 15 s left
    assert lines[-1].startswith("[0:40] run 1 of 2 transformer seed 0") and "val1-6 97.5" in lines[-1]
    assert lines[-1].endswith("; ETA 0:15")
    progress.done(Outcome(jobs[1], "finished", 41.0))
    assert "ETA" not in lines[-1] and lines[-1].startswith("[0:40] run 2 of 2 falcon-1.3")
    progress.end()


def test_a_closed_or_broken_stream_stops_no_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    safe_writer(closed)("a line")

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    safe_writer(Broken())("a line")
    kept = io.StringIO()
    safe_writer(kept)("a line")
    assert kept.getvalue() == "a line\n"
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of a closed descriptor 1 (`>&-`)
    safe_writer()("a line")
