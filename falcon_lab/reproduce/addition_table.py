"""The addition table from finished runs: table.md (ours beside the paper's), table.csv and per_width.csv;
table.md also lists the runs begun but not finished, at their last evaluation, and progress.csv follows
every evaluation of every begun run (how fast each row takes in the widths).

Ours are mean ± sample standard deviation over the seeds of a row, each run taken at its best step
(the evaluation with the highest validation accuracy, the earliest among equals), as the paper's
Table 3 reports; the last step's accuracies stand beside them.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from falcon_lab.eval.callback import eval_widths, evals_path, pick_best, read_evals
from falcon_lab.reproduce.addition_rows import ROW_BY_NAME
from falcon_lab.reproduce.jobs import Job
from falcon_lab.runs import Registry, atomic_write_text, git_state, now, run_dir_for
from falcon_lab.train.data import train_widths



def split_of(jobs: Sequence[Job]) -> tuple[range, range]:
    """The validation and held-out widths of a plan's evaluations (its first run's; a plan shares them)."""
    return eval_widths(jobs[0].cfg) if jobs else (range(1, 33), range(33, 49))


def span(widths: range) -> str:
    """A range of widths as the tables write it: 1–32, or 7 for one width."""
    return f"{widths.start}–{widths.stop - 1}" if len(widths) > 1 else f"{widths.start}"


def metrics(val: range = range(1, 33), held_out: range = range(33, 49)) -> tuple[tuple[str, str, str, int], ...]:
    """(registry metric, column of table.csv, markdown header, decimals) of a table whose runs validate on
    `val` and hold out `held_out`: for the paper's 1–32 and 33–48, Val. acc. 1–32, Mean 33–48, Acc@33 in
    columns val_acc, ood_mean, acc33, ...; PAPER's keys are columns here."""
    v, o, first, last = span(val), span(held_out), held_out.start, held_out.stop - 1
    return (
        ("best_step", "best_step", "Best step", 0),
        ("best_val_acc", "val_acc", f"Val. acc. {v}", 1),
        ("best_ood_mean", "ood_mean", f"Mean {o}", 1),
        (f"best_acc@{first}", f"acc{first}", f"Acc@{first}", 1),
        (f"best_acc@{last}", f"acc{last}", f"Acc@{last}", 1),
        ("best_widths", "widths", "Widths answered", 1),
        ("best_free_val_acc", "free_val_acc", f"Free-running val. acc. {v}", 1),
        ("best_free_ood_mean", "free_ood_mean", f"Free-running mean {o}", 1),
        ("best_val_token_acc", "token_val_acc", f"Per-token val. acc. {v}", 1),
        ("best_ood_token_mean", "token_ood_mean", f"Per-token mean {o}", 1),
        (f"best_token_acc@{first}", f"token_acc{first}", f"Per-token Acc@{first}", 1),
        (f"best_token_acc@{last}", f"token_acc{last}", f"Per-token Acc@{last}", 1),
        ("last_val_acc", "last_val_acc", f"Last-step val. acc. {v}", 1),
        ("last_ood_mean", "last_ood_mean", f"Last-step mean {o}", 1),
        ("tied_steps", "tied_steps", f"Evaluations tied with the best step ({v})", 1),
        ("tied_ood_mean", "tied_ood_mean", f"Mean {o} over them", 1),
    )


METRICS = metrics()
# "Widths answered": the longest run of widths 1, 2, ... (up to the widest trained) whose whole answers
# are right in at least this share of samples (teacher-forced), in percent.
ANSWERED = 95.0
# The paper's columns (its Table 3: validation on widths 1–32, held out 33–48): shown only beside runs
# evaluated on the same widths.
PAPER = (("best_step", "Best step"), ("val_acc", "Val. acc. 1–32"), ("ood_mean", "Mean 33–48"),
         ("acc33", "Acc@33"), ("acc48", "Acc@48"))
PAPER_SPLIT = (range(1, 33), range(33, 49))


def paper_comparable(jobs: Sequence[Job]) -> bool:
    """Whether a plan's evaluations split the widths as the paper's table does (1–32, then 33–48)."""
    return split_of(jobs) == PAPER_SPLIT


def widths_answered(teacher_forced: dict[int, float], widest: int, threshold: float = ANSWERED) -> int:
    """How many widths 1, 2, ... in a row (up to `widest`) have whole-answer accuracy >= `threshold` %."""
    count = 0
    for n in range(1, widest + 1):
        # 19 of 20 samples is 94.9999988 as the evaluation computes it (a float32 mean): 95 to this count
        if teacher_forced.get(n, 0.0) < threshold - 1e-3:
            break
        count = n
    return count


def tied_steps(evals: Sequence[Mapping[str, Any]], best: Mapping[str, Any] | None) -> dict[str, float]:
    """The evaluations the in-distribution criterion cannot tell from the best step (the same val. acc.: once a
    run answers every sample of widths 1–32, each later evaluation ties with it): how many (`tied_steps`) and
    their mean held-out accuracy (`tied_ood_mean`). The best step is the earliest of them, so a run that goes on
    learning past it shows it here and not in `best_ood_mean`; nothing held out chooses among them."""
    if best is None or best.get("val_acc") is None:
        return {}
    tied = [r for r in evals if r.get("val_acc") == best["val_acc"] and r.get("ood_mean") is not None]
    if not tied:
        return {}
    return {"tied_steps": float(len(tied)), "tied_ood_mean": statistics.fmean(float(r["ood_mean"]) for r in tied)}


def finished_runs(jobs: Sequence[Job], results: Path) -> list[dict[str, Any]]:
    """One record per job whose run is finished: job, seed, metrics, the registry row and the run folder
    (`dir`). The metrics gain `best_widths` (widths answered at the best step) and the per-token accuracy at the
    first and last held-out width (`best_token_acc@n`) where the run's evals.csv has the best step."""
    registry = Registry(results / "lab.db")
    held_out = split_of(jobs)[1]
    out = []
    for job in jobs:
        row = registry.get(job.run_id)
        if row is not None and row["status"] == "finished":
            metrics = json.loads(row["metrics"] or "{}")
            evals = read_evals(evals_path(run_dir_for(job.run_id, results=results)))
            best = pick_best(evals, ties=job.cfg.eval.best_ties)
            metrics.update(tied_steps(evals, best))
            if best is not None and "teacher_forced" in best:
                metrics["best_widths"] = widths_answered(best["teacher_forced"], job.cfg.data.widths[1])
            for n in (held_out.start, held_out.stop - 1):
                if best is not None and n in best.get("per_token", {}):
                    metrics[f"best_token_acc@{n}"] = best["per_token"][n]
            out.append({"job": job, "seed": job.cfg.train.seed, "metrics": metrics, "registry": row,
                        "dir": run_dir_for(job.run_id, results=results).root})
    return out


def unfinished_runs(jobs: Sequence[Job], results: Path) -> list[dict[str, Any]]:
    """One record per job whose run has begun (it has evaluations) but not finished: the state a
    campaign stopped in, to read before it resumes. Not part of any mean."""
    registry = Registry(results / "lab.db")
    out = []
    for job in jobs:
        row = registry.get(job.run_id)
        if row is None or row["status"] == "finished":
            continue
        evals = read_evals(evals_path(run_dir_for(job.run_id, results=results)))
        if evals:
            last = evals[-1]
            out.append({"row": job.cfg.mixer, "seed": job.cfg.train.seed, "run_id": job.run_id,
                        "status": row["status"], "step": int(last["step"]),
                        **{k: last.get(k) for k in ("val_acc", "ood_mean", "val_token_acc", "ood_token_mean")},
                        "widths": widths_answered(last.get("teacher_forced", {}), job.cfg.data.widths[1])})
    return out


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation; (None, None) for no values, std None for one."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def row_label(row: Any, cfg: Any) -> str:
    """The table's name of a row as the plan trains it: the transformer or RetNet without RoPE is the NoPE one; a Falcon row
    with a constant ridge in place of its name's ctxλ says λ̄, and one given same-time writes, no output gate, the
    read before the write or no short convolutions says so (the `same-time` preset's rows, the `tiny` one's)."""
    options = cfg.model.mixer_options
    if cfg.mixer == "transformer" and options.get("rope", True) is False:
        return row.label.replace("(RoPE)", "(NoPE)")
    if cfg.mixer == "retnet" and options.get("rope", True) is False:
        return f"{row.label} (NoPE)"
    if not cfg.mixer.startswith("falcon-"):
        return row.label
    label, extra = row.label, []
    if options.get("ridge") == "const_lambda":
        ridge = f"λ̄ = {float(options.get('lam', 0.0)):g}"
        label = label.replace("-ctxλ", f", {ridge}") if "-ctxλ" in label else label
        extra += [] if ridge in label else [ridge]
    if options.get("alignment") == "same_time":
        extra.append("same-time writes")
    if options.get("output_gate") is False:
        extra.append("no output gate")
    if options.get("timing") == "rbw":
        extra.append("read before write")
    if options.get("conv") is False:
        extra.append("no short conv")
    if not extra:
        return label
    return f"{label[:-1]}; {', '.join(extra)})" if label.endswith(")") else f"{label} ({', '.join(extra)})"


def row_groups(jobs: Sequence[Job], runs: list[dict[str, Any]],
               rows_by_name: Mapping[str, Any]) -> Iterator[tuple[Any, list[dict[str, Any]], dict[str, Any]]]:
    """Per row of the plan, in the plan's order: the row, its finished runs, and the columns every table.csv
    starts with (row, model, runs, planned, params, seeds)."""
    planned: dict[str, int] = {}
    cfgs = {}
    for job in jobs:
        planned[job.cfg.mixer] = planned.get(job.cfg.mixer, 0) + 1
        cfgs.setdefault(job.cfg.mixer, job.cfg)
    for name, count in planned.items():
        row = rows_by_name[name]
        mine = [r for r in runs if r["job"].cfg.mixer == name]
        yield row, mine, {"row": name, "model": row_label(row, cfgs[name]), "runs": len(mine), "planned": count,
                          "params": mine[0]["registry"]["n_params"] if mine else None,
                          "seeds": " ".join(str(r["seed"]) for r in mine)}


def summary_rows(jobs: Sequence[Job], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """table.csv's rows: one per table row of the plan, in the plan's order; the paper's numbers beside
    them where the plan's evaluations split the widths as the paper's do. `<column>_seeds` lists each
    finished run's value in seed order and `<column>_median` gives their median."""
    table = []
    paper = paper_comparable(jobs)
    for row, mine, record in row_groups(jobs, runs, ROW_BY_NAME):
        if paper:
            for key, _ in PAPER:
                record[f"paper_{key}"] = getattr(row.paper, key) if row.paper else None
        for metric, column, _, _ in metrics(*split_of(jobs)):
            values = [float(r["metrics"][metric]) for r in mine if r["metrics"].get(metric) is not None]
            record[f"{column}_mean"], record[f"{column}_std"] = mean_std(values)
            if column in SEED_COLUMNS:
                record[f"{column}_seeds"] = " ".join(f"{v:.1f}" for v in values)
                record[f"{column}_median"] = statistics.median(values) if values else None
        table.append(record)
    return table


# The columns whose value in every seed table.csv lists beside the mean: the spread a mean ± std hides.
SEED_COLUMNS = ("val_acc", "ood_mean", "tied_ood_mean")


def per_width_rows(runs: list[dict[str, Any]], results: Path) -> list[dict[str, Any]]:
    """per_width.csv's rows: every width evaluated at the best and the last evaluation of every finished run,
    with the row's name in the table (`model`) and whether the width was trained on and held out."""
    out = []
    for run in runs:
        job = run["job"]
        evals = read_evals(evals_path(run_dir_for(job.run_id, results=results)))
        if not evals:
            continue
        val, held_out = eval_widths(job.cfg)
        trained = range(job.cfg.data.widths[0], job.cfg.data.widths[1] + 1)
        model = row_label(ROW_BY_NAME[job.cfg.mixer], job.cfg) if job.cfg.mixer in ROW_BY_NAME else job.cfg.mixer
        for which, e in (("best", pick_best(evals, ties=job.cfg.eval.best_ties)), ("last", evals[-1])):
            for n in range(val.start, held_out.stop):
                out.append({"row": job.cfg.mixer, "model": model, "seed": run["seed"], "run_id": job.run_id,
                            "which": which, "step": e["step"], "width": n, "trained": n in trained,
                            "held_out": n in held_out,
                            "teacher_forced": e.get("teacher_forced", {}).get(n),
                            "per_token": e.get("per_token", {}).get(n),
                            "free_running": e.get("free_running", {}).get(n)})
    return out


PROGRESS_COLUMNS = ["row", "seed", "run_id", "status", "step", "train_width", "widths", "val_acc",
                    "val_token_acc", "ood_mean"]


def progress_columns(jobs: Sequence[Job]) -> list[str]:
    """progress.csv's columns: PROGRESS_COLUMNS, then `tf@<n>` (teacher-forced whole answers) for every width the
    plan evaluates, the heat map's cells."""
    val, held_out = split_of(jobs)
    return [*PROGRESS_COLUMNS, *(f"tf@{n}" for n in range(val.start, held_out.stop))]


def progress_rows(jobs: Sequence[Job], results: Path) -> list[dict[str, Any]]:
    """progress.csv's rows: every evaluation of every run begun (finished or not), with the widest width
    trained on by then (the curriculum's, else the widest of data.widths), the widths answered and each
    width's whole answers (`tf@<n>`)."""
    registry = Registry(results / "lab.db")
    out = []
    for job in jobs:
        row = registry.get(job.run_id)
        if row is None:
            continue
        widest = job.cfg.data.widths[1]
        for e in read_evals(evals_path(run_dir_for(job.run_id, results=results))):
            step = int(e["step"])
            out.append({"row": job.cfg.mixer, "seed": job.cfg.train.seed, "run_id": job.run_id,
                        "status": row["status"], "step": step,
                        # the batches of steps 0 .. step-1 came before this evaluation (widths only grow)
                        "train_width": train_widths(job.cfg, max(step - 1, 0))[1],
                        "widths": widths_answered(e.get("teacher_forced", {}), widest),
                        **{k: e.get(k) for k in ("val_acc", "val_token_acc", "ood_mean")},
                        **{f"tf@{n}": acc for n, acc in e.get("teacher_forced", {}).items()}})
    return out


def format_cell(mean: float | None, std: float | None, decimals: int) -> str:
    """`mean ± std` with `decimals` decimals; `mean` alone without a std; "—" without a mean."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    text = f"{mean:.{decimals}f}"
    return text if std is None else f"{text} ± {std:.{decimals}f}"


def _paper_cell(value: float | None, decimals: int) -> str:
    return "—" if value is None else f"{value:.{decimals}f}"


def format_params(n: int | None) -> str:
    """A parameter count as 33K or 10.6M; "—" when unknown."""
    return "—" if n is None else f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.0f}K"


def markdown_table(header: list[str], lines: list[list[str]]) -> str:
    """A GitHub markdown table of `header` and body `lines` (lists of cell texts)."""
    rows = [header, ["---"] * len(header), *lines]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"


def trained_commits(run: dict[str, Any]) -> list[str]:
    """The commits (12 characters) that trained a finished run's weights: the one its last start from step 0
    ran at and those of every resume from a checkpoint since, from its folder's provenance.json (a folder
    whose run started again from step 0 keeps its first commit at the top, not in the weights). The
    registry's commit when the record has no folder or the folder no provenance."""
    try:
        record = json.loads((run["dir"] / "provenance.json").read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError):
        return [(run["registry"]["commit"] or "unknown")[:12]]
    commits: list[str | None] = []
    for entry in [record, *record.get("resumes", [])]:
        # resumed_from_step: the checkpoint's step; None where the run (re)started from step 0
        commits = commits + [entry.get("commit")] if entry.get("resumed_from_step") else [entry.get("commit")]
    return [(c or "unknown")[:12] for c in commits]


def distinct_commits(commits: Iterable[str]) -> list[str]:
    """Sorted, each commit once: a hash given short on one machine ($LAB_COMMIT) and long on another counts
    once, in its longer form."""
    found = set(commits)
    return sorted(c for c in found if not any(o != c and o.startswith(c) for o in found))


def provenance_sentence(jobs: Sequence[Job], runs: list[dict[str, Any]], command: str) -> str:
    """How a table was made: the command, when and at which commit it was written, the commits its runs
    trained at (their beginnings and resumes)."""
    code = git_state()
    commit = (code["commit"] or "unknown")[:12] + (" (with uncommitted changes)" if code["dirty"] else "")
    trained = distinct_commits(c for r in runs for c in trained_commits(r))
    devices = sorted({r["registry"]["device"] or "unknown" for r in runs})
    return (f"Remade by `{command}` from the repository root. Table written {now()} at commit {commit}; "
            f"runs trained at {', '.join(trained) or '—'} on {'; '.join(devices) or '—'}. "
            f"{len(runs)} of {len(jobs)} planned runs finished.")


def _model_options(jobs: Sequence[Job]) -> str:
    """The mixer options and digit-position settings of runs that share them, as a phrase (", rope=False,
    digit positions ..."), empty for none."""
    cfg = jobs[0].cfg
    m, e = cfg.model, cfg.eval
    options = "".join(f", {key}={value}" for key, value in sorted(m.mixer_options.items()))
    digits = ("" if m.abacus is None
              else ", exact digit positions (Abacus embeddings, no random offset)" if m.abacus == 0
              else f", digit positions (Abacus embeddings) with a random offset of 0–{m.abacus} in training"
                   f"{' per sample' if m.isolate_samples else ''}"
                   f"{f' on {m.abacus_shift_frac:.0%} of them' if m.abacus_shift_frac != 1.0 else ''}"
                   f"{f', {e.abacus_offset} in evaluation' if e.abacus_offset else ''}"
                   f"{', the answer carrying the index of the digit it predicts' if m.abacus_ahead else ''}")
    if m.isolate_samples:
        from falcon_lab.mixers import masks_samples, resets_at_samples

        ways = {"attention within each packed sample" if masks_samples(j.cfg.mixer)
                else "the state restarted at each packed sample" if resets_at_samples(j.cfg.mixer)
                else "each packed sample mixed on a row of its own" for j in jobs}
        digits += (f", {ways.pop()}" if len(ways) == 1
                   else f", packed samples kept apart ({'; '.join(sorted(ways))}, by mixer)")
    return options + digits


def _options_key(job: Job) -> str:
    m = job.cfg.model
    return json.dumps([m.mixer_options, m.abacus, m.isolate_samples, job.cfg.eval.abacus_offset,
                       job.cfg.train.max_steps, m.abacus_ahead, m.n_heads, job.cfg.optim.lr,
                       job.cfg.optim.schedule()], sort_keys=True, default=str)


def settings_sentence(jobs: Sequence[Job]) -> str:
    """The settings the runs of a plan share: preset, model shape, schedule, widths, evaluation, seeds; the
    mixer options and digit positions row by row where the rows' differ."""
    cfg = jobs[0].cfg
    m, t, d, e = cfg.model, cfg.train, cfg.data, cfg.eval
    seeds = sorted({j.cfg.train.seed for j in jobs})
    curriculum = ("" if d.curriculum is None
                  else f", {d.curriculum} curriculum from width {d.start_width} over {d.ramp_steps} steps")
    rows = ("" if d.seq_len is None
            else f", rows of {d.seq_len} positions{' packed with whole samples' if d.packing else ''}")
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(_options_key(job), []).append(job)
    if len(groups) == 1:
        options, per_row = _model_options(jobs), ""
    else:
        by_row: dict[str, list[Job]] = {}
        for job in jobs:
            by_row.setdefault(job.cfg.mixer, []).append(job)
        phrases = []
        steps = len({j.cfg.train.max_steps for j in jobs}) > 1
        heads = len({j.cfg.model.n_heads for j in jobs}) > 1
        rates = len({(j.cfg.optim.lr, j.cfg.optim.schedule()) for j in jobs}) > 1
        for name, mine in by_row.items():
            label = row_label(ROW_BY_NAME[name], mine[0].cfg) if name in ROW_BY_NAME else name
            mc, oc = mine[0].cfg.model, mine[0].cfg.optim
            own = (f", {mine[0].cfg.train.max_steps} steps" if steps else "") + (
                f", {mc.n_heads} heads" if heads else "") + (
                f", lr {oc.lr:g} ({oc.schedule()})" if rates else "") + _model_options(mine)
            phrases.append(f"{label}: {own.removeprefix(', ') or 'none'}")
        options, per_row = "", f" Options by row: {'; '.join(phrases)}."
    val, held_out = eval_widths(cfg)
    same_steps = len({j.cfg.train.max_steps for j in jobs}) == 1
    same_heads = len({j.cfg.model.n_heads for j in jobs}) == 1
    same_rate = len({(j.cfg.optim.lr, j.cfg.optim.schedule()) for j in jobs}) == 1
    return (f"Preset `{cfg.preset}`: d_model {m.d_model}, {m.n_layers} layers, "
            f"{f'{m.n_heads} heads' if same_heads else 'heads by row'}{options}; "
            f"{f'{t.max_steps} steps' if same_steps else 'steps by row'} "
            f"of batch {t.batch_size}, "
            f"{f'lr {cfg.optim.lr:g} ({cfg.optim.schedule()})' if same_rate else 'lr by row'}; train widths "
            f"{d.widths[0]}–{d.widths[1]}{curriculum}{rows}; evaluated every {t.val_every} steps on widths "
            f"{val.start}–{held_out.stop - 1} (held out from {held_out.start}) with "
            f"{e.n_per_length} samples per width ({e.free_per_length} free-running, at the best and the last step); "
            f"seeds {', '.join(map(str, seeds))}.{per_row}")


def ties_phrase(jobs: Sequence[Job]) -> str:
    """How the plan's runs choose their best step among evaluations of equal val. acc. (`eval.best_ties`)."""
    names = {"earliest": "the earliest", "val_loss": "the lowest validation loss"}
    return " or ".join(names[t] for t in sorted({job.cfg.eval.best_ties for job in jobs}))


def render_markdown(jobs: Sequence[Job], table: list[dict[str, Any]], runs: list[dict[str, Any]],
                    command: str, unfinished: Sequence[dict[str, Any]] = ()) -> str:
    """table.md: provenance, settings, ours beside the paper's, then free-running and per-token accuracy,
    then the runs begun but not finished."""
    labels = {name: row.label for name, row in ROW_BY_NAME.items()}
    labels.update({job.cfg.mixer: row_label(ROW_BY_NAME[job.cfg.mixer], job.cfg) for job in jobs
                   if job.cfg.mixer in ROW_BY_NAME})
    val, held_out = split_of(jobs)
    v, o = span(val), span(held_out)
    columns = metrics(val, held_out)
    paper = paper_comparable(jobs)
    lines = [
        "# Addition: teacher-forced length extrapolation (the paper's Table 3)",
        "",
        provenance_sentence(jobs, runs, command),
        "",
        settings_sentence(jobs),
        "",
        "Accuracies in percent. Teacher-forced whole-suffix accuracy: a sample counts when every target digit "
        f"and the end token are predicted right. Val. acc.: widths {v}; Mean {o}: the held-out widths {o}. "
        "Ours: mean ± standard deviation over seeds, each run at its best step (highest val. acc., "
        f"{ties_phrase(jobs)} among equals)"
        + ("; (paper): the paper's Table 3." if paper else
           f". The paper's Table 3 (validation on widths 1–32, held out 33–48) is not beside these runs, which are "
           f"evaluated on widths {v} and {o}."),
        "",
    ]
    by_column = {column: decimals for _, column, _, decimals in columns}
    header = ["Model", "Params", "Runs"]
    body = []
    if paper:
        for key, title in PAPER:
            header += [f"{title} (paper)", title]
        for r in table:
            cells = [r["model"], format_params(r["params"]), f"{r['runs']}/{r['planned']}"]
            for key, _ in PAPER:
                decimals = by_column[key]
                cells += [_paper_cell(r[f"paper_{key}"], decimals),
                          format_cell(r[f"{key}_mean"], r[f"{key}_std"], decimals)]
            body.append(cells)
    else:
        main = columns[:5]
        header += [title for _, _, title, _ in main] + [f"{title}, by seed" for _, c, title, _ in main
                                                         if c in SEED_COLUMNS]
        for r in table:
            body.append([r["model"], format_params(r["params"]), f"{r['runs']}/{r['planned']}",
                         *(format_cell(r[f"{c}_mean"], r[f"{c}_std"], dec) for _, c, _, dec in main),
                         *((r[f"{c}_seeds"] or "—").replace(" ", " / ") for _, c, _, _ in main
                           if c in SEED_COLUMNS)])
    lines.append(markdown_table(header, body))
    lines += [
        ("Beside the paper, at" if paper else "At") + " the best step: widths answered (the longest run of widths "
        f"1, 2, … whose whole answers are right in ≥ {ANSWERED:g}% of samples, teacher-forced), free-running "
        "(greedy) and per-token accuracy (each answer digit and the end token counted on its own: the paper calls its "
        "measure teacher-forced target-suffix accuracy without saying whether it counts answers or digits); and "
        "teacher-forced accuracy at the last step; the evaluations tied with the best step on val. acc. (the best is "
        "the earliest of them: once a run answers every sample of the trained widths, every later evaluation ties) "
        "and their mean held-out accuracy, which no held-out number chooses; then the median over seeds (one seed far "
        "from the others moves a mean and not a median). A greedy answer is right "
        "exactly when every teacher-forced prediction is, so free-running accuracy can part from teacher-forced "
        "accuracy only through floating-point differences (and fewer samples).",
        "",
    ]
    extra = columns[5:]
    titles = {column: title for _, column, title, _ in columns}
    body = [[r["model"]] + [format_cell(r[f"{c}_mean"], r[f"{c}_std"], dec) for _, c, _, dec in extra]
            + [format_cell(r[f"{c}_median"], None, by_column[c]) for c in SEED_COLUMNS] for r in table]
    lines.append(markdown_table(["Model", *(title for _, _, title, _ in extra),
                                 *(f"{titles[c]}, median of seeds" for c in SEED_COLUMNS)], body))
    lines.append("Per-width accuracies of every run (best and last step): `per_width.csv`; every evaluation of "
                 "every run begun, with the widths answered: `progress.csv`; the numbers above: `table.csv`.\n")
    if unfinished:
        lines += ["Runs begun but not finished (their last evaluation; in no mean above; the same command "
                  "resumes them from their last checkpoint, or starts them again without one):", ""]
        body = [[labels.get(u["row"], u["row"]), str(u["seed"]), f"`{u['run_id']}`", u["status"], str(u["step"]),
                 *(format_cell(u[k], None, 1) for k in ("val_acc", "ood_mean", "val_token_acc", "ood_token_mean")),
                 str(u["widths"])]
                for u in unfinished]
        lines.append(markdown_table(["Model", "Seed", "Run", "Status", "Last evaluation", f"Val. acc. {v}",
                                     f"Mean {o}", f"Per-token val. acc. {v}", f"Per-token mean {o}",
                                     "Widths answered"], body))
    return "\n".join(lines)


NOTES = "notes.md"  # hand-written notes that table.md ends with


def write_tables(jobs: Sequence[Job], results: Path, out: Path, command: str) -> int:
    """Write table.md, table.csv and per_width.csv to `out` from the finished runs of `jobs`; return
    how many runs are finished. A hand-written `out/notes.md` (what the numbers mean, where they part
    from the paper's and why) ends table.md under "Notes", so that every rewrite keeps it."""
    runs = finished_runs(jobs, results)
    table = summary_rows(jobs, runs)
    text = render_markdown(jobs, table, runs, command, unfinished_runs(jobs, results))
    notes = out / NOTES
    if notes.exists():
        text += f"\n\n## Notes\n\n(from `{NOTES}` beside this table)\n\n{notes.read_text(encoding='utf-8').strip()}\n"
    atomic_write_text(out / "table.md", text)
    frame = pd.DataFrame(table)
    # Whole numbers stay whole where a row has none (the paper's best step, the parameter count).
    whole = [c for c in ("params", "paper_best_step") if c in frame.columns]
    frame[whole] = frame[whole].astype("Int64")
    atomic_write_text(out / "table.csv", frame.to_csv(index=False))
    columns = ["row", "model", "seed", "run_id", "which", "step", "width", "trained", "held_out", "teacher_forced",
               "per_token", "free_running"]
    atomic_write_text(out / "per_width.csv", pd.DataFrame(per_width_rows(runs, results), columns=columns)
                      .to_csv(index=False))
    atomic_write_text(out / "progress.csv", pd.DataFrame(progress_rows(jobs, results), columns=progress_columns(jobs))
                      .to_csv(index=False))
    return len(runs)
