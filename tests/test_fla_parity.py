"""This lab's baseline ops against fla's own on a GPU (fla-core 0.6.0, when installed), each beside a float64
recurrence both are held to: DeltaNet on falcon-1's fused kernels (what the DeltaNet mixer runs on a GPU) and on
the WY chunk form against ``fla.ops.delta_rule.chunk_delta_rule`` (outputs, final state and every gradient);
Gated DeltaNet (the WY chunk form and falcon-1's kernels) against ``chunk_gated_delta_rule`` and decayed linear
attention (RetNet / Lightning) against ``chunk_simple_gla``, forward only (fla refuses those backward passes on Hopper with Triton 3.4–3.7.0, its #640).
The relative RMS errors are printed (``FLAPARITY``) for the records."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels import fast_weight_rule, gated_delta_rule, linear_attention

pytestmark = pytest.mark.gpu
B, T, H, D = 2, 1000, 4, 64  # T no multiple of the chunk
SCALE = D ** -0.5
TOL = 2e-2  # bf16 inputs


def rel(a: Tensor, b: Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def inputs(seed: int) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = {"q": F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1),
         "k": F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1),
         "v": torch.randn(B, T, H, D, generator=g),
         "beta": 0.05 + 0.9 * torch.rand(B, T, H, generator=g),
         "g": F.logsigmoid(2.0 + 4.0 * torch.rand(B, T, H, generator=g)),
         "w": torch.randn(B, T, H, D, generator=g), "wS": torch.randn(B, H, D, D, generator=g)}
    return {n: t.cuda() for n, t in x.items()}


def leaves(x: dict[str, Tensor], names: tuple[str, ...], dtype: torch.dtype) -> list[Tensor]:
    return [x[n].to(dtype).detach().clone().requires_grad_() for n in names]


def outputs_and_grads(fn, x: dict[str, Tensor], dtype: torch.dtype) -> list[Tensor]:
    """o, the final S, and the gradients of <o, w> + <S, wS> in q, k, v, β."""
    ins = leaves(x, ("q", "k", "v", "beta"), dtype)
    o, S = fn(*ins)
    ((o.double() * x["w"].double()).sum() + (S.double() * x["wS"].double()).sum()).backward()
    return [o.detach(), S.detach()] + [t.grad for t in ins]


def test_deltanet_against_fla() -> None:
    from fla.ops.delta_rule import chunk_delta_rule

    x = inputs(0)

    def ours_fused(q, k, v, beta):
        o, st = fast_weight_rule(q * SCALE, k, v, eta=beta, lam=torch.zeros_like(beta), rule="falcon-1",
                                 alignment="same_time", timing="raw", backend="triton", output_final_state=True)
        return o, st.S

    def ours_chunk(q, k, v, beta, backend="chunk"):
        o, st = gated_delta_rule(q, k, v, None, beta, scale=SCALE, backend=backend, output_final_state=True)
        return o, st.S

    def fla(q, k, v, beta):
        return chunk_delta_rule(q, k, v, beta, scale=SCALE, output_final_state=True)

    ref = outputs_and_grads(lambda *a: ours_chunk(*a, backend="recurrent"), x, torch.float64)
    names = ("o", "S", "dq", "dk", "dv", "dbeta")
    for label, fn in (("fla chunk_delta_rule", fla), ("falcon-1 fused", ours_fused), ("WY chunk", ours_chunk)):
        got = outputs_and_grads(fn, x, torch.bfloat16)
        errs = {n: rel(a, b) for n, a, b in zip(names, got, ref)}
        print(f"\nFLAPARITY deltanet {label}: " + " ".join(f"{n}={e:.1e}" for n, e in errs.items()))
        assert max(errs.values()) <= TOL, (label, errs)


@pytest.mark.parametrize("op", ["gated_delta_rule", "simple_gla"])
def test_gated_forms_against_fla_forward(op: str) -> None:
    x = inputs(1)
    q, k, v, beta = (x[n].to(torch.bfloat16) for n in ("q", "k", "v", "beta"))
    g = x["g"]
    if op == "gated_delta_rule":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        theirs, S_theirs = chunk_gated_delta_rule(q, k, v, g, beta, scale=SCALE, output_final_state=True)
        run = lambda dtype, backend: gated_delta_rule(  # noqa: E731
            q.to(dtype), k.to(dtype), v.to(dtype), g.to(dtype), beta.to(dtype), scale=SCALE, backend=backend,
            output_final_state=True)
    else:
        from fla.ops.simple_gla import chunk_simple_gla

        theirs, S_theirs = chunk_simple_gla(q, k, v, g=g, scale=SCALE, output_final_state=True)
        run = lambda dtype, backend: linear_attention(  # noqa: E731
            q.to(dtype), k.to(dtype), v.to(dtype), g.to(dtype), scale=SCALE, backend=backend,
            output_final_state=True)
    o_ref, st_ref = run(torch.float64, "recurrent")
    o_ours, st_ours = run(torch.bfloat16, "chunk")
    S_ref = st_ref.S if hasattr(st_ref, "S") else st_ref
    S_ours = st_ours.S if hasattr(st_ours, "S") else st_ours
    errs = {"fla o": rel(theirs, o_ref), "fla S": rel(S_theirs, S_ref), "ours o": rel(o_ours, o_ref),
            "ours S": rel(S_ours, S_ref)}
    if op == "gated_delta_rule":  # and on falcon-1's kernels, what the Gated DeltaNet mixer runs on a GPU
        from falcon_lab.kernels.regression.gated_delta import gated_delta_triton

        o_fused, st_fused = gated_delta_triton(q, k, v, g, beta, scale=SCALE, output_final_state=True)
        errs.update({"fused o": rel(o_fused, o_ref), "fused S": rel(st_fused.S, S_ref)})
    print(f"\nFLAPARITY {op}: " + " ".join(f"{n}={e:.1e}" for n, e in errs.items()))
    assert max(errs.values()) <= TOL, errs
