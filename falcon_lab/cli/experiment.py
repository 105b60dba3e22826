"""`lab experiment`: the declared experiments (falcon_lab/experiments/), listed, run, followed and reported."""

import shlex
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from falcon_lab.cli._common import GPUS_PER_RUN_HELP, PER_GPU_HELP, print_outcome, refuse, writable_out

app = typer.Typer(help="Declared experiments: one file a question under falcon_lab/experiments/; list, run, status, "
                       "report.", no_args_is_help=True)

PROG = "lab experiment"
NameArgument = Annotated[str, typer.Argument(help="The experiment's name (`lab experiment list`).")]
ResultsOption = Annotated[Path | None, typer.Option(
    help="Folder of runs/ and the registry lab.db; the tables go to <results>/experiments/<name>/. Default "
         "$LAB_RESULTS or results/.", callback=writable_out)]
SmokeOption = Annotated[bool, typer.Option(
    help="The experiment at a tiny size: one seed, a few steps of a one-layer model of width 16, on the CPU; its "
         "tables go to <results>/experiments/<name>/smoke/.")]


def _experiment(name: str) -> Any:
    from falcon_lab.experiments import get

    try:
        return get(name)
    except ValueError as err:
        refuse(PROG, err)


def _failed(err: Exception) -> NoReturn:
    """A command of the experiment failed: one line on stderr, exit code 1 (its own output says why)."""
    typer.echo(f"{PROG}: {err}", err=True)
    raise typer.Exit(code=1)


def _results(results: Path | None) -> Path:
    from falcon_lab.paths import results_root

    return results.resolve() if results is not None else results_root()


@app.command("list")
def list_() -> None:
    """Every declared experiment: its name, the runs it plans, its budget and the question it answers."""
    from falcon_lab.experiments import experiments

    try:
        found = experiments()
        planned = {name: experiment.plan() for name, experiment in found.items()}
    except ValueError as err:
        refuse(PROG, err)
    width = max((len(n) for n in found), default=4)
    for name, experiment in found.items():
        runs = planned[name]
        size = f"{len(runs)} runs" if runs else f"{sum(len(p.commands) for p in experiment.parts)} commands"
        typer.echo(f"{name:<{width}}  {size:>11}  budget {experiment.budget_s / 3600:4.1f} h, {experiment.machine}:  "
                   f"{experiment.question}")


@app.command()
def run(
    name: NameArgument,
    budget: Annotated[float | None, typer.Option(
        help="Stop after this many seconds: each run ends after its step with a checkpoint, no run starts after "
             "it (nor one that would not end by then as the longest like it so far took), the tables are written; "
             "the next call resumes. Default: no limit.")] = None,
    devices: Annotated[int | None, typer.Option(
        help="GPUs to use (on a CPU: processes); default every visible GPU, 1 on a CPU.")] = None,
    per_gpu: Annotated[int, typer.Option(help=PER_GPU_HELP)] = 1,
    gpus_per_run: Annotated[int, typer.Option(help=GPUS_PER_RUN_HELP)] = 1,
    smoke: SmokeOption = False,
    results: ResultsOption = None,
    snapshot_dir: Annotated[Path | None, typer.Option(
        help="Write <dir>/<name>.tgz, the finished runs (no weights) and the tables, every --snapshot-every "
             "seconds and at the end, so a call killed from outside still leaves them; `lab runs merge` reads it.",
        callback=writable_out)] = None,
    snapshot_every: Annotated[float, typer.Option(help="Seconds between snapshots.")] = 120.0,
    merge: Annotated[list[Path] | None, typer.Option(
        help="A folder of runs or a snapshot archive to merge into the results folder first, so its runs are not "
             "trained again (repeatable).")] = None,
    caches: Annotated[Path | None, typer.Option(
        help="An archive (.tgz) of the compilation caches (<results>/cache): unpacked first if it exists, written "
             "at the end, so the next machine of the same GPU compiles nothing these runs compiled.")] = None,
) -> None:
    """Train the experiment's runs not yet finished and write its tables and figures.

    Finished runs are skipped and stopped ones resume from their checkpoints, so an experiment can be made a call
    at a time. Exit code 1 if a run failed."""
    from falcon_lab.cli._common import campaign_slots
    from falcon_lab.console import say
    from falcon_lab.experiments.declare import CommandFailed
    from falcon_lab.experiments.runner import declared, run_experiment, run_states, tables

    experiment = _experiment(name)
    root = _results(results)
    try:
        slots = 1 if smoke and devices is None else campaign_slots(devices, per_gpu, gpus_per_run)
        ran = run_experiment(experiment, root, budget=budget, slots=slots, per_gpu=per_gpu,
                             gpus_per_run=gpus_per_run, snapshot_dir=snapshot_dir, snapshot_every=snapshot_every,
                             merge=merge or (), smoke=smoke, on_done=print_outcome,
                             on_merged=lambda m: say(m.line()), caches=caches)
    except ValueError as err:
        refuse(PROG, err)
    except CommandFailed as err:
        _failed(err)
    states = run_states(declared(experiment, smoke).plan(), root)
    finished = sum(s.state == "finished" for s in states)
    if ran.stopped:
        say(f"budget of {budget:g} s spent: {finished} of {len(states)} planned runs finished; run the same "
            f"command again to resume")
    for campaign in ran.campaigns:
        for path in campaign.figures:
            say(f"figure: {path}")
    for table in tables(experiment, root, smoke):
        say(f"table: {table}")
    if states:
        say(f"{experiment.name}: {finished} of {len(states)} planned runs finished")
    if ran.snapshot is not None:
        say(f"snapshot: {ran.snapshot}")
    if caches is not None and caches.is_file():
        say(f"caches: {caches} ({caches.stat().st_size / 2**20:.1f} MiB)")
    if ran.failed:
        say(f"{PROG}: {len(ran.failed)} run(s) failed; their logs are train.log in their run folders", err=True)
        raise typer.Exit(code=1)


@app.command()
def status(name: NameArgument, smoke: SmokeOption = False, results: ResultsOption = None) -> None:
    """The experiment's runs: how many are planned, finished, running and missing, and a line for each run not
    finished."""
    from falcon_lab.experiments.runner import STATES, declared, run_states, tables, training_left

    experiment = _experiment(name)
    try:
        states = run_states(declared(experiment, smoke).plan(), _results(results))
    except ValueError as err:
        refuse(PROG, err)
    counts = ", ".join(f"{sum(s.state == state for s in states)} {state}" for state in STATES)
    typer.echo(f"{experiment.name}: {len(states)} planned, {counts}")
    left = training_left(states, _results(results))
    if left is not None and any(s.state != "finished" for s in states):
        typer.echo(f"left: about {left[0] / 60:.0f} min of training, one run after another, at the pace of the "
                   f"{left[1]} finished runs that recorded it (their machines', per mixer where one ran)")
    for part in declared(experiment, smoke).parts:
        typer.echo(f"trains as: {' '.join(w if w == '&&' else shlex.quote(w) for w in part.words())}")
    for table in tables(experiment, _results(results), smoke):
        typer.echo(f"table: {table} ({'written' if table.is_file() else 'not written yet'})")
    for s in states:
        if s.state != "finished":
            typer.echo(f"  {s.line()}")
    if experiment.not_remade:
        typer.echo(f"not remade by this experiment: {experiment.not_remade}")


@app.command()
def report(name: NameArgument, smoke: SmokeOption = False, results: ResultsOption = None) -> None:
    """The experiment's tables and figures from whatever of its runs exist (nothing trains), into
    <results>/experiments/<name>/."""
    from falcon_lab.console import say
    from falcon_lab.experiments.declare import CommandFailed
    from falcon_lab.experiments.runner import report as make_report
    from falcon_lab.experiments.runner import tables

    experiment = _experiment(name)
    root = _results(results)
    try:
        done = make_report(experiment, root, smoke)
    except ValueError as err:
        refuse(PROG, err)
    except CommandFailed as err:
        _failed(err)
    for campaign in done:
        for path in campaign.figures:
            say(f"figure: {path}")
    for table, campaign in zip(tables(experiment, root, smoke), done):
        say(f"table: {table} ({campaign.finished} of {campaign.planned} planned runs finished)")
