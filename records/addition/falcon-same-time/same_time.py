"""The table and figure of the falcon-same-time calls: the paper's Falcon variants with the output gate off, in the
isolated-offsets setting (samples apart, half of them with digit indices offset by 0-64; the packed-exact schedule:
6 x 384, 2000 steps, ramp over 1500, lr 1e-3, 65k tokens a step), one H200.

First falcon-1.3's write pairing and ridge, two at a time (seed 0; with the falcon-options run `f13-nogate-ab64-s0`
the four cells shifted/same-time x ctxλ/λ̄ = 0), then three seeds of falcon-1.3, falcon-1a.3 and falcon-1a.1 with
same-time writes and λ̄ = 0. Each run's options come from its own config.yaml (falcon-options/options.py reads them).
For each run: the best step by whole answers over widths 1-32 (the paper's selection) and, there and at the last
evaluation, whole answers and per-token accuracy over widths 33-48; for each configuration with three seeds, the
median and range. The references: DeltaNet's three seeds at the same setting (../isolated-offsets) and falcon-1
with all of DeltaNet's options (../falcon-options). Left of the figure: the four pairing x ridge cells of
falcon-1.3 by step; right: per width 20-48 at the best step, every seeded run (each answers every width 1-20 whole).

    python records/addition/falcon-same-time/same_time.py   # writes summary.csv, seeds.csv, same_time.png
"""

import importlib.util
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import yaml
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
ADDITION = HERE.parent
_spec = importlib.util.spec_from_file_location("falcon_options", ADDITION / "falcon-options" / "options.py")
falcon_options = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(falcon_options)

WIDTHS = range(1, 49)
REFERENCES = [ADDITION / "isolated-offsets" / "runs" / f"dn-iso-ab64-s{s}" for s in range(3)] + [
    ADDITION / "falcon-options" / "runs" / r for r in ("f1-dnopts-ab64-s0", "f13-nogate-ab64-s0")]


def load(folder: Path) -> tuple[dict, pd.DataFrame]:
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    ev = pd.read_csv(readable(folder / "evals.csv"))
    best, last = ev.loc[ev["val_acc"].idxmax()], ev.iloc[-1]
    opts = falcon_options.options(cfg)
    config = folder.name.rsplit("-s", 1)[0]
    row = dict(run=folder.name, config=config, reference=folder.parent.parent != HERE, mixer=cfg["mixer"],
               seed=cfg["train"]["seed"], **opts, best_step=int(best["step"]), last_step=int(last["step"]),
               val_acc=round(best["val_acc"], 1), last_val_acc=round(last["val_acc"], 1),
               widths_answered=sum(best[f"tf@{w}"] >= 96 for w in range(1, 33)),
               ood_mean=round(best["ood_mean"], 1), ood_token_mean=round(best["ood_token_mean"], 1),
               last_ood_mean=round(last["ood_mean"], 1), acc_33=round(best["tf@33"], 1),
               acc_40=round(best["tf@40"], 1), acc_48=round(best["tf@48"], 1))
    return row, ev


def main() -> None:
    loaded = [load(f) for f in sorted((HERE / "runs").iterdir()) + REFERENCES]
    table = pd.DataFrame([row for row, _ in loaded])
    table.to_csv(HERE / "summary.csv", index=False)

    print("| run | mixer | QK norm | gain | ridge | pairing | output gate | best step (last) | val. acc. 1-32 (last) | "
          "widths 1-32 answered | 33-48 (per token) | last 33-48 | @33 | @40 | @48 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table.sort_values(["reference", "config", "seed"]).itertuples():
        ref = " (ref.)" if r.reference else ""
        print(f"| `{r.run}`{ref} | {r.mixer} | {r.qk_norm} | {r.gain} | {r.ridge} | {r.pairing} | "
              f"{'on' if r.gate else 'off'} | {r.best_step} ({r.last_step}) | {r.val_acc} ({r.last_val_acc}) | "
              f"{r.widths_answered} | {r.ood_mean} ({r.ood_token_mean}) | {r.last_ood_mean} | {r.acc_33} | "
              f"{r.acc_40} | {r.acc_48} |")

    seeded = table.groupby("config").filter(lambda g: len(g) >= 3)
    seeds = seeded.groupby("config", sort=False).agg(
        mixer=("mixer", "first"), runs=("run", "size"), val_acc_median=("val_acc", "median"),
        val_acc_min=("val_acc", "min"), val_acc_max=("val_acc", "max"), ood_median=("ood_mean", "median"),
        ood_min=("ood_mean", "min"), ood_max=("ood_mean", "max"), ood_mean=("ood_mean", "mean"),
        ood_std=("ood_mean", "std"), last_ood_median=("last_ood_mean", "median"),
        token_median=("ood_token_mean", "median")).round(1).reset_index()
    seeds.to_csv(HERE / "seeds.csv", index=False)
    print("\n| configuration | runs | val. acc. 1-32: median (range) | 33-48 at the best step: median (range) | "
          "mean ± sd | last step: median | per token: median |")
    print("|---|---|---|---|---|---|---|")
    for r in seeds.itertuples():
        print(f"| `{r.config}` ({r.mixer}) | {r.runs} | {r.val_acc_median} ({r.val_acc_min}–{r.val_acc_max}) | "
              f"{r.ood_median} ({r.ood_min}–{r.ood_max}) | {r.ood_mean} ± {r.ood_std} | {r.last_ood_median} | "
              f"{r.token_median} |")

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 7.4), constrained_layout=True)
    cells = {"f13-nogate-ab64-s0": ("shifted, ctxλ", "C3"), "f13-nogate-lam0-ab64-s0": ("shifted, λ̄ = 0", "C1"),
             "f13-nogate-same-ab64-s0": ("same-time, ctxλ", "C2"),
             "f13-nogate-same-lam0-ab64-s0": ("same-time, λ̄ = 0", "C0")}
    colours = {"falcon-1.3": "C0", "falcon-1a.3": "C4", "falcon-1a.1": "C2", "deltanet": "0.55", "falcon-1": "0.2"}
    for row, ev in loaded:
        if row["run"] in cells:
            label, colour = cells[row["run"]]
            left.plot(ev["step"], ev["val_acc"], marker="o", ms=3, color=colour, lw=1.9,
                      label=f"{label} ({row['run']}: {row['ood_mean']} over 33–48)")
        if row["config"].endswith("same-lam0-ab64") or row["reference"] and row["run"] != "f13-nogate-ab64-s0":
            best = ev.loc[ev["val_acc"].idxmax()]
            ref = "ref.: " if row["reference"] else ""
            right.plot(WIDTHS, [best[f"tf@{w}"] for w in WIDTHS], color=colours[row["mixer"]],
                       ls=":" if row["reference"] else "-", lw=1.4 if row["reference"] else 1.8,
                       label=f"{ref}{row['mixer']} seed {row['seed']}: {row['ood_mean']}")
    left.set(xlabel="step", ylabel="whole answers right, widths 1–32 (%)", ylim=(0, 101), xlim=(0, 2050),
             title="falcon-1.3, gate off, seed 0: write pairing × ridge")
    left.legend(loc="lower right", fontsize=9)
    right.axvspan(32.5, 48.5, color="0.92", zorder=0)
    right.text(36, 104, "untrained widths 33–48", fontsize=9, color="0.3")
    right.set(xlabel="operand width (digits; every run answers widths 1–20 whole)",
              ylabel="whole answers right at the best step (%)", ylim=(-2, 110), xlim=(20, 48), xticks=range(20, 49, 2),
              title="same-time, λ̄ = 0, gate off: per width at the best step (legend: mean 33–48)")
    right.legend(loc="lower left", fontsize=8, ncol=2)
    fig.suptitle("The paper's Falcon variants with the output gate off, samples apart, digit indices offset by 0–64 "
                 "(one H200, 11.6M parameters):\nshifted writes stop the fit; with same-time writes and no ridge "
                 "falcon-1.3, falcon-1a.3 and falcon-1a.1 fit widths 1–32 and answer past them")
    fig.savefig(HERE / "same_time.png", dpi=120)


if __name__ == "__main__":
    main()
