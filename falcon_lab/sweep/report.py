"""`lab sweep report`: figures, the best configuration and a markdown summary of a study.

Writes into `<results>/sweeps/<study>/`: `history.png` (one per objective for two), `importances.png`,
`slice.png` (one panel per parameter) and `contour.png` (one panel per pair of the most important parameters;
both drawn by `falcon_lab.plots.sweep`), `intermediate.png` (the evaluations that
pruning saw), `pareto.png` (two objectives), `trials.csv`, `best.yaml` (a `lab train --config` file)
and `report.md`. A figure the study cannot support yet (too few trials, one parameter) is named in
report.md with the reason instead.
"""

from __future__ import annotations

import math
import shlex
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from falcon_lab.config import dump_yaml, from_dict
from falcon_lab.runs import atomic_write, atomic_write_text, git_state, now

if TYPE_CHECKING:
    import pandas as pd

# Contour plots of more than this many parameters are a wall of panels; the most important ones go in.
CONTOUR_PARAMS = 3


@dataclass
class Report:
    """What `write_report` wrote: the files, the figures it skipped (name -> reason), the best trial."""

    folder: Path
    files: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    best: FrozenTrial | None = None


def metric_names(study: optuna.Study) -> list[str]:
    names = study.user_attrs.get("metric_names")
    return list(names) if names else [f"value{i}" for i in range(len(study.directions))]


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best complete trial; with two objectives, the Pareto-optimal one best on the first."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    if len(study.directions) == 1:
        return study.best_trial
    return max(study.best_trials, key=lambda t: t.values[0])


def write_report(study: optuna.Study, folder: str | Path) -> Report:
    """Write the figures, trials.csv, best.yaml and report.md of `study` into `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report(folder, best=best_trial(study))
    names = metric_names(study)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _figures(study, names, report)
    df = study.trials_dataframe()
    atomic_write(folder / "trials.csv", lambda f: df.to_csv(f, index=False))
    report.files.append(folder / "trials.csv")
    if report.best is not None and "config" in report.best.user_attrs:
        path = folder / "best.yaml"
        values = ", ".join(f"{n} {v:.4g}" for n, v in zip(names, report.best.values))
        header = (f"# Best trial {report.best.number} of sweep {study.study_name} ({values}).\n"
                  f"# Train it again: lab train --config {_shown(str(path))}\n")
        atomic_write_text(path, header + dump_yaml(from_dict(report.best.user_attrs["config"])))
        report.files.append(path)
    atomic_write_text(folder / "report.md", markdown(study, names, report))
    report.files.append(folder / "report.md")
    return report


def _save(report: Report, name: str, draw: Callable[[], Any]) -> None:
    import matplotlib.pyplot as plt

    try:
        axes = draw()
    except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as err:
        report.skipped[name] = str(err).splitlines()[0] if str(err) else type(err).__name__
        plt.close("all")
        return
    first = axes.flat[0] if hasattr(axes, "flat") else axes
    path = report.folder / f"{name}.png"
    atomic_write(path, lambda f: first.figure.savefig(f, dpi=120, bbox_inches="tight", format="png"))
    plt.close("all")
    report.files.append(path)


def _figures(study: optuna.Study, names: list[str], report: Report) -> None:
    vm = optuna.visualization.matplotlib
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 1:
        report.skipped["all figures"] = "no complete trial yet"
        return
    multi = len(names) > 1
    target: Callable[[FrozenTrial], float] | None = (lambda t: t.values[0]) if multi else None
    if multi:
        _save(report, "pareto", lambda: vm.plot_pareto_front(study, target_names=names))
        for i, name in enumerate(names):
            _save(report, f"history-{name}", lambda i=i, name=name: vm.plot_optimization_history(
                study, target=lambda t: t.values[i], target_name=name))
    else:
        _save(report, "history", lambda: vm.plot_optimization_history(study, target_name=names[0]))
        if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
            _save(report, "intermediate", lambda: vm.plot_intermediate_values(study))
    importances = _importances(study, target, report)
    if importances:
        _save(report, "importances", lambda: vm.plot_param_importances(study, target=target, target_name=names[0]))
    from falcon_lab.plots.sweep import plot_pairs, plot_slice

    trials = objective_table(study.trials_dataframe())
    source, command = f"study {study.study_name}", f"lab sweep report {study.study_name}"
    _drawn(report, "slice", lambda path: plot_slice(trials, path, names[0], source, command))
    params = list(importances) or sorted({p for t in complete for p in t.params})
    if len(params) < 2:
        report.skipped["contour"] = "needs two parameters present in complete trials"
    else:
        _drawn(report, "contour", lambda path: plot_pairs(trials, params[:CONTOUR_PARAMS], path, names[0], source,
                                                          command))


def objective_table(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials table with the (first) objective as `value`: a two-objective study's is `values_0`."""
    if "value" not in trials.columns and "values_0" in trials.columns:
        return trials.rename(columns={"values_0": "value"})
    return trials


def _drawn(report: Report, name: str, draw: Callable[[Path], Path]) -> None:
    """Write `<name>.png` with `draw(path)` (lab's own figures), or note why it is not drawn."""
    try:
        report.files.append(draw(report.folder / f"{name}.png"))
    except (ValueError, KeyError) as err:
        report.skipped[name] = str(err).splitlines()[0] if str(err) else type(err).__name__


def _importances(study: optuna.Study, target: Callable[[FrozenTrial], float] | None,
                 report: Report) -> dict[str, float]:
    """Parameter importances (fANOVA) on the first objective, {} with the reason noted when there are none."""
    values = {t.values[0] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    if len(values) < 2:
        # fANOVA splits a constant objective evenly between parameters, which reads as a finding.
        report.skipped["importances"] = "the objective is the same in every complete trial"
        return {}
    try:
        out = optuna.importance.get_param_importances(study, target=target)
    except (ValueError, RuntimeError, ZeroDivisionError) as err:
        report.skipped["importances"] = str(err).splitlines()[0]
        return {}
    if not out or any(not math.isfinite(v) for v in out.values()):
        report.skipped["importances"] = "the objective does not vary over the complete trials"
        return {}
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "null" if value is None else str(value)


def _row(t: FrozenTrial, names: list[str]) -> list[str]:
    values = " / ".join(_fmt(v) for v in t.values) if t.values else ""
    if not values and t.intermediate_values:
        step = max(t.intermediate_values)
        values = f"({_fmt(t.intermediate_values[step])} at step {step})"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in t.params.items())
    seconds = t.duration.total_seconds() if t.duration else None
    note = t.user_attrs.get("error", "") if t.state != TrialState.COMPLETE else ""
    return [str(t.number), t.state.name, values, params, _fmt(t.user_attrs.get("steps", "")),
            _fmt(seconds) if seconds is not None else "", note.replace("|", "/")]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _order(t: FrozenTrial) -> tuple:
    """Best first: complete trials by their first objective (descending), then pruned, then failed."""
    rank = {TrialState.COMPLETE: 0, TrialState.PRUNED: 1, TrialState.FAIL: 2}.get(t.state, 3)
    first = -t.values[0] if t.values else 0.0
    return rank, first, t.number


def markdown(study: optuna.Study, names: list[str], report: Report) -> str:
    """The text of report.md."""
    trials = study.get_trials(deepcopy=False)
    attrs = study.user_attrs
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    devices: dict[str, int] = {}
    for t in trials:
        if "device" in t.user_attrs:
            devices[t.user_attrs["device"]] = devices.get(t.user_attrs["device"], 0) + 1
    commits = sorted({str(t.user_attrs["commit"])[:10] for t in trials if t.user_attrs.get("commit")})
    identity = attrs.get("identity", {})
    explain = {"ood_mean": "ood_mean (mean accuracy on widths 33-48, at the run's best validation step)",
               "val_acc": "val_acc (accuracy on widths 1-32, at the run's best validation step)",
               "tokens_per_s": "tokens_per_s (the run's median training throughput)"}
    lines = [f"# Sweep {study.study_name}", ""]
    lines += [f"- objective: maximise {' and '.join(explain.get(n, n) for n in names)}",
              f"- space: `{_shown(attrs.get('space_file', '?'))}` (sha {identity.get('space', '?')}), preset "
              f"{identity.get('preset') or 'of the space'}, mixer {identity.get('mixer') or 'of the space'}, "
              f"--set {identity.get('sets') or 'none'}"]
    for entry in attrs.get("commands", []):
        lines.append(f"- command ({entry['date']}): `{shlex.join(entry['command'])}` (sampler {entry['sampler']}, "
                     f"pruner {entry['pruner']}, seed {entry['seed']})")
    state = git_state()
    lines += [f"- report made {now()} at commit {state['commit'] or 'unknown'}"
              f"{' (uncommitted changes)' if state['dirty'] else ''}; trials ran at commit(s) "
              f"{', '.join(commits) or 'unknown'}",
              f"- hardware: {', '.join(f'{d} ({n} trials)' for d, n in devices.items()) or 'unknown'}", ""]
    lines += ["## Best", ""]
    best = report.best
    if best is None:
        lines += ["No complete trial yet.", ""]
    else:
        values = ", ".join(f"{n} = {v:.4g}" for n, v in zip(names, best.values))
        lines += [f"Trial {best.number}: {values}; run folder `{_shown(best.user_attrs.get('run_dir', '?'))}`.", ""]
        lines += [_table(["parameter", "value"], [[k, _fmt(v)] for k, v in best.params.items()]), ""]
        if "best.yaml" in {p.name for p in report.files}:
            lines += ["Its configuration: `best.yaml` (train it again with `lab train --config best.yaml`).", ""]
        if len(names) > 1:
            front = sorted(study.best_trials, key=lambda t: -t.values[0])
            lines += ["Pareto front: " + "; ".join(
                f"trial {t.number} ({', '.join(_fmt(v) for v in t.values)})" for t in front), ""]
    by_state = _table(["state", "trials"], [[s, str(n)] for s, n in sorted(counts.items())])
    lines += ["## Trials by state", "", by_state, ""]
    header = ["#", "state", " / ".join(names), "parameters", "steps", "seconds", "note"]
    lines += ["## Trials (best first)", "", _table(header, [_row(t, names) for t in sorted(trials, key=_order)]), ""]
    lines += ["## Figures", ""]
    lines += [f"![{p.stem}]({p.name})" for p in report.files if p.suffix == ".png"]
    lines += [f"- {name}: not drawn ({why})" for name, why in report.skipped.items()]
    return "\n".join(lines) + "\n"


def _shown(path: str) -> str:
    """A path as the report shows it: relative to the repository when it lies inside it, also when the
    trials ran in a copy of it on another machine (from its `results/`, `records/` or `falcon_lab/sweeps/` on)."""
    from falcon_lab.paths import REPO_ROOT

    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except (ValueError, OSError):
        parts = Path(path).parts
        for anchor in ("results", "records", "sweeps"):
            if anchor in parts:
                return str(Path(*parts[parts.index(anchor):]))
        return path
