"""`lab bench gpu-check`: ``backend="triton"`` for falcon-1/falcon-2 checked on a GPU at real sizes, then timed.

    lab bench gpu-check [--out DIR] [--commit SHA] [--quick] [--no-sweeps] [--no-fla] [--smoke]

Correctness: outputs, final state and every gradient (q, k, v, β, λ, the initial S) against the float64
chunk form (``backend="chunk"``, itself held to the recurrent oracle at 1e-10 by the tests), as relative RMS
errors, in bf16 and fp32. Timing: ``triton.testing.do_bench`` medians of forward and forward+backward in
bf16. Every row is appended to ``DIR/regression_gpu_check.log`` as soon as it is measured (default DIR:
``<results>/bench/gpu_check``).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch
import torch.nn.functional as F

from falcon_lab.kernels.common.spec import RuleNames, rule_spec

CHECK_SHAPES = [(8, 2048, 12, 64), (1, 16384, 16, 128)]
TIME_SHAPES = [(8, 2048, 12, 64), (4, 4096, 16, 128), (1, 16384, 16, 128)]
SMOKE_SHAPES = [(1, 80, 2, 16)]  # --smoke: the whole script at a tiny size (CPU, Triton's interpreter)
RULES = RuleNames(lambda spec: spec.family == "regression")  # the rules on the regression kernels: falcon-1, falcon-2
FLA_DELTA = "fla delta"  # fla's chunk_delta_rule, profiled beside the rules
# launch variants of the latency-bound sequential kernels, timed beside the defaults
SWEEP = [("falcon-1", ("f1_state", "f1_dstate"), dict(BV=32, num_warps=4)),
         ("falcon-1", ("f1_state", "f1_dstate"), dict(BV=16, num_warps=4)),
         ("falcon-2", ("f2_fwd", "f2_dstate"), dict(BV=16, num_warps=2)),
         ("falcon-2", ("f2_fwd", "f2_dstate"), dict(BV=16, num_warps=4))]
# precisions of the UT transform's inverse for bf16 inputs, checked and timed beside the default
SOLVE_SWEEP = ("tf32x3", "tf32", "bf16")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def draw(rule: str, shape, dtype: torch.dtype, seed: int):
    """q, k ℓ2-normalised, v ~ N(0, 1), β ~ U(0.1, 1.9), λ ~ U(0, 0.2), a random initial S; float64 leaves
    holding the values rounded to ``dtype``."""
    B, T, H, D = shape
    g = torch.Generator(DEVICE).manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, D, device=DEVICE, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, D, device=DEVICE, generator=g), dim=-1)
    v = torch.randn(B, T, H, D, device=DEVICE, generator=g)
    bshape = (B, T, H, D) if rule_spec(rule).per_channel else (B, T, H)
    beta = 0.1 + 1.8 * torch.rand(bshape, device=DEVICE, generator=g)
    lam = 0.2 * torch.rand(B, T, H, device=DEVICE, generator=g)
    S0 = torch.randn(B, H, D, D, device=DEVICE, generator=g) / D ** 0.5
    return [t.to(dtype).double() for t in (q, k, v, beta, lam)] + [S0.double()]


def forward_backward(rule, xs, dtype, backend, chunk_size, grads_out):
    from falcon_lab.kernels import fast_weight_rule

    leaves = [t.detach().to(dtype if i < 5 else torch.float32 if backend == "triton" else torch.float64)
              .clone().requires_grad_() for i, t in enumerate(xs)]
    o, st = fast_weight_rule(*leaves[:5], rule=rule, backend=backend, chunk_size=chunk_size,
                             initial_state=leaves[5], output_final_state=True)
    o_g, S_g = grads_out
    (o.double() * o_g).sum().add((st.S.double() * S_g).sum()).backward()
    return [o.detach(), st.S.detach()] + [t.grad for t in leaves]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def check(rule: str, shape, dtype: torch.dtype, seed: int) -> dict:
    xs = draw(rule, shape, dtype, seed)
    B, T, H, D = shape
    g = torch.Generator(DEVICE).manual_seed(seed + 1)
    grads_out = (torch.randn(B, T, H, D, device=DEVICE, generator=g, dtype=torch.float64),
                 torch.randn(B, H, D, D, device=DEVICE, generator=g, dtype=torch.float64))
    # the chunk form's per-channel decay tiles grow with the chunk: 16 keeps falcon-2's reference in memory
    ref = forward_backward(rule, xs, torch.float64, "chunk", 16 if rule_spec(rule).per_channel else 64, grads_out)
    out = forward_backward(rule, xs, dtype, "triton", 64, grads_out)
    names = ["o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0"]
    errs = {n: rel(a, b) for n, a, b in zip(names, out, ref)}
    errs["nan"] = any(bool(torch.isnan(a).any()) for a in out)
    return errs


def bench(rule: str, shape, dtype: torch.dtype) -> dict:
    from triton.testing import do_bench

    from falcon_lab.kernels import fast_weight_rule

    if DEVICE == "cpu":  # --smoke: one untimed pass through the same calls
        def do_bench(fn, grad_to_none=None, **_):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3

    xs = [t.to(dtype) for t in draw(rule, shape, dtype, 0)[:5]]
    fwd = do_bench(lambda: fast_weight_rule(*xs, rule=rule, backend="triton"), warmup=5, rep=30)
    leaves = [t.clone().requires_grad_() for t in xs]
    do = torch.randn_like(xs[2])

    def step():
        o, _ = fast_weight_rule(*leaves, rule=rule, backend="triton")
        o.backward(do)

    both = do_bench(step, warmup=3, rep=30, grad_to_none=leaves)
    return {"fwd_ms": fwd, "fwd_bwd_ms": both}


def bench_fla(shape) -> dict:
    """fla's chunk_delta_rule (falcon-1 at λ = 0) and chunk_gated_delta_rule (its twin) in bf16, when installed."""
    from triton.testing import do_bench

    from fla.ops.delta_rule import chunk_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    B, T, H, D = shape
    q, k, v = (t.to(torch.bfloat16) for t in draw("falcon-1", shape, torch.bfloat16, 0)[:3])
    beta = torch.rand(B, T, H, device=DEVICE, dtype=torch.bfloat16)
    g = F.logsigmoid(4 + torch.randn(B, T, H, device=DEVICE)).float()
    out = {"delta_fwd_ms": do_bench(lambda: chunk_delta_rule(q, k, v, beta), warmup=5, rep=30)}
    leaves = [t.clone().requires_grad_() for t in (q, k, v, beta)]
    do = torch.randn_like(v)

    def step():
        o, _ = chunk_delta_rule(*leaves)
        o.backward(do)

    out["delta_fwd_bwd_ms"] = do_bench(step, warmup=3, rep=30, grad_to_none=leaves)
    out["gated_fwd_ms"] = do_bench(lambda: chunk_gated_delta_rule(q, k, v, g, beta), warmup=5, rep=30)
    return out


def profile(op: str, shape) -> list:
    """Device time per kernel over one bf16 forward+backward of the rule ``op``: where the time goes.
    ``op=FLA_DELTA`` profiles fla's chunk_delta_rule (falcon-1 at λ = 0) the same way, to set the two side by side."""
    from falcon_lab.kernels import fast_weight_rule

    if op == FLA_DELTA:
        from fla.ops.delta_rule import chunk_delta_rule

        B, T, H, _ = shape
        q, k, v = (t.to(torch.bfloat16) for t in draw("falcon-1", shape, torch.bfloat16, 0)[:3])
        beta = torch.rand(B, T, H, device=DEVICE, dtype=torch.bfloat16)
        leaves = [t.clone().requires_grad_() for t in (q, k, v, beta)]

        def call():
            return chunk_delta_rule(*leaves)
    else:
        leaves = [t.to(torch.bfloat16).requires_grad_() for t in draw(op, shape, torch.bfloat16, 0)[:5]]

        def call():
            return fast_weight_rule(*leaves, rule=op, backend="triton")
    do = torch.randn_like(leaves[2])
    for _ in range(2):
        o, _ = call()
        o.backward(do)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        o, _ = call()
        o.backward(do)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us > 0:
            rows.append((e.key[:40], round(us / 1e3, 3), e.count))
    return sorted(rows, key=lambda r: -r[1])[:12]


def warm(job) -> str:
    """Compile one (rule, dtype, shape, launch variant) family of kernels at a small T in a worker process."""
    rule, dtype_name, D, H, names, variant = job
    from falcon_lab.kernels.regression import fused as tr

    dtype = getattr(torch, dtype_name)
    tr.LAUNCH_OVERRIDES.update({name: variant for name in names})
    xs = draw(rule, (1, 1024, H, D), dtype, 0)
    try:
        forward_backward(rule, xs, dtype, "triton", 64,
                         (torch.zeros(1, 1024, H, D, device=DEVICE, dtype=torch.float64),
                          torch.zeros(1, H, D, D, device=DEVICE, dtype=torch.float64)))
        torch.cuda.synchronize()
    except Exception as err:
        return f"{job}: {err!r}"[:400]
    return ""


def run(out: str | os.PathLike, *, commit: str = "unknown", skip_check: bool = False, smoke: bool = False,
        quick: bool = False, no_sweeps: bool = False, no_fla: bool = False, rules: Sequence[str] | None = None,
        check_shapes: Sequence[tuple[int, int, int, int]] | None = None,
        echo: Callable[[str], None] = print) -> list[dict]:
    """Check, time, profile and sweep as the options say; append every row to ``out/regression_gpu_check.log``,
    echo it and then the summary table; return the rows. ``smoke``: tiny shapes on a CPU under Triton's
    interpreter. ``quick``: the first shape only, no profile, launch sweep or fla (the solve sweep still runs).
    ``rules``: the rules checked and timed (default falcon-1 and falcon-2, whose kernels the sweeps vary; any
    registered rule, each against its own float64 chunk form); ``check_shapes``: the shapes checked (default
    CHECK_SHAPES; the smoke run's are its own)."""
    chosen = tuple(rules) if rules else tuple(RULES)
    check_shapes, time_shapes = ((SMOKE_SHAPES, SMOKE_SHAPES) if smoke
                                 else (list(check_shapes or CHECK_SHAPES), TIME_SHAPES))
    if quick:
        check_shapes = check_shapes[:1]
    from falcon_lab.kernels.regression import fused as tr

    def prec(rule: str, dtype: torch.dtype) -> str:
        """The regression kernels' product precision for ``dtype`` (the other rules' kernels have none to set)."""
        return tr.MATMUL_PRECISION[dtype] if rule_spec(rule).family == "regression" else "-"

    os.makedirs(out, exist_ok=True)
    log_path = os.path.join(out, "regression_gpu_check.log")
    rows = []

    def log(row: dict) -> None:
        rows.append(row)
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        echo(json.dumps(row))

    import triton

    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)"
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    log({"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__, "commit": commit, "date": now})
    t0 = time.time()
    sweep_shapes = (time_shapes[0], time_shapes[-1])
    jobs = [(r, d, D, H, (), {}) for r in chosen for d in ("bfloat16", "float32") for (_, _, H, D) in check_shapes]
    sweep = [] if quick or smoke or no_sweeps else [row for row in SWEEP if row[0] in chosen]
    jobs += [(r, "bfloat16", D, H, names, variant) for r, names, variant in sweep for (_, _, H, D) in sweep_shapes]
    jobs += [(r, "bfloat16", D, H, (), {}) for r in chosen for (_, _, H, D) in time_shapes[-1:]] if quick else []
    if not smoke:
        with ProcessPoolExecutor(max_workers=8, mp_context=get_context("spawn")) as pool:
            failed = [err for err in pool.map(warm, jobs) if err]
        log({"stage": "compiled", "jobs": len(jobs), "s": round(time.time() - t0, 1), "failed": failed})

    def guarded(what: dict, fn) -> None:
        """One row: its numbers, or the error that stopped it (the next rows still run)."""
        try:
            log({**what, **fn()})
        except Exception as err:
            log({**what, "error": repr(err)[:300]})
        if DEVICE == "cuda":
            torch.cuda.empty_cache()

    def errs_row(rule, shape, dtype):
        errs = check(rule, shape, dtype, seed=1)
        return {k: (round(v, 7) if isinstance(v, float) else v) for k, v in errs.items()}

    def time_row(rule, shape):
        return {k: round(v, 3) for k, v in bench(rule, shape, torch.bfloat16).items()}

    for shape in check_shapes:
        for rule in chosen:
            for dtype in (torch.bfloat16, torch.float32):
                if smoke and dtype == torch.bfloat16 and not rule_spec(rule).regression:
                    # Triton's interpreter (3.9) multiplies bf16 operands of tl.dot wrongly (a 16×16 product
                    # 2e10 off), which the inner-product kernels' bf16 products meet (the regression rules' pass)
                    log({"check": rule, "shape": shape, "dtype": str(dtype), "skipped": "bf16 dots: GPU only"})
                    continue
                if not skip_check:
                    guarded({"check": rule, "shape": shape, "dtype": str(dtype), "prec": prec(rule, dtype)},
                            lambda: errs_row(rule, shape, dtype))
    for shape in time_shapes:
        for rule in chosen:
            guarded({"time": rule, "shape": shape, "dtype": "bf16", "prec": prec(rule, torch.bfloat16)},
                    lambda: time_row(rule, shape))
    if not smoke and not quick:
        with_fla = importlib.util.find_spec("fla") is not None
        for shape in (time_shapes[0], time_shapes[-1]):
            for rule in chosen + ((FLA_DELTA,) if with_fla else ()):
                guarded({"profile_ms": rule, "shape": shape}, lambda: {"kernels": profile(rule, shape)})
    for rule, names, variant in sweep:
        tr.LAUNCH_OVERRIDES.update({name: variant for name in names})
        for shape in sweep_shapes:
            guarded({"time": rule, "shape": shape, "dtype": "bf16", "prec": prec(rule, torch.bfloat16),
                     "variant": {name: variant for name in names}}, lambda: time_row(rule, shape))
        tr.LAUNCH_OVERRIDES.clear()
    default_solve = tr.SOLVE_PRECISION[torch.bfloat16]
    for solve in () if no_sweeps else SOLVE_SWEEP:
        tr.SOLVE_PRECISION[torch.bfloat16] = solve
        variant = {"solve": solve}
        for rule in (r for r in chosen if rule_spec(r).family == "regression"):  # the solve is theirs alone
            if not skip_check:
                guarded({"check": rule, "shape": check_shapes[0], "dtype": str(torch.bfloat16),
                         "prec": prec(rule, torch.bfloat16), "variant": variant},
                        lambda: errs_row(rule, check_shapes[0], torch.bfloat16))
            for shape in time_shapes:
                guarded({"time": rule, "shape": shape, "dtype": "bf16", "prec": prec(rule, torch.bfloat16),
                         "variant": variant}, lambda: time_row(rule, shape))
        tr.SOLVE_PRECISION[torch.bfloat16] = default_solve
    log({"stage": "swept", "s": round(time.time() - t0, 1)})
    for shape in time_shapes if not (smoke or quick or no_fla) else ():
        guarded({"fla": shape}, lambda: {k: round(v, 3) for k, v in bench_fla(shape).items()})
    echo("\n| what | rule | shape | dtype | prec | result |\n|---|---|---|---|---|---|")
    for r in rows:
        line = _summary_line(r)
        if line:
            echo(line)
    return rows


def _summary_line(r: dict) -> str | None:
    """One row of the summary table, or None for the rows that only mark a stage."""
    if "error" in r:
        return f"| error | {r} |"
    if "skipped" in r:
        return f"| check | {r['check']} | {r['shape']} | {r['dtype']} | - | not checked: {r['skipped']} |"
    if "check" in r:
        worst = max(v for k, v in r.items() if k in ("o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0"))
        variant = "".join(f" {k}={v}" for k, v in r.get("variant", {}).items())
        return (f"| check | {r['check']} | {r['shape']} | {r['dtype']} | {r['prec']} | worst rel RMS "
                f"{worst:.2e}{' NaN!' if r['nan'] else ''}{variant} |")
    if "fla" in r:
        return (f"| time | fla delta / gated | {r['fla']} | bf16 | - | chunk_delta_rule fwd {r['delta_fwd_ms']:.3f}, "
                f"fwd+bwd {r['delta_fwd_bwd_ms']:.3f}; chunk_gated_delta_rule fwd {r['gated_fwd_ms']:.3f} ms |")
    if "time" in r:
        variant = "".join(f" {k}={v}" for k, v in r.get("variant", {}).items())
        return (f"| time | {r['time']} | {r['shape']} | {r['dtype']} | {r['prec']} | fwd {r['fwd_ms']:.3f} ms, "
                f"fwd+bwd {r['fwd_bwd_ms']:.3f} ms{variant} |")
    return None
