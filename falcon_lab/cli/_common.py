"""What every `lab` command group shares."""

import functools
import inspect
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from falcon_lab.reproduce.names import campaign_preset as key_of
from falcon_lab.reproduce.names import preset_help


def remake_command(words: Iterable[str], options: Iterable[tuple[str, object | None]]) -> str:
    """The shell line that remakes a result: `words`, then each `(flag, value)` whose value is not None,
    in order (a flag may repeat, as `--set` does). Printed beside the tables and figures it made."""
    parts = list(words)
    for flag, value in options:
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def unwritable(path: Path) -> str | None:
    """Why no folder can be made and written at `path` (None when one can), found leaving nothing behind: the
    nearest part of it that exists must be a folder this process may write in, and one that takes a new folder
    (a folder made there and removed at once: permissions alone do not tell, /proc takes none even from root)."""
    import os
    import tempfile

    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".lab-probe-", dir=probe))
    except OSError as err:
        return f"{probe} takes no new folder ({err.strerror})"
    return None


def _prog(ctx: typer.Context) -> str:
    """`lab <group>` of the command whose option is being read, as its error lines begin."""
    group = ctx.parent.info_name if ctx.parent is not None and ctx.parent.parent is not None else ctx.info_name
    return f"lab {group}"


def writable_out(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Typer callback of an output folder option (`--out`, `--results`): one that cannot be written is one
    line on stderr and exit code 2, before any work starts."""
    why = None if value is None else unwritable(value)
    if why is not None:
        typer.echo(f"{_prog(ctx)}: {param.opts[0]} {value} cannot be written: {why}", err=True)
        raise typer.Exit(code=2)
    return value


def campaign_preset(track: str) -> Callable[[typer.Context, str], str]:
    """Typer callback of a campaign's --preset option: a preset's name (or older spelling) becomes the key
    the campaign code uses; an unknown one is one line naming the accepted names, exit code 2."""
    def pick(ctx: typer.Context, value: str) -> str:
        try:
            return key_of(track, value)
        except ValueError as err:
            refuse(_prog(ctx), err)
    return pick


def refuse(prog: str, err: Exception) -> NoReturn:
    """Bad input: one line on stderr naming the problem, exit code 2."""
    typer.echo(f"{prog}: {err}", err=True)
    raise typer.Exit(code=2)


TABLE_ONLY_HELP = ("Train nothing: write the tables from the runs already in the results folder (runs copied in "
                   "from other machines, or a campaign read before it ends).")
PER_GPU_HELP = ("Runs sharing each GPU at once (small models leave most of a GPU idle); on a CPU, processes "
                "per --gpus slot.")


GPUS_PER_RUN_HELP = ("GPUs each run trains on, as one DDP run (the same run id and data as on one GPU; "
                     "--gpus then counts runs at once, each on this many GPUs); on a CPU, processes a run.")

# The placement options every table-building command (`lab reproduce`, `lab ablate`) takes, and the ones it
# shares with its runs: they change no number of its table (placement) or every run (--max-steps, --set).
GpusOption = Annotated[int | None, typer.Option(
    help="Runs at once, each on its own GPU (on a CPU: processes); default every visible GPU, 1 on a CPU.")]
PerGpuOption = Annotated[int, typer.Option(help=PER_GPU_HELP)]
GpusPerRunOption = Annotated[int, typer.Option(help=GPUS_PER_RUN_HELP)]
TableOnlyOption = Annotated[bool, typer.Option(help=TABLE_ONLY_HELP)]
MaxStepsOption = Annotated[int | None, typer.Option(help="Train each run for this many steps instead.")]
StartWithinOption = Annotated[float | None, typer.Option(
    help="Start no run later than this many seconds after the command began (the runs going then finish), nor, "
         "one run after another, a run that would not end by then as the longest like it so far took: a call "
         "with a fixed time starts only runs it can end. Default: no limit.")]
ResultsOption = Annotated[Path | None, typer.Option(
    help="Folder of runs/ and the registry lab.db; default $LAB_RESULTS or results/.", callback=writable_out)]
# The addition campaign presets, as `lab reproduce addition` and `lab ablate alignment` both take them.
# What each is lies in docs/addition.md and its lab preset's file; the help names only the two a user starts with.
ADDITION_PRESETS = {"paper": "the paper's settings", "tiny": "tiny: a CPU, in minutes"}
AdditionPresetOption = Annotated[str, typer.Option(callback=campaign_preset("addition"),
                                                   help=preset_help("addition", ADDITION_PRESETS))]


def set_option(example: str) -> Any:
    """A campaign's `--set` option (repeatable), its help showing `example`."""
    return Annotated[list[str] | None, typer.Option(
        "--set", help=f"Override one setting of every run, e.g. --set {example} (repeatable).")]


def out_option(default: str) -> Any:
    """A campaign's `--out` option: the folder of its table files, `default` when not given."""
    return Annotated[Path | None, typer.Option(help=f"Folder of the table files; default {default}.",
                                               callback=writable_out)]


def remake_campaign(words: Iterable[str], own: Iterable[tuple[str, object | None]], max_steps: int | None,
                    set_: list[str] | None, results: Path | None, out: Path | None,
                    inputs: Iterable[tuple[str, object | None]] = ()) -> str:
    """The line that remakes a campaign's table: `words`, its own options, then --max-steps, every --set, its
    `inputs`, --results and --out. The placement options (--gpus, --per-gpu, --gpus-per-run, --table-only)
    are left out: they change no number."""
    return remake_command(words, [*own, ("--max-steps", max_steps), *(("--set", item) for item in set_ or []),
                                  *inputs, ("--results", results), ("--out", out)])


def run_campaign_command(prog: str, table: str, choose: Callable[[], Any], run: Callable[[Any], Any],
                         show: Callable[[Any], None] | None = None) -> None:
    """A table-building command: `choose()` (its rows and slots), then `run(chosen)` (the campaign), each
    refused in one line on a ValueError; then `show(done)`, and where the table is (exit 1 if a run failed)."""
    try:
        chosen = choose()
    except ValueError as err:
        refuse(prog, err)
    try:
        done = run(chosen)
    except ValueError as err:
        refuse(prog, err)
    if show is not None:
        show(done)
    finish_campaign(prog, done, table)


def campaign_slots(gpus: int | None, per_gpu: int = 1, gpus_per_run: int = 1) -> int:
    """How many runs a table-building command runs at once: `--gpus` (else every visible GPU, else 1)
    times `--per-gpu`; with `--gpus-per-run` R, `--gpus` (else the visible GPUs over R, else 1)."""
    from falcon_lab.reproduce.launch import check_slots, visible_gpus

    if per_gpu < 1:
        raise ValueError(f"--per-gpu must be >= 1, got {per_gpu}")
    if gpus_per_run < 1:
        raise ValueError(f"--gpus-per-run must be >= 1, got {gpus_per_run}")
    slots = (gpus if gpus is not None else max(1, len(visible_gpus()) // gpus_per_run)) * per_gpu
    check_slots(slots, per_gpu, gpus_per_run)
    return slots


@dataclass(frozen=True)
class CampaignOptions:
    """The options every table-building command shares: where its runs go and whether any trains (--gpus,
    --per-gpu, --gpus-per-run, --table-only, --start-within: they change no number, so the command that remakes the
    table leaves them out), how long each trains (--max-steps) and the folder of its runs (--results)."""

    gpus: int | None = None
    per_gpu: int = 1
    gpus_per_run: int = 1
    table_only: bool = False
    max_steps: int | None = None
    results: Path | None = None
    start_within: float | None = None

    def slots(self) -> int:
        """How many runs at once (`campaign_slots`); ValueError for a bad count."""
        return campaign_slots(self.gpus, self.per_gpu, self.gpus_per_run)


def _campaign_options(gpus: GpusOption = None, per_gpu: PerGpuOption = 1, gpus_per_run: GpusPerRunOption = 1,
                      table_only: TableOnlyOption = False, max_steps: MaxStepsOption = None,
                      results: ResultsOption = None, start_within: StartWithinOption = None) -> None:
    """CampaignOptions' fields as Typer declares them (read by `with_campaign_options` for their signature)."""


def with_campaign_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """A table-building command whose parameter `campaign: CampaignOptions` Typer shows as the shared options
    (--gpus, --per-gpu, --gpus-per-run, --table-only, --max-steps, --results, --start-within) in its place: declared
    once here. --start-within is set for the process here (`falcon_lab.reproduce.launch.start_within`), before the
    command plans anything."""
    own = inspect.signature(command, eval_str=True)
    shared = list(inspect.signature(_campaign_options, eval_str=True).parameters.values())
    params = []
    for param in own.parameters.values():
        params += shared if param.name == "campaign" else [param]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        campaign = CampaignOptions(**{p.name: kwargs.pop(p.name) for p in shared})
        from falcon_lab.reproduce.launch import start_within

        try:
            start_within(campaign.start_within)
        except ValueError as err:  # one line, as every campaign's refusals: "lab reproduce: ..."
            refuse(f"lab {command.__module__.rsplit('.', 1)[-1]}", err)
        return command(**kwargs, campaign=campaign)

    wrapper.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in params}, "return": own.return_annotation}
    return wrapper


def print_outcome(outcome: Any) -> None:
    """One line per finished, skipped or failed run of a campaign."""
    from falcon_lab.console import say
    from falcon_lab.reproduce.jobs import outcome_line

    say(outcome_line(outcome))


def finish_campaign(prog: str, done: Any, table: str) -> None:
    """Say where the table is and how much of the plan has finished; exit 1 if any run failed."""
    from falcon_lab.console import say

    say(f"table: {done.out / table} ({done.finished} of {done.planned} planned runs finished)")
    if done.failed:
        say(f"{prog}: {len(done.failed)} run(s) failed; their logs are train.log in their run folders", err=True)
        raise typer.Exit(code=1)
