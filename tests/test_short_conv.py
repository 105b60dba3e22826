"""The fused short convolution (``falcon_lab.kernels.conv.short_conv``) against its PyTorch twin, ``ShortConv``'s own
forward: output and the gradients of x, the taps and the bias, in float32 against the twin in float32 and float64,
at widths of 2 to 4, packed rows of samples of several lengths (one-token samples among them) and plain rows, a
row length that is no multiple of the kernels' blocks and more channels than one block. Every buffer the kernels
write is allocated full of NaN here. Without CUDA the kernels run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from falcon_lab.kernels.common import triton_helpers
from falcon_lab.mixers import layers
from falcon_lab.mixers.layers import ShortConv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_helpers, "new_buffer", lambda *shape, dtype, device: torch.full(
        shape, float("nan"), dtype=dtype, device=device))


def packed_rows(lengths: list[list[int]]) -> Tensor:
    """``samples [B, L]`` from each row's sample lengths (each row's ids its own, from 0)."""
    rows = [torch.repeat_interleave(torch.arange(len(row)), torch.tensor(row)) for row in lengths]
    return torch.stack(rows)


# three rows: one-token samples beside long ones; one sample the whole row; samples of 2 and 3 tokens. 150 tokens:
# one span of the backward's programs (spans of one and three tiles are tested apart)
SAMPLES = packed_rows([[1, 3, 1, 1, 40, 2, 1, 61, 40], [150], [2, 3] * 30])
SHORT = packed_rows([[1, 3, 1, 1, 20, 2, 1, 11], [40], [2, 3] * 8])


def twin(conv: ShortConv, x: Tensor, samples: Tensor | None) -> Tensor:
    """``ShortConv``'s PyTorch form (the fused kernel switched off, as on a CPU: on a GPU too)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layers, "fused_conv", lambda x: False)
        return conv(x, samples)


def module(conv: ShortConv, x: Tensor, samples: Tensor | None) -> Tensor:
    return conv(x, samples)


def fused(conv: ShortConv, x: Tensor, samples: Tensor | None) -> Tensor:
    from falcon_lab.kernels.conv import short_conv

    return short_conv(x, conv.conv.weight[:, 0], conv.conv.bias, samples)


def run(fn, conv: ShortConv, x: Tensor, samples: Tensor | None, dy: Tensor, dtype: torch.dtype) -> list[Tensor]:
    conv = conv.to(DEVICE, dtype)
    conv.zero_grad()
    x = x.to(DEVICE, dtype).detach().requires_grad_()
    y = fn(conv, x, None if samples is None else samples.to(DEVICE))
    (y * dy.to(DEVICE, dtype)).sum().backward()
    grads = [x.grad, conv.conv.weight.grad] + ([] if conv.conv.bias is None else [conv.conv.bias.grad])
    return [t.detach().double().cpu() for t in [y, *grads]]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("size", [2, 3, 4])
def test_short_conv_matches_its_pytorch_twin(size: int, packed: bool, bias: bool) -> None:
    g = torch.Generator().manual_seed(100 * size + 10 * packed + bias)
    torch.manual_seed(size)
    rows, C = SHORT, 12
    if size == 4 and packed and bias:
        rows, C = SAMPLES, 70  # two blocks of channels, the second short
    B, L = rows.shape
    conv = ShortConv(C, size, bias=bias)
    with torch.no_grad():
        conv.conv.weight.copy_(torch.randn(conv.conv.weight.shape, generator=g))
        if bias:
            conv.conv.bias.copy_(torch.randn(C, generator=g))
    x, dy = torch.randn(B, L, C, generator=g), torch.randn(B, L, C, generator=g)
    samples = rows if packed else None
    got = run(fused, conv, x, samples, dy, torch.float32)
    same = run(twin, conv, x, samples, dy, torch.float32)
    exact = run(twin, conv, x, samples, dy, torch.float64)
    for name, a, b, c in zip(("y", "dx", "dw", "dbias"), got, same, exact):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize(("form", "span", "rows"), [("tiles", 1, 1), ("tiles", 3, 1), ("serial", 7, 1),
                                                  ("serial", 64, 1), ("serial", 7, 4)])
@pytest.mark.parametrize("size", [1, 4, 8])
def test_short_conv_backward_across_forms_and_spans(monkeypatch: pytest.MonkeyPatch, size: int, form: str,
                                                     span: int, rows: int) -> None:
    """Both forms of the backward: the tiles form's tiles overlap by size − 1 tokens (their g read back at the lags)
    and its programs take spans of ``span`` tiles; the serial form's programs
    walk ``span`` tokens, a thread a channel, beginning size − 1 tokens past their span, ``rows`` spans a program in
    step (the last program's partly past the rows' end). At widths of one token and the widest, with many spans to
    a row, the last one short, samples that cross the tiles' and the spans' edges, and (serial) channels in three
    blocks of 32, the last short, the gradients are the float64 twin's."""
    from falcon_lab.kernels.conv import triton_short_conv

    monkeypatch.setattr(triton_short_conv, "BWD_FORM", form)
    monkeypatch.setattr(triton_short_conv, "SPAN_TILES" if form == "tiles" else "SERIAL_SPAN", span)
    monkeypatch.setattr(triton_short_conv, "SERIAL_BC", 32)
    monkeypatch.setattr(triton_short_conv, "SERIAL_ROWS", rows)
    g = torch.Generator().manual_seed(size + span)
    C = 70 if form == "serial" else 12
    conv = ShortConv(C, size, bias=True)
    with torch.no_grad():
        conv.conv.weight.copy_(torch.randn(conv.conv.weight.shape, generator=g))
        conv.conv.bias.copy_(torch.randn(C, generator=g))
    B, L = SAMPLES.shape
    x, dy = torch.randn(B, L, C, generator=g), torch.randn(B, L, C, generator=g)
    got = run(fused, conv, x, SAMPLES, dy, torch.float32)
    exact = run(twin, conv, x, SAMPLES, dy, torch.float64)
    for name, a, c in zip(("y", "dx", "dw", "dbias"), got, exact):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("tokens", [16, 128])
def test_the_forward_at_other_tokens_a_program(monkeypatch: pytest.MonkeyPatch, tokens: int) -> None:
    """The forward's programs of 16 tokens (many to a row) or 128 (a row's 150 tokens in two, the last short; eight
    warps on a GPU), samples across their edges: y is the float64 twin's."""
    from falcon_lab.kernels.conv import triton_short_conv

    monkeypatch.setattr(triton_short_conv, "BT_FWD", tokens)
    g = torch.Generator().manual_seed(tokens)
    conv = ShortConv(12, 4, bias=True)
    with torch.no_grad():
        conv.conv.weight.copy_(torch.randn(conv.conv.weight.shape, generator=g))
    B, L = SAMPLES.shape
    x, dy = torch.randn(B, L, 12, generator=g), torch.randn(B, L, 12, generator=g)
    got, exact = run(fused, conv, x, SAMPLES, dy, torch.float32)[0], run(twin, conv, x, SAMPLES, dy, torch.float64)[0]
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["tiles", "serial"])
def test_short_conv_float64_gradcheck(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """The kernels accumulate float64 inputs in float64: torch's own gradient check at a tiny shape, with
    either form of the backward."""
    from falcon_lab.kernels.conv import short_conv, triton_short_conv

    monkeypatch.setattr(triton_short_conv, "BWD_FORM", form)
    g = torch.Generator().manual_seed(5)
    samples = packed_rows([[2, 1, 4], [7]]).to(DEVICE)
    leaves = [torch.randn(2, 7, 3, generator=g), torch.randn(3, 3, generator=g), torch.randn(3, generator=g)]
    x, w, b = (t.to(DEVICE, torch.float64).requires_grad_() for t in leaves)
    assert torch.autograd.gradcheck(lambda x, w, b: short_conv(x, w, b, samples), (x, w, b), fast_mode=True)


@pytest.mark.parametrize("form", ["tiles", "serial"])
def test_short_conv_takes_strided_inputs_and_half_precision(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """x a slice of a wider tensor along its channels (as Mamba-2's x, B, C are of its projection: read in place)
    or along its tokens (rows not L tokens apart: copied), a gradient of stride 0 (a sum's), samples as int32;
    bf16 x with float32 taps: y and dx in bf16, the taps' gradient in float32, all close to the float64 twin;
    with either form of the backward."""
    from falcon_lab.kernels.conv import short_conv, triton_short_conv

    monkeypatch.setattr(triton_short_conv, "BWD_FORM", form)
    g = torch.Generator().manual_seed(7)
    wide = torch.randn(2, 50, 20, generator=g)
    taps = torch.randn(8, 4, generator=g)
    samples = packed_rows([[1, 30, 9], [40]]).to(DEVICE, torch.int32)
    for x in (wide[:, :40, 5:13], wide[:, 3:43, :8]):
        x = x.to(DEVICE, torch.bfloat16).requires_grad_()
        w = taps.to(DEVICE).requires_grad_()
        y = short_conv(x, w, None, samples)
        dx, dw = torch.autograd.grad(y, (x, w), torch.ones(1, 1, 1, dtype=y.dtype, device=DEVICE).expand(y.shape))
        assert y.dtype == dx.dtype == torch.bfloat16 and dw.dtype == torch.float32
        conv = ShortConv(8, 4).double()
        with torch.no_grad():
            conv.conv.weight[:, 0] = taps.double()
        x64 = x.detach().double().cpu().requires_grad_()
        want = conv(x64, samples.cpu())
        want_dx, want_dw = torch.autograd.grad(want.sum(), (x64, conv.conv.weight))
        torch.testing.assert_close(y.double().cpu(), want, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(dx.double().cpu(), want_dx, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(dw.double().cpu(), want_dw[:, 0], rtol=1e-4, atol=1e-3)


def test_short_conv_module_takes_the_kernel_where_fused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ShortConv.forward`` hands its own taps and bias to the kernel when ``fused_conv`` says so (CUDA tensors;
    forced here) and gives what its PyTorch form gives; CPU tensors keep the PyTorch form."""
    assert not layers.fused_conv(torch.zeros(1, 2, 3))
    g = torch.Generator().manual_seed(3)
    conv = ShortConv(6, 3, bias=True)
    x, dy = torch.randn(2, 150, 6, generator=g), torch.randn(2, 150, 6, generator=g)
    want = run(twin, conv, x, SAMPLES[:2], dy, torch.float32)
    monkeypatch.setattr(layers, "fused_conv", lambda x: True)
    got = run(module, conv, x, SAMPLES[:2], dy, torch.float32)
    for name, a, b in zip(("y", "dx", "dw", "dbias"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


def test_short_conv_compiles_without_graph_breaks() -> None:
    """A custom op with its backward registered: torch.compile traces a step through it in one graph."""
    from falcon_lab.kernels.conv import short_conv

    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 9, 5, generator=g).to(DEVICE).requires_grad_()
    w = torch.randn(5, 4, generator=g).to(DEVICE).requires_grad_()
    samples = packed_rows([[3, 6], [1, 8]]).to(DEVICE)
    step = torch.compile(lambda x, w: (short_conv(x * 2, w, None, samples) ** 2).sum(), fullgraph=True,
                         backend="aot_eager")
    step(x, w).backward()
    want_x, want_w = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    (short_conv(x * 2, w, None, samples) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, want_x)
    torch.testing.assert_close(w.grad, want_w)


def test_short_conv_refuses_shapes_that_do_not_fit() -> None:
    from falcon_lab.kernels.conv import short_conv

    x = torch.zeros(2, 8, 4)
    with pytest.raises(ValueError, match=r"x must be \[B, L, C\]"):
        short_conv(x[0], torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"weight must be \[C, K\]"):
        short_conv(x, torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"weight must be \[C, K\]"):
        short_conv(x, torch.zeros(4, 9))
    with pytest.raises(ValueError, match=r"bias must be \[C\]"):
        short_conv(x, torch.zeros(4, 4), torch.zeros(5))
    with pytest.raises(ValueError, match="samples must be an integer"):
        short_conv(x, torch.zeros(4, 4), None, torch.zeros(2, 8))


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["tiles", "serial"])
def test_on_a_gpu_short_conv_matches_its_twin_at_the_table_size(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """The compiled kernels (not the interpreter), with either form of the backward, at the same-time table's size: 16 rows of 4,096
    tokens packed with samples of 1 to 80 tokens, 384 channels, bf16, width 4 with a bias; and torch.compile
    (Inductor) through the op in one graph. Against the PyTorch twin in float32 on the same device: relative RMS
    errors of bf16's order."""
    from falcon_lab.kernels.conv import short_conv, triton_short_conv

    monkeypatch.setattr(triton_short_conv, "BWD_FORM", form)
    g = torch.Generator().manual_seed(11)
    B, L, C = 16, 4096, 384
    lengths = [torch.randint(1, 81, (L,), generator=g) for _ in range(B)]
    rows = [torch.repeat_interleave(torch.arange(L), n)[:L] for n in lengths]
    samples = torch.stack(rows).cuda()
    conv = ShortConv(C, 4, bias=True).cuda()
    x = torch.randn(B, L, C, generator=g).cuda()
    dy = torch.randn(B, L, C, generator=g).cuda()

    def rel(a: Tensor, b: Tensor) -> float:
        return float((a.float() - b.float()).pow(2).mean().sqrt() / b.float().pow(2).mean().sqrt())

    outs = {}
    for name, dtype in (("fused", torch.bfloat16), ("twin", torch.float32)):
        monkeypatch.setattr(layers, "fused_conv", lambda x, on=name == "fused": on)
        conv.zero_grad()
        xi = x.to(dtype).requires_grad_()
        y = conv(xi, samples)
        y.backward(dy.to(dtype))
        outs[name] = [y, xi.grad, conv.conv.weight.grad.clone(), conv.conv.bias.grad.clone()]
    for label, a, b in zip(("y", "dx", "dw", "dbias"), outs["fused"], outs["twin"]):
        assert rel(a, b) < 1e-2, label
    w = conv.conv.weight[:, 0].detach()
    step = torch.compile(lambda x: short_conv(x, w, None, samples), fullgraph=True)
    xb = x.bfloat16()
    torch.testing.assert_close(step(xb), short_conv(xb, w, None, samples))
