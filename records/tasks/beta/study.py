"""The gain-range study (the runs of `lab experiment run tasks-beta-parity-40`, or any such grid) on running parity
or, from a permutation grid's runs, S5 composition: a table over seeds, a table per run and a figure of accuracy by
length, and, from each run's best weights, where its transitions' eigenvalues along the written key went on the
held-out lengths. Eigenvalue of a write (per token, head and layer): falcon-1 (regression) γ − η‖x‖², with η =
β/(‖x‖² + λ + ε) for ctxβ or the emitted η for ctxη, λ = λ̄‖x‖², γ = 1 − min(ηλ, 1 − ε_γ); falcon-1a (inner
product) γ alone; DeltaNet 1 − β (unit keys). A run without best weights (checkpoints/ never enter records/, nor
come back from a device call) has no census: its columns read "n/a" (empty in the CSVs), and a row whose census
covers only some of its seeds says how many. The task, the trained and held-out lengths and the machine come from
the runs' config.yaml and provenance.json.

    python records/tasks/beta/study.py [RESULTS [OUT]]   # RESULTS holds runs/ (default: this folder); OUT: where
        # table.md, table.csv, seeds.md, seeds.csv and lengths.png go (default: this folder)
    python records/tasks/beta/study.py /tmp/beta/permutation /tmp/beta/permutation   # the S5 grid
"""

from __future__ import annotations

import csv
import json
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

from falcon_lab.eval.callback import best_weights_path  # noqa: E402
from falcon_lab.eval.run_weights import load_run_model  # noqa: E402
from falcon_lab.runs import RunDir  # noqa: E402
from falcon_lab.mixers.deltanet import DeltaNet  # noqa: E402
from falcon_lab.mixers.falcon import FalconMixer  # noqa: E402
from falcon_lab.tasks.synthetic import eval_samples, make_task, pad_batch  # noqa: E402
from falcon_lab.compact import open_text  # noqa: E402

ROWS = (("f13-eta", "falcon-1.3 (ctxη, regression)"), ("f11-beta", "falcon-1 .1 settings (ctxβ, regression)"),
        ("dn-beta", "DeltaNet"), ("f1a3-eta", "falcon-1a.3 (ctxη, inner product: control)"))
TASKS = {"parity": "Running parity", "permutation": "S5 composition"}


def hook_census(model: torch.nn.Module) -> list[torch.Tensor]:
    """Make every Falcon and DeltaNet mixer of `model` append, at each forward, every write's eigenvalue along its
    key to the returned list (flattened over batch, token and head; per channel for falcon-2)."""
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
            def delta_rule(q, k, v, g, beta, backend, state=None, samples=None, rule=m._rule):
                found.append((1 - beta.float()).flatten().cpu())
                return rule(q, k, v, g, beta, backend, state, samples=samples)
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


def has_weights(run: Path) -> bool:
    """Whether the run kept its best weights, which the census reads."""
    return best_weights_path(RunDir(run.resolve())).exists()


def ms(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)


def setting(runs: list[Path]) -> dict:
    """What every run of the study shares: task, trained and held-out lengths, machine, model size and steps;
    ValueError if they differ."""
    seen = set()
    for run in runs:
        d = yaml.safe_load((run / "config.yaml").read_text())
        prov = json.loads((run / "provenance.json").read_text())
        machine = "a CPU" if prov.get("accelerator", "cpu") == "cpu" else f"an {prov['device'].removesuffix(' x1')}"
        size = f"d_model {d['model']['d_model']}, {d['model']['n_layers']} layers, {d['train']['max_steps']} steps"
        seen.add((d["task"], *d["data"]["lengths"], *d["data"]["test_lengths"], machine, size))
    if len(seen) != 1:
        raise ValueError(f"the runs mix tasks, lengths, machines or sizes: {sorted(seen)}")
    task, lo, hi, test_lo, test_hi, machine, size = seen.pop()
    return {"task": task, "trained": (lo, hi), "held_out": (test_lo, test_hi), "machine": machine, "size": size}


def main() -> None:
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE
    every = sorted(r for prefix, _ in ROWS for r in (results / "runs").glob(f"{prefix}[12]-s*"))
    if not every:
        raise SystemExit(f"study.py: no runs of the study under {results / 'runs'} ({', '.join(p for p, _ in ROWS)})")
    shared = setting(every)
    (lo, hi), (test_lo, test_hi) = shared["trained"], shared["held_out"]
    rows, seeds, curves = [], [], {}
    for prefix, label in ROWS:
        for bound in (1, 2):
            runs = sorted((results / "runs").glob(f"{prefix}{bound}-s*"))
            best, lengths, eig_neg, eig_min = [], [], [], []
            for run in runs:
                evals = list(csv.DictReader(open_text(run / "evals.csv")))
                if not evals:
                    continue
                b = max(evals, key=lambda r: (float(r["val_acc"]), -int(r["step"])))
                best.append(b)
                lengths.append([float(b[f"tf@{n}"]) for n in range(1, test_hi + 1)])
                neg = low = None
                if has_weights(run):
                    e = eigenvalues(run)
                    neg, low = 100.0 * (e < 0).float().mean().item(), e.min().item()
                    eig_neg.append(neg)
                    eig_min.append(low)
                last = max(evals, key=lambda r: int(r["step"]))
                seeds.append({"model": label, "bound": bound, "seed": run.name.rsplit("-s", 1)[1],
                              "best_step": int(b["step"]), "val_acc": float(b["val_acc"]),
                              "held_out": float(b["ood_mean"]), "held_out_token": float(b["ood_token_mean"]),
                              "last_step": int(last["step"]), "last_held_out": float(last["ood_mean"]),
                              "neg_eig_pct": neg, "min_eig": low,
                              "run": json.loads((run / "run.json").read_text())["id"], "folder": run.name})
            if not best:
                continue
            val = ms([float(b["val_acc"]) for b in best])
            held = ms([float(b["ood_mean"]) for b in best])
            held_tok = ms([float(b["ood_token_mean"]) for b in best])
            rows.append({"row": prefix, "model": label, "bound": bound, "seeds": len(best),
                         "val_acc": val, "held_out": held, "held_out_token": held_tok,
                         "neg_eig_pct": ms(eig_neg) if eig_neg else None, "min_eig": min(eig_min, default=None),
                         "census_seeds": len(eig_neg), "runs": " ".join(r.name for r in runs)})
            curves[(prefix, bound)] = lengths
    out.mkdir(parents=True, exist_ok=True)
    blank = lambda x: "" if x is None else x  # noqa: E731  no census: an empty cell
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "model", "gain_bound", "seeds", "val_acc_mean", "val_acc_std", "held_out_mean",
                    "held_out_std", "held_out_token_mean", "held_out_token_std", "neg_eig_pct_mean",
                    "neg_eig_pct_std", "min_eig", "runs"])
        for r in rows:
            w.writerow([r["row"], r["model"], r["bound"], r["seeds"], *r["val_acc"], *r["held_out"],
                        *r["held_out_token"], *(r["neg_eig_pct"] or ("", "")), blank(r["min_eig"]), r["runs"]])
    held_name = f"held-out acc. {test_lo}–{test_hi}"
    lines = [f"| model | gain bound | seeds | val. acc. {lo}–{hi} | {held_name} | held-out per token | "
             "writes with eigenvalue < 0 | lowest eigenvalue |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda p: f"{p[0]:.1f} ± {p[1]:.1f}"  # noqa: E731
        part = "" if r["census_seeds"] == r["seeds"] else f" ({r['census_seeds']} of {r['seeds']} seeds)"
        neg = f"{f(r['neg_eig_pct'])}%{part}" if r["neg_eig_pct"] is not None else "n/a"
        low = f"{r['min_eig']:.3f}{part}" if r["min_eig"] is not None else "n/a"
        lines.append(f"| {r['model']} | {r['bound']} | {r['seeds']} | {f(r['val_acc'])} | {f(r['held_out'])} | "
                     f"{f(r['held_out_token'])} | {neg} | {low} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    keys = ["model", "bound", "seed", "best_step", "val_acc", "held_out", "held_out_token", "last_step",
            "last_held_out", "neg_eig_pct", "min_eig", "run", "folder"]
    with open(out / "seeds.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in seeds:
            w.writerow([blank(r[k]) for k in keys])
    lines = [f"| model | gain bound | seed | best step | val. acc. {lo}–{hi} | {held_name} | held-out per token | "
             f"last step | {held_name} at the last step | writes with eigenvalue < 0 | lowest eigenvalue | run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in seeds:
        neg = "n/a" if r["neg_eig_pct"] is None else f"{r['neg_eig_pct']:.1f}%"
        low = "n/a" if r["min_eig"] is None else f"{r['min_eig']:.3f}"
        lines.append(f"| {r['model']} | {r['bound']} | {r['seed']} | {r['best_step']} | {r['val_acc']:.1f} | "
                     f"{r['held_out']:.1f} | {r['held_out_token']:.1f} | {r['last_step']} | "
                     f"{r['last_held_out']:.1f} | {neg} | {low} | {r['run']} |")
    (out / "seeds.md").write_text("\n".join(lines) + "\n")
    drawn = [(prefix, label) for prefix, label in ROWS if any(curves.get((prefix, b)) for b in (1, 2))]
    fig, axes = plt.subplots(1, len(drawn), figsize=(4 * len(drawn), 3.8), sharey=True, layout="constrained",
                             squeeze=False)
    axes = axes[0]
    for ax, (prefix, label) in zip(axes, drawn):  # a mixer without runs gets no panel
        for bound, colour in ((1, "tab:blue"), (2, "tab:red")):
            runs = curves.get((prefix, bound))
            if not runs:
                continue
            t = torch.tensor(runs)
            x = range(1, test_hi + 1)
            ax.plot(x, t.mean(0), color=colour, label=f"gain bound {bound} ({len(runs)} seeds)")
            ax.fill_between(x, t.min(0).values.clamp(0, 100), t.max(0).values.clamp(0, 100), color=colour,
                            alpha=0.15)
        ax.axvspan(lo - 0.5, hi + 0.5, color="grey", alpha=0.1)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("length")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("whole sequences right (%)")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle(f"{TASKS[shared['task']]} ({shared['size']}) on {shared['machine']}, trained on lengths {lo}–{hi} "
                 "(shaded); mean over seeds, band min–max.\n"
                 "Gain bound 1: β (or η‖x‖²) < 1; bound 2: < 2, so the eigenvalue 1 − β along the key can be negative",
                 fontsize=10)
    fig.savefig(out / "lengths.png", dpi=110)


if __name__ == "__main__":
    main()
