"""The table and figure of the falcon-options calls: falcon-1 between falcon-1.3's options and DeltaNet's, one
option at a time, in the isolated-offsets setting (samples apart, half of them with digit indices offset by 0-64;
the packed-exact schedule: 6 x 384, 2000 steps, ramp over 1500, lr 1e-3, 65k tokens a step), one H200.

Each run's options are read from its own config.yaml over the Falcon defaults and its variant (``.1/.3``), so the
table says what was trained. For each run: the best step by whole answers over widths 1-32 (the paper's selection)
and, there and at the last evaluation, whole answers and per-token accuracy over widths 33-48. The references are
the three DeltaNet runs at the same setting and falcon-1.3 with its own options (offset 0-32) from
../isolated-offsets. Left of the figure: widths 1-32 by step; right: per width 1-48 at the best step.

    python records/addition/falcon-options/options.py   # writes summary.csv and options.png, prints the tables
"""

import sys
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from falcon_lab.mixers.falcon import VARIANTS, FalconOptions  # noqa: E402
from falcon_lab.compact import readable  # noqa: E402

WIDTHS = range(1, 49)
REFERENCES = ["dn-iso-ab64-s0", "dn-iso-ab64-s1", "dn-iso-ab64-s2", "f13-iso-ab32-s0"]


def options(cfg: dict) -> dict:
    """The options that differ between falcon-1.3 and DeltaNet, as this run trained them."""
    mixer = cfg["model"]["mixer"] if "mixer" in cfg.get("model", {}) else cfg["mixer"]
    given = cfg["model"].get("mixer_options") or {}
    if mixer in ("deltanet",):  # DeltaNet's fixed choices (falcon_lab/mixers/deltanet.py)
        return dict(rule="delta", qk_norm="l2", gain="β ≤ 1", ridge="none", pairing=given.get("alignment", "same_time"),
                    gate=given.get("output_gate", False))
    rule, _, variant = mixer.partition(".")
    opts = asdict(FalconOptions()) | VARIANTS.get(variant, {}) | given
    gain = (f"ctxβ ≤ {opts['beta_max']:g}" if opts["gain"] == "ctx_beta" else
            f"ctxη ≤ {opts['eta_max']:g}" if opts["gain"] == "ctx_eta" else f"β = {opts['beta']:g}")
    ridge = "ctxλ" if opts["ridge"] == "ctx_lambda" else f"λ̄ = {opts['lam']:g}"
    return dict(rule=rule, qk_norm=opts["qk_norm"], gain=gain, ridge=ridge, pairing=opts["alignment"],
                gate=opts["output_gate"])


def load(folder: Path) -> tuple[dict, pd.DataFrame]:
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    ev = pd.read_csv(readable(folder / "evals.csv"))
    best, last = ev.loc[ev["val_acc"].idxmax()], ev.iloc[-1]
    row = dict(run=folder.name, reference=folder.parent.parent.name != HERE.name, mixer=cfg["mixer"],
               abacus=cfg["model"]["abacus"], seed=cfg["train"]["seed"], **options(cfg),
               best_step=int(best["step"]), last_step=int(last["step"]), val_acc=round(best["val_acc"], 1),
               widths_answered=sum(best[f"tf@{w}"] >= 96 for w in range(1, 33)),
               ood_mean=round(best["ood_mean"], 1), ood_token_mean=round(best["ood_token_mean"], 1),
               last_ood_mean=round(last["ood_mean"], 1), acc_33=round(best["tf@33"], 1),
               acc_40=round(best["tf@40"], 1))
    return row, ev


def main() -> None:
    folders = sorted((HERE / "runs").iterdir()) + [HERE.parent / "isolated-offsets" / "runs" / r for r in REFERENCES]
    loaded = [load(f) for f in folders]
    table = pd.DataFrame([row for row, _ in loaded])
    table.to_csv(HERE / "summary.csv", index=False)

    print("| run | mixer | QK norm | gain | ridge | pairing | output gate | best step (last) | val. acc. 1-32 | "
          "widths 1-32 answered | 33-48 (per token) | last 33-48 | @33 | @40 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table.sort_values(["reference", "val_acc"], ascending=[True, False]).itertuples():
        ref = " (ref.)" if r.reference else ""
        print(f"| `{r.run}`{ref} | {r.mixer} | {r.qk_norm} | {r.gain} | {r.ridge} | {r.pairing} | "
              f"{'on' if r.gate else 'off'} | {r.best_step} ({r.last_step}) | {r.val_acc} | {r.widths_answered} | "
              f"{r.ood_mean} ({r.ood_token_mean}) | {r.last_ood_mean} | {r.acc_33} | {r.acc_40} |")

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 7.4), constrained_layout=True)
    for (row, ev), colour in zip(loaded, ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9", "C9"] + ["0.5"] * 4):
        if row["reference"]:
            style = dict(color="0.55" if row["mixer"] == "deltanet" else "0.2", ls=":", lw=1.4)
            label = f"ref.: {row['mixer']}, own options, offset 0–{row['abacus']}, seed {row['seed']}"
        else:
            style = dict(color=colour, ls="-" if not row["gate"] else "--", lw=1.9)
            label = (f"{row['run'].removesuffix('-ab64-s0')}: {row['qk_norm']}, {row['gain']}, {row['ridge']}, "
                     f"{row['pairing']}, gate {'on' if row['gate'] else 'off'}")
        left.plot(ev["step"], ev["val_acc"], marker="o", ms=3, label=label, **style)
        best = ev.loc[ev["val_acc"].idxmax()]
        right.plot(WIDTHS, [best[f"tf@{w}"] for w in WIDTHS], **style)
    left.set(xlabel="step", ylabel="whole answers right, widths 1–32 (%)", ylim=(0, 101), xlim=(0, 2050),
             title="validation accuracy by step (dashed: output gate on)")
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=8)
    right.axvspan(32.5, 48.5, color="0.92", zorder=0)
    right.text(33.5, 104, "untrained widths 33–48", fontsize=9, color="0.3")
    right.set(xlabel="operand width (digits)", ylabel="whole answers right at the best step (%)", ylim=(-2, 110),
              xlim=(1, 48), title="per width, best step by widths 1–32")
    fig.suptitle("falcon-1 between falcon-1.3's options and DeltaNet's, samples apart, digit indices offset by 0–64 "
                 "(one H200, 11.6M parameters, seed 0):\nwith the output gate on no run fits widths 1–32; with it off "
                 "and same-time writes, no ridge, falcon-1 fits and answers past 32")
    fig.savefig(HERE / "options.png", dpi=120)


if __name__ == "__main__":
    main()
