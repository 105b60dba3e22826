"""`lab bench throughput`: what a table's run costs, row by row, from process start to exit.

Each row trains as its campaign trains it (`lab train --preset <campaign preset> --mixer <row>`, the preset's
settings for that row included) in its own process, alone, timed from the process's start to its exit: the
price of one run of the table, imports, compilation, every evaluation and the last checkpoint included. From
the run's own `metrics.csv` (elapsed and evaluation seconds at every logged step) come:

- `step_ms`: the median time of a training step between logged steps, evaluation taken out;
- `compile_s`: the first logged step's elapsed time less its steps at `step_ms` (compilation, autotuning and
  the first passes' allocation: what a run pays before it runs at speed);
- `eval_s`: the seconds spent evaluating during training; `other_s`: the rest of `wall_s` (start-up, the data's
  first batches, the final evaluation and writing the run), of which the run's own `timings` (run.json) give
  `start_s` (process start to `run_training`: imports), `setup_s` (to the first step's clock: the model, the trainer,
  the device) and `finish_s` (after the training loop: the last checkpoint, the records), and `exit_s` the rest
  after them (the interpreter's and the device's teardown, from the last record to the process's exit);
- `mfu`: the step's model FLOPs (falcon_lab/bench/flops.py) over `step_ms`, a fraction of the GPU's bf16 peak;
- `target_s` and `on_target`: the row's target, a run in a minute (two for falcon-2 and falcon-3, whose kernels are
  slower by design), and whether `wall_s` meets it.

The runs share one results folder, so their compile caches (`<results>/cache`, set by `lab train`) are shared:
`--repeat 2` trains every row twice (the second run under another seed) to show what a run of an already compiled
shape pays. `val_acc` and `ood_mean` (the best step's, by validation accuracy, earliest among ties) let a faster
run be checked against the recorded ones: `--against` a campaign's `table.csv` (`records/addition/same-time/`) puts
each row's recorded mean over 33-48 beside it (`record_ood_mean`, `record_ood_sd`, `record_ood_seeds`, the same best
step's) and `within_spread`: whether the run lies within two standard deviations of the recorded seeds' mean (or of
their range, where that is wider). Writes `throughput.csv` and `throughput.md` after every run.
"""

from __future__ import annotations

import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from falcon_lab.bench.train import _read_rows, _write_csv, timed_run
from falcon_lab.runs import RunDir, atomic_write_text, device_name, git_state, now

COLUMNS = ("row", "seed", "status", "steps", "wall_s", "target_s", "on_target", "step_ms", "mfu", "compile_s",
           "eval_s", "other_s", "start_s", "setup_s", "finish_s", "exit_s", "tokens_per_s", "tflop", "val_acc",
           "ood_mean", "record_ood_mean", "record_ood_sd", "record_ood_seeds", "within_spread", "gpu", "run_id",
           "message")


SLOW_ROWS = {"falcon-2": 120.0, "falcon-3": 120.0}  # the rows allowed two minutes a run; every other one, one


def target_s(row: str) -> float:
    """The seconds a run of ``row`` should take, process start to exit, alone on one GPU."""
    return SLOW_ROWS.get(row, 60.0)


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def timings(metrics: list[dict[str, str]]) -> dict[str, float | None]:
    """step_ms, compile_s and eval_s from a run's logged rows (step, elapsed_s, eval_s)."""
    points = [(s, e, _float(r.get("eval_s")) or 0.0) for r in metrics
              if (s := _float(r.get("step"))) is not None and (e := _float(r.get("elapsed_s"))) is not None]
    if not points:
        return {"step_ms": None, "compile_s": None, "eval_s": None}
    per_step = [((e1 - e0) - (v1 - v0)) / (s1 - s0) for (s0, e0, v0), (s1, e1, v1) in zip(points, points[1:])
                if s1 > s0]
    step_s = statistics.median(per_step) if per_step else None
    first_step, first_elapsed, first_eval = points[0]
    compile_s = None if step_s is None else max(0.0, first_elapsed - first_eval - first_step * step_s)
    return {"step_ms": None if step_s is None else step_s * 1e3, "compile_s": compile_s, "eval_s": points[-1][2]}


def best_scores(evals: list[dict[str, str]]) -> dict[str, float | None]:
    """val_acc and ood_mean at the best step by validation accuracy (the earliest among ties)."""
    best = None
    for row in evals:
        acc = _float(row.get("val_acc"))
        if acc is not None and (best is None or acc > best[0]):
            best = (acc, _float(row.get("ood_mean")))
    return {"val_acc": None if best is None else best[0], "ood_mean": None if best is None else best[1]}


PHASES = ("start_s", "setup_s", "train_s", "finish_s")  # run.json's timings, process start to the last record


def summarise(row: str, seed: int, run_dir: Path, returncode: int | str, wall_s: float, tail: str,
              tflop: float | None, gpu: str | None) -> dict[str, Any]:
    """One line of throughput.csv from a finished (or failed) run folder."""
    from falcon_lab.bench.flops import peak_flops

    metrics = _read_rows(run_dir / "metrics.csv")
    found = timings(metrics)
    step_ms = found["step_ms"]
    peak = peak_flops(gpu)
    last = metrics[-1] if metrics else {}
    eval_s = found["eval_s"]
    elapsed = _float(last.get("elapsed_s"))
    phases = RunDir(run_dir).read_state().get("timings") or {}
    return {
        "row": row, "seed": seed,
        "status": "ok" if returncode == 0 else ("timeout" if returncode == "timeout" else f"failed ({returncode})"),
        "steps": int(float(last["step"])) if last else 0,
        "wall_s": round(wall_s, 1), "target_s": target_s(row),
        "on_target": returncode == 0 and wall_s <= target_s(row),
        "step_ms": None if step_ms is None else round(step_ms, 2),
        "mfu": None if (step_ms is None or peak is None or tflop is None) else round(tflop * 1e12 / (step_ms / 1e3)
                                                                                      / peak, 4),
        "compile_s": None if found["compile_s"] is None else round(found["compile_s"], 1),
        "eval_s": None if eval_s is None else round(eval_s, 1),
        "other_s": None if elapsed is None else round(wall_s - elapsed, 1),
        **{k: phases.get(k) for k in ("start_s", "setup_s", "finish_s")},
        "exit_s": (round(wall_s - sum(phases[k] for k in PHASES), 1) if all(k in phases for k in PHASES)
                   else None),
        "tokens_per_s": _float(last.get("tokens_per_s")),
        "tflop": None if tflop is None else float(f"{tflop:.4g}"),
        **best_scores(_read_rows(run_dir / "evals.csv")),
        "gpu": gpu or "cpu", "run_id": run_dir.name,
        "message": "" if returncode == 0 else (tail.strip().splitlines() or [""])[-1][:200],
    }


def recorded(table: Path) -> dict[str, dict[str, Any]]:
    """Each row's recorded mean over 33-48 (mean, sd, the seeds' values) from a campaign's ``table.csv``.
    ValueError naming the file when it is missing or lacks the columns."""
    import csv

    try:
        with table.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise ValueError(f"--against {table}: cannot read it ({err.strerror or err})") from None
    need = ("row", "ood_mean_mean", "ood_mean_std", "ood_mean_seeds")
    if not rows or any(k not in rows[0] for k in need):
        raise ValueError(f"--against {table}: not a campaign's table.csv (columns {', '.join(need)} needed)")
    return {r["row"]: {"mean": _float(r["ood_mean_mean"]), "sd": _float(r["ood_mean_std"]) or 0.0,
                       "seeds": [v for x in r["ood_mean_seeds"].split() if (v := _float(x)) is not None]}
            for r in rows}


def against(score: float | None, record: dict[str, Any] | None) -> dict[str, Any]:
    """The record's columns of one line: its mean, sd and seeds, and whether ``score`` lies within two standard
    deviations of the mean or within the seeds' range."""
    if record is None or record["mean"] is None:
        return {}
    seeds = record["seeds"]
    within = None
    if score is not None:
        low, high = record["mean"] - 2 * record["sd"], record["mean"] + 2 * record["sd"]
        if seeds:
            low, high = min(low, min(seeds)), max(high, max(seeds))
        within = low <= score <= high
    return {"record_ood_mean": round(record["mean"], 1), "record_ood_sd": round(record["sd"], 1),
            "record_ood_seeds": " ".join(f"{v:.1f}" for v in seeds), "within_spread": within}


def step_tflop(row: str, preset: str, task: str, overrides: Sequence[str]) -> float:
    """The row's training-step model TFLOP under its campaign preset (built on the CPU, one batch)."""
    from falcon_lab.bench.flops import step_flops
    from falcon_lab.config import load_config
    from falcon_lab.reproduce.names import train_preset
    from falcon_lab.train.data import train_batch
    from falcon_lab.train.module import LabModule

    base, settings = train_preset(preset, row)
    cfg = load_config(base, overrides=[f"task={task}", f"mixer={row}", *settings, *overrides])
    model = LabModule(cfg).model
    ids, _ = train_batch(cfg, cfg.train.max_steps // 2, 0, 1)
    return step_flops(model, cfg, ids).total / 1e12


def run(rows: Sequence[str], *, preset: str, task: str, out: Path, overrides: Sequence[str] = (),
        repeat: int = 1, seed: int = 0, timeout_s: float | None = None,
        echo: Callable[[str], None] = print, sample_ids: bool | None = None,
        against_table: Path | None = None) -> list[dict[str, Any]]:
    """Train each row `repeat` times (seeds seed, seed + 1, ...) under `out/results`; write the tables into `out`.
    `sample_ids`: every run's isolated samples by their ids (True) or as packed sequences (False), through
    `LAB_SAMPLE_IDS` in the runs' environment; None: the environment as it is. `against_table`: a campaign's
    table.csv whose recorded scores each run is set beside (ValueError when it cannot be read)."""
    from falcon_lab.mixers.layers import sample_ids_set

    records = recorded(against_table) if against_table is not None else {}
    with sample_ids_set(sample_ids):  # this process checks each row's configuration as its runs will
        return _run(rows, preset, task, out, overrides, repeat, seed, timeout_s, echo, sample_ids, records)


def _run(rows: Sequence[str], preset: str, task: str, out: Path, overrides: Sequence[str], repeat: int, seed: int,
         timeout_s: float | None, echo: Callable[[str], None], sample_ids: bool | None,
         records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results"
    gpu = None
    try:
        import torch

        gpu = device_name() if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    lines: list[dict[str, Any]] = []
    tflops = {row: step_tflop(row, preset, task, overrides) for row in rows}  # a bad row is refused before any run
    extra = [a for item in overrides for a in ("--set", item)]
    for i in range(repeat):
        for row in rows:
            run_seed = seed + i
            run_dir = results / "runs" / f"{row}-s{run_seed}"
            cmd = [sys.executable, "-m", "falcon_lab", "train", "--task", task, "--mixer", row, "--preset", preset,
                   "--seed", str(run_seed), "--out", str(run_dir), "--results", str(results), "--no-progress", *extra]
            echo(f"$ {shlex.join(['lab', *cmd[3:]])}")
            env = None if sample_ids is None else {"LAB_SAMPLE_IDS": "1" if sample_ids else "0"}
            returncode, stdout, stderr, wall = timed_run(cmd, timeout_s, env)
            (out / f"{row}-s{run_seed}.log").write_text(stdout + stderr)
            line = summarise(row, run_seed, run_dir, returncode, wall, stderr or stdout, tflops[row], gpu)
            line.update(against(line["ood_mean"], records.get(row)))
            lines.append(line)
            echo("  " + "  ".join(f"{k} {line.get(k)}" for k in ("status", "wall_s", "step_ms", "mfu", "compile_s",
                                                                 "eval_s", "val_acc", "ood_mean", "record_ood_mean",
                                                                 "within_spread")))
            _write_csv(out / "throughput.csv", lines, COLUMNS)
            atomic_write_text(out / "throughput.md", markdown(lines, preset, task))
    return lines


def markdown(lines: list[dict[str, Any]], preset: str, task: str) -> str:
    git = git_state()
    head = ["# What a run of the table costs, row by row", "",
            f"- preset `{preset}`, task {task}: each row as its campaign trains it, alone, process start to exit",
            f"- device: {device_name()}", f"- commit: {git['commit']}{' (dirty)' if git['dirty'] else ''}",
            f"- date: {now()}", f"- command: `{shlex.join(['lab', *sys.argv[1:]])}`",
            "- columns: falcon_lab/bench/throughput.py", "",
            "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    body = ["| " + " | ".join("" if line.get(k) is None else str(line[k]) for k in COLUMNS) + " |" for line in lines]
    return "\n".join(head + body) + "\n"
