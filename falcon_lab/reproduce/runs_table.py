"""The table of a grid of single runs (an experiment's RunGrid): one line per row label, from the registry.

Each finished run is read at its best evaluation as training recorded it in its final metrics (`best_val_acc`,
`best_ood_mean` and their per-token forms, `best_step`: the highest accuracy on the validation widths or lengths,
never chosen on the held-out ones), with its wall time; a row is the mean ± std over its finished seeds. Any task
whose runs evaluate (addition and the synthetic tasks) has these metrics; a measure a task lacks is "—".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from falcon_lab.reproduce.addition_table import format_cell, markdown_table, mean_std, provenance_sentence
from falcon_lab.reproduce.jobs import Job
from falcon_lab.runs import Registry, atomic_write_text, run_dir_for

# (final metric, column, header, decimals)
MEASURES = (("best_val_acc", "val_acc", "val. acc.", 1), ("best_val_token_acc", "val_token_acc", "val. per token", 1),
            ("best_ood_mean", "ood_mean", "held-out acc.", 1),
            ("best_ood_token_mean", "ood_token_mean", "held-out per token", 1),
            ("best_step", "best_step", "best step", 0), ("elapsed_s", "seconds", "train s", 0))


def finished(jobs: Sequence[Job], results: Path) -> list[dict[str, Any]]:
    """One record per job whose run is finished: job, seed, final metrics, registry row and folder (`dir`)."""
    registry = Registry(results / "lab.db")
    runs = []
    for job in jobs:
        row = registry.get(job.run_id)
        if row is not None and row["status"] == "finished":
            runs.append({"job": job, "seed": job.cfg.train.seed, "metrics": json.loads(row["metrics"] or "{}"),
                         "registry": row, "dir": run_dir_for(job.run_id, results=results).root})
    return runs


def write_runs_table(jobs: Sequence[Job], results: Path, out: Path, command: str) -> int:
    """runs.md (a line per row label: runs finished, each measure as mean ± std over seeds) and runs.csv (the
    same numbers, and every finished run by seed in runs_by_seed.csv) in `out`; returns how many runs are
    finished."""
    runs = finished(jobs, results)
    table, lines, by_seed = [], [], []
    for label in dict.fromkeys(j.label for j in jobs):
        mine = [r for r in runs if r["job"].label == label]
        record: dict[str, Any] = {"row": label, "mixer": next(j.cfg.mixer for j in jobs if j.label == label),
                                  "runs": len(mine), "planned": sum(j.label == label for j in jobs),
                                  "seeds": " ".join(str(r["seed"]) for r in mine)}
        for metric, column, _, _ in MEASURES:
            values = [float(r["metrics"][metric]) for r in mine if r["metrics"].get(metric) is not None]
            record[f"{column}_mean"], record[f"{column}_std"] = mean_std(values)
        table.append(record)
        lines.append([label, f"{record['runs']}/{record['planned']}",
                      *(format_cell(record[f"{c}_mean"], record[f"{c}_std"], d) for _, c, _, d in MEASURES)])
        by_seed += [{"row": label, "seed": r["seed"], "run_id": r["job"].run_id,
                     **{c: r["metrics"].get(m) for m, c, _, _ in MEASURES}} for r in mine]
    cfg = jobs[0].cfg
    text = (f"# {cfg.task}: single runs, each at its best evaluation\n\n{provenance_sentence(jobs, runs, command)}\n\n"
            f"Preset `{cfg.preset}`; each row's settings are its label's. Accuracies in percent at the run's best "
            f"step (highest accuracy on the validation widths or lengths), mean ± std over finished seeds; train "
            f"s: the run's training wall time.\n\n"
            + markdown_table(["row", "runs", *(h for _, _, h, _ in MEASURES)], lines))
    atomic_write_text(out / "runs.md", text)
    atomic_write_text(out / "runs.csv", pd.DataFrame(table).to_csv(index=False))
    columns = ["row", "seed", "run_id", *(c for _, c, _, _ in MEASURES)]
    atomic_write_text(out / "runs_by_seed.csv", pd.DataFrame(by_seed, columns=columns).to_csv(index=False))
    return len(runs)
