"""`lab bench kernels`: median time of every Falcon kernel beside its anchors, against two floors.

Timing: ``triton.testing.do_bench`` (CUDA events; warm-up, then the median of many runs; it also flushes
L2 between runs), each call on the next of ``N_SETS`` input sets in turn so that no run finds its inputs
in cache. ``fwd`` runs under ``torch.no_grad``; ``fwd+bwd`` runs the forward and ``backward`` of a fixed
random ``do``. Peak memory is the most the op allocates above what was allocated before it (one call).

Floors. The time no implementation can beat on this GPU, from two counts per row:

* bytes / 4.3 TB/s (the H200's measured device-to-device copy). Forward: every input read once, the output
  written once. fwd+bwd adds the backward's minimum: every input and ``do`` read once more, one gradient
  per input written. So fwd = in + out, fwd+bwd = 3·in + 2·out, with ``in`` the bytes of the inputs as
  given (q, k, v, β, λ, g ...) and ``out`` the bytes of o.
* FLOPs / 790 TFLOP/s (the measured bf16 dense matrix rate), counting a multiply-add as 2 FLOPs, per head
  and token with K = Dk, V = Dv, C = 64 the chunk, causal blocks counted as half squares:
    - ``linear`` (falcon-1a, falcon-2a, simple GLA): state update xᵀv' 2KV, inter-chunk read q·h 2KV,
      intra scores q xᵀ C·K, scores·v C·V: fwd = 4KV + C(K + V). The per-channel carry of 2a adds only
      elementwise work.
    - ``linear_window`` (falcon-3a, window B = 4): ``linear`` once, over the pairs delayed by B − 1, and the
      band of the B − 1 pairs still inside each window, (B − 1)(2K + 2V) (falcon_lab/kernels/window/fused.py).
    - ``delta`` (falcon-1, delta rule, gated delta rule; WY form): Gram k kᵀ C·K, the unit-triangular
      inverse 2C²/3, w = T k C·K, u = T v C·V, pseudo-values u − w h 2KV, state update 2KV, q·h 2KV,
      q kᵀ C·K, scores·values C·V: fwd = 6KV + C(3K + 2V) + 2C²/3.
    - ``delta_per_channel`` (falcon-2): as delta plus one triangular solve per value channel, C·V.
    - ``delta_window`` (falcon-3, window B = 4): ``delta`` over the B window slots of every token as rows,
      R = 64 rows a chunk (16 tokens), the reads per token: fwd = B(4KV + R(2K + V) + 2R²/3) + 2KV + R(K + V).
    - ``softmax`` (causal SDPA): Q Kᵀ and P V over the causal half: fwd = 2·T·D per token (T²·D per
      head and matrix, halved, times 2 FLOPs).
  The backward of the chunked forms does each product of the forward about twice (dq, dk, dv): bwd = 2·fwd;
  for SDPA the flash backward's five products against the forward's two: bwd = 2.5·fwd.
These counts are a model, not a measurement; the fraction reached is floor / measured.
"""

from __future__ import annotations

import csv
import datetime
import io
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from falcon_lab.kernels import RULES
from falcon_lab.runs import atomic_write_text
from falcon_lab.bench.ops import CHUNK, F2_FORMS, Op, Shape, anchor_ops, rule_chunk_ops, rule_ops, torch_chunk_op

BANDWIDTH = 4.3e12  # bytes/s
PEAK_FLOPS = 790e12  # bf16 dense FLOP/s
SHAPES: tuple[Shape, ...] = ((8, 2048, 12, 64), (4, 4096, 16, 128), (1, 16384, 16, 128))
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MODES = ("fwd", "fwd+bwd")
N_SETS = 3
WINDOW = 4  # falcon-3/3a's window B in these rows (the op's default)
WINDOW_ROWS = 64  # falcon-3's chunk in window-slot rows (falcon_lab/kernels/window/triton_falcon3_launch.py at chunk_size 64)
TORCH_CHUNK_MAX_TOKENS = 8 * 2048 * 12  # the PyTorch chunk form runs at the smaller shapes only (B·T·H)
RULE_CHUNK_MAX_TOKENS = 4 * 4096 * 16  # --chunk-forms: each rule's own PyTorch chunk form, up to this B·T·H
ANCHORS = ("fla chunk_delta_rule", "fla chunk_gated_delta_rule", "fla chunk_simple_gla", "torch SDPA causal",
           "falcon-1a PyTorch chunk")
COLUMNS = ["shape", "op", "mode", "ms", "peak_mib", "bytes_floor_ms", "bytes_frac", "flop_floor_ms", "flop_frac",
           *[f"x_{a}" for a in ANCHORS], "x_own_chunk", "status"]


class BenchError(RuntimeError):
    """A benchmark that cannot run here (no CUDA, a malformed option)."""


def parse_sizes(text: str, names: str = "B,T,H,D", example: str = "8,2048,12,64") -> tuple[int, ...]:
    """``text`` (sizes by commas or x) as the sizes ``names`` names, each >= 1; BenchError saying what was expected."""
    parts = text.replace("x", ",").split(",")
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = ()
    if len(sizes) != len(names.split(",")):
        raise BenchError(f"shape {text!r}: expected {names}, e.g. {example}")
    if min(sizes) < 1:
        raise BenchError(f"shape {text!r}: every size must be >= 1")
    return sizes


def parse_shape(text: str) -> Shape:
    return parse_sizes(text)  # type: ignore[return-value]


def flops(family: str, shape: Shape, mode: str) -> float:
    """The FLOP count of the module docstring."""
    B, T, H, D = shape
    K = V = D
    C = CHUNK
    per_token = {
        "linear": 4 * K * V + C * (K + V),
        "linear_window": 4 * K * V + C * (K + V) + (WINDOW - 1) * (2 * K + 2 * V),
        "delta": 6 * K * V + C * (3 * K + 2 * V) + 2 * C * C / 3,
        "delta_per_channel": 6 * K * V + C * (3 * K + 3 * V) + 2 * C * C / 3,
        "delta_window": (WINDOW * (4 * K * V + WINDOW_ROWS * (2 * K + V) + 2 * WINDOW_ROWS ** 2 / 3) + 2 * K * V
                         + WINDOW_ROWS * (K + V)),
        "softmax": 2 * T * D,
    }[family]
    fwd = B * T * H * per_token
    return fwd if mode == "fwd" else fwd * (3.5 if family == "softmax" else 3.0)


def bytes_moved(inputs: dict, out_bytes: int, mode: str) -> float:
    """The byte count of the module docstring."""
    in_bytes = sum(t.numel() * t.element_size() for t in inputs.values())
    return in_bytes + out_bytes if mode == "fwd" else 3 * in_bytes + 2 * out_bytes


def _measure(op: Op, shape: Shape, dtype, mode: str, rep: int) -> dict:
    """Time one op at one shape and mode; returns the row's measured fields."""
    import torch
    from triton.testing import do_bench

    sets = [op.make(shape, dtype, seed) for seed in range(N_SETS)]
    leaves = [t for s in sets for t in s.values() if t.is_floating_point()]
    grads = None
    if mode == "fwd+bwd":
        for t in leaves:
            t.requires_grad_(True)
        with torch.no_grad():
            out = op.call(sets[0])
        grads = torch.randn_like(out)
    turn = [0]

    def once() -> None:
        x = sets[turn[0] % N_SETS]
        turn[0] += 1
        if grads is None:
            with torch.no_grad():
                op.call(x)
        else:
            op.call(x).backward(grads)

    once()  # compile and check that it runs at all
    torch.cuda.synchronize()
    ms = do_bench(once, warmup=max(10, rep // 4), rep=rep, grad_to_none=leaves if grads is not None else None,
                  return_mode="median")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    once()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    with torch.no_grad():
        out = op.call(sets[0])
    b = bytes_moved(sets[0], out.numel() * out.element_size(), mode)
    f = flops(op.family, shape, mode)
    bytes_ms, flop_ms = b / BANDWIDTH * 1e3, f / PEAK_FLOPS * 1e3
    return {"ms": ms, "peak_mib": peak, "bytes_floor_ms": bytes_ms, "bytes_frac": bytes_ms / ms,
            "flop_floor_ms": flop_ms, "flop_frac": flop_ms / ms, "status": "ok"}


def _skipped(op: Op, shape: Shape) -> str | None:
    """Why a PyTorch chunk form is not timed at this shape (its memory and time grow fast), else None."""
    tokens = shape[0] * shape[1] * shape[2]
    if op.anchor and op.name == "falcon-1a PyTorch chunk" and tokens > TORCH_CHUNK_MAX_TOKENS:
        return "skipped: run at the smaller shapes only"
    if not op.anchor and op.name.endswith(" PyTorch chunk") and tokens > RULE_CHUNK_MAX_TOKENS:
        return f"skipped: the rules' own chunk forms run up to B·T·H = {RULE_CHUNK_MAX_TOKENS:,}"
    return None


def _row(op: Op, shape: Shape, dtype, mode: str, rep: int) -> dict:
    import torch

    row = {"shape": "x".join(map(str, shape)), "op": op.name, "mode": mode}
    why = op.missing()
    if why is None and op.refuses is not None:
        why = op.refuses(mode)
    if why is not None:
        return {**row, "status": why}
    why = _skipped(op, shape)
    if why is not None:
        return {**row, "status": why}
    try:
        return {**row, **_measure(op, shape, dtype, mode, rep)}
    except torch.cuda.OutOfMemoryError:
        return {**row, "status": "out of memory"}
    except Exception as err:  # an anchor refusing (fla's gated backward on Triton < 3.7.1) is a result
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return {**row, "status": f"refused: {type(err).__name__}: {first[:160]}"}
    finally:
        torch.cuda.empty_cache()


def _ratios(rows: list[dict]) -> None:
    """x_<anchor>: the row's ms over the anchor's ms at the same shape and mode."""
    ms = {(r["shape"], r["mode"], r["op"]): r.get("ms") for r in rows}
    for r in rows:
        for a in ANCHORS:
            ref = ms.get((r["shape"], r["mode"], a))
            r[f"x_{a}"] = r["ms"] / ref if r.get("ms") and ref else None
        op = "falcon-2" if r["op"] in F2_FORMS else r["op"]  # falcon-2's solves share its chunk form
        own = ms.get((r["shape"], r["mode"], f"{op} PyTorch chunk"))
        r["x_own_chunk"] = r["ms"] / own if r.get("ms") and own else None


def _provenance(command: str, dtype_name: str) -> dict:
    import torch
    import triton

    commit = os.environ.get("LAB_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parents[2], timeout=10).stdout.strip() or None
        except OSError:
            commit = None
    try:
        import fla
        fla_version = getattr(fla, "__version__", "installed")
    except ImportError:
        fla_version = "not installed"
    return {"gpu": torch.cuda.get_device_name(), "commit": commit or "unknown",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "dtype": dtype_name, "torch": torch.__version__, "triton": triton.__version__,
            "fla": fla_version}


def _fmt(v, digits: int = 3) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)




def write(rows: list[dict], prov: dict, out: Path) -> None:
    """kernels.csv (every field) and kernels.md (a readable table with the provenance, the kernel variants in
    force among it), each atomically."""
    from falcon_lab.kernels import variants

    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: _fmt(r.get(c), 6) for c in COLUMNS})
    atomic_write_text(out / "kernels.csv", buf.getvalue())
    head = ["shape", "op", "mode", "ms", "peak MiB", "bytes floor ms (frac)", "FLOP floor ms (frac)",
            "× delta", "× gated delta", "× simple GLA", "× SDPA", "× PyTorch chunk", "× own chunk", "status"]
    lines = [f"# Kernel benchmark ({prov['dtype']})", "",
             f"- GPU: {prov['gpu']}", f"- commit: {prov['commit']}", f"- date: {prov['date']}",
             f"- command: `{prov['command']}`",
             f"- torch {prov['torch']}, triton {prov['triton']}, fla {prov['fla']}",
             "- kernels: " + ", ".join(f"{k}={v}" for k, v in variants.current().items()),
             f"- floors: bytes / {BANDWIDTH / 1e12:.1f} TB/s and FLOPs / {PEAK_FLOPS / 1e12:.0f} TFLOP/s "
             "(counting in falcon_lab/bench/kernels.py); frac = floor / measured; × anchor = ms / anchor ms", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        floors = [f"{_fmt(r.get(a))} ({_fmt(r.get(b), 2)})" if r.get(a) else "" for a, b in
                  (("bytes_floor_ms", "bytes_frac"), ("flop_floor_ms", "flop_frac"))]
        cells = [r["shape"], r["op"], r["mode"], _fmt(r.get("ms")), _fmt(r.get("peak_mib"), 4), *floors,
                 *[_fmt(r.get(f"x_{a}"), 3) for a in ANCHORS], _fmt(r.get("x_own_chunk"), 3), r.get("status", "")]
        lines.append("| " + " | ".join(cells) + " |")
    atomic_write_text(out / "kernels.md", "\n".join(lines) + "\n")


def paired_with_chunk_forms(ops: list[Op], chunk_ops: list[Op]) -> list[Op]:
    """Each Triton row followed by its own PyTorch chunk form, where it has one (falcon-2's solve forms share
    falcon-2's, after the first of them)."""
    chunk = {op.name.removesuffix(" PyTorch chunk"): op for op in chunk_ops}
    return [o for op in ops for o in (op, chunk.get(op.name)) if o is not None]


def run(shapes: list[Shape], rules: tuple[str, ...], dtype_name: str, out: Path, rep: int = 100,
        command: str | None = None, echo=print, chunk_forms: bool = False,
        against: Sequence[Path] = ()) -> list[dict]:
    """Measure every rule and anchor at every shape and mode; rewrite the files after each row, the kernels'
    targets (``falcon_lab.bench.targets``: targets.md|csv, beside ``against``'s kernels.csv files) among them. With
    ``chunk_forms`` each rule's own PyTorch chunk form follows its Triton row (× own chunk: Triton / chunk)."""
    from falcon_lab.bench import targets

    try:
        before = targets.read_all(against) if against else None
    except targets.TargetsError as err:
        raise BenchError(str(err)) from None
    if dtype_name not in DTYPES:
        raise BenchError(f"dtype {dtype_name!r}; accepted: {', '.join(DTYPES)}")
    bad = [r for r in rules if r not in RULES]
    if bad:
        raise BenchError(f"rules {bad}; accepted: {', '.join(RULES)}")
    import torch

    if not torch.cuda.is_available():
        raise BenchError("a CUDA GPU is needed and none is visible (torch.cuda.is_available() is False); nothing was measured")
    dtype = getattr(torch, DTYPES[dtype_name])
    command = command or "lab " + shlex.join(sys.argv[1:])
    prov = _provenance(command, dtype_name)
    ops = rule_ops(rules)
    if chunk_forms:  # falcon-1a's own row then stands for the "falcon-1a PyTorch chunk" anchor too
        ops = paired_with_chunk_forms(ops, rule_chunk_ops(rules))
    ops += anchor_ops() + ([] if chunk_forms and "falcon-1a" in rules else [torch_chunk_op()])
    # the rules at every shape first, then the anchors (fla autotunes each op on first use, 25-45 s on an H200):
    # a run cut short keeps every rule's row; the files list the rows shape by shape in the ops' order
    plan = [(i, j) for own in (True, False) for i in range(len(shapes)) for j, op in enumerate(ops)
            if (not op.anchor) == own]
    measured: dict[tuple[int, int, int], dict] = {}
    start = time.perf_counter()
    for i, j in plan:
        op = ops[j]
        for m, mode in enumerate(MODES):
            row = _row(op, shapes[i], dtype, mode, rep)
            measured[i, j, m] = row
            rows = [measured[key] for key in sorted(measured)]
            _ratios(rows)
            write(rows, prov, out)  # after every row: an interrupted run keeps what it measured
            targets.write(targets.evaluate(targets.times_of(rows), before), out, str(out / "kernels.csv"),
                          " ".join(map(str, against)) or None)
            echo(f"{row['shape']:>14} {op.name:<28} {mode:<8} {_fmt(row.get('ms')):>8} ms  {row['status']}"
                 f"  [{time.perf_counter() - start:.0f}s]")
    return [measured[key] for key in sorted(measured)]
