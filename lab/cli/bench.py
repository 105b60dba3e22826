"""`lab bench`: speed measurements against their floors."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Benchmark kernels and training throughput.")


@app.command()
def kernels(
    rule: Annotated[list[str] | None, typer.Option("--rule", help="Rule to time (repeatable); default all.")] = None,
    backend: Annotated[
        list[str] | None, typer.Option("--backend", help="recurrent, masked or chunk (repeatable).")
    ] = None,
    shape: Annotated[
        list[str] | None, typer.Option("--shape", help="B,T,H,D to time (repeatable).")
    ] = None,
    dtype: Annotated[str, typer.Option(help="bf16, fp16 or fp32.")] = "bf16",
    out: Annotated[Path | None, typer.Option(help="CSV file for the table.")] = None,
) -> None:
    """Forward and backward time of each rule and backend, with the bandwidth and FLOP floors."""
    not_built("kernel benchmarks")


@app.command()
def train(
    mixer: Annotated[str, typer.Option(help="Mixer name from the registry.")] = "falcon-1a.3",
    preset: Annotated[str, typer.Option(help="Size preset.")] = "tiny",
    steps: Annotated[int, typer.Option(help="Steps to time after warm-up.")] = 50,
    devices: Annotated[int, typer.Option(help="Number of devices.")] = 1,
) -> None:
    """Training throughput in tokens per second."""
    not_built("training benchmarks")
