"""falcon-1's, falcon-2's and falcon-3a's fused kernels over rows of samples told apart by a per-token sample id
(``sample_id``): the rows as they are, in full chunks of 16, against each sample run alone by the float64 recurrent
oracle and against the packed sequences (``cu_seqlens``); outputs, final states and every gradient, under Triton's
interpreter on a CPU.

Every buffer the kernels fill starts as NaN, so a row a kernel forgets to write cannot pass.
"""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import FastWeightState, fast_weight_rule, gated_delta_rule
from falcon_lab.kernels.common import triton_helpers
from falcon_lab.kernels.common.checks import start_state
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.regression.fused import triton_regression
from falcon_lab.kernels.regression.gated_delta import gated_delta_triton
from tests.rules_util import gain
from tests.test_triton_regression import DEVICE, TOL, draw, rel

# chunks of 16 over rows of 40 tokens: a sample of 1 token first in its row, one ending a chunk, one filling a chunk
# (16), one of 1 token opening a chunk, a short last chunk; one crossing a chunk boundary (30), one of 1 token
# closing a chunk
LENGTHS = ([1, 4, 11, 16, 1, 7], [1, 30, 1, 8])
SAMPLE_ID = torch.tensor([sum(([n] * size for n, size in enumerate(row)), []) for row in LENGTHS], dtype=torch.int32)
B, T = SAMPLE_ID.shape
H = 2
NAMES = ("q", "k", "v", "beta", "lam", "S0", "last_key")
# two float32 paths through the same kernels, chunked differently: exact fp32 products under the interpreter, three
# tf32 passes on a GPU
SAME = 1e-5 if DEVICE == "cpu" else TOL


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_buffer(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(triton_helpers, "new_buffer", nan_buffer)


def inputs(seed: int, lam: tuple[float, float] = (0.0, 0.5), beta: tuple[float, float] = (0.1, 1.9),
           rule: str = "falcon-1"):
    """``draw``'s inputs with λ = 0 on head 0 (the gain alone) and λ > 0 on head 1 (the decayed rule)."""
    q, k, v, b, lm = draw(rule, B, T, H, seed, beta=beta, lam=lam)
    lm[..., 0] = 0.0
    return [q, k, v, b, lm]


def start(kind: str, seed: int, **opts):
    """None (fresh rows), or the float64 state after a first recurrent segment (S and the last key)."""
    if kind == "fresh":
        return None
    _, st = fast_weight_rule(*draw("falcon-1", B, 6, H, seed + 2000)[:3], beta=torch.full((B, 6, H), 0.7,
                             dtype=torch.float64), lam=torch.full((B, 6, H), 0.2, dtype=torch.float64),
                             rule="falcon-1", backend="recurrent", output_final_state=True, **opts)
    return st


def each_sample(q, k, v, b, lam, state=None, normalize=True, rule="falcon-1", **opts):
    """The float64 oracle over each sample alone, each row's first from its row of ``state``; the final state each
    row's last sample's."""
    outs, finals = [], []
    for row, lengths in enumerate(LENGTHS):
        at, parts = 0, []
        for n, size in enumerate(lengths):
            init = None
            if n == 0 and state is not None:
                init = FastWeightState(*(t[row:row + 1] for t in state))
            o, fin = fast_weight_rule(*(t[row:row + 1, at:at + size] for t in (q, k, v)),
                                      lam=lam[row:row + 1, at:at + size],
                                      **gain(b[row:row + 1, at:at + size], normalize), rule=rule,
                                      backend="recurrent", initial_state=init, output_final_state=True, **opts)
            parts.append(o)
            at += size
        outs.append(torch.cat(parts, 1))
        finals.append(fin)
    return torch.cat(outs, 0), FastWeightState(*(torch.cat(f, 0) for f in zip(*finals)))


def by_id(q, k, v, b, lam, state=None, normalize=True, alignment="shifted", timing="raw", rule="falcon-1", **opts):
    """falcon-1's kernels over the rows by sample id at their entry, with the final state (each row's after its
    last token) and a state in when given (each row's first sample from its row); the op's ``sample_id`` takes
    fresh rows with outputs alone (``by_id_op``)."""
    cfg = RuleConfig(rule=rule, alignment=alignment, timing=timing, normalize=normalize, **opts)
    st, fresh = start_state(q, v, state, torch.float32, span=cfg.span)
    return triton_regression(q, k, v, b, lam, cfg, st, fresh, chunk_size=16, sample_id=SAMPLE_ID.to(q.device))


def by_id_op(q, k, v, b, lam, state=None, normalize=True, **opts):
    """``fast_weight_rule(..., sample_id=)``: fresh rows, outputs alone."""
    return fast_weight_rule(q, k, v, lam=lam, **gain(b, normalize), rule="falcon-1", backend="triton", chunk_size=16,
                            sample_id=SAMPLE_ID.to(q.device), **opts)


def as_packed(q, k, v, b, lam, state=None, normalize=True, **opts):
    """The samples as the packed sequences of one row (``cu_seqlens``), fresh, outputs alone."""
    starts = torch.cat([torch.ones(B, 1, dtype=torch.bool), SAMPLE_ID[:, 1:] != SAMPLE_ID[:, :-1]], 1).flatten()
    bounds = torch.cat([starts.nonzero().flatten(), torch.tensor([B * T])]).to(torch.int32).to(q.device)
    o, fin = fast_weight_rule(*(t.flatten(0, 1)[None] for t in (q, k, v)), lam=lam.flatten(0, 1)[None],
                              **gain(b.flatten(0, 1)[None], normalize), rule="falcon-1", backend="triton",
                              chunk_size=16, cu_seqlens=bounds, output_final_state=True, **opts)
    return o[0].unflatten(0, (B, T)), None


def outputs_and_grads(fn, xs, state, dtype: torch.dtype, seed: int, **opts):
    """o, the final S (when ``fn`` gives one) and the gradients of a fixed random loss on them (inputs', and the
    state's when given)."""
    device = "cpu" if fn is each_sample else DEVICE
    leaves = [t.to(device=device, dtype=dtype).requires_grad_() for t in xs]
    st = None
    if state is not None:
        st = FastWeightState(state.S.to(device, dtype).requires_grad_(),
                             state.last_key.to(device, dtype).requires_grad_(), *state[2:])
        leaves += [st.S, st.last_key]
    o, fin = fn(*leaves[:5], state=st, **opts)
    g = torch.Generator().manual_seed(seed + 3000)
    wo = torch.randn(o.shape, generator=g, dtype=torch.float64).to(device, o.dtype)
    if fin is None:
        (o * wo).sum().backward()
        return [o] + [t.grad for t in leaves]
    wS = torch.randn(fin.S.shape, generator=g, dtype=torch.float64).to(device, fin.S.dtype)
    ((o * wo).sum() + (fin.S * wS).sum()).backward()
    return [o, fin.S] + [t.grad for t in leaves]


def check(got, ref, tol: float) -> None:
    names = ("o", "final S", *NAMES) if len(got) > 6 else ("o", *NAMES)
    for name, a, b in zip(names, got, ref):
        assert a is not None and not torch.isnan(a).any(), f"{name}: missing or NaN"
        assert rel(a, b) <= tol, f"{name}: relative error {rel(a, b):.2e}"


@pytest.mark.parametrize(("alignment", "timing"), [("shifted", "raw"), ("shifted", "rbw"), ("same_time", "raw"),
                                                   ("same_time", "rbw")])
def test_rows_of_samples_are_the_samples_run_alone(alignment: str, timing: str) -> None:
    """Fresh rows, λ = 0 on one head and λ > 0 on the other: the same outputs, final states (each row's last
    sample's) and gradients of q, k, v, β, λ as each sample run alone by the float64 oracle. Shifted: every sample's
    first token writes nothing, and the last key of a sample gets no gradient from the next."""
    seed = sum(map(ord, alignment + timing))
    xs = inputs(seed)
    opts = dict(alignment=alignment, timing=timing)
    check(outputs_and_grads(by_id, xs, None, torch.float32, seed, **opts),
          outputs_and_grads(each_sample, xs, None, torch.float64, seed, **opts), TOL)


@pytest.mark.parametrize(("alignment", "timing", "normalize"), [("shifted", "rbw", True), ("same_time", "raw", False)])
def test_rows_of_samples_from_a_state(alignment: str, timing: str, normalize: bool) -> None:
    """Each row's first sample continues from its row of a state (S and, shifted, the last key, whose gradients are
    checked too); the step size given itself (``eta``, with λ up to 4 so the carry's floor binds) or the gain."""
    seed = 17 + normalize
    xs = inputs(seed, **({} if normalize else dict(beta=(0.05, 0.6), lam=(0.0, 4.0))))
    opts = dict(alignment=alignment, timing=timing)
    state = start("continue", seed, **opts)
    check(outputs_and_grads(by_id, xs, state, torch.float32, seed, normalize=normalize, **opts),
          outputs_and_grads(each_sample, xs, state, torch.float64, seed, normalize=normalize, **opts), TOL)


@pytest.mark.parametrize(("alignment", "timing", "from_state"), [("shifted", "raw", False), ("same_time", "rbw", False),
                                                                 ("shifted", "rbw", True)])
def test_falcon2_rows_of_samples_are_the_samples_run_alone(alignment: str, timing: str, from_state: bool) -> None:
    """falcon-2's kernels by sample id (one gain and one carry a value column, chunks of 16): the outputs, the final
    states and the gradients of q, k, v, β (per column) and λ of each sample run alone by the float64 oracle; fresh
    rows, or each row's first sample from its row of a state."""
    seed = 61 + len(alignment) + from_state
    xs = inputs(seed, rule="falcon-2")
    opts = dict(alignment=alignment, timing=timing, rule="falcon-2")
    state = start("continue", seed, alignment=alignment, timing=timing) if from_state else None
    check(outputs_and_grads(by_id, xs, state, torch.float32, seed, **opts),
          outputs_and_grads(each_sample, xs, state, torch.float64, seed, **opts), TOL)


@pytest.mark.parametrize("solve", ["sequential", "outputs-apart"])
def test_falcon2_rows_of_samples_in_every_solve_form(monkeypatch: pytest.MonkeyPatch, solve: str) -> None:
    """The same by falcon-2's other solve forms (``triton_launch.F2_SOLVE``): the substitutions forward and back
    within each sample, from a state."""
    from falcon_lab.kernels.regression import triton_launch

    monkeypatch.setattr(triton_launch, "F2_SOLVE", solve)
    seed = 83
    xs = inputs(seed, rule="falcon-2")
    opts = dict(alignment="same_time", timing="raw", rule="falcon-2")
    state = start("continue", seed, alignment="same_time", timing="raw")
    check(outputs_and_grads(by_id, xs, state, torch.float32, seed, **opts),
          outputs_and_grads(each_sample, xs, state, torch.float64, seed, **opts), TOL)


def test_rows_of_samples_equal_the_packed_sequences() -> None:
    """``fast_weight_rule(..., sample_id=)`` on falcon-1's kernels: the same outputs and gradients in float32 as the
    packed-sequence path (every sample a sequence of its own chunks), scale-coupled ridge."""
    xs = inputs(29, lam=(0.0, 2.0))
    opts = dict(alignment="shifted", timing="raw", scale_coupled_ridge=True)
    check(outputs_and_grads(by_id_op, xs, None, torch.float32, 29, **opts),
          outputs_and_grads(as_packed, xs, None, torch.float32, 29, **opts), SAME)


@pytest.mark.parametrize(("alignment", "timing"), [("same_time", "raw"), ("shifted", "rbw")])
def test_gated_delta_rule_on_rows_of_samples(alignment: str, timing: str) -> None:
    """``gated_delta_triton(..., sample_id=)`` against each sample run alone by the gated delta rule's float64
    oracle: outputs and the gradients of q, k, v, g and β."""
    gen = torch.Generator().manual_seed(41)
    d = 16
    xs = [torch.randn(B, T, H, d, generator=gen, dtype=torch.float64),
          torch.nn.functional.normalize(torch.randn(B, T, H, d, generator=gen, dtype=torch.float64), dim=-1),
          torch.randn(B, T, H, d, generator=gen, dtype=torch.float64),
          -2 * torch.rand(B, T, H, generator=gen, dtype=torch.float64),
          2 * torch.rand(B, T, H, generator=gen, dtype=torch.float64)]
    w = torch.randn(B, T, H, d, generator=gen, dtype=torch.float64)
    opts = dict(scale=0.5, alignment=alignment, timing=timing)

    def run(kernels: bool) -> list[torch.Tensor]:
        device, dtype = (DEVICE, torch.float32) if kernels else ("cpu", torch.float64)
        leaves = [t.to(device, dtype).requires_grad_() for t in xs]
        if kernels:
            o, _ = gated_delta_triton(*leaves, chunk_size=16, sample_id=SAMPLE_ID.to(device), **opts)
        else:
            rows = []
            for row, lengths in enumerate(LENGTHS):
                ends = torch.tensor(lengths).cumsum(0).tolist()
                rows.append(torch.cat([gated_delta_rule(*(t[row:row + 1, e - n:e] for t in leaves),
                                                        backend="recurrent", **opts)[0]
                                       for n, e in zip(lengths, ends)], 1))
            o = torch.cat(rows, 0)
        (o * w.to(device, dtype)).sum().backward()
        return [o] + [t.grad for t in leaves]

    for name, a, b in zip(("o", "q", "k", "v", "g", "beta"), run(True), run(False)):
        assert not torch.isnan(a).any(), name
        assert rel(a, b) <= TOL, f"{name}: relative error {rel(a, b):.2e}"


@pytest.mark.parametrize(("alignment", "timing", "scale_coupled_ridge"),
                         [("shifted", "raw", False), ("shifted", "rbw", True), ("same_time", "raw", True),
                          ("same_time", "rbw", False)])
def test_falcon3a_rows_of_samples_are_the_samples_run_alone(alignment: str, timing: str,
                                                            scale_coupled_ridge: bool) -> None:
    """falcon-3a (window 3) on ``fast_weight_rule(..., sample_id=)``: its delayed pass on falcon-1a's kernels by
    sample id and its band over each row, windows cut at each sample's first token, against each sample run alone
    by the float64 recurrent oracle: outputs and the gradients of q, k, v, β and λ (samples of 1 token hold no
    pair when shifted; one of 30 fills every window)."""
    seed = sum(map(ord, alignment + timing)) + 7
    xs = inputs(seed)
    opts = dict(rule="falcon-3a", window=3, alignment=alignment, timing=timing,
                scale_coupled_ridge=scale_coupled_ridge)

    def run(kernels: bool) -> list[torch.Tensor]:
        device, dtype = (DEVICE, torch.float32) if kernels else ("cpu", torch.float64)
        leaves = [t.to(device, dtype).requires_grad_() for t in xs]
        if kernels:
            o, _ = fast_weight_rule(*leaves[:3], beta=leaves[3], lam=leaves[4], backend="triton", chunk_size=16,
                                    sample_id=SAMPLE_ID.to(device), **opts)
        else:
            rows = []
            for row, lengths in enumerate(LENGTHS):
                ends = torch.tensor(lengths).cumsum(0).tolist()
                rows.append(torch.cat([fast_weight_rule(*(t[row:row + 1, e - n:e] for t in leaves[:3]),
                                                        beta=leaves[3][row:row + 1, e - n:e],
                                                        lam=leaves[4][row:row + 1, e - n:e], backend="recurrent",
                                                        **opts)[0]
                                       for n, e in zip(lengths, ends)], 1))
            o = torch.cat(rows, 0)
        w = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        (o * w.to(device, dtype)).sum().backward()
        return [o] + [t.grad for t in leaves]

    for name, a, b in zip(("o", *NAMES[:5]), run(True), run(False)):
        assert not torch.isnan(a).any(), name
        assert rel(a, b) <= TOL, f"{name}: relative error {rel(a, b):.2e}"


def test_sample_id_is_refused_where_it_is_not_taken() -> None:
    """One ValueError naming the argument: beside cu_seqlens or a state, a wrong shape or dtype."""
    q, k, v, b, lam = (t.float().to(DEVICE) for t in inputs(3))
    sid = SAMPLE_ID.to(DEVICE)
    base = dict(beta=b, lam=lam, rule="falcon-1", backend="triton", chunk_size=16)
    with pytest.raises(ValueError, match="sample_id runs fresh samples with no state in or out"):
        fast_weight_rule(q, k, v, sample_id=sid, output_final_state=True, **base)
    with pytest.raises(ValueError, match=r"sample_id must be integers \[B, T\] = \(2, 40\)"):
        fast_weight_rule(q, k, v, sample_id=sid[:, 1:], **base)
    with pytest.raises(ValueError, match=r"sample_id must be integers"):
        fast_weight_rule(q, k, v, sample_id=sid.float(), **base)
    with pytest.raises(ValueError, match="cu_seqlens .* or sample_id .*, not both"):
        gated_delta_triton(q[:1], k[:1], v[:1], None, b[:1], sample_id=sid[:1],
                           cu_seqlens=torch.tensor([0, T], device=DEVICE))
    with pytest.raises(ValueError, match=r"sample_id must be integers \[B, T\] = \(2, 40\)"):
        gated_delta_triton(q, k, v, None, b, sample_id=sid[:, 1:])


@pytest.mark.parametrize("name", ["falcon-1.3", "falcon-3a.3", "deltanet", "gated-deltanet"])
def test_mixers_take_samples_by_id_when_switched_on(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``layers.SAMPLE_IDS`` (``LAB_SAMPLE_IDS=1``): the mixer's isolated samples reach the kernels by their ids,
    never as packed sequences, with the same outputs and input gradients as the packed sequences (the default); over the
    second row (samples of 1, 30, 1 and 8 tokens)."""
    from falcon_lab.mixers import build_mixer, deltanet, falcon, layers

    torch.manual_seed(0)
    mixer = build_mixer(name, 32, 2, backend="triton", chunk_size=16).to(DEVICE)
    samples = SAMPLE_ID[1:].to(DEVICE)
    x = torch.randn(1, T, 32, device=DEVICE)
    outs = []
    for on in (False, True):
        monkeypatch.setattr(layers, "SAMPLE_IDS", on)
        if on:
            for module in (falcon, deltanet):
                monkeypatch.setattr(module, "sample_bounds", lambda s: pytest.fail("packed sequences by id"))
        xi = x.clone().requires_grad_(True)
        y = mixer(xi, samples=samples)
        y.square().sum().backward()
        outs.append((y.detach(), xi.grad))
    (y0, g0), (y1, g1) = outs
    assert rel(y1, y0) <= SAME and rel(g1, g0) <= SAME, (rel(y1, y0), rel(g1, g0))


@pytest.mark.parametrize("mixer", ["falcon-1.3", "falcon-3a.3", "gated-deltanet"])
def test_a_model_over_samples_by_id_reads_nothing_on_the_host(mixer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A language model over packed samples (``PositionsConfig.sample_end``) with ``layers.SAMPLE_IDS`` on: its
    forward and backward pass make no host read at all (the packed sequences' path reads their bounds once a step,
    ``tests/test_packed_facts.py``), so nothing in the step stops a CUDA graph from replaying it."""
    from falcon_lab.mixers import layers
    from tests.test_packed_facts import host_reads

    monkeypatch.setattr(layers, "SAMPLE_IDS", True)
    assert host_reads(mixer, "triton", monkeypatch) == {1: [], 2: []}


def test_cuda_graphs_take_isolated_samples_by_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """``train.cuda_graphs`` with isolated samples is refused where a step's work changes with its samples, and
    accepted where the kernels take them by id (the default; ``LAB_SAMPLE_IDS=0`` refuses): falcon-1.x, falcon-2,
    falcon-1a.x, falcon-3, falcon-3a.x, DeltaNet, Gated DeltaNet, RetNet, Mamba-2 on backend auto or triton."""
    from falcon_lab.config import ConfigError, load_config
    from falcon_lab.mixers import layers, samples_by_id

    def graphs(mixer: str, *more: str):
        return load_config(preset="addition-tiny", mixer=mixer, overrides=[
            "model.isolate_samples=true", "train.cuda_graphs=true", *more])

    monkeypatch.setattr(layers, "SAMPLE_IDS", False)  # LAB_SAMPLE_IDS=0: the samples as packed sequences
    with pytest.raises(ConfigError, match="train.cuda_graphs replays one fixed step"):
        graphs("falcon-1.3")
    monkeypatch.setattr(layers, "SAMPLE_IDS", True)
    for mixer in ("falcon-1.3", "falcon-1", "falcon-2", "falcon-1a.3", "falcon-3", "falcon-3a.3", "deltanet",
                  "gated-deltanet", "retnet", "mamba2"):
        assert samples_by_id(mixer) and graphs(mixer).train.cuda_graphs
    assert samples_by_id("deltanet", {"backend": "triton"})
    for mixer, more in (("falcon-1.3", ["model.mixer_options={backend: chunk}"]), ("falcon-2a", [])):
        assert not samples_by_id(mixer, {"backend": "chunk"} if more else None)
        with pytest.raises(ConfigError, match="by id: the default, not LAB_SAMPLE_IDS=0"):
            graphs(mixer, *more)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 2e-2)])
def test_gpu_falcon2_rows_of_samples(dtype: torch.dtype, tol: float) -> None:
    """falcon-2 by sample id at a thinned same-time shape on a GPU, fp32 and bf16, against the float64 chunk form over
    the packed samples (``tests/test_triton_falcon3.py``'s check)."""
    from tests.test_triton_falcon3 import check_rows_of_samples_on_gpu

    check_rows_of_samples_on_gpu("falcon-2", dtype, tol)
