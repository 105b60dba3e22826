"""`lab bench conv`: the fused short convolution (``falcon_lab.kernels.conv``) forward and backward, in its
forms and their launches, beside the bandwidth floor.

The forward is one kernel (programs of ``BT_FWD`` tokens and 64 channels), timed once a shape at each of
``fwd_tokens``. The backward has two
forms (``triton_short_conv.BWD_FORM``). ``tiles``: programs each loop over ``SPAN_TILES`` tiles of their row, handing
g between threads through scratch rows and barriers (few tiles a program give more programs and fewer serial steps
each, many give fewer partial sums of the taps' gradients). ``serial``: programs walk ``SERIAL_SPAN`` tokens of
``SERIAL_BC`` channels token by token, g of the later tokens kept in registers, ``SERIAL_ROWS`` spans a program in
step, ``SERIAL_VEC`` channels a thread. Each variant is timed on the same inputs, so one call measures which is
fastest at a shape before it becomes the default.

Inputs: ``x [B, L, C]`` in bf16, taps ``[C, 4]``, a bias, and samples of 1 to 80 tokens packed along each row (as the
addition batches are), given by id. Timing: ``triton.testing.do_bench`` medians (warm-up, L2 flushed between runs);
on a CPU (``--smoke``, Triton's interpreter) one untimed pass. Each op is timed alone (the backward op called
directly: timed through autograd, the forward and backward together took 0.8-1.1 ms on an H200 whatever the kernels,
the host's time, records/bench/conv-forms). The floor: bytes / 3.35 TB/s (an H100's HBM3), the forward reading x and
writing y, the backward reading x and dy and writing dx once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from falcon_lab.bench.kernels import BenchError, parse_sizes
from falcon_lab.runs import atomic_write_text

BANDWIDTH = 3.35e12  # bytes/s
SHAPES = ((256, 256, 384), (16, 4096, 384), (8, 1024, 2304))  # the same-time step's q, k, v; a long row; 124M's qkv
COLUMNS = ["shape", "form", "span", "channels", "rows", "vec", "mode", "ms", "floor_ms", "frac", "status"]
# the kernels' form and launch: ("tiles", tiles a program, channels, 1, 1) or ("serial", tokens a program, channels,
# spans a program, channels a thread of the backward)
Variant = tuple[str, int, int, int, int]


def parse_shape(text: str) -> tuple[int, int, int]:
    return parse_sizes(text, "B,L,C", "256,256,384")  # type: ignore[return-value]


def inputs(shape: tuple[int, int, int], device: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """x, taps, bias, samples (ids of packed samples of 1-80 tokens) and the backward's dy for one shape."""
    B, L, C = shape
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 81, (B, L), generator=g)
    samples = torch.stack([torch.repeat_interleave(torch.arange(L), n)[:L] for n in lengths])
    return {"x": torch.randn(B, L, C, generator=g).to(device, torch.bfloat16),
            "w": (torch.randn(C, 4, generator=g) / 2).to(device), "b": torch.randn(C, generator=g).to(device),
            "samples": samples.to(device), "dy": torch.randn(B, L, C, generator=g).to(device, torch.bfloat16)}


def _timer(device: str) -> Callable[[Callable[[], object]], float]:
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=10, rep=50)

    def once(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    return once


def variants(span_tiles: Sequence[int], serial_spans: Sequence[int], serial_channels: Sequence[int],
             serial_rows: Sequence[int] = (1,), serial_vec: Sequence[int] = (1,)) -> list[Variant]:
    """The backward's tiles form at each of ``span_tiles`` (its channels a program: 64), then its serial form at each
    span, channel count, number of spans a program and of channels a thread."""
    from falcon_lab.kernels.conv import triton_short_conv

    for name, values in (("--span-tiles", span_tiles), ("--serial-span", serial_spans)):
        if any(v < 1 for v in values):
            raise BenchError(f"{name} must be >= 1, got {list(values)}")
    if any(v < 32 or v & (v - 1) for v in serial_channels):
        raise BenchError(f"--serial-channels must be powers of two >= 32, got {list(serial_channels)}")
    for name, values in (("--serial-rows", serial_rows), ("--serial-vec", serial_vec)):
        if any(v < 1 or v & (v - 1) for v in values):
            raise BenchError(f"{name} must be powers of two >= 1, got {list(values)}")
    return ([("tiles", n, triton_short_conv.MAX_BC, 1, 1) for n in span_tiles]
            + [("serial", n, bc, r, v) for n in serial_spans for bc in serial_channels for r in serial_rows
               for v in serial_vec])


def run(shapes: Sequence[tuple[int, int, int]], picked: Sequence[Variant], out: Path, device: str,
        echo: Callable[[str], None] = print, fwd_tokens: Sequence[int] = ()) -> list[dict]:
    """Time the forward (at each of ``fwd_tokens`` tokens a program, else its default) and every variant of the
    backward at every shape; rewrite conv.csv and conv.md after each row; the rows."""
    from falcon_lab.kernels.conv import short_conv, triton_short_conv as tsc

    if any(n < 16 or n & (n - 1) for n in fwd_tokens):
        raise BenchError(f"--fwd-tokens must be powers of two >= 16, got {list(fwd_tokens)}")
    timer = _timer(device)
    kept = tsc.BT_FWD, tsc.BWD_FORM, tsc.SPAN_TILES, tsc.SERIAL_SPAN, tsc.SERIAL_BC, tsc.SERIAL_ROWS, tsc.SERIAL_VEC
    rows: list[dict] = []
    try:
        for shape in shapes:
            t = inputs(shape, device)
            x, dy = t["x"], t["dy"]
            floors = {"fwd": 2 * x.numel() * x.element_size() / BANDWIDTH * 1e3,
                      "bwd": 3 * x.numel() * x.element_size() / BANDWIDTH * 1e3}

            def forward() -> object:
                with torch.no_grad():
                    return short_conv(t["x"], t["w"], t["b"], t["samples"])

            def backward() -> object:  # the backward op itself: through autograd the host's time is what one sees
                return torch.ops.falcon_lab.short_conv_backward(dy, x, t["w"], t["b"], t["samples"])

            # the forward (its one form) at each count of tokens a program, then the backward in each variant
            timed = [("fwd", forward, ("tiles", n, tsc.MAX_BC, 1, 1)) for n in fwd_tokens or (kept[0],)]
            timed += [("bwd", backward, variant) for variant in picked]
            for mode, fn, (form, span, channels, rows_a_program, vec) in timed:
                if mode == "fwd":
                    tsc.BT_FWD = span
                elif form == "tiles":
                    tsc.BWD_FORM, tsc.SPAN_TILES = form, span
                else:
                    tsc.BWD_FORM, tsc.SERIAL_SPAN, tsc.SERIAL_BC = form, span, channels
                    tsc.SERIAL_ROWS, tsc.SERIAL_VEC = rows_a_program, vec
                row = {"shape": "x".join(map(str, shape)), "form": form, "span": span, "channels": channels,
                       "rows": rows_a_program, "vec": vec, "mode": mode, "floor_ms": floors[mode]}
                try:
                    row["ms"] = timer(fn)
                    row["frac"] = row["floor_ms"] / row["ms"]
                    row["status"] = "ok"
                except Exception as err:  # a variant that fails to compile or run is a result
                    row["status"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
                rows.append(row)
                write(rows, out, device)
                echo(f"{row['shape']:>14} {form:<6} {span:>4} x {channels:<4} x {rows_a_program} x {vec} "
                     f"{mode:<4} {_fmt(row.get('ms')):>9} ms  floor {_fmt(row['floor_ms'])}  {row['status']}")
    finally:
        tsc.BT_FWD, tsc.BWD_FORM, tsc.SPAN_TILES, tsc.SERIAL_SPAN, tsc.SERIAL_BC, tsc.SERIAL_ROWS, tsc.SERIAL_VEC = kept
    return rows


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)


def write(rows: Sequence[dict], out: Path, device: str) -> None:
    from falcon_lab.bench.train import _write_csv

    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "conv.csv", [{c: _fmt(r.get(c)) for c in COLUMNS} for r in rows], COLUMNS)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton's interpreter: one untimed pass)"
    lines = ["# The short convolution's kernels by the backward's form and launch", "", f"- device: {name}",
             "- span: tokens a program (the forward, the serial backward) or tiles a program (the tiles backward); "
             "channels: a program's; rows: spans a program of the serial backward; vec: its channels a thread",
             f"- floor: bytes / {BANDWIDTH / 1e12:.2f} TB/s (falcon_lab/bench/conv.py); frac = floor / ms", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    atomic_write_text(out / "conv.md", "\n".join(lines) + "\n")
