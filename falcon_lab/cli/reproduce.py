"""`lab reproduce`: remake the paper's tables end to end."""

from pathlib import Path
from typing import Annotated, Any

import typer

from falcon_lab.cli._common import (
    AdditionPresetOption,
    CampaignOptions,
    campaign_preset,
    out_option,
    print_outcome,
    remake_campaign,
    run_campaign_command,
    set_option,
    with_campaign_options,
)
from falcon_lab.reproduce.names import preset_help

app = typer.Typer(help="Reproduce the paper's tables: data, training, evaluation and the table, in one command.")


@app.command()
@with_campaign_options
def addition(
    preset: AdditionPresetOption = "paper",
    rows: Annotated[str | None, typer.Option(
        help="Comma-separated rows to train, e.g. transformer,falcon-1a.3 (default: all; tiny: transformer,"
             "falcon-1.3).")] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds per row, 0..N-1 (default: 3 for paper, 1 for tiny).")]
    = None,
    campaign: CampaignOptions = CampaignOptions(),
    set_: set_option("optim.lr=3e-3") = None,
    out: out_option("<results>/addition (tiny: <results>/addition/tiny)") = None,
) -> None:
    """The addition extrapolation table (best step, val acc, mean 33-48, Acc@33, Acc@48) beside the paper's.

    Finished runs are skipped and unfinished ones resume, so the table can be built a piece at a time. Each
    run's start and end is a line (run k of N, the time so far, the time left), and so is the state of the
    running runs every 15 s; at the end the table is printed and per_width.png drawn beside table.md. On a CPU
    the tiny preset runs one process per core."""
    from falcon_lab.reproduce.addition import cpu_processes, parse_rows, reproduce_addition
    from falcon_lab.reproduce.progress import CampaignProgress

    def choose() -> tuple[Any, int]:
        chosen = parse_rows(rows, preset)
        slots = campaign.slots()
        if campaign.gpus is None and campaign.gpus_per_run == 1:
            slots = cpu_processes(preset) or slots
        return chosen, slots

    def run(chosen: tuple[Any, int]) -> Any:
        progress = CampaignProgress()
        return reproduce_addition(preset, chosen[0], seeds, chosen[1], campaign.max_steps, set_ or (),
                                  campaign.results, out, command,
                                  on_done=progress.done, per_gpu=campaign.per_gpu, table_only=campaign.table_only,
                                  gpus_per_run=campaign.gpus_per_run, progress=progress)

    command = remake_campaign(["lab", "reproduce", "addition"], [("--preset", preset), ("--rows", rows),
                              ("--seeds", seeds)], campaign.max_steps, set_, campaign.results, out)
    run_campaign_command("lab reproduce", "table.md", choose, run, show=print_table)


def print_table(done: Any) -> None:
    """The campaign's table on stdout (rich; plain text where stdout is no terminal), and its figures."""
    import sys

    from rich.console import Console

    from falcon_lab.reproduce.addition_console import summary_table
    from falcon_lab.reproduce.progress import safe_writer

    if not done.jobs or sys.stdout is None:  # no stdout (`>&-`): table.md and table.csv are the record
        return
    try:
        console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 150)
        console.print(summary_table(done.jobs, done.results))
    except (OSError, ValueError):  # stdout closed or its reader gone: table.md and table.csv are the record
        pass
    write = safe_writer()
    for path in done.figures:
        write(f"figure: {path}")


@app.command()
@with_campaign_options
def fineweb(
    preset: Annotated[str, typer.Option(callback=campaign_preset("fineweb"), help=preset_help("fineweb", {
        "fineweb-124m": "the paper's: ~124M parameters, 100k steps of 480x1024 tokens", "tiny": "a CPU"}))]
    = "fineweb-124m",
    rows: Annotated[str | None, typer.Option(
        help="Comma-separated rows to train, e.g. transformer,falcon-1a.3 (default: all).")] = None,
    seeds: Annotated[int, typer.Option(help="Seeds per row, 0..N-1.")] = 1,
    campaign: CampaignOptions = CampaignOptions(),
    set_: set_option("train.batch_size=240") = None,
    data: Annotated[Path | None, typer.Option(
        help="Folder of token shards (`lab data fineweb`); default the preset's data/fineweb-edu.")] = None,
    wiki: Annotated[Path | None, typer.Option(
        help="Local WikiText-103 test text (plain text, one document) to score.")] = None,
    lambada: Annotated[Path | None, typer.Option(
        help="Local LAMBADA file (.jsonl with a 'text' field per record) to score.")] = None,
    out: out_option("<results>/fineweb (tiny: <results>/fineweb/tiny)") = None,
) -> None:
    """The FineWeb-Edu perplexity table (Wiki, LAMBADA, FineWeb-Edu) beside the paper's.

    Finished runs are skipped and unfinished ones resume; each finished run is scored once."""
    from falcon_lab.reproduce.fineweb import parse_rows, reproduce_fineweb

    command = remake_campaign(["lab", "reproduce", "fineweb"], [("--preset", preset), ("--rows", rows),
                              ("--seeds", seeds)], campaign.max_steps, set_, campaign.results, out,
                              inputs=[("--data", data), ("--wiki", wiki), ("--lambada", lambada)])
    run_campaign_command(
        "lab reproduce", "table.md", lambda: (parse_rows(rows), campaign.slots()),
        lambda chosen: reproduce_fineweb(preset, chosen[0], seeds, chosen[1], campaign.max_steps, set_ or (), data,
                                         wiki, lambada, campaign.results, out, command, on_done=print_outcome,
                                         per_gpu=campaign.per_gpu, table_only=campaign.table_only,
                                         gpus_per_run=campaign.gpus_per_run))


SeqRowsOption = Annotated[str | None, typer.Option(
    help="Comma-separated rows (mixers) to train, e.g. deltanet,falcon-1a.3 (default: all).")]
SeqSeedsOption = Annotated[int, typer.Option(help="Seeds per row, 0..N-1.")]
SeqSetOption = set_option("data.test_lengths=17,128")


def _sequence_command(task: str, help_text: str) -> None:
    """Register `lab reproduce <task>`: the campaign of a synthetic task over the mixers with its tiny preset
    (falcon_lab.reproduce.sequences)."""

    @with_campaign_options
    def command(rows: SeqRowsOption = None, seeds: SeqSeedsOption = 2, campaign: CampaignOptions = CampaignOptions(),
                set_: SeqSetOption = None, out: out_option(f"<results>/{task}") = None) -> None:
        from falcon_lab.reproduce.sequences import parse_rows, reproduce_task

        line = remake_campaign(["lab", "reproduce", task], [("--rows", rows), ("--seeds", seeds)],
                               campaign.max_steps, set_, campaign.results, out)
        run_campaign_command(
            "lab reproduce", "table.md", lambda: (parse_rows(rows), campaign.slots()),
            lambda chosen: reproduce_task(task, chosen[0], seeds, chosen[1], campaign.max_steps, set_ or (),
                                          campaign.results, out, line, on_done=print_outcome,
                                          table_only=campaign.table_only, per_gpu=campaign.per_gpu,
                                          gpus_per_run=campaign.gpus_per_run))

    command.__doc__ = help_text
    app.command(name=task)(command)


def _register_length_tasks() -> None:
    """`lab reproduce <task>` for every registered task with a length axis (``falcon_lab.task.LengthTask``)."""
    from falcon_lab.task import LengthTask, tasks

    for task in tasks():
        if isinstance(task, LengthTask):
            _sequence_command(task.name, f"{task.summary[:1].upper()}{task.summary[1:]} over the mixers (preset "
                                         f"{task.preset}): accuracy on the train lengths and the held-out ones.")


_register_length_tasks()
