"""MQAR against model width with each mixer at its own learning rate, as zoology draws it: for every mixer and
width the rate whose runs answer the train lengths best (mean over seeds of the whole-sequence accuracy at each
run's best step; the held-out lengths play no part in the choice), then that rate's train and held-out accuracy.

    python records/tasks/mqar_width/best_rate.py OUT RESULTS [RESULTS ...]

Each RESULTS holds runs/ named `<mixer>-d<d_model>-s<seed>-lr<LR>` (`run.sh` with LR set); a run without the
suffix is taken at the `mqar-tiny` preset's 3e-3. Writes table.md, table.csv and width.png to OUT. A rate counts
for a mixer and width only with as many seeds as the most any rate has there, so no rate wins on fewer seeds.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study import MIXERS, best, ms, panels, setting  # noqa: E402

PRESET_RATE = "3e-3"


def parse(name: str) -> tuple[str, int, int, str]:
    """`<mixer>-d<d>-s<seed>[-lr<LR>]` -> (mixer, d, seed, rate)."""
    stem, _, rate = name.partition("-lr")
    mixer, rest = stem.rsplit("-d", 1)
    d, seed = rest.split("-s")
    return mixer, int(d), int(seed), rate or PRESET_RATE


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cells: dict[tuple[str, int, str], list[dict]] = defaultdict(list)
    runs = [run for results in map(Path, sys.argv[2:]) for run in sorted((results / "runs").glob("*-d*-s*"))]
    for run in runs:
        b = best(run)
        if b is not None:
            mixer, d, _, rate = parse(run.name)
            cells[mixer, d, rate].append(b)
    rates = sorted({r for _, _, r in cells}, key=float)
    widths = sorted({d for _, d, _ in cells})
    table = []
    for mixer, label, _ in MIXERS:
        for d in widths:
            here = {r: cells[mixer, d, r] for r in rates if cells.get((mixer, d, r))}
            if not here:
                continue
            most = max(len(v) for v in here.values())
            mean_val = {r: statistics.mean(float(b["val_acc"]) for b in v) for r, v in here.items() if len(v) == most}
            chosen = max(mean_val, key=lambda r: (mean_val[r], -float(r)))  # ties: the lower rate
            found = here[chosen]
            table.append({"mixer": mixer, "label": label, "d_model": d, "rate": chosen,
                          "seeds": len(found), "val_by_rate": mean_val,
                          "val": [float(b["val_acc"]) for b in found],
                          "held": [float(b["ood_mean"]) for b in found],
                          "held_tok": [float(b["ood_token_mean"]) for b in found]})

    with open(out / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mixer", "d_model", "rate", "seeds", "val_acc_by_seed", "held_out_by_seed",
                    "held_out_token_by_seed", *(f"mean_val_acc_lr{r}" for r in rates)])
        for r in table:
            w.writerow([r["mixer"], r["d_model"], r["rate"], r["seeds"], " ".join(f"{x:.1f}" for x in r["val"]),
                        " ".join(f"{x:.1f}" for x in r["held"]), " ".join(f"{x:.1f}" for x in r["held_tok"]),
                        *(f"{r['val_by_rate'][x]:.1f}" if x in r["val_by_rate"] else "" for x in rates)])
    head = " | ".join(f"val. at {x}" for x in rates)
    lines = [f"| model | d_model | rate chosen | seeds | val. acc. 16–32 tokens | held-out acc. 33–64 tokens | "
             f"held-out per answer | {head} |", "|---|---|---|---|---|---|---|" + "---|" * len(rates)]
    lines += [f"| {r['label']} | {r['d_model']} | {r['rate']} | {r['seeds']} | {ms(r['val'])} | {ms(r['held'])} | "
              f"{ms(r['held_tok'])} | "
              + " | ".join(f"{r['val_by_rate'][x]:.1f}" if x in r["val_by_rate"] else "–" for x in rates) + " |"
              for r in table]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    steps, devices = setting(runs)
    markers = dict(zip(rates, "os^Dv"))
    fig, axes = panels(table, widths, figsize=(11.5, 3.8), markers=markers)
    fig.legend(loc="outside right upper", fontsize=8, title="mixer", title_fontsize=8)
    handles = [axes[1].plot([], [], markers[r], color="black", linestyle="none")[0] for r in rates]
    fig.legend(handles, [f"lr {r}" for r in rates], loc="outside right lower", fontsize=8, title="rate chosen",
               title_fontsize=8)
    fig.suptitle("MQAR against model width, each mixer at the rate that fits the train lengths best "
                 f"(of {', '.join(rates)})\n2 layers, {steps} steps; {devices}; mean over seeds, bars min–max",
                 fontsize=10)
    fig.savefig(out / "width.png", dpi=110)


if __name__ == "__main__":
    main()
