"""`lab ablate`: controlled ablations, one change at a time."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import (
    GpusOption,
    GpusPerRunOption,
    MaxStepsOption,
    PerGpuOption,
    ResultsOption,
    TableOnlyOption,
    campaign_preset,
    campaign_slots,
    finish_campaign,
    print_outcome,
    refuse,
    remake_command,
    writable_out,
)

from lab.reproduce.names import preset_help

app = typer.Typer(help="Run ablations: the 2x2 RAW/RBW x shifted/same-time alignment grid.")


@app.command()
def alignment(
    mixers: Annotated[str | None, typer.Option(
        help="Comma-separated recurrent mixers (default: falcon-1a.3, falcon-3a.3, falcon-1.3, deltanet, "
             "gated-deltanet, mamba2, retnet).")] = None,
    preset: Annotated[str, typer.Option(callback=campaign_preset("addition"), help=preset_help("addition", {
        "paper": "the addition table's settings: 2000 steps, batch 256", "packed": "the same with the curriculum "
        "and packing", "packed-constant": "packed with no learning-rate decay", "tiny": "minutes on a CPU"}))]
    = "paper",
    seeds: Annotated[int | None, typer.Option(help="Seeds per cell, 0..N-1 (default: 3 for paper, 1 for tiny).")]
    = None,
    gpus: GpusOption = None,
    per_gpu: PerGpuOption = 1,
    gpus_per_run: GpusPerRunOption = 1,
    table_only: TableOnlyOption = False,
    max_steps: MaxStepsOption = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override one setting of every run, e.g. --set optim.lr=3e-3 (repeatable).")] = None,
    results: ResultsOption = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder of the table files; default <results>/ablation (tiny: <results>/ablation/tiny).",
        callback=writable_out)] = None,
) -> None:
    """Train each mixer in the four cells RAW/shifted, RAW/same-time, RBW/shifted, RBW/same-time on addition.

    Writes alignment.md, alignment.csv and alignment_per_width.csv: per mixer and cell the addition
    table's numbers and their difference from the mixer's default cell. Finished runs are skipped and
    unfinished ones resume; a mixer's default cell is the run `lab reproduce addition` makes."""
    from lab.ablate.alignment import ablate_alignment, parse_mixers

    try:
        chosen = parse_mixers(mixers)
        slots = campaign_slots(gpus, per_gpu, gpus_per_run)
    except ValueError as err:
        refuse("lab ablate", err)
    command = remake_command(["lab", "ablate", "alignment"], [
        ("--preset", preset), ("--mixers", mixers), ("--seeds", seeds), ("--max-steps", max_steps),
        *(("--set", item) for item in set_ or []), ("--results", results), ("--out", out)])

    try:
        done = ablate_alignment(preset, chosen, seeds, slots, max_steps, set_ or (), results, out, command,
                                on_done=print_outcome, per_gpu=per_gpu, table_only=table_only,
                                gpus_per_run=gpus_per_run)
    except ValueError as err:
        refuse("lab ablate", err)
    finish_campaign("lab ablate", done, "alignment.md")
