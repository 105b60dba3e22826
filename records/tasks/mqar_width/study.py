"""MQAR recall against model width (`run.sh` beside this file): a table over seeds and zoology's figure, whole-
sequence accuracy (every answer right) at each run's best step against d_model, on the train lengths and on the
held-out ones.

    python records/tasks/mqar_width/study.py [RESULTS [OUT]]   # RESULTS holds runs/ (default: this folder);
                                                              # writes table.md, table.csv, width.png to OUT (here)
Mixers and widths are those the runs hold (run folders `<mixer>-d<d_model>-s<seed>`, with `-lr<LR>` for a rate
other than the preset's: LR=1e-3 in the environment reads those); the title names the steps and the machine the
runs' config.yaml and provenance.json give.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from falcon_lab.compact import open_text, readable

HERE = Path(__file__).resolve().parent
MIXERS = (("transformer", "Transformer", "tab:grey"), ("retnet", "RetNet", "tab:brown"),
          ("mamba2", "Mamba-2", "tab:olive"), ("deltanet", "DeltaNet", "tab:green"),
          ("gated-deltanet", "Gated DeltaNet", "tab:cyan"), ("falcon-1a.3", "Falcon-1A.3", "tab:blue"),
          ("falcon-3a.3", "Falcon-3A.3", "tab:purple"), ("falcon-1.3", "Falcon-1.3", "tab:orange"))


def best(run: Path) -> dict | None:
    path = readable(run / "evals.csv")  # or its compacted evals.csv.gz
    if not path.exists():
        return None
    with open_text(path) as f:
        rows = list(csv.DictReader(f))
    return max(rows, key=lambda r: (float(r["val_acc"]), -int(r["step"]))) if rows else None


def setting(runs: list[Path]) -> tuple[str, str]:
    """The steps and the machines the runs' config.yaml and provenance.json give, for a figure's title."""
    steps = sorted({line.split(":")[1].strip() for r in runs if (r / "config.yaml").exists()
                    for line in (r / "config.yaml").read_text().splitlines() if line.startswith("  max_steps:")})
    devices = sorted({json.loads((r / "provenance.json").read_text()).get("device", "?") for r in runs
                      if (r / "provenance.json").exists()})
    return "/".join(steps), ", ".join(devices)


def ms(xs: list[float]) -> str:
    """mean ± sample standard deviation (0 for one value)"""
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.1f}"


def panels(table: list[dict], widths: list[int], figsize: tuple[float, float], markers: dict | None = None):
    """The two panels, train lengths and held out: per mixer the mean over seeds against d_model, bars min–max.
    `markers` (rate -> marker) marks each point with the rate its row chose (`r["rate"]`). Lines are labelled
    on the first panel only."""
    fig, axes = plt.subplots(1, 2, figsize=figsize, sharey=True, layout="constrained")
    for ax, key, title in ((axes[0], "val", "train lengths (16–32 tokens, 2–4 pairs)"),
                           (axes[1], "held", "held out (33–64 tokens, 4–8 pairs)")):
        for mixer, label, colour in MIXERS:
            rows = [r for r in table if r["mixer"] == mixer]
            if not rows:
                continue
            xs = [r["d_model"] for r in rows]
            mean = [statistics.mean(r[key]) for r in rows]
            lo = [m - min(r[key]) for m, r in zip(mean, rows)]
            hi = [max(r[key]) - m for m, r in zip(mean, rows)]
            ax.errorbar(xs, mean, yerr=[lo, hi], color=colour, marker=None if markers else "o", capsize=3,
                        label=label if ax is axes[0] else None)
            for x, m, r in zip(xs, mean, rows) if markers else ():
                ax.plot(x, m, markers[r["rate"]], color=colour, markersize=6)
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(d) for d in widths])
        ax.set_xlabel("model width d_model")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("sequences with every answer right (%)")
    return fig, axes


def main() -> None:
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE
    out.mkdir(parents=True, exist_ok=True)
    rate = os.environ.get("LR")  # the runs of one rate: named ...-lr<LR>, or without a suffix for the preset's
    runs = [r for r in sorted((results / "runs").glob("*-d*-s*"))
            if (r.name.endswith(f"-lr{rate}") if rate else "-lr" not in r.name)]
    widths = sorted({int(r.name.rsplit("-d", 1)[1].split("-s")[0]) for r in runs})
    steps, devices = setting(runs)
    table = []
    for mixer, label, _ in MIXERS:
        for d in widths:
            found = [b for b in (best(r) for r in runs if r.name.startswith(f"{mixer}-d{d}-s")) if b]
            if not found:
                continue
            val = [float(b["val_acc"]) for b in found]
            held = [float(b["ood_mean"]) for b in found]
            held_tok = [float(b["ood_token_mean"]) for b in found]
            table.append({"mixer": mixer, "label": label, "d_model": d, "seeds": len(found), "val": val,
                          "held": held, "held_tok": held_tok})
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mixer", "d_model", "seeds", "val_acc_by_seed", "held_out_by_seed", "held_out_token_by_seed"])
        for r in table:
            w.writerow([r["mixer"], r["d_model"], r["seeds"], " ".join(f"{x:.1f}" for x in r["val"]),
                        " ".join(f"{x:.1f}" for x in r["held"]), " ".join(f"{x:.1f}" for x in r["held_tok"])])

    lines = ["| model | d_model | seeds | val. acc. 16–32 tokens | held-out acc. 33–64 tokens | held-out per answer |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['d_model']} | {r['seeds']} | {ms(r['val'])} | {ms(r['held'])} | "
              f"{ms(r['held_tok'])} |" for r in table]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, axes = panels(table, widths, figsize=(11.5, 3.8))
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8, title="mixer",
               title_fontsize=8)  # beside the panels, where it hides no line
    fig.suptitle(f"MQAR against model width (2 layers, {steps} steps, lr {rate or '3e-3'}; {devices}); "
                 "mean over seeds, bars min–max", fontsize=10)
    fig.savefig(out / "width.png", dpi=110)


if __name__ == "__main__":
    main()
