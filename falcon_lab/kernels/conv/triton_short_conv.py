"""The short causal depthwise convolution with SiLU, samples kept apart, in one Triton kernel each way.

For ``x [B, L, C]``, taps ``w [C, K]`` (tap K − 1 − j weighs the token j back), an optional ``bias [C]`` and
optional ``samples [B, L]`` (the sample of its row each token belongs to):

    a_t = Σ_{j<K} w[c, K−1−j] x_{t−j} [t − j ≥ 0, samples_{t−j} = samples_t] (+ bias[c]),    y_t = silu(a_t),

per row b and channel c: every sample of a row convolved as if it began a sequence (without ``samples``, each row
one sequence). Written in PyTorch (``falcon_lab.mixers.layers.ShortConv``, the exact twin and the CPU's path) it
is K − 1 rounds of shifted products and pads, and backward as many reductions over all tokens for the taps'
gradients: a compiled training step launched many generated kernels for it. Here:

- forward, one program per ``BT_FWD`` tokens of a row and ``BC`` channels reads its tokens and the K − 1 before
  them (the shifted reads of neighbouring programs meet in the cache: x crosses memory about once) and writes y;
- backward, one program per ``SPAN_TILES`` tiles of ``BT_BWD`` tokens overlapping by K − 1 and ``BC`` channels
  writes dx = Σ_j w[c, K−1−j] g_{t+j} [same sample], g = dy · silu'(a), and the taps' and bias's gradients of its
  tokens as partial sums ``[programs, K + 1, C]`` that one torch sum reduces (a fixed order: the same sums on
  every run).

The backward recomputes the pre-activation a rather than keeping it from the forward. Kept, it would be one more
tensor of x's size written forward and read backward (two passes over memory against the three a backward makes
anyway: x and dy read, dx written); recomputed, it costs K reads of x tiles that the cache holds. A tile computes
a and g once for each of its tokens (one exponential a value) and hands g to the threads that need it at lags
1 .. K − 1 through the program's own rows of a scratch buffer (written, a barrier, read back shifted: in L1 or
L2, the rows reused tile after tile); its last K − 1 tokens only feed that, and the next tile begins at them.
Its x and dy are read two tiles ahead so that the reads from memory are in flight while the tiles before are
worked; the lags' x and the taps' gradients' x come from the cache. "Same sample" is read from ``samples`` itself
(a vector of the tile's tokens a shift, folded into the reads' masks), so nothing is precomputed per step.

A second form of the backward (``BWD_FORM = "serial"``, the default) walks ``SERIAL_SPAN`` tokens a program token
by token from its span's end, a thread a channel, with the window of x and g of the K − 1 later tokens in registers
(no scratch, no barrier: one new x and one dy read a token, issued two tokens ahead). `lab bench conv` times both
forms. (A forward walked alike was slower than the tiles': `docs/findings.md`.)

Accumulation is float32 (float64 for float64 inputs); y and dx come back in x's dtype, the taps' and bias's
gradients in their own. The op is a ``torch.library`` custom op with its backward registered: torch.compile keeps
it in the graph as one opaque call (no graph break) and the projections and gates around it still compile.
"""

from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from falcon_lab.kernels.common import triton_helpers
from falcon_lab.kernels.common.checks import env_setting, setting

BT_FWD = 32  # tokens a forward program takes (4 warps; 8 from 128 tokens)
BT_BWD = 16  # the tokens of a backward tile (its last K − 1 only feed the others' dx), BWD_WARPS warps: 4 values a
BWD_WARPS = 8  # thread, 113 registers compiled for sm_90 at K = 4 (2 programs an SM; 32 tokens a tile take 173)
SPAN_TILES = 16  # tiles a backward program loops over (its taps' gradients one partial sum)
FORMS = ("tiles", "serial")  # the backward's


def form(text: str) -> str:
    """The backward's form named by ``text``; SettingError for what is not one."""
    return setting("the short convolution's backward form", text, FORMS)


# the backward's kernel, "tiles" (_bwd_kernel) or "serial" (_bwd_serial_kernel): in the same-time step on an H200 the
# serial one took 142 µs a call against the tiles' 218 (records/bench/conv-forms). LAB_CONV_FORM in the environment
# sets it, so one machine times a step in either
BWD_FORM = env_setting("LAB_CONV_FORM", "serial", form)
SERIAL_SPAN = 64  # tokens a program of the serial backward walks
SERIAL_BC = 128  # channels it takes, a thread a channel
SERIAL_ROWS = 1  # spans a program of the serial backward walks in step, a power of two (1: as timed on the H200)
# channels a thread of the serial backward takes, a power of two: with 2 or 4 its reads of x, dy and dx are 4 or 8
# bytes wide, at 72 or 128 registers against 48 for sm_90; slower at the same-time shape on an H100 (0.25 and 0.32
# against 0.19 ms a call, records/bench/conv-serial-launch), as were 64 and 128 tokens a forward program
SERIAL_VEC = 1
MAX_BC = 64  # channels a program takes
MAX_SIZE = 8  # the widest convolution the kernels unroll (the mixers use 4)


@triton.jit
def _wide(v, F64: tl.constexpr):
    if F64:
        return v.to(tl.float64)
    else:
        return v.to(tl.float32)


# Every read below is of tokens t + D of a row, D a constant: the backward reads token t + D for several taps and
# several tokens, and reads written alike are one load once compiled (common subexpressions).

@triton.jit
def _sample_at(s_ptr, row0, t, D: tl.constexpr, L, sst):
    """The sample of tokens t + D of the row whose first token is ``row0`` of the flat rows (−1 outside the row)."""
    p = t + D
    return tl.load(s_ptr + (row0 + p) * sst, mask=(p >= 0) & (p < L), other=-1)


@triton.jit
def _raw_at(ptr, row0, t, D: tl.constexpr, c, L, C, st, sc):
    """``_tile_at`` in the tensor's own dtype."""
    p = t + D
    return tl.load(ptr + (row0 + p)[:, None] * st + c[None, :] * sc,
                   mask=((p >= 0) & (p < L))[:, None] & (c < C)[None, :], other=0.0)


@triton.jit
def _tile_at(ptr, row0, t, D: tl.constexpr, c, L, C, st, sc, F64: tl.constexpr):
    """``[len(t), len(c)]`` of a ``[B, L, C]`` tensor read as ``[B·L, C]`` at tokens t + D of the row whose first token
    is ``row0`` (0 outside the row)."""
    p = t + D
    v = tl.load(ptr + (row0 + p)[:, None] * st + c[None, :] * sc,
                mask=((p >= 0) & (p < L))[:, None] & (c < C)[None, :], other=0.0)
    return _wide(v, F64)


@triton.jit
def _tile_if(ptr, row0, t, D: tl.constexpr, c, L, C, st, sc, keep, F64: tl.constexpr):
    """``_tile_at`` at the tokens where ``keep [len(t)]`` holds, 0 at the others: the condition one predicate of the
    row's read, not a select of every value read."""
    p = t + D
    v = tl.load(ptr + (row0 + p)[:, None] * st + c[None, :] * sc,
                mask=((p >= 0) & (p < L) & keep)[:, None] & (c < C)[None, :], other=0.0)
    return _wide(v, F64)


@triton.jit
def _tap(w_ptr, c, C, swc, swk, I: tl.constexpr, F64: tl.constexpr):
    """Tap ``I`` of every channel c ``[len(c)]`` (0 past C)."""
    return _wide(tl.load(w_ptr + c * swc + I * swk, mask=c < C, other=0.0), F64)


@triton.jit
def _lag_tap(w_ptr, c, C, swc, swk, J: tl.constexpr, K: tl.constexpr, F64: tl.constexpr):
    """The tap of lag ``J`` (tap K − 1 − J) of every channel c, 0 for J >= K."""
    if J < K:
        return _tap(w_ptr, c, C, swc, swk, K - 1 - J, F64)
    else:
        return _wide(tl.zeros(c.shape, dtype=tl.float32), F64)


@triton.jit
def _pre(x_ptr, w_ptr, b_ptr, s_ptr, row0, t, J: tl.constexpr, c, L, C, sxt, sxc, swc, swk, sst,
         K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SAMPLES: tl.constexpr, F64: tl.constexpr):
    """The pre-activation a_u at tokens u = t + J ``[len(t), len(c)]``: Σ_i w_{K−1−i} x_{u−i} over the u − i of
    u's sample (finite garbage where u lies outside the row: the callers mask it)."""
    if HAS_SAMPLES:
        s_u = _sample_at(s_ptr, row0, t, J, L, sst)
    acc = _tile_at(x_ptr, row0, t, J, c, L, C, sxt, sxc, F64) * _tap(w_ptr, c, C, swc, swk, K - 1, F64)[None, :]
    for i in tl.static_range(1, K):
        if HAS_SAMPLES:
            x = _tile_if(x_ptr, row0, t, J - i, c, L, C, sxt, sxc, _sample_at(s_ptr, row0, t, J - i, L, sst) == s_u,
                         F64)
        else:
            x = _tile_at(x_ptr, row0, t, J - i, c, L, C, sxt, sxc, F64)
        acc += x * _tap(w_ptr, c, C, swc, swk, K - 1 - i, F64)[None, :]
    if HAS_BIAS:
        acc += _wide(tl.load(b_ptr + c, mask=c < C, other=0.0), F64)[None, :]
    return acc


@triton.jit(do_not_specialize=["L"])  # L changes with the batch: compiled once, not once for L % 16 == 0 and once not
def _fwd_kernel(x_ptr, w_ptr, b_ptr, s_ptr, y_ptr, L, C, sxt, sxc, swc, swk, sst,
                K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SAMPLES: tl.constexpr, F64: tl.constexpr,
                BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    n_t = tl.cdiv(L, BLOCK_T)
    pid = tl.program_id(0)
    i_b = (pid // n_t).to(tl.int64)
    t = (pid % n_t) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    a = _pre(x_ptr, w_ptr, b_ptr, s_ptr, i_b * L, t, 0, c, L, C, sxt, sxc, swc, swk, sst,
             K, HAS_BIAS, HAS_SAMPLES, F64)
    y = a / (1.0 + tl.exp(-a))
    tl.store(y_ptr + ((i_b * L + t) * C)[:, None] + c[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(t < L)[:, None] & (c < C)[None, :])


@triton.jit
def _pick(j: tl.constexpr, v0, v1, v2, v3, v4, v5, v6, v7):
    if j == 0:
        return v0
    elif j == 1:
        return v1
    elif j == 2:
        return v2
    elif j == 3:
        return v3
    elif j == 4:
        return v4
    elif j == 5:
        return v5
    elif j == 6:
        return v6
    else:
        return v7


@triton.jit(do_not_specialize=["L"])
def _bwd_kernel(x_ptr, w_ptr, b_ptr, s_ptr, dy_ptr, dx_ptr, dwb_ptr, scr_ptr, L, C, sxt, sxc, swc, swk, sst, sdt, sdc,
                K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SAMPLES: tl.constexpr,
                F64: tl.constexpr, BLOCK_T: tl.constexpr, TILES: tl.constexpr, BLOCK_C: tl.constexpr):
    OUT_T: tl.constexpr = BLOCK_T - (K - 1)  # the tokens a tile writes: its last K − 1 only feed them
    n_span = tl.cdiv(L, OUT_T * TILES)
    pid = tl.program_id(0)
    i_b = (pid // n_span).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = c < C
    row0 = i_b * L
    r = tl.arange(0, BLOCK_T)
    # the program's own [BLOCK_T, BLOCK_C] rows of scratch (its g, tile by tile: in L1 or L2, never all of memory)
    scr = scr_ptr + (pid * tl.num_programs(1) + tl.program_id(1)).to(tl.int64) * BLOCK_T * BLOCK_C \
        + (r * BLOCK_C)[:, None] + tl.arange(0, BLOCK_C)[None, :]
    # the bias's and the taps' gradients by lag j (tap K − 1 − j), token by token, summed over tokens at the end
    # (one reduction across the program's threads, not one a tile); K <= MAX_SIZE = 8: Triton keeps no lists of
    # tensors
    db = _wide(tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32), F64)
    dw0, dw1, dw2, dw3, dw4, dw5, dw6, dw7 = db, db, db, db, db, db, db, db
    first = (pid % n_span) * TILES * OUT_T
    # the taps by lag, read once
    w0 = _lag_tap(w_ptr, c, C, swc, swk, 0, K, F64)
    w1 = _lag_tap(w_ptr, c, C, swc, swk, 1, K, F64)
    w2 = _lag_tap(w_ptr, c, C, swc, swk, 2, K, F64)
    w3 = _lag_tap(w_ptr, c, C, swc, swk, 3, K, F64)
    w4 = _lag_tap(w_ptr, c, C, swc, swk, 4, K, F64)
    w5 = _lag_tap(w_ptr, c, C, swc, swk, 5, K, F64)
    w6 = _lag_tap(w_ptr, c, C, swc, swk, 6, K, F64)
    w7 = _lag_tap(w_ptr, c, C, swc, swk, 7, K, F64)
    # x and dy at a tile's tokens read two tiles ahead (in x's dtype): their reads from memory in flight while the
    # tiles before are worked (the other reads of a tile, its lags and its g, come from the cache)
    x_next = _raw_at(x_ptr, row0, first + r, 0, c, L, C, sxt, sxc)
    dy_next = _raw_at(dy_ptr, row0, first + r, 0, c, L, C, sdt, sdc)
    x_after = _raw_at(x_ptr, row0, first + r, OUT_T, c, L, C, sxt, sxc)
    dy_after = _raw_at(dy_ptr, row0, first + r, OUT_T, c, L, C, sdt, sdc)
    for tile in range(tl.minimum(TILES, tl.cdiv(L - first, OUT_T))):  # the row's last span may be short
        t = first + tile * OUT_T + r
        x0 = _wide(x_next, F64)
        dyt = _wide(dy_next, F64)
        x_next, dy_next = x_after, dy_after
        x_after = _raw_at(x_ptr, row0, t, 2 * OUT_T, c, L, C, sxt, sxc)
        dy_after = _raw_at(dy_ptr, row0, t, 2 * OUT_T, c, L, C, sdt, sdc)
        # g = dy · silu'(a) once per token of the tile (0 past the row); the other lags' x from the cache
        if HAS_SAMPLES:
            s_t = _sample_at(s_ptr, row0, t, 0, L, sst)
        a = x0 * w0[None, :]
        for i in tl.static_range(1, K):
            if HAS_SAMPLES:
                x = _tile_if(x_ptr, row0, t, -i, c, L, C, sxt, sxc, _sample_at(s_ptr, row0, t, -i, L, sst) == s_t, F64)
            else:
                x = _tile_at(x_ptr, row0, t, -i, c, L, C, sxt, sxc, F64)
            a += x * _pick(i, w0, w1, w2, w3, w4, w5, w6, w7)[None, :]
        if HAS_BIAS:
            a += _wide(tl.load(b_ptr + c, mask=mc, other=0.0), F64)[None, :]
        sig = 1.0 / (1.0 + tl.exp(-a))
        g = dyt * sig * (1.0 + a * (1.0 - sig))
        own = ((r < OUT_T) & (t < L))[:, None]  # the tokens this tile answers for
        # the taps' and bias's gradients of its own tokens, before any write (the lags' reads of x the same loads
        # as a's, once compiled)
        g_own = tl.where(own, g, 0.0)
        db += g_own
        dw0 += g_own * x0
        for j in tl.static_range(1, K):
            if HAS_SAMPLES:
                x = _tile_if(x_ptr, row0, t, -j, c, L, C, sxt, sxc, _sample_at(s_ptr, row0, t, -j, L, sst) == s_t, F64)
            else:
                x = _tile_at(x_ptr, row0, t, -j, c, L, C, sxt, sxc, F64)
            part = g_own * x
            if j == 1:
                dw1 += part
            elif j == 2:
                dw2 += part
            elif j == 3:
                dw3 += part
            elif j == 4:
                dw4 += part
            elif j == 5:
                dw5 += part
            elif j == 6:
                dw6 += part
            else:
                dw7 += part
        # dx_t = Σ_j w[K−1−j] g_{t+j} [same sample]: g of the tile's own rows r + j
        dx = g * w0[None, :]
        # the tile's g through the program's scratch rows, read back at rows r + j by the threads that need them
        # (the barriers: every thread's reads of the tile before done, every thread's g written)
        tl.debug_barrier()
        tl.store(scr, g)
        tl.debug_barrier()
        for j in tl.static_range(1, K):
            keep = r + j < BLOCK_T
            if HAS_SAMPLES:
                keep &= _sample_at(s_ptr, row0, t, j, L, sst) == s_t
            g_j = tl.load(scr + j * BLOCK_C, mask=keep[:, None], other=0.0)
            dx += g_j * _pick(j, w0, w1, w2, w3, w4, w5, w6, w7)[None, :]
        tl.store(dx_ptr + ((row0 + t) * C)[:, None] + c[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=own & mc[None, :])
    # partial sums [programs, K + 1, C]: taps 0 .. K − 1 in the weights' order, then the bias
    out = dwb_ptr + (i_b * n_span + pid % n_span) * (K + 1) * C + c
    for j in tl.static_range(K):
        tl.store(out + (K - 1 - j) * C, tl.sum(_pick(j, dw0, dw1, dw2, dw3, dw4, dw5, dw6, dw7), axis=0), mask=mc)
    tl.store(out + K * C, tl.sum(db, axis=0), mask=mc)


@triton.jit
def _slide(J: tl.constexpr, K: tl.constexpr, nearer, new):
    """Slot J's next value in a window of K slots sliding by one: slot J + 1's (``nearer``), the new value at slot
    K − 1, nothing past the window."""
    if J + 1 < K:
        return nearer
    elif J + 1 == K:
        return new
    else:
        return tl.zeros_like(new)


@triton.jit
def _later(J: tl.constexpr, K: tl.constexpr, nearer):
    """Slot J + 1's next value in the window of g after t (slots 1 .. K − 1), sliding by one: slot J's."""
    if J + 1 < K:
        return nearer
    else:
        return tl.zeros_like(nearer)


@triton.jit
def _row_at(ptr, row0, t, live, c, mc, st, sc):
    """Token t ``[R]`` of each of R rows ``[R, len(c)]`` in the tensor's own dtype (0 before a row's start, and for the
    rows not ``live``)."""
    return tl.load(ptr + (row0 + t)[:, None] * st + c[None, :] * sc, mask=mc[None, :] & ((t >= 0) & live)[:, None],
                   other=0.0)


@triton.jit
def _sample_of(s_ptr, row0, t, live, sst, HAS_SAMPLES: tl.constexpr):
    """Token t's sample ``[R]`` in each of R rows (−1 before a row's start; 0 for rows of one sequence)."""
    if HAS_SAMPLES:
        return tl.load(s_ptr + (row0 + t) * sst, mask=(t >= 0) & live, other=-1).to(tl.int32)
    else:
        return tl.where(t >= 0, 0, -1)


@triton.jit
def _x_and_sample(x_ptr, s_ptr, row0, t, live, c, mc, sxt, sxc, sst, HAS_SAMPLES: tl.constexpr):
    """x at token t ``[R]`` of each of R rows (``_row_at``) and the token's sample (``_sample_of``)."""
    return _row_at(x_ptr, row0, t, live, c, mc, sxt, sxc), _sample_of(s_ptr, row0, t, live, sst, HAS_SAMPLES)


@triton.jit(do_not_specialize=["L"])
def _bwd_serial_kernel(x_ptr, w_ptr, b_ptr, s_ptr, dy_ptr, dx_ptr, dwb_ptr, n_rows, L, C, sxt, sxc, swc, swk, sst, sdt,
                       sdc, K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SAMPLES: tl.constexpr, F64: tl.constexpr,
                       SPAN: tl.constexpr, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    """The backward token by token: a program walks ``ROWS`` spans of ``SPAN`` tokens in step, each from its last
    token to its first, a thread a channel (several spans a program: more reads in flight a step). It keeps in
    registers the window of x (x_t .. x_{t−K+1}, with their samples) and g of the K − 1 tokens after t (g_{t+1} ..
    g_{t+K−1}, with theirs), so a token reads one new x and one dy from memory, and dx_t = Σ_j w[K−1−j] g_{t+j}
    needs no exchange between threads and no barrier; it begins K − 1 tokens past its span (their g only). Those
    reads are issued two tokens ahead. The taps' and bias's gradients are each thread's own sums, then the
    program's."""
    n_span = tl.cdiv(L, SPAN)
    pid = tl.program_id(0)
    sp = pid * ROWS + tl.arange(0, ROWS)  # the program's spans, numbered along the rows
    live = sp < n_rows * n_span
    i_b = (sp // n_span).to(tl.int64)
    first = (sp % n_span) * SPAN
    end = tl.minimum(first + SPAN, L)  # a span's tokens: first .. end − 1
    top = tl.minimum(end + K - 1, L)  # its walk begins at top − 1
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = c < C
    row0 = i_b * L
    w0 = _lag_tap(w_ptr, c, C, swc, swk, 0, K, F64)[None, :]
    w1 = _lag_tap(w_ptr, c, C, swc, swk, 1, K, F64)[None, :]
    w2 = _lag_tap(w_ptr, c, C, swc, swk, 2, K, F64)[None, :]
    w3 = _lag_tap(w_ptr, c, C, swc, swk, 3, K, F64)[None, :]
    w4 = _lag_tap(w_ptr, c, C, swc, swk, 4, K, F64)[None, :]
    w5 = _lag_tap(w_ptr, c, C, swc, swk, 5, K, F64)[None, :]
    w6 = _lag_tap(w_ptr, c, C, swc, swk, 6, K, F64)[None, :]
    w7 = _lag_tap(w_ptr, c, C, swc, swk, 7, K, F64)[None, :]
    zero = _wide(tl.zeros([ROWS, BLOCK_C], dtype=tl.float32), F64)
    bias = zero
    if HAS_BIAS:
        bias = zero + _wide(tl.load(b_ptr + c, mask=mc, other=0.0), F64)[None, :]
    db, dw0, dw1, dw2, dw3, dw4, dw5, dw6, dw7 = zero, zero, zero, zero, zero, zero, zero, zero, zero
    # the window at the walk's first token (slot j: x_{t−j} as read, and its sample)
    t = top - 1
    x0, s0 = _x_and_sample(x_ptr, s_ptr, row0, t, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    none = tl.zeros_like(x0)
    x1, x2, x3, x4, x5, x6, x7 = none, none, none, none, none, none, none
    s1, s2, s3, s4, s5, s6, s7 = s0, s0, s0, s0, s0, s0, s0
    if K > 1:
        x1, s1 = _x_and_sample(x_ptr, s_ptr, row0, t - 1, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 2:
        x2, s2 = _x_and_sample(x_ptr, s_ptr, row0, t - 2, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 3:
        x3, s3 = _x_and_sample(x_ptr, s_ptr, row0, t - 3, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 4:
        x4, s4 = _x_and_sample(x_ptr, s_ptr, row0, t - 4, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 5:
        x5, s5 = _x_and_sample(x_ptr, s_ptr, row0, t - 5, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 6:
        x6, s6 = _x_and_sample(x_ptr, s_ptr, row0, t - 6, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    if K > 7:
        x7, s7 = _x_and_sample(x_ptr, s_ptr, row0, t - 7, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    dyt = _row_at(dy_ptr, row0, t, live, c, mc, sdt, sdc)
    # the reads one token ahead: x entering the window, its sample, dy
    xa, sa = _x_and_sample(x_ptr, s_ptr, row0, t - K, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
    dya = _row_at(dy_ptr, row0, t - 1, live, c, mc, sdt, sdc)
    # g of the tokens after t (slot j: g_{t+j}) and their samples; none yet (the row's end, or the walk's start)
    g1, g2, g3, g4, g5, g6, g7 = zero, zero, zero, zero, zero, zero, zero
    q1, q2, q3, q4, q5, q6, q7 = s0 - 2, s0 - 2, s0 - 2, s0 - 2, s0 - 2, s0 - 2, s0 - 2  # -2: no sample
    for i in range(0, tl.max(tl.where(live, top - first, 0), axis=0)):
        t = top - 1 - i  # [ROWS]: a span shorter than the longest walks past its start, its token not its own
        # the reads two tokens ahead, in flight while this token is worked
        xb, sb = _x_and_sample(x_ptr, s_ptr, row0, t - K - 1, live, c, mc, sxt, sxc, sst, HAS_SAMPLES)
        dyb = _row_at(dy_ptr, row0, t - 2, live, c, mc, sdt, sdc)
        a = _wide(x0, F64) * w0 + bias
        a += tl.where((s1 == s0)[:, None], _wide(x1, F64), 0.0) * w1
        a += tl.where((s2 == s0)[:, None], _wide(x2, F64), 0.0) * w2
        a += tl.where((s3 == s0)[:, None], _wide(x3, F64), 0.0) * w3
        a += tl.where((s4 == s0)[:, None], _wide(x4, F64), 0.0) * w4
        a += tl.where((s5 == s0)[:, None], _wide(x5, F64), 0.0) * w5
        a += tl.where((s6 == s0)[:, None], _wide(x6, F64), 0.0) * w6
        a += tl.where((s7 == s0)[:, None], _wide(x7, F64), 0.0) * w7
        sig = 1.0 / (1.0 + tl.exp(-a))
        g = _wide(dyt, F64) * sig * (1.0 + a * (1.0 - sig))
        # dx_t from g_t and the later tokens' g of t's sample; the gradients of the taps and bias of the span's own
        # tokens (the walk's first K − 1, past the span, only hand their g on)
        dx = g * w0
        dx += tl.where((q1 == s0)[:, None], g1, 0.0) * w1
        dx += tl.where((q2 == s0)[:, None], g2, 0.0) * w2
        dx += tl.where((q3 == s0)[:, None], g3, 0.0) * w3
        dx += tl.where((q4 == s0)[:, None], g4, 0.0) * w4
        dx += tl.where((q5 == s0)[:, None], g5, 0.0) * w5
        dx += tl.where((q6 == s0)[:, None], g6, 0.0) * w6
        dx += tl.where((q7 == s0)[:, None], g7, 0.0) * w7
        own = (t < end) & (t >= first) & live
        tl.store(dx_ptr + (row0 + t)[:, None] * C + c[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=mc[None, :] & own[:, None])
        g_own = tl.where(own[:, None], g, 0.0)
        db += g_own
        dw0 += g_own * _wide(x0, F64)
        dw1 += tl.where((s1 == s0)[:, None], g_own, 0.0) * _wide(x1, F64)
        dw2 += tl.where((s2 == s0)[:, None], g_own, 0.0) * _wide(x2, F64)
        dw3 += tl.where((s3 == s0)[:, None], g_own, 0.0) * _wide(x3, F64)
        dw4 += tl.where((s4 == s0)[:, None], g_own, 0.0) * _wide(x4, F64)
        dw5 += tl.where((s5 == s0)[:, None], g_own, 0.0) * _wide(x5, F64)
        dw6 += tl.where((s6 == s0)[:, None], g_own, 0.0) * _wide(x6, F64)
        dw7 += tl.where((s7 == s0)[:, None], g_own, 0.0) * _wide(x7, F64)
        # one token back: g_t becomes g_{(t−1)+1}; the window takes the read that entered it
        g7, q7 = _later(6, K, g6), _later(6, K, q6)
        g6, q6 = _later(5, K, g5), _later(5, K, q5)
        g5, q5 = _later(4, K, g4), _later(4, K, q4)
        g4, q4 = _later(3, K, g3), _later(3, K, q3)
        g3, q3 = _later(2, K, g2), _later(2, K, q2)
        g2, q2 = _later(1, K, g1), _later(1, K, q1)
        g1, q1 = g, s0
        x0, s0 = _slide(0, K, x1, xa), _slide(0, K, s1, sa)
        x1, s1 = _slide(1, K, x2, xa), _slide(1, K, s2, sa)
        x2, s2 = _slide(2, K, x3, xa), _slide(2, K, s3, sa)
        x3, s3 = _slide(3, K, x4, xa), _slide(3, K, s4, sa)
        x4, s4 = _slide(4, K, x5, xa), _slide(4, K, s5, sa)
        x5, s5 = _slide(5, K, x6, xa), _slide(5, K, s6, sa)
        x6, s6 = _slide(6, K, x7, xa), _slide(6, K, s7, sa)
        x7, s7 = _slide(7, K, x7, xa), _slide(7, K, s7, sa)
        dyt = dya
        xa, sa, dya = xb, sb, dyb
    out = dwb_ptr + pid * (K + 1) * C + c
    for j in tl.static_range(K):
        tl.store(out + (K - 1 - j) * C, tl.sum(_pick(j, dw0, dw1, dw2, dw3, dw4, dw5, dw6, dw7), axis=0), mask=mc)
    tl.store(out + K * C, tl.sum(db, axis=0), mask=mc)


def _flags(x: Tensor, weight: Tensor) -> tuple[bool, int]:
    """(accumulate in float64, channels a program takes)."""
    return torch.float64 in (x.dtype, weight.dtype), min(MAX_BC, triton.next_power_of_2(x.shape[-1]))


def _flat_rows(t: Tensor) -> Tensor:
    """``t [B, L, ...]`` laid so that the kernels read it as ``[B·L, ...]`` by its token stride alone (any token and
    channel strides; rows ``L`` tokens apart), copied when it is not: the row's length, which changes with the
    batch, then enters no stride the kernels are specialised on."""
    return t if t.shape[0] == 1 or t.stride(0) == t.shape[1] * t.stride(1) else t.contiguous()


@torch.library.custom_op("falcon_lab::short_conv", mutates_args=())
def _short_conv(x: Tensor, weight: Tensor, bias: Optional[Tensor], samples: Optional[Tensor]) -> Tensor:
    B, L, C = x.shape
    K = weight.shape[1]
    y = triton_helpers.new_buffer(B, L, C, dtype=x.dtype, device=x.device)
    f64, BC = _flags(x, weight)
    x, s = _flat_rows(x), x if samples is None else _flat_rows(samples)
    common = dict(K=K, HAS_BIAS=bias is not None, HAS_SAMPLES=samples is not None, F64=f64)
    grid = (B * triton.cdiv(L, BT_FWD), triton.cdiv(C, BC))
    _fwd_kernel[grid](x, weight, weight if bias is None else bias, s, y, L, C, *x.stride()[1:],
                      *weight.stride(), s.stride(1), **common, BLOCK_T=BT_FWD, BLOCK_C=BC,
                      num_warps=8 if BT_FWD >= 128 else 4)
    return y


@_short_conv.register_fake
def _(x: Tensor, weight: Tensor, bias: Optional[Tensor], samples: Optional[Tensor]) -> Tensor:
    return x.new_empty(x.shape)


@torch.library.custom_op("falcon_lab::short_conv_backward", mutates_args=())
def _short_conv_backward(dy: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
                         samples: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    B, L, C = x.shape
    K = weight.shape[1]
    f64, BC = _flags(x, weight)
    acc = torch.float64 if f64 else torch.float32
    serial = BWD_FORM == "serial"
    if serial:  # programs of SERIAL_ROWS spans, the spans numbered along the rows
        BC = min(SERIAL_BC, triton.next_power_of_2(C))
        programs = triton.cdiv(B * triton.cdiv(L, SERIAL_SPAN), SERIAL_ROWS)
    else:  # programs of SPAN_TILES tiles, a row's own
        programs = B * triton.cdiv(L, (BT_BWD - K + 1) * SPAN_TILES)
    dx = triton_helpers.new_buffer(B, L, C, dtype=x.dtype, device=x.device)
    parts = triton_helpers.new_buffer(programs, K + 1, C, dtype=acc, device=x.device)
    x, dy, s = _flat_rows(x), _flat_rows(dy), x if samples is None else _flat_rows(samples)
    grid = (programs, triton.cdiv(C, BC))
    common = dict(K=K, HAS_BIAS=bias is not None, HAS_SAMPLES=samples is not None, F64=f64, BLOCK_C=BC)
    if serial:
        _bwd_serial_kernel[grid](x, weight, weight if bias is None else bias, s, dy, dx, parts, B, L, C,
                                 *x.stride()[1:], *weight.stride(), s.stride(1), *dy.stride()[1:], **common,
                                 SPAN=SERIAL_SPAN, ROWS=SERIAL_ROWS,
                                 num_warps=max(1, min(8, SERIAL_ROWS * BC // (32 * SERIAL_VEC))))
    else:
        scratch = torch.empty(grid[0] * grid[1], BT_BWD, BC, dtype=acc, device=x.device)
        _bwd_kernel[grid](x, weight, weight if bias is None else bias, s, dy, dx, parts, scratch, L, C,
                          *x.stride()[1:], *weight.stride(), s.stride(1), *dy.stride()[1:], **common,
                          BLOCK_T=BT_BWD, TILES=SPAN_TILES, num_warps=BWD_WARPS,
                          num_stages=1)  # no loads moved across the barriers
    summed = parts.sum(0)  # [K + 1, C]
    db_dtype = weight.dtype if bias is None else bias.dtype
    # copies, not views of one another (at K = 1 the taps' rows would be the bias's neighbours in one tensor)
    return dx, summed[:K].t().to(weight.dtype, copy=True).contiguous(), summed[K].to(db_dtype)


@_short_conv_backward.register_fake
def _(dy: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
      samples: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    db_dtype = weight.dtype if bias is None else bias.dtype
    return x.new_empty(x.shape), weight.new_empty(weight.shape), weight.new_empty(weight.shape[0], dtype=db_dtype)


def _setup(ctx, inputs: tuple, output: Tensor) -> None:
    x, weight, bias, samples = inputs
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, bias, samples)


def _backward(ctx, dy: Tensor) -> tuple[Optional[Tensor], ...]:
    x, weight, bias, samples = ctx.saved_tensors
    dx, dw, db = _short_conv_backward(dy, x, weight, bias, samples)
    return dx, dw, db if ctx.has_bias else None, None


_short_conv.register_autograd(_backward, setup_context=_setup)


def short_conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, samples: Tensor | None = None) -> Tensor:
    """silu(causal depthwise convolution of ``x [B, L, C]`` by ``weight [C, K]`` (+ ``bias [C]``)), each sample of
    ``samples [B, L]`` (its row's sample of every token; None: each row one sequence) convolved on its own; y in
    x's dtype. x in bf16, fp16, fp32 or fp64, any strides; CUDA tensors, or any under Triton's interpreter.
    Differentiable in x, weight and bias."""
    if x.dim() != 3:
        raise ValueError(f"short_conv: x must be [B, L, C], got shape {tuple(x.shape)}")
    B, L, C = x.shape
    if weight.dim() != 2 or weight.shape[0] != C or not 1 <= weight.shape[1] <= MAX_SIZE:
        raise ValueError(f"short_conv: weight must be [C, K] with C = {C} and 1 <= K <= {MAX_SIZE}, "
                         f"got shape {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (C,):
        raise ValueError(f"short_conv: bias must be [C] with C = {C}, got shape {tuple(bias.shape)}")
    if samples is not None and (tuple(samples.shape) != (B, L) or samples.is_floating_point()):
        raise ValueError(f"short_conv: samples must be an integer [B, L] = {(B, L)}, got "
                         f"{samples.dtype} {tuple(samples.shape)}")
    return _short_conv(x, weight, bias, samples)
