"""`lab bench`: speed measurements against their floors."""

from pathlib import Path
from typing import Annotated

import typer

from falcon_lab.cli._common import writable_out


app = typer.Typer(help="Benchmark kernels and training throughput.")

MixersOption = Annotated[list[str] | None, typer.Option(
    "--mixers", "--mixer", help="Mixer names (repeatable, or comma-separated); default every registered one.")]
PresetOption = Annotated[str, typer.Option(
    help="Size preset: a file of falcon_lab/presets, or a campaign's preset with the settings it gives each row (same-time).")]
TaskOption = Annotated[str, typer.Option(help="Task: addition or random.")]

KernelsOption = Annotated[list[str] | None, typer.Option(
    "--kernels", help="A kernel variant, NAME=VALUE (repeatable): conv=tiles|serial (the backward), "
                      "inverse=substitution|doubling, launch='kernel:KEY=N,...', falcon3-glue=eager|compiled "
                      "(falcon_lab/kernels/variants.py); default: the environment's.")]

SamplesOption = Annotated[str | None, typer.Option(
    help="How isolated samples reach the kernels that take them by id: packed (as packed sequences, their bounds "
         "read on the host) or by-id (the rows as they are, LAB_SAMPLE_IDS=1); default as LAB_SAMPLE_IDS says.")]


def _sample_ids(command: str, samples: str | None) -> bool | None:
    """``--samples`` as the benches take it (None: as the environment says); anything else refused in one line."""
    if samples not in (None, "packed", "by-id"):
        typer.echo(f"{command}: --samples must be packed or by-id, got {samples}", err=True)
        raise typer.Exit(code=2)
    return None if samples is None else samples == "by-id"


@app.command()
def kernels(
    shapes: Annotated[list[str] | None, typer.Option(
        "--shapes", "--shape", help="B,T,H,D to time (repeatable); default 8,2048,12,64 4,4096,16,128 1,16384,16,128."
    )] = None,
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", "--rule", help="falcon-1, falcon-2, falcon-3, falcon-1a, falcon-2a or falcon-3a (repeatable); default all.")] = None,
    dtype: Annotated[str, typer.Option(help="bf16, fp16 or fp32.")] = "bf16",
    out: Annotated[Path | None, typer.Option(
        help="Folder for kernels.csv and kernels.md; default <results>/bench.",
        callback=writable_out)] = None,
    rep: Annotated[int, typer.Option(help="Milliseconds of timed repetitions per row (do_bench rep).")] = 100,
    chunk_forms: Annotated[bool, typer.Option(
        "--chunk-forms", help="Also time each rule's own PyTorch chunk form (up to B·T·H = 4·4096·16).")] = False,
    against: Annotated[list[Path] | None, typer.Option(
        help="An earlier run's kernels.csv (repeatable): its ratios beside the targets' (targets.md).")] = None,
    kernels: KernelsOption = None,
) -> None:
    """Forward and forward+backward time of each rule's Triton kernel beside fla, SDPA and the PyTorch chunk
    form, with the bandwidth and FLOP floors, and the kernels' targets met or missed (needs a CUDA GPU)."""
    from falcon_lab.bench.kernels import RULES, SHAPES, BenchError, parse_shape, run
    from falcon_lab.kernels import variants
    from falcon_lab.kernels.common.checks import SettingError
    from falcon_lab.paths import results_path

    try:
        variant = variants.parse(kernels or ())
    except SettingError as err:
        typer.echo(f"lab bench kernels: {err}", err=True)
        raise typer.Exit(code=2) from None
    out = out if out is not None else results_path("bench")
    try:
        picked = [parse_shape(s) for text in shapes for s in text.split()] if shapes else list(SHAPES)
        with variants.using(variant):
            run(picked, tuple(rules) if rules else RULES, dtype, out, rep=rep, echo=typer.echo,
                chunk_forms=chunk_forms, against=against or ())
    except BenchError as err:
        typer.echo(f"lab bench kernels: {err}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"wrote {out / 'kernels.csv'}, {out / 'kernels.md'} and {out / 'targets.md'}")


@app.command()
def targets(
    kernels_csv: Annotated[list[Path], typer.Argument(
        help="kernels.csv of lab bench kernels (several: their rows together, a later file's replacing).")],
    against: Annotated[list[Path] | None, typer.Option(
        help="An earlier run's kernels.csv (repeatable): its ratios beside these.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for targets.csv and targets.md; default the first kernels.csv's folder.",
        callback=writable_out)] = None,
) -> None:
    """The kernels' targets (each rule's time over fla's or over the rule it extends, bounded) met or missed at
    every shape, from kernels.csv files already measured (no GPU)."""
    from falcon_lab.bench.targets import TargetsError, remake

    folder = out if out is not None else kernels_csv[0].parent
    try:
        rows = remake(kernels_csv, folder, against or ())
    except TargetsError as err:
        typer.echo(f"lab bench targets: {err}", err=True)
        raise typer.Exit(code=2) from None
    met = sum(1 for r in rows if r["met"] is True)
    typer.echo(f"{met} of {len(rows)} targets met; wrote {folder / 'targets.csv'} and {folder / 'targets.md'}")


@app.command()
def train(
    mixers: MixersOption = None,
    preset: PresetOption = "small",
    task: TaskOption = "addition",
    max_steps: Annotated[int, typer.Option(help="Optimiser steps per mixer.")] = 300,
    out: Annotated[Path | None, typer.Option(
        help="Folder for train.csv, train_curves.csv and train.md; default <results>/bench/train.",
        callback=writable_out)] = None,
    work: Annotated[Path | None, typer.Option(
        help="Folder for the runs themselves; default <results>/runs/bench-train.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a setting of every run (repeatable).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds one mixer may train before it is stopped.")] = None,
) -> None:
    """Train every mixer for a few hundred steps: tokens per second, loss, parameter count, one table."""
    from falcon_lab.bench.train import run
    from falcon_lab.paths import results_path

    names = _mixer_names("lab bench train", mixers)
    out = out if out is not None else results_path("bench", "train")
    work = work if work is not None else results_path("runs", "bench-train")
    extra = [a for item in (set_ or []) for a in ("--set", item)]
    rows = run(names, preset=preset, task=task, max_steps=max_steps, out=out, work=work, extra=extra,
               timeout_s=timeout, echo=typer.echo)
    typer.echo(f"wrote {out / 'train.csv'}, {out / 'train_curves.csv'} and {out / 'train.md'}")
    if any(r["status"] != "ok" for r in rows):
        raise typer.Exit(code=1)


@app.command()
def step(
    mixers: MixersOption = None,
    preset: PresetOption = "small",
    task: TaskOption = "addition",
    steps: Annotated[int, typer.Option(help="Timed steps per mixer.")] = 20,
    out: Annotated[Path | None, typer.Option(help="Folder for step.csv and step.md; default <results>/bench/step.",
                                             callback=writable_out)] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a setting (repeatable).")] = None,
    traces: Annotated[bool, typer.Option(
        "--traces", help="Write each mixer's profiled step as a gzipped Chrome trace beside step.csv (GPU).")] = False,
    samples: SamplesOption = None,
    kernels: KernelsOption = None,
) -> None:
    """Where a training step's time goes without Lightning: bare-loop ms, model FLOP utilisation, data /
    forward / backward / optimiser ms, kernels launched and their device time."""
    from falcon_lab.bench.step import run
    from falcon_lab.paths import results_path

    names = _mixer_names("lab bench step", mixers)
    sample_ids = _sample_ids("lab bench step", samples)
    out = out if out is not None else results_path("bench", "step")
    if steps < 1:
        typer.echo(f"lab bench step: --steps must be >= 1, got {steps}", err=True)
        raise typer.Exit(code=2)
    from falcon_lab.config import ConfigError

    from falcon_lab.kernels import variants
    from falcon_lab.kernels.common.checks import SettingError

    try:
        picked = variants.parse(kernels or ())
        with variants.using(picked):
            run(names, preset=preset, task=task, steps=steps, out=out, overrides=set_ or (), echo=typer.echo,
                traces=traces, sample_ids=sample_ids)
    except (ConfigError, SettingError) as err:
        typer.echo(f"lab bench step: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"wrote {out / 'step.csv'} and {out / 'step.md'}")


@app.command()
def throughput(
    mixers: MixersOption = None,
    preset: PresetOption = "same-time",
    task: TaskOption = "addition",
    out: Annotated[Path | None, typer.Option(
        help="Folder for throughput.csv, throughput.md, each run's log and results/; default "
             "<results>/bench/throughput.", callback=writable_out)] = None,
    repeat: Annotated[int, typer.Option(help="Runs of each row (seeds --seed, --seed + 1, ...): the second pays "
                                             "no compilation the first paid.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of each row's first run.")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a setting of every run (repeatable).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds one run may take before it is stopped.")] = None,
    samples: SamplesOption = None,
    against: Annotated[Path | None, typer.Option(
        help="A campaign's table.csv (e.g. records/addition/same-time/table.csv): each run's mean over 33-48 beside "
             "the row's recorded seeds, and whether it lies within their spread.")] = None,
) -> None:
    """A table's rows as their campaign trains them, each alone from process start to exit: wall time, step
    ms, model FLOP utilisation, compilation and evaluation seconds, and the run's scores."""
    from falcon_lab.bench.throughput import run
    from falcon_lab.config import ConfigError
    from falcon_lab.paths import results_path

    names = _mixer_names("lab bench throughput", mixers)
    sample_ids = _sample_ids("lab bench throughput", samples)
    if repeat < 1:
        typer.echo(f"lab bench throughput: --repeat must be >= 1, got {repeat}", err=True)
        raise typer.Exit(code=2)
    out = out if out is not None else results_path("bench", "throughput")
    try:
        lines = run(names, preset=preset, task=task, out=out, overrides=set_ or (), repeat=repeat, seed=seed,
                    timeout_s=timeout, echo=typer.echo, sample_ids=sample_ids, against_table=against)
    except (ConfigError, ValueError) as err:
        typer.echo(f"lab bench throughput: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"wrote {out / 'throughput.csv'} and {out / 'throughput.md'}")
    if any(line["status"] != "ok" for line in lines):
        raise typer.Exit(code=1)


@app.command()
def conv(
    shapes: Annotated[list[str] | None, typer.Option(
        "--shapes", "--shape", help="B,L,C to time (repeatable); default 256,256,384 16,4096,384 8,1024,2304.")] = None,
    span_tiles: Annotated[list[int] | None, typer.Option(
        "--span-tiles", help="The tiles form: tiles a backward program loops over (repeatable); default 16, 4, 1 "
                             "(none if only --serial-span is given).")] = None,
    serial_spans: Annotated[list[int] | None, typer.Option(
        "--serial-span", help="The serial form: tokens a backward program walks (repeatable); default 32, 64 "
                              "(none if only --span-tiles is given).")] = None,
    serial_channels: Annotated[list[int] | None, typer.Option(
        "--serial-channels", help="The serial form: channels a program takes, a power of two >= 32 (repeatable); "
                                  "default 64, 128.")] = None,
    serial_rows: Annotated[list[int] | None, typer.Option(
        "--serial-rows", help="The serial backward: spans a program walks in step, a power of two (repeatable); "
                              "default 1, 2, 4.")] = None,
    serial_vec: Annotated[list[int] | None, typer.Option(
        "--serial-vec", help="The serial backward: channels a thread takes, a power of two (repeatable); "
                             "default 1.")] = None,
    fwd_tokens: Annotated[list[int] | None, typer.Option(
        "--fwd-tokens", help="The forward: tokens a program takes, a power of two >= 16 (repeatable); default the "
                             "kernel's (32).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for conv.csv and conv.md; default <results>/bench/conv.", callback=writable_out)] = None,
    smoke: Annotated[bool, typer.Option(
        "--smoke", help="A tiny shape, to try the command without a GPU (under Triton's interpreter).")] = False,
) -> None:
    """The fused short convolution forward and backward, each op alone, in its forms and launches, beside the
    bandwidth floor (needs a CUDA GPU, or --smoke)."""
    device = _gpu_or_smoke("lab bench conv", smoke, "a tiny shape")
    from falcon_lab.bench.conv import SHAPES, parse_shape, run, variants
    from falcon_lab.bench.kernels import BenchError
    from falcon_lab.paths import results_path

    folder = out if out is not None else results_path("bench", "conv")
    try:
        picked = ([(2, 40, 16)] if smoke and not shapes else
                  [parse_shape(s) for s in shapes] if shapes else list(SHAPES))
        neither = span_tiles is None and serial_spans is None
        forms = variants([16, 4, 1] if neither else span_tiles or [], [32, 64] if neither else serial_spans or [],
                         serial_channels or [64, 128], serial_rows or [1, 2, 4], serial_vec or [1])
        run(picked, forms, folder, device, echo=typer.echo, fwd_tokens=fwd_tokens or ())
    except BenchError as err:
        typer.echo(f"lab bench conv: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"wrote {folder / 'conv.csv'} and {folder / 'conv.md'}")


@app.command()
def registers(
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", "--rule", help="falcon-1, falcon-2, falcon-3, falcon-1a, falcon-2a, falcon-3a or conv (the short "
                                  "convolution; repeatable); default all.")] = None,
    shape: Annotated[str, typer.Option(help="B,T,H,D the op runs at (only the host code runs: any size).")] =
        "256,256,6,64",
    dtype: Annotated[str, typer.Option(help="bf16, fp16 or fp32.")] = "bf16",
    window: Annotated[int, typer.Option(help="B of falcon-3 and falcon-3a.")] = 4,
    alignment: Annotated[str, typer.Option(help="shifted or same_time.")] = "shifted",
    timing: Annotated[str, typer.Option(help="raw or rbw.")] = "raw",
    sample_length: Annotated[int | None, typer.Option(
        help="Rows of fresh samples of this many tokens (by id where the rule takes them so); default each row "
             "one sequence.")] = None,
    kernels: KernelsOption = None,
    out: Annotated[Path | None, typer.Option(
        help="Folder for registers.csv and registers.md; default <results>/bench/registers.",
        callback=writable_out)] = None,
) -> None:
    """Registers a thread, spilled bytes and local loads of every Triton kernel a rule launches forward and
    backward, compiled for sm_90 by the installed Triton without a GPU (the launches intercepted, nothing run)."""
    import torch

    from falcon_lab.bench.kernels import BenchError, parse_shape
    from falcon_lab.bench.registers import RULES, refusal, run
    from falcon_lab.kernels import variants
    from falcon_lab.kernels.common.checks import SettingError
    from falcon_lab.paths import results_path

    picked = tuple(rules) if rules else RULES
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    try:
        size = parse_shape(shape)
        variant = variants.parse(kernels or ())
        problem = (refusal(picked) or (None if dtype in dtypes else f"--dtype must be bf16, fp16 or fp32, got {dtype}")
                   or (None if sample_length is None or sample_length >= 1
                       else f"--sample-length must be >= 1, got {sample_length}"))
    except (BenchError, SettingError) as err:
        problem = str(err)
    if problem:
        typer.echo(f"lab bench registers: {problem}", err=True)
        raise typer.Exit(code=2)
    out = out if out is not None else results_path("bench", "registers")
    try:
        with variants.using(variant):
            run(picked, size, dtypes[dtype], out, window, alignment, timing, sample_length, echo=typer.echo)
    except (BenchError, ValueError) as err:
        typer.echo(f"lab bench registers: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"wrote {out / 'registers.csv'} and {out / 'registers.md'}")


@app.command("gpu-check")
def gpu_check(
    out: Annotated[Path | None, typer.Option(
        help="Folder for regression_gpu_check.log (appended to); default <results>/bench/gpu_check.")] = None,
    commit: Annotated[str | None, typer.Option(help="Commit to record; default the checkout's ($LAB_COMMIT).")] = None,
    quick: Annotated[bool, typer.Option(
        "--quick", help="The first shape only; no profile, launch sweep or fla (the solve sweep still runs).")] = False,
    no_sweeps: Annotated[bool, typer.Option("--no-sweeps", help="Skip the launch and solve-precision sweeps.")] = False,
    no_fla: Annotated[bool, typer.Option("--no-fla", help="Skip fla's timings (lab bench kernels has them).")] = False,
    skip_check: Annotated[bool, typer.Option("--skip-check", help="Time only; no check against float64.")] = False,
    smoke: Annotated[bool, typer.Option(
        "--smoke", help="Tiny shapes, to try the command without a GPU (under Triton's interpreter).")] = False,
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", "--rule", help="Rules to check and time (repeatable; 'all': every rule); default falcon-1 and "
                                  "falcon-2.")] = None,
    check_shapes: Annotated[list[str] | None, typer.Option(
        "--check-shapes", "--check-shape", help="B,T,H,D to check against float64 (repeatable); default "
                                                "8,2048,12,64 and 1,16384,16,128.")] = None,
) -> None:
    """The rules' fused kernels (falcon-1 and falcon-2 unless --rules) against the float64 chunk form at real sizes
    (outputs, final state, every gradient; bf16 and fp32), their device time per kernel, and falcon-1/2's launch
    and precision variants timed (needs a CUDA GPU, or --smoke)."""
    from falcon_lab.paths import results_path
    from falcon_lab.runs import git_state

    _gpu_or_smoke("lab bench gpu-check", smoke, "tiny shapes")
    from falcon_lab.bench.gpu_check import run
    from falcon_lab.bench.kernels import BenchError, parse_shape
    from falcon_lab.kernels import RULES

    picked = list(RULES) if rules and "all" in rules else rules
    unknown = [r for r in picked or () if r not in RULES]
    if unknown:
        typer.echo(f"lab bench gpu-check: unknown rules {unknown}; accepted: all, {', '.join(RULES)}", err=True)
        raise typer.Exit(code=2)
    try:
        shapes = [parse_shape(s) for s in check_shapes] if check_shapes else None
    except BenchError as err:
        typer.echo(f"lab bench gpu-check: {err}", err=True)
        raise typer.Exit(code=2) from None

    out = out if out is not None else results_path("bench", "gpu_check")
    run(out, commit=commit or git_state()["commit"] or "unknown", skip_check=skip_check, smoke=smoke, quick=quick,
        no_sweeps=no_sweeps, no_fla=no_fla, rules=picked, check_shapes=shapes, echo=typer.echo)
    typer.echo(f"rows appended to {out / 'regression_gpu_check.log'}")


def _gpu_or_smoke(prog: str, smoke: bool, smoke_size: str) -> str:
    """The device a kernel command runs on: "cuda", or without one "cpu" under Triton's interpreter with --smoke
    (set before Triton is first imported); without either, one line and exit 2."""
    import os

    import torch

    if torch.cuda.is_available():
        return "cuda"
    if not smoke:
        typer.echo(f"{prog}: needs a CUDA GPU; --smoke tries it on a CPU at {smoke_size}", err=True)
        raise typer.Exit(code=2)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def _mixer_names(prog: str, mixers: list[str] | None) -> list[str]:
    """The mixers named (repeatable, or comma-separated), or every registered one; exit 2 on an unknown one."""
    from falcon_lab.mixers import MIXERS

    names = [n for text in mixers for n in text.split(",") if n] if mixers else list(MIXERS)
    unknown = [n for n in names if n not in MIXERS]
    if unknown:
        typer.echo(f"{prog}: unknown mixer {', '.join(unknown)}; accepted: {', '.join(MIXERS)}", err=True)
        raise typer.Exit(code=2)
    return names
