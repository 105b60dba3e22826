"""`lab bench registers`: what each Triton kernel of a rule asks of an sm_90 GPU, read without one.

A kernel's registers a thread, the stack it spills them to and the loads back from local memory decide how many
programs share an SM and how much of its time goes to memory it did not mean to touch; they are fixed when the kernel
compiles, so a CPU can tell them. The rule's op runs forward and backward on CPU tensors of the given shape with
every Triton launch recorded and none run (``falcon_lab.kernels.falcon.launches``: the host code picks kernels,
constants and launches as it would on a GPU), and each distinct launch is compiled for sm_90 by the installed Triton
(``ptxas``) and read back with ``cuobjdump``. Pointers are taken as 16-byte aligned and integers as the launch passed
them; the figures are the compiler's, not a measurement of time (``lab bench kernels`` times them on a GPU).
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from falcon_lab.bench.kernels import BenchError
from falcon_lab.kernels.falcon.launches import OPTIONS, Launch, recorded

TARGET = ("cuda", 90, 32)  # an H100/H200: compute capability 9.0, warps of 32
RULES = ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a", "conv")
COLUMNS = ("rule", "kernel", "num_warps", "num_stages", "constants", "registers", "spill_bytes", "local_loads",
           "local_stores", "shared_bytes", "ctas_per_sm", "warps_per_sm", "sass_lines")
# An sm_90 SM (H100, H200), as CUDA's occupancy calculator takes it: 64K registers, allocated to a warp 256 at a time;
# 64 warps and 32 CTAs at most; 228 KiB of shared memory, 1 KiB of it reserved for each CTA
SM_REGISTERS, SM_WARPS, SM_CTAS, SM_SHARED, CTA_RESERVED = 65536, 64, 32, 228 * 1024, 1024
POINTER_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32", torch.float64: "*fp64",
                 torch.int32: "*i32", torch.int64: "*i64", torch.int8: "*i8", torch.uint8: "*u8", torch.bool: "*i1"}
SHOWN = ("BK", "BV", "BT", "C", "R", "WP", "PREC", "SAMPLES", "BACKWARD", "BLOCK_T", "BLOCK_C", "TILES")  # `constants`


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return POINTER_TYPES.get(value.dtype, "*fp32")
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return "constexpr"  # None and the like: no runtime argument


def sample_rows(B: int, T: int, length: int) -> torch.Tensor:
    """``[B, T]`` sample ids: samples of ``length`` tokens, the last of each row shorter."""
    return (torch.arange(T) // length).expand(B, T).contiguous()


def capture(rule: str, shape: tuple[int, int, int, int], dtype: torch.dtype, window: int = 4,
            alignment: str = "shifted", timing: str = "raw", sample_length: int | None = None) -> list[Launch]:
    """The distinct launches of ``rule``'s fused op (or ``conv``, the short convolution over B·T tokens of H·D
    channels), forward and backward, at ``shape`` (B, T, H, D), in their first order; ``sample_length``: rows of
    fresh samples of that many tokens (by id where the rule takes them so), outputs alone."""
    from falcon_lab.kernels import fast_weight_rule

    problem = refusal((rule,))
    if problem:
        raise BenchError(problem)
    B, T, H, D = shape
    g = torch.Generator().manual_seed(0)
    samples = None if sample_length is None else sample_rows(B, T, sample_length)
    with recorded() as launches:
        if rule == "conv":
            from falcon_lab.kernels.conv.triton_short_conv import short_conv

            x = torch.randn(B, T, H * D, generator=g).to(dtype).requires_grad_()
            w = torch.randn(H * D, 4, generator=g).requires_grad_()
            short_conv(x, w, None, samples).float().sum().backward()
        else:
            q, k, v = (torch.randn(B, T, H, D, generator=g).to(dtype).requires_grad_() for _ in range(3))
            gain = torch.rand(B, T, H, *((D,) if rule in ("falcon-2", "falcon-2a") else ()), generator=g)
            lam = torch.rand(B, T, H, generator=g)
            o, _ = fast_weight_rule(q, k, v, beta=gain.to(dtype).requires_grad_(), lam=lam.to(dtype).requires_grad_(),
                                    rule=rule, window=window, alignment=alignment, timing=timing, backend="triton",
                                    sample_id=samples)
            o.float().sum().backward()
    seen: dict[tuple, Launch] = {}
    for launch in launches:
        seen.setdefault(launch.key(), launch)
    return list(seen.values())


def _tools() -> Path:
    import triton.backends.nvidia as nvidia

    folder = Path(nvidia.__file__).parent / "bin"
    if not (folder / "cuobjdump").exists():
        raise BenchError(f"no cuobjdump beside Triton's NVIDIA backend ({folder}): this Triton cannot be read back")
    return folder


def compile_launch(launch: Launch) -> dict[str, Any]:
    """Compile ``launch`` for sm_90 and read its resources back: registers a thread, spilled bytes (the stack),
    local loads and stores in its SASS, static shared memory, SASS lines."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = launch.fn
    options = {k: launch.kwargs[k] for k in OPTIONS if k in launch.kwargs}
    values = launch.values()
    missing = [n for n in fn.arg_names if n not in values]
    if missing:
        raise BenchError(f"{launch.name}: no value for {', '.join(missing)}")
    loose = {fn.arg_names[i] if isinstance(i, int) else i for i in fn.do_not_specialize}
    signature, constants, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params)):
        value, kind = values[name], _kind(values[name])
        if param.is_constexpr or kind == "constexpr":
            signature[name], constants[name] = "constexpr", value
            continue
        signature[name] = kind
        if kind.startswith("*") or (kind in ("i32", "i64") and value % 16 == 0 and name not in loose):
            attrs[(i,)] = [["tt.divisibility", 16]]
    try:
        compiled = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget(*TARGET),
                                  options=dict(num_stages=3, **options))
    except Exception as err:  # the compiler's own message, on one line
        raise BenchError(f"{launch.name} does not compile for sm_90: {str(err).splitlines()[0]}") from None
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        tools = _tools()
        usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    found = re.search(r"REG:(\d+).*?STACK:(\d+).*?SHARED:(\d+)", usage, re.S)
    if found is None:
        raise BenchError(f"{launch.name}: cuobjdump gave no resource usage")
    registers, warps = int(found.group(1)), options.get("num_warps", 4)
    shared = int(found.group(3)) + int(getattr(compiled.metadata, "shared", 0) or 0)  # static + Triton's dynamic
    ctas = occupancy(registers, warps, shared)
    return dict(registers=registers, spill_bytes=int(found.group(2)),
                local_loads=len(re.findall(r"\bLDL\b", sass)), local_stores=len(re.findall(r"\bSTL\b", sass)),
                shared_bytes=shared, ctas_per_sm=ctas, warps_per_sm=ctas * warps, sass_lines=sass.count("\n"),
                num_warps=warps, num_stages=options.get("num_stages", 3))


def occupancy(registers: int, warps: int, shared: int) -> int:
    """CTAs of a kernel one sm_90 SM holds at once (``SM_*``): the fewest its registers, its warps, its shared
    memory and the CTA limit allow."""
    per_warp = -(-registers * 32 // 256) * 256  # a warp's registers, in the units they are allocated in
    by_registers = (SM_REGISTERS // per_warp) // warps
    by_shared = SM_SHARED // (shared + CTA_RESERVED)
    return min(by_registers, SM_WARPS // warps, by_shared, SM_CTAS)


def _constants(launch: Launch) -> str:
    """The launch's block sizes and the like (``SHOWN``, where the kernel takes them as constants)."""
    fn = launch.fn
    values = launch.values()
    constant = {name for name, param in zip(fn.arg_names, fn.params) if param.is_constexpr}
    return " ".join(f"{k}={values[k]}" for k in SHOWN if k in constant and k in values)


def run(rules: Sequence[str], shape: tuple[int, int, int, int], dtype: torch.dtype, out: Path, window: int = 4,
        alignment: str = "shifted", timing: str = "raw", sample_length: int | None = None,
        echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every distinct launch of every rule compiled and read; registers.csv and registers.md under ``out``."""
    from falcon_lab.kernels import variants

    rows = []
    for rule in rules:
        for launch in capture(rule, shape, dtype, window, alignment, timing, sample_length):
            row = dict(rule=rule, kernel=launch.name, constants=_constants(launch), **compile_launch(launch))
            rows.append(row)
            echo(f"{rule:10s} {row['kernel']:28s} warps {row['num_warps']} regs {row['registers']:3d} "
                 f"spill {row['spill_bytes']:5d} B  LDL {row['local_loads']:4d}  warps/SM {row['warps_per_sm']:2d}  "
                 f"{row['constants']}")
    said = (f"window {window} (falcon-3/3a), {alignment}, {timing}, "
            + ("each row one sequence" if sample_length is None else f"rows of samples of {sample_length} tokens"))
    _write(rows, out, shape, dtype, said, variants.current())
    return rows


def _write(rows: list[dict[str, Any]], out: Path, shape: tuple[int, ...], dtype: torch.dtype, said: str,
           kernels: dict[str, str]) -> None:
    import triton

    from falcon_lab.runs import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows({c: r[c] for c in COLUMNS} for r in rows)
    atomic_write_text(out / "registers.csv", buf.getvalue())
    lines = ["# Registers and spills of the rules' Triton kernels, compiled for sm_90 without a GPU", "",
             f"- shape (B, T, H, D): {', '.join(map(str, shape))}; {str(dtype).removeprefix('torch.')}; {said}",
             f"- Triton {triton.__version__}, torch {torch.__version__}; kernels: "
             + ", ".join(f"{k}={v}" for k, v in kernels.items()),
             "- columns: falcon_lab/bench/registers.py (spill bytes: the stack; local loads/stores: LDL/STL in the "
             "SASS; shared: static and Triton's dynamic; CTAs and warps an SM holds at once, by CUDA's occupancy "
             "rules for sm_90)", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    atomic_write_text(out / "registers.md", "\n".join(lines) + "\n")


def refusal(rules: Sequence[str]) -> str | None:
    """Why these rules cannot be read back here, or None: an unknown rule, or Triton's interpreter on (its kernels
    are not compiled ones)."""
    for rule in rules:
        if rule not in RULES:
            return f"unknown rule {rule!r}; accepted: {', '.join(RULES)}"
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "TRITON_INTERPRET is set: its kernels are the interpreter's, not compiled ones (unset it)"
    return None
