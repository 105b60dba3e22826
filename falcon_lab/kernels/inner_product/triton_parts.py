"""Pieces of the falcon-1a/2a Triton kernels of their own: constants, the chunk-local log-carries, the read/write
masks, the masks of samples kept apart by their ids, and the outputs and source gradients of a block of rows (the
rest is in falcon_lab/kernels/common/triton_helpers.py).

Samples by id (``SAMPLES``, scalar gates only): rows of B·T tokens in full chunks with a sample id per token,
non-decreasing along a row, each new id a fresh sample. Within a chunk a read sees the writes of its own sample
only; the state before the chunk belongs to the sample of the token before it (the row's first sample at its first
chunk: S0 enters it), and a token reads it only if it is of that sample; the state after the chunk is the
sample of its last token: the carried state if that is still the sample carried in, plus its own writes. With G
the log-carries summed within each chunk and sample (``_sample_prefix_kernel``), every difference G_t − G_s the
kernels take is within one sample, and every masked one is masked before its exponential."""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import mm

SUB = 16  # falcon-2a's intra-chunk block: the midpoint factors stay below e^{8 |log ε_γ|}
NEG_INF = tl.constexpr(float("-inf"))  # kernels may read only constexpr globals


@triton.jit
def _carries(G, bos, i_h, t, L, j, H, V: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """Chunk-local cumulative log-carries at tokens t (``[len(t)]``, or ``[len(t), len(j)]`` per channel).
    Tokens past the end repeat the last one: they carry γ = 1."""
    tc = tl.minimum(t, L - 1)
    if PER_CHANNEL:
        return tl.load(G + ((bos + tc)[:, None] * H + i_h) * V + j[None, :], mask=(j < V)[None, :], other=0.0)
    else:
        return tl.load(G + (bos + tc) * H + i_h)


@triton.jit
def _carry_at(G, bos, i_h, idx, L, j, H, V: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """The cumulative log-carry at one token (a scalar, or ``[len(j)]`` per channel)."""
    ic = tl.minimum(idx, L - 1)
    if PER_CHANNEL:
        return tl.load(G + ((bos + ic) * H + i_h) * V + j, mask=j < V, other=0.0)
    else:
        return tl.load(G + (bos + ic) * H + i_h)


@triton.jit
def _read_carries(G, bos, i_h, t, t0, L, j, H, V: tl.constexpr, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """G_{r(t)}: through t (RAW) or through t − 1 (RBW; 0 at the chunk's first token, which reads h_c)."""
    if RAW:
        g = _carries(G, bos, i_h, t, L, j, H, V, PER_CHANNEL)
    else:
        g = _carries(G, bos, i_h, tl.maximum(t - 1, t0), L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            g = tl.where((t == t0)[:, None], 0.0, g)
        else:
            g = tl.where(t == t0, 0.0, g)
    return g


@triton.jit
def _ids_at(sid, bos, t, L):
    """The sample ids of tokens ``t`` of the row starting at ``bos`` (``[len(t)]``); tokens past its end repeat the
    last one's."""
    return tl.load(sid + bos + tl.minimum(tl.maximum(t, 0), L - 1))


@triton.jit
def _opens_sample(sid, bos, t, L):
    """``[len(t)]``: whether token t opens a sample after the row's first (shifted: it writes no pair)."""
    return (t > 0) & (_ids_at(sid, bos, t, L) != _ids_at(sid, bos, t - 1, L))


@triton.jit
def _sample_cumsum(x, ids, t):
    """``[len(t)]``: x summed over the tokens up to t of t's sample (``ids``) among ``t``."""
    upto = (t[None, :] <= t[:, None]) & (ids[None, :] == ids[:, None])
    return tl.sum(tl.where(upto, x[None, :], 0.0), 1)


@triton.jit
def _sample_masks(sid, bos, tr, tc, t0, L, BT: tl.constexpr, SAMPLES: tl.constexpr):
    """For tokens ``tr`` of the chunk starting at ``t0`` against its tokens ``tc``: ``same`` ``[len(tr), len(tc)]``
    (of one sample), ``carried`` ``[len(tr)]`` (of the sample the state before the chunk holds: the token before
    it, or the row's first), ``last`` ``[len(tr)]`` (of the sample of the chunk's last token) and ``keep`` (the
    state after the chunk keeps the one before it: one sample runs through). Without sample ids: zeros, unused."""
    if SAMPLES:
        ir = _ids_at(sid, bos, tr, L)
        ic = _ids_at(sid, bos, tc, L)
        prev = tl.load(sid + bos + tl.maximum(t0 - 1, 0))
        end = tl.load(sid + bos + tl.minimum(t0 + BT, L) - 1)
        same = ir[:, None] == ic[None, :]
        carried = ir == prev
        last = ir == end
        keep = end == prev
    else:
        same = 0
        carried = 0
        last = 0
        keep = 0
    return same, carried, last, keep


@triton.jit
def _sees(reader, source, RAW: tl.constexpr):
    """``[len(reader), len(source)]``: whether the read at ``reader`` sees the write at ``source``."""
    if RAW:
        return source[None, :] <= reader[:, None]
    else:
        return source[None, :] < reader[:, None]


@triton.jit
def _seen_by(source, reader, RAW: tl.constexpr):
    """``[len(source), len(reader)]``: whether the read at ``reader`` sees the write at ``source``."""
    if RAW:
        return reader[None, :] >= source[:, None]
    else:
        return reader[None, :] > source[:, None]


@triton.jit
def _outputs(qh, A, Gr, Gc, ec, vc, G, bos, i_h, tr, tc, b0, t0, L, j, H, V: tl.constexpr,
             BR: tl.constexpr, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, DT: tl.constexpr,
             PREC: tl.constexpr, same, carried, SAMPLES: tl.constexpr):
    """o at reader rows tr from qh = q h_c and the scores A = q xᵀ over the chunk's sources tc (with sample ids:
    the sources of the reader's sample, and h_c for readers of the sample it holds, ``_sample_masks``)."""
    if PER_CHANNEL:
        ve = vc * ec
        # sources in earlier blocks, through the token before this block: e^{G_r − G_ref} e^{G_ref − G_s}
        Gref = _carry_at(G, bos, i_h, tl.maximum(b0 - 1, t0), L, j, H, V, PER_CHANNEL)
        before = (tc < b0)[:, None]
        v_off = ve * tl.exp(tl.where(before, Gref[None, :] - Gc, NEG_INF))
        out = mm(A.to(DT), v_off.to(DT), PREC) * tl.exp(tl.where(b0 > t0, Gr - Gref[None, :], NEG_INF))
        # sources in this block, through its midpoint
        Gm = _carry_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, PER_CHANNEL)
        inblk = (tc >= b0) & (tc < b0 + BR)
        v_d = tl.where(inblk[:, None], ve * tl.exp(tl.where(inblk[:, None], Gm[None, :] - Gc, 0.0)), 0.0)
        A_d = tl.where(_sees(tr, tc, RAW) & inblk[None, :], A, 0.0)
        out += mm(A_d.to(DT), v_d.to(DT), PREC) * tl.exp(Gr - Gm[None, :])
        out += qh * tl.exp(Gr)
    else:
        seen = _sees(tr, tc, RAW)
        if SAMPLES:
            seen = seen & same
            qh = tl.where(carried[:, None], qh, 0.0)
        dec = tl.exp(tl.where(seen, Gr[:, None] - Gc[None, :], NEG_INF))
        out = qh * tl.exp(Gr)[:, None] + mm((A * dec * ec[None, :]).to(DT), vc.to(DT), PREC)
    return out


@triton.jit
def _source_grads(xdh, At, Gs, Grc, Gl, doc, G, bos, i_h, ts, tc, b0, L, j, H,
                  V: tl.constexpr, BR: tl.constexpr, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr,
                  DT: tl.constexpr, PREC: tl.constexpr, same, last, SAMPLES: tl.constexpr):
    """dv' = Dᵀx at source rows ts from xdh = x dh_end and At = x qᵀ over the chunk's readers tc (with sample ids:
    the readers of the source's sample, and dh_end for sources of the chunk's last sample)."""
    if PER_CHANNEL:
        # readers in later blocks, through this block's last token
        Ge = _carry_at(G, bos, i_h, b0 + BR - 1, L, j, H, V, PER_CHANNEL)
        after = (tc >= b0 + BR)[:, None]
        do_off = doc * tl.exp(tl.where(after, Grc - Ge[None, :], NEG_INF))
        out = mm(At.to(DT), do_off.to(DT), PREC) * tl.exp(Ge[None, :] - Gs)
        # readers in this block, through its midpoint
        Gm = _carry_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, PER_CHANNEL)
        inblk = (tc >= b0) & (tc < b0 + BR)
        do_d = tl.where(inblk[:, None], doc * tl.exp(tl.where(inblk[:, None], Grc - Gm[None, :], 0.0)), 0.0)
        At_d = tl.where(_seen_by(ts, tc, RAW) & inblk[None, :], At, 0.0)
        out += mm(At_d.to(DT), do_d.to(DT), PREC) * tl.exp(Gm[None, :] - Gs)
        out += xdh * tl.exp(Gl[None, :] - Gs)
    else:
        seen = _seen_by(ts, tc, RAW)
        kept = Gl - Gs
        if SAMPLES:
            seen = seen & same
            kept = tl.where(last, kept, NEG_INF)
        dec = tl.exp(tl.where(seen, Grc[None, :] - Gs[:, None], NEG_INF))
        out = xdh * tl.exp(kept)[:, None] + mm((At * dec).to(DT), doc.to(DT), PREC)
    return out
