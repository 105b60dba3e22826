"""`lab eval`: evaluate a trained run."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Evaluate trained runs: addition extrapolation accuracy, perplexity.")


@app.command()
def addition(
    run: Annotated[Path, typer.Argument(help="Run folder or checkpoint to evaluate.")],
    digits: Annotated[str, typer.Option(help="Operand lengths n to test, as LO-HI.")] = "33-48",
    per_n: Annotated[int, typer.Option(help="Samples per operand length n.")] = 100,
    greedy: Annotated[bool, typer.Option(help="Also report free-running (greedy) accuracy.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the evaluation samples.")] = 0,
) -> None:
    """Per-digit teacher-forced accuracy on operand lengths beyond training."""
    not_built("addition evaluation")


@app.command()
def ppl(
    run: Annotated[Path, typer.Argument(help="Run folder or checkpoint to evaluate.")],
    dataset: Annotated[str, typer.Option(help="fineweb-edu, wikitext-103 or lambada.")] = "fineweb-edu",
    data: Annotated[Path | None, typer.Option(help="Local file or folder holding the dataset.")] = None,
) -> None:
    """Perplexity of a language model on a held-out corpus."""
    not_built("perplexity evaluation")
