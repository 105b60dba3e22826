"""`lab ablate`: controlled ablations, one change at a time."""

from typing import Annotated

import typer

from falcon_lab.cli._common import (AdditionPresetOption, CampaignOptions, out_option, print_outcome, remake_campaign,
                             run_campaign_command, set_option, with_campaign_options)

app = typer.Typer(help="Run ablations: the 2x2 RAW/RBW x shifted/same-time alignment grid.")


@app.command()
@with_campaign_options
def alignment(
    mixers: Annotated[str | None, typer.Option(
        help="Comma-separated recurrent mixers (default: falcon-1a.3, falcon-3a.3, falcon-1.3, deltanet, "
             "gated-deltanet, mamba2, retnet).")] = None,
    task: Annotated[str, typer.Option(
        help="addition, or a synthetic task (mqar, parity, permutation) on its tiny preset (change it with --set, "
             "e.g. --set model.d_model=128).")] = "addition",
    preset: AdditionPresetOption = "paper",
    seeds: Annotated[int | None, typer.Option(
        help="Seeds per cell, 0..N-1 (default: 3 for paper and the synthetic tasks, 1 for tiny).")]
    = None,
    only: Annotated[bool, typer.Option(
        "--only", help="The tables hold --mixers alone (default: every default mixer beside them, so that a grid "
                       "can be built a few mixers at a time).")] = False,
    campaign: CampaignOptions = CampaignOptions(),
    set_: set_option("optim.lr=3e-3") = None,
    out: out_option("<results>/ablation (tiny: <results>/ablation/tiny)") = None,
) -> None:
    """Train each mixer in the four cells RAW/shifted, RAW/same-time, RBW/shifted, RBW/same-time on addition
    (or a synthetic task).

    Writes alignment.md, alignment.csv and alignment_per_width.csv (synthetic: alignment_per_length.csv): per
    mixer and cell the table's numbers and their difference from the mixer's default cell. Finished runs are
    skipped and unfinished ones resume; a mixer's default cell is the run `lab reproduce addition` (or `lab
    reproduce <task>`) makes."""
    from falcon_lab.ablate.alignment import ablate_alignment, check_task, length_task, parse_mixers
    from falcon_lab.task import SEQUENCE_TASKS

    def chosen_inputs():
        check_task(task)
        if length_task(task) is not None and preset != "paper":
            raise ValueError(f"--preset {preset} is an addition campaign preset; a synthetic task runs its tiny "
                             f"preset ({task}-tiny: change it with --set)")
        return parse_mixers(mixers), campaign.slots()

    synthetic = task in SEQUENCE_TASKS
    command = remake_campaign(["lab", "ablate", "alignment", *(["--only"] if only else [])],
                              [("--task", task if synthetic else None), ("--preset", None if synthetic else preset),
                               ("--mixers", mixers), ("--seeds", seeds)], campaign.max_steps, set_,
                              campaign.results, out)
    run_campaign_command(
        "lab ablate", "alignment.md", chosen_inputs,
        lambda chosen: ablate_alignment(None if synthetic else preset, chosen[0], seeds, chosen[1],
                                        campaign.max_steps, set_ or (), campaign.results, out, command,
                                        on_done=print_outcome,
                                        per_gpu=campaign.per_gpu, table_only=campaign.table_only,
                                        gpus_per_run=campaign.gpus_per_run, task=task, only=only))
