"""`lab data`: generate the datasets of the two tracks."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Generate the datasets: variable-length addition and FineWeb-Edu token shards.")


@app.command()
def addition(
    out: Annotated[Path, typer.Option(help="Folder to write the splits into.")] = Path("data/addition"),
    seed: Annotated[int, typer.Option(help="Seed; the same seed gives the same data.")] = 0,
    train_digits: Annotated[str, typer.Option(help="Operand lengths n for training, as LO-HI.")] = "1-32",
    ood_digits: Annotated[str, typer.Option(help="Operand lengths n for out-of-distribution tests.")] = "33-48",
    per_n: Annotated[int, typer.Option(help="Evaluation samples per operand length n.")] = 100,
) -> None:
    """Write addition problems: a+b= with the reversed sum as target."""
    not_built("addition data generation")


@app.command()
def fineweb(
    source: Annotated[str, typer.Option(help="Folder of FineWeb-Edu parquet files, or a datasets name.")],
    out: Annotated[Path, typer.Option(help="Folder to write uint16 token shards into.")] = Path("data/fineweb-edu"),
    tokenizer: Annotated[
        Path | None, typer.Option(help="GPT-2 BPE ranks as a local .tiktoken file (offline use).")
    ] = None,
    shard_tokens: Annotated[int, typer.Option(help="Tokens per shard.")] = 100_000_000,
    val_tokens: Annotated[int, typer.Option(help="Tokens held out for validation.")] = 10_000_000,
) -> None:
    """Tokenise FineWeb-Edu with GPT-2 BPE into llm.c-compatible shards."""
    not_built("FineWeb-Edu tokenisation and sharding")
