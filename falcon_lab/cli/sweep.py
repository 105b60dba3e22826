"""`lab sweep`: Optuna sweeps over `lab train` runs (search spaces in falcon_lab/sweeps/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Optuna sweeps: search spaces (falcon_lab/sweeps/*.yaml) run as `lab train` trials, and their reports. "
                        "A live view of a study: optuna-dashboard <results>/sweeps/<study>/journal.log (or the "
                        "database URL), after pip install optuna-dashboard.")

SAMPLER_HELP = "tpe (multivariate, constant liar), random, cmaes, qmc, grid, bruteforce, nsga2, nsga3 or gp."
STORAGE_HELP = ("A journal file (default <results>/sweeps/<study>/journal.log) or a database URL, "
                "e.g. postgresql://user:pass@host/db for workers on several machines.")


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"lab sweep: {message}", err=True)
    return typer.Exit(code=code)


def _results(results: Path | None) -> Path:
    from falcon_lab.paths import results_root

    return results.resolve() if results is not None else results_root()


def _refuse_records(study_dir: Path, storage: str | None) -> None:
    """A study shipped in records/ is evidence: read it (`lab sweep report --storage`), copy it, never append."""
    from falcon_lab.paths import inside_records

    for where in (study_dir, None if storage is None or "://" in storage else Path(storage)):
        if where is not None and inside_records(where):
            raise _fail(f"{where} lies in records/, which holds the committed studies and is never appended to; "
                        f"copy the study under $LAB_RESULTS/sweeps/ (default results/sweeps/) to resume it there")


def _storage(storage: str | None, results: Path, study: str) -> str:
    if storage is None:
        return str(results / "sweeps" / study / "journal.log")
    return storage if "://" in storage else str(Path(storage).resolve())


@app.command()
def run(
    space: Annotated[str, typer.Argument(help="Search space: regime, rules (falcon_lab/sweeps/), or a YAML file.")],
    trials: Annotated[int, typer.Option(help="The study's trial budget: trials started, in any state.")] = 20,
    workers: Annotated[int, typer.Option(help="Worker processes here: one GPU each, or CPU processes.")] = 1,
    study: Annotated[str | None, typer.Option(
        help="Study name; default the space's name, plus -MIXER with --mixer.")] = None,
    storage: Annotated[str | None, typer.Option(help=STORAGE_HELP)] = None,
    sampler: Annotated[str, typer.Option(help=SAMPLER_HELP)] = "tpe",
    objective: Annotated[str, typer.Option(
        help="val_acc (widths 1-32, the default), val_token_acc (per-token accuracy on widths 1-32, last "
             "evaluation), multi (val_acc and tokens/s), or ood_mean (widths 33-48: tunes on the test widths, "
             "with a warning).")] = "val_acc",
    pruner: Annotated[str, typer.Option(
        help="hyperband (on each evaluation) or none; multi never prunes.")] = "hyperband",
    preset: Annotated[str | None, typer.Option(help="Base preset; default the space's.")] = None,
    mixer: Annotated[str | None, typer.Option(help="Mixer of every trial (for spaces that do not search it).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Fix a setting of every trial, e.g. --set train.val_every=50 (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed (worker k uses seed + k); default random.")] = None,
    heartbeat: Annotated[int, typer.Option(
        help="Seconds between heartbeats of running trials in a database storage.")] = 60,
    prune_after: Annotated[int, typer.Option(
        help="Hyperband's first rung in training steps (default: the first evaluation).")] = 0,
    results: Annotated[Path | None, typer.Option(
        help="Results folder (sweeps/ and the run registry); default $LAB_RESULTS or results/.")] = None,
) -> None:
    """Run (or resume) a sweep until the study has --trials trials; each trial is a `lab train` run in
    <results>/sweeps/<study>/trials/<n>/."""
    from falcon_lab.config import ConfigError
    from falcon_lab.sweep.spec import SweepSpec
    from falcon_lab.sweep.storage import redact
    from falcon_lab.sweeps import space_path

    try:
        path = space_path(space)
    except ValueError as err:
        raise _fail(str(err)) from None
    name = study or (f"{path.stem}-{mixer}" if mixer else path.stem)
    root = _results(results)
    _refuse_records(root / "sweeps" / name, storage)
    spec = SweepSpec(study=name, space=str(path.resolve()), storage=_storage(storage, root, name), results=str(root),
                     trials=trials, objective=objective, sampler=sampler, pruner=pruner, preset=preset, mixer=mixer,
                     sets=list(set_ or ()), heartbeat=heartbeat, prune_after=prune_after)
    if seed is not None:
        spec.seed = seed
    from falcon_lab.sweep.spec import HELD_OUT_OBJECTIVES

    if objective in HELD_OUT_OBJECTIVES:
        typer.echo(f"warning: --objective {objective} maximises accuracy on the held-out widths 33-48: the study "
                   f"tunes on the test set, and its best trial's {objective} is no longer a held-out number "
                   f"(val_acc, the default, selects on widths 1-32)", err=True)
    # The command as retyped with every choice explicit (the seed drawn included), for the study's history.
    spec.command = ["lab", "sweep", "run", space, "--trials", str(trials), "--workers", str(workers), "--study", name,
                    "--objective", objective, "--sampler", sampler, "--pruner", pruner, "--seed", str(spec.seed)]
    shown = redact(storage) if storage is not None else None
    for flag, value in (("--preset", preset), ("--mixer", mixer), ("--storage", shown), ("--results", results)):
        spec.command += [flag, str(value)] if value is not None else []
    spec.command += [arg for item in spec.sets for arg in ("--set", item)]
    spec.command += ["--heartbeat", str(heartbeat)] if heartbeat != 60 else []
    spec.command += ["--prune-after", str(prune_after)] if prune_after else []
    from falcon_lab.sweep.runner import run_sweep

    try:
        outcome = run_sweep(spec, workers, echo=typer.echo)
    except (ValueError, ConfigError) as err:
        raise _fail(str(err)) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(outcome.counts.items()))
    typer.echo(f"study {name}: {counts or 'no trials'} (budget {trials}). Report: lab sweep report {name}"
               + (f" --storage {shown}" if storage else "") + (f" --results {results}" if results else ""))
    if not outcome.complete or any(outcome.exit_codes):
        raise typer.Exit(code=1)


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="Study name.")],
    storage: Annotated[str | None, typer.Option(help=STORAGE_HELP)] = None,
    results: Annotated[Path | None, typer.Option(
        help="Results folder; the report goes to <results>/sweeps/<study>/.")] = None,
) -> None:
    """Figures (history, importances, slice, contour), best.yaml (a `lab train --config` file), trials.csv
    and report.md of a sweep, in <results>/sweeps/<study>/. For a live, interactive view of the same study:
    optuna-dashboard with the journal file or database URL (pip install optuna-dashboard)."""
    root = _results(results)
    where = _storage(storage, root, study)
    if "://" not in where and not Path(where).exists():
        raise _fail(f"no study {study!r}: {where} does not exist; give --storage or --results of the sweep")
    import optuna

    from falcon_lab.sweep.report import write_report
    from falcon_lab.sweep.storage import open_storage

    try:
        loaded = optuna.load_study(study_name=study, storage=open_storage(where))
    except KeyError:
        raise _fail(f"no study {study!r} in {where}") from None
    except ValueError as err:
        raise _fail(str(err)) from None
    out = write_report(loaded, root / "sweeps" / study)
    for path in out.files:
        typer.echo(f"wrote {path}")
    for name, why in out.skipped.items():
        typer.echo(f"not drawn: {name} ({why})")
    if out.best is None:
        typer.echo("no complete trial yet: no best.yaml")
