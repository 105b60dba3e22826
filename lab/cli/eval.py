"""`lab eval`: evaluate a trained run."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Evaluate trained runs: addition extrapolation accuracy, perplexity.")

COLUMNS = (("val_acc", "Val. acc."), ("ood_mean", "Mean 33–48"), ("acc@33", "Acc@33"), ("acc@48", "Acc@48"),
           ("free_val_acc", "Free-running val. acc."), ("free_ood_mean", "Free-running mean 33–48"),
           ("val_token_acc", "Per-token val. acc."), ("ood_token_mean", "Per-token mean 33–48"))


@app.command()
def addition(
    run: Annotated[Path, typer.Option("--run", help="Run folder to evaluate.")],
    which: Annotated[str, typer.Option(help="best (the best step's weights) or last (the last checkpoint).")]
    = "best",
    per_n: Annotated[int, typer.Option(help="Teacher-forced samples per operand width n (1-48).")] = 100,
    free_per_n: Annotated[int, typer.Option(help="Free-running (greedy) samples per width; 0 skips them.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the evaluation samples (runs evaluate with 0).")] = 0,
) -> None:
    """Teacher-forced, per-token and free-running accuracy of a run on widths 1-48, as a row of the table."""
    import torch

    from lab.config import ConfigError
    from lab.eval.addition import evaluate_addition
    from lab.eval.free_running import free_running_accuracy
    from lab.eval.run_weights import WHICH, load_run_model
    from tasks.addition import summarise

    if which not in WHICH:
        typer.echo(f"lab eval: --which {which!r} is not accepted; accepted: {', '.join(WHICH)}", err=True)
        raise typer.Exit(code=2)
    if per_n < 1 or free_per_n < 0:
        typer.echo(f"lab eval: --per-n must be >= 1 and --free-per-n >= 0, got {per_n} and {free_per_n}", err=True)
        raise typer.Exit(code=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        loaded = load_run_model(run, which, device)
    except (ValueError, ConfigError) as err:
        typer.echo(f"lab eval: {err}", err=True)
        raise typer.Exit(code=2) from None
    if loaded.cfg.task != "addition":
        typer.echo(f"lab eval: run {run} trained task {loaded.cfg.task!r}; accepted: addition", err=True)
        raise typer.Exit(code=2)
    summary = evaluate_addition(loaded.model, n_per_length=per_n, seed=seed, device=device).summary()
    if free_per_n:
        free = summarise(free_running_accuracy(loaded.model, n_per_length=free_per_n, seed=seed, device=device))
        summary.update(free_val_acc=free["val_acc"], free_ood_mean=free["ood_mean"])
    cells = [loaded.cfg.mixer, str(loaded.step)]
    cells += ["—" if summary.get(key) is None else f"{summary[key]:.1f}" for key, _ in COLUMNS]
    typer.echo(f"{run} ({which} weights: {loaded.source.name}, step {loaded.step}; {per_n} samples per width, "
               f"{free_per_n} free-running)")
    typer.echo("| " + " | ".join(["Mixer", "Step", *(title for _, title in COLUMNS)]) + " |")
    typer.echo("| " + " | ".join(["---"] * len(cells)) + " |")
    typer.echo("| " + " | ".join(cells) + " |")


@app.command()
def ppl(
    run: Annotated[Path, typer.Argument(help="Run folder or checkpoint to evaluate.")],
    dataset: Annotated[str, typer.Option(help="fineweb-edu, wikitext-103 or lambada.")] = "fineweb-edu",
    data: Annotated[Path | None, typer.Option(help="Local file or folder holding the dataset.")] = None,
) -> None:
    """Perplexity of a language model on a held-out corpus."""
    not_built("perplexity evaluation")
