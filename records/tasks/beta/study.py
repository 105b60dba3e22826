"""The gain-range study on running parity (`run.sh` beside this file): a table over seeds and a figure of accuracy by
length, and, from each run's best weights, where its transitions' eigenvalues along the written key went on the
held-out lengths. Eigenvalue of a write (per token, head and layer): falcon-1 (regression) γ − η‖x‖², with
η = β/(‖x‖² + λ + ε) for ctxβ or the emitted η for ctxη, λ = λ̄‖x‖², γ = 1 − min(ηλ, 1 − ε_γ); falcon-1a (inner
product) γ alone; DeltaNet 1 − β (unit keys).

    python records/tasks/beta/study.py [RESULTS]   # RESULTS holds runs/ (default: this folder); writes here
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from lab.eval.run_weights import load_run_model  # noqa: E402
from mixers.deltanet import DeltaNet  # noqa: E402
from mixers.falcon import FalconMixer  # noqa: E402
from tasks.synthetic import eval_samples, make_task, pad_batch  # noqa: E402

ROWS = (("f13-eta", "falcon-1.3 (ctxη, regression)"), ("f11-beta", "falcon-1 .1 settings (ctxβ, regression)"),
        ("dn-beta", "DeltaNet"), ("f1a3-eta", "falcon-1a.3 (ctxη, inner product: control)"))
HELD_OUT = range(17, 65)


def hook_census(model: torch.nn.Module) -> list[torch.Tensor]:
    """Make every Falcon and DeltaNet mixer of `model` append, at each forward, every write's eigenvalue along its
    key to the returned list (flattened over batch, token and head; per channel for falcon-2). Also used by
    ../eta_bound/study.py and records/device/census.py."""
    found: list[torch.Tensor] = []
    for m in model.modules():
        if isinstance(m, FalconMixer):
            def falcon_rule(q, k, v, gain, lam, samples=None, m=m, rule=m._rule):
                o = m.opts
                energy = (k.float() ** 2).sum(-1)[:, :-1]  # x_t = k_{t-1}: the writes of tokens 2..T
                g, lb = gain[:, 1:].float(), lam[:, 1:].float()
                lam_t = lb * energy if o.scale_coupled_ridge else lb
                if m.per_channel:
                    energy, lam_t = energy[..., None], lam_t[..., None]
                eta = g if o.gain == "ctx_eta" else g / (energy + lam_t + o.eps)
                carry = 1 - torch.clamp(eta * lam_t, max=1 - o.decay_floor)
                regression = m.rule in ("falcon-1", "falcon-2")  # 1a/2a write by inner product: carry alone
                found.append((carry - eta * energy if regression else carry).flatten().cpu())
                return rule(q, k, v, gain, lam, samples)
            m._rule = falcon_rule
        elif isinstance(m, DeltaNet):
            def delta_rule(q, k, v, g, beta, backend, state=None, rule=m._rule):
                found.append((1 - beta.float()).flatten().cpu())
                return rule(q, k, v, g, beta, backend, state)
            m._rule = delta_rule
    return found


def eigenvalues(run: Path) -> torch.Tensor:
    """Every write's eigenvalue along its key on held-out sequences of the run's task: 8 of every 8th held-out
    length (parity-tiny: 17, 25, ..., 57), from the run's best weights. Also read by ../eta_bound/study.py."""
    rm = load_run_model(run, "best", "cpu")
    found = hook_census(rm.model)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    d = cfg["data"]
    task = make_task(cfg["task"], vocab_size=d["vocab_size"], tokens_per_pair=d["tokens_per_pair"], group=d["group"])
    with torch.no_grad():
        for length in range(d["test_lengths"][0], d["test_lengths"][1] + 1, 8):
            ids, _ = pad_batch(eval_samples(task, "test", length, 8, seed=0))
            rm.model(ids)
    return torch.cat(found)


def main() -> None:
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    rows, curves = [], {}
    for prefix, label in ROWS:
        for bound in (1, 2):
            runs = sorted((results / "runs").glob(f"{prefix}{bound}-s*"))
            best, lengths, eig_neg, eig_min = [], [], [], []
            for run in runs:
                evals = list(csv.DictReader(open(run / "evals.csv")))
                if not evals:
                    continue
                b = max(evals, key=lambda r: (float(r["val_acc"]), -int(r["step"])))
                best.append(b)
                lengths.append([float(b[f"tf@{n}"]) for n in range(1, 65)])
                e = eigenvalues(run)
                eig_neg.append(100.0 * (e < 0).float().mean().item())
                eig_min.append(e.min().item())
            if not best:
                continue
            def ms(xs):
                return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)
            val = ms([float(b["val_acc"]) for b in best])
            held = ms([float(b["ood_mean"]) for b in best])
            held_tok = ms([float(b["ood_token_mean"]) for b in best])
            rows.append({"row": prefix, "model": label, "bound": bound, "seeds": len(best),
                         "val_acc": val, "held_out": held, "held_out_token": held_tok,
                         "neg_eig_pct": ms(eig_neg), "min_eig": min(eig_min),
                         "runs": " ".join(r.name for r in runs)})
            curves[(prefix, bound)] = lengths
    with open(HERE / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "model", "gain_bound", "seeds", "val_acc_mean", "val_acc_std", "held_out_mean",
                    "held_out_std", "held_out_token_mean", "held_out_token_std", "neg_eig_pct_mean",
                    "neg_eig_pct_std", "min_eig", "runs"])
        for r in rows:
            w.writerow([r["row"], r["model"], r["bound"], r["seeds"], *r["val_acc"], *r["held_out"],
                        *r["held_out_token"], *r["neg_eig_pct"], r["min_eig"], r["runs"]])
    lines = ["| model | gain bound | seeds | val. acc. 1–16 | held-out acc. 17–64 | held-out per token | "
             "writes with eigenvalue < 0 | lowest eigenvalue |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda p: f"{p[0]:.1f} ± {p[1]:.1f}"  # noqa: E731
        lines.append(f"| {r['model']} | {r['bound']} | {r['seeds']} | {f(r['val_acc'])} | {f(r['held_out'])} | "
                     f"{f(r['held_out_token'])} | {f(r['neg_eig_pct'])}% | {r['min_eig']:.3f} |")
    (HERE / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, axes = plt.subplots(1, len(ROWS), figsize=(16, 3.8), sharey=True, layout="constrained")
    for ax, (prefix, label) in zip(axes, ROWS):
        for bound, colour in ((1, "tab:blue"), (2, "tab:red")):
            runs = curves.get((prefix, bound))
            if not runs:
                continue
            t = torch.tensor(runs)
            x = range(1, 65)
            ax.plot(x, t.mean(0), color=colour, label=f"gain bound {bound} ({len(runs)} seeds)")
            ax.fill_between(x, t.min(0).values.clamp(0, 100), t.max(0).values.clamp(0, 100), color=colour,
                            alpha=0.15)
        ax.axvspan(0.5, 16.5, color="grey", alpha=0.1)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("length")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("whole sequences right (%)")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Running parity, toy size on a CPU, trained on lengths 1–16 (shaded); mean over seeds, band min–max. "
                 "Gain bound 1: β (or η‖x‖²) < 1; bound 2: < 2, so the eigenvalue 1 − β along the key can be negative",
                 fontsize=10)
    fig.savefig(HERE / "lengths.png", dpi=110)


if __name__ == "__main__":
    main()
