"""`lab bench`: speed measurements against their floors."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Benchmark kernels and training throughput.")


@app.command()
def kernels(
    shapes: Annotated[list[str] | None, typer.Option(
        "--shapes", "--shape", help="B,T,H,D to time (repeatable); default 8,2048,12,64 4,4096,16,128 1,16384,16,128."
    )] = None,
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", "--rule", help="falcon-1, falcon-2, falcon-1a or falcon-2a (repeatable); default all.")] = None,
    dtype: Annotated[str, typer.Option(help="bf16, fp16 or fp32.")] = "bf16",
    out: Annotated[Path, typer.Option(help="Folder for kernels.csv and kernels.md.")] = Path("results/bench"),
    rep: Annotated[int, typer.Option(help="Milliseconds of timed repetitions per row (do_bench rep).")] = 100,
) -> None:
    """Forward and forward+backward time of each rule's Triton kernel beside fla, SDPA and the PyTorch chunk
    form, with the bandwidth and FLOP floors (needs a CUDA GPU)."""
    from lab.bench.kernels import RULES, SHAPES, BenchError, parse_shape, run

    try:
        picked = [parse_shape(s) for text in shapes for s in text.split()] if shapes else list(SHAPES)
        run(picked, tuple(rules) if rules else RULES, dtype, out, rep=rep, echo=typer.echo)
    except BenchError as err:
        typer.echo(f"lab bench kernels: {err}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"wrote {out / 'kernels.csv'} and {out / 'kernels.md'}")


@app.command()
def train(
    mixer: Annotated[str, typer.Option(help="Mixer name from the registry.")] = "falcon-1a.3",
    preset: Annotated[str, typer.Option(help="Size preset.")] = "tiny",
    steps: Annotated[int, typer.Option(help="Steps to time after warm-up.")] = 50,
    devices: Annotated[int, typer.Option(help="Number of devices.")] = 1,
) -> None:
    """Training throughput in tokens per second."""
    not_built("training benchmarks")
