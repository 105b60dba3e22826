"""`lab bench train`: a short real training run of each mixer, its throughput and its loss.

Each mixer trains in its own subprocess through ``lab train`` (so one mixer's failure or memory cannot
spoil the next), for ``max_steps`` optimiser steps of a preset on a task. Throughput is the median of the
logged tokens/s over the second half of the run (after compilation, autotuning and warm-up); the loss is
the last logged one. Writes ``train.csv`` (one row per mixer), ``train_curves.csv`` (every logged row of
every run, with its mixer) and ``train.md`` (the table with the GPU, commit, date and command).
"""

from __future__ import annotations

import csv
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from falcon_lab.compact import open_text, readable
from falcon_lab.runs import atomic_write_text, device_name, git_state, now

COLUMNS = ["mixer", "status", "params", "steps", "tokens_per_s", "loss", "val_loss", "wall_s", "message"]


def _read_rows(path: Path) -> list[dict[str, str]]:
    if not readable(path).exists():
        return []
    with open_text(path) as fh:  # the plain file or its compacted .gz
        return list(csv.DictReader(fh))


def _float(row: dict[str, str], key: str) -> float | None:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else None


def summarise_run(mixer: str, run_dir: Path, returncode: int | str, wall_s: float, tail: str) -> dict:
    """One row of train.csv from a finished (or failed) run folder."""
    rows = _read_rows(run_dir / "metrics.csv")
    speeds = [s for r in rows[len(rows) // 2:] if (s := _float(r, "tokens_per_s")) is not None]
    losses = [v for r in rows if (v := _float(r, "loss")) is not None]
    val = [v for r in rows if (v := _float(r, "val_loss")) is not None]
    params = None
    state_file = run_dir / "params.txt"
    if state_file.exists():
        params = int(state_file.read_text().strip())
    return {
        "mixer": mixer,
        "status": "ok" if returncode == 0 else ("timeout" if returncode == "timeout" else f"failed ({returncode})"),
        "params": params,
        "steps": int(float(rows[-1]["step"])) if rows else 0,
        "tokens_per_s": round(statistics.median(speeds)) if speeds else None,
        "loss": round(losses[-1], 4) if losses else None,
        "val_loss": round(val[-1], 4) if val else None,
        "wall_s": round(wall_s, 1),
        "message": "" if returncode == 0 else tail.strip().splitlines()[-1][:200] if tail.strip() else "",
    }


def count_parameters(mixer: str, preset: str, task: str) -> int:
    """Parameters of the model `lab train` builds for this mixer, preset and task."""
    from falcon_lab.mixers import LanguageModel

    from falcon_lab.config import load_config
    from falcon_lab.train.module import lm_config

    return LanguageModel(lm_config(load_config(preset=preset, task=task, mixer=mixer))).num_parameters()


def run(mixers: Sequence[str], *, preset: str, task: str, max_steps: int, out: Path, work: Path,
        extra: Sequence[str] = (), timeout_s: float | None = None,
        echo: Callable[[str], None] = print) -> list[dict]:
    """Train each mixer briefly, write the three result files under ``out`` (rewritten after every mixer,
    so a stopped benchmark keeps what it measured), return the rows. ``timeout_s`` bounds one mixer's run."""
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for mixer in mixers:
        run_dir = work / mixer
        cmd = [sys.executable, "-m", "falcon_lab", "train", "--task", task, "--mixer", mixer, "--preset", preset,
               "--max-steps", str(max_steps), "--out", str(run_dir), "--results", str(work), "--no-progress",
               *extra]
        echo(f"$ {shlex.join(cmd[1:])}")
        returncode, stdout, stderr, wall = timed_run(cmd, timeout_s)
        (work / f"{mixer}.log").write_text(stdout + stderr)
        try:
            (run_dir / "params.txt").write_text(str(count_parameters(mixer, preset, task)))
        except Exception as err:  # noqa: BLE001 — a mixer that cannot even build is reported in its row
            echo(f"  could not count parameters of {mixer}: {err}")
        row = summarise_run(mixer, run_dir, returncode, wall, stderr or stdout)
        rows.append(row)
        curves += [{"mixer": mixer, **r} for r in _read_rows(run_dir / "metrics.csv")]
        echo(f"  {row['status']}: {row['tokens_per_s']} tok/s, loss {row['loss']}, {row['wall_s']} s")
        _write_csv(out / "train.csv", rows, COLUMNS)
        curve_cols = ["mixer", *dict.fromkeys(k for r in curves for k in r if k != "mixer")]
        _write_csv(out / "train_curves.csv", curves, curve_cols)
        atomic_write_text(out / "train.md", markdown(rows, preset, task, max_steps))
    return rows


def timed_run(cmd: Sequence[str], timeout_s: float | None,
              env: dict[str, str] | None = None) -> tuple[int | str, str, str, float]:
    """Run `cmd` to its exit (or `timeout_s`), in this process's environment with `env` set over it: its return code
    ("timeout" when stopped), stdout, stderr and wall seconds from start to exit."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        returncode = "timeout"
        stdout, stderr = _text(err.stdout), _text(err.stderr) + f"\nstopped after {timeout_s} s"
    return returncode, stdout, stderr, time.perf_counter() - start


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _write_csv(path: Path, rows: list[dict], columns: Sequence[str]) -> None:
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def markdown(rows: list[dict], preset: str, task: str, max_steps: int) -> str:
    git = git_state()
    lines = [
        f"# Training throughput per mixer ({task}, preset `{preset}`, {max_steps} steps)",
        "",
        f"- device: {device_name()}",
        f"- commit: {git['commit']}{' (dirty)' if git['dirty'] else ''}",
        f"- date: {now()}",
        f"- command: `{shlex.join(['lab', *sys.argv[1:]])}`",
        "- tokens/s: median of the logged tokens/s over the second half of each run",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
