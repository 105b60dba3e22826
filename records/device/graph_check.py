"""Is a training step's gradient the same when the model runs eagerly, compiled, or replayed from a CUDA graph
(`train.cuda_graphs`)? One packed addition batch (rows of 256 positions, widths 1-32) through the paper-size model
of each mixer given; every way of running it is compared with the same model whose Falcon rules run token by
token in PyTorch (backend "recurrent": no chunks, no Triton), all under bf16 autocast as in training. Printed: the
loss, and the relative error of the whole gradient and of the token embedding's gradient (which carries what the
rule passes across chunks back to the inputs) against that reference. A step whose gradient loses what crosses a
chunk boundary shows an error far above bf16's ~1e-2. The last row feeds the fused kernels float32 inputs
(`rule_dtype="float32"`) rather than the projections' bf16.

    python records/device/graph_check.py [--mixers falcon-1.3,falcon-1a.3] [--batch 64] [--chunk 64]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from dataclasses import replace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch

from falcon_lab.train.graphs import capture
from falcon_lab.train.module import token_loss_sum
from falcon_lab.mixers import LanguageModel, LMConfig
from falcon_lab.mixers.falcon import FalconMixer
from falcon_lab.tasks.addition.batches import make_batch


def set_backend(model: torch.nn.Module, backend: str, rule_dtype: str = "input") -> None:
    """Every mixer with a `backend` option (the Falcon rules, DeltaNet) computes its rule with `backend` (and
    the Falcon rules take their inputs in `rule_dtype`)."""
    for m in model.modules():
        if hasattr(getattr(m, "opts", None), "backend"):
            m.opts = replace(m.opts, backend=backend)
        if hasattr(getattr(m, "opts", None), "rule_dtype"):
            m.opts = replace(m.opts, rule_dtype=rule_dtype)


def grads(model: torch.nn.Module, forward, ids: torch.Tensor, labels: torch.Tensor, autocast: bool):
    model.zero_grad(set_to_none=True)
    ctx = torch.autocast(ids.device.type, torch.bfloat16) if autocast else torch.autocast(ids.device.type,
                                                                                            enabled=False)
    with ctx:
        logits = forward(ids)
    total, count = token_loss_sum(logits, labels)
    loss = total / count
    loss.backward()
    g = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), g


def rel(a: dict, b: dict, keys=None) -> float:
    keys = keys or b.keys()
    num = sum(((a[k] - b[k]) ** 2).sum() for k in keys if k in a) ** 0.5
    den = sum((b[k] ** 2).sum() for k in keys) ** 0.5
    return float(num / den)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mixers", default="falcon-1.3,falcon-1a.3")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    b = make_batch(0, 3000, args.batch, (1, 32), args.seq, pack=True)
    ids, labels = b.input_ids.to(device), b.labels.to(device)
    print(f"device {torch.cuda.get_device_name() if gpu else 'cpu'}; batch {tuple(ids.shape)}, chunk {args.chunk}")
    for name in args.mixers.split(","):
        torch.manual_seed(0)
        opts = {"chunk_size": args.chunk}
        model = LanguageModel(LMConfig(vocab_size=256, d_model=args.d_model, n_layers=args.layers,
                                       n_heads=args.heads, mixer=name, mixer_options=opts)).to(device).train()
        set_backend(model, "recurrent")
        ref_loss, ref = grads(model, model, ids, labels, gpu)
        emb = [k for k in ref if "embed" in k]
        rows = []
        fast = "triton" if any(isinstance(m, FalconMixer) for m in model.modules()) else "chunk"
        ways = [("chunk", "eager")] + ([(fast, how) for how in ("eager", "graph", "compile", "compile+graph")
                                        if (fast, how) != ("chunk", "eager")] if gpu else [])
        if fast == "triton":  # the fused kernels fed float32 (rule_dtype) rather than the projections' bf16
            ways.append((fast, "eager fp32 rule") if gpu else ("chunk", "eager fp32 rule"))
        for backend, how in ways:
            set_backend(model, backend, "float32" if how.endswith("fp32 rule") else "input")
            try:
                if how.startswith("eager"):
                    fwd = model
                elif how == "compile":
                    fwd = torch.compile(model)
                elif how == "graph":
                    fwd = capture(model, tuple(ids.shape), "bf16-mixed", device)
                else:
                    fwd = capture(torch.compile(model), tuple(ids.shape), "bf16-mixed", device)
                loss, g = grads(model, fwd, ids, labels, gpu and not how.endswith("graph"))
                if how.endswith("graph"):  # a replay, not the captured pass: run it twice, keep the second
                    loss, g = grads(model, fwd, ids, labels, False)
                rows.append((f"{backend} {how}", loss, rel(g, ref), rel(g, ref, emb)))
            except Exception as e:  # noqa: BLE001 - a way that fails is reported, the others still run
                rows.append((f"{backend} {how}", float("nan"), float("nan"), float("nan")))
                print(f"  {name} {backend} {how}: {type(e).__name__}: {str(e)[:300]}")
        print(f"{name} (chunks of {args.chunk}): reference (recurrent, eager) loss {ref_loss:.5f}")
        print(f"  {'way':22s} {'loss':>9s} {'rel. err. grad':>15s} {'rel. err. embedding grad':>25s}")
        for way, loss, e_all, e_emb in rows:
            print(f"  {way:22s} {loss:9.5f} {e_all:15.2e} {e_emb:25.2e}", flush=True)


if __name__ == "__main__":
    main()
