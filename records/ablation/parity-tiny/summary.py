"""The alignment ablation on running parity, its three grids read as one: `summary.md` (every mixer and cell, mean ±
standard deviation over seeds and each seed's held-out accuracy) and `summary.png` (whole strings right on the
trained and the held-out lengths, per mixer and cell, each seed a dot). Each grid is a folder written by
`lab ablate alignment` (`alignment.csv`, `alignment_per_length.csv`); a mixer with no finished run is left out.

    python records/ablation/parity-tiny/summary.py            # this folder's grids, written here
    python records/ablation/parity-tiny/summary.py DIR [OUT]  # grids under DIR
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
# (folder, the mixer's row label here): each grid's own options, which its alignment.md names in its command
GRIDS = (
    ("defaults", {"falcon-1.3": "Falcon-1.3 (ctxη, gain < 2)",
                  "falcon-1a.3": "Falcon-1A.3 (inner product)",
                  "deltanet": "DeltaNet (β < 1)"}),
    ("falcon-1-ctxbeta", {"falcon-1": "Falcon-1 (.1 settings, ctxβ < 2)"}),
    ("deltanet-beta2", {"deltanet": "DeltaNet (β < 2)"}),
)
CELLS = ("raw/shifted", "raw/same_time", "rbw/shifted", "rbw/same_time")
CELL_NAMES = {"raw/shifted": "RAW · shifted", "raw/same_time": "RAW · same-time", "rbw/shifted": "RBW · shifted",
              "rbw/same_time": "RBW · same-time"}
COLOURS = ("#1b6ca8", "#7fb3d5", "#c0392b", "#f1948a")


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def per_seed(rows: list[dict[str, str]], lengths: range) -> dict[tuple[str, str], dict[int, float]]:
    """(mixer, cell) -> seed -> the mean whole-string accuracy over `lengths` at the run's best step."""
    acc: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in rows:
        if int(r["length"]) in lengths:
            acc.setdefault((r["row"], r["cell"]), {}).setdefault(int(r["seed"]), []).append(float(r["teacher_forced"]))
    return {key: {s: statistics.fmean(v) for s, v in seeds.items()} for key, seeds in acc.items()}


def spread(values: list[float]) -> str:
    if not values:
        return "—"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.1f} ± {sd:.1f}"


def collect(root: Path) -> list[dict]:
    out = []
    for folder, labels in GRIDS:
        grid = root / folder
        if not (grid / "alignment.csv").is_file():
            continue
        table = read(grid / "alignment.csv")
        lengths = read(grid / "alignment_per_length.csv")
        val_span, held_span = table[0]["val_lengths"], table[0]["held_lengths"]
        lo, hi = (int(x) for x in val_span.split("–"))
        hlo, hhi = (int(x) for x in held_span.split("–"))
        val, held = per_seed(lengths, range(lo, hi + 1)), per_seed(lengths, range(hlo, hhi + 1))
        for mixer, label in labels.items():
            for cell in CELLS:
                row = next((r for r in table if r["row"] == mixer and r["cell"] == cell), None)
                if row is None or int(row["runs"]) == 0:
                    continue
                out.append({"grid": folder, "mixer": mixer, "label": label, "cell": cell,
                            "default": row["default"] == "True", "runs": int(row["runs"]),
                            "val": val.get((mixer, cell), {}), "held": held.get((mixer, cell), {}),
                            "reach": f"{float(row['reach_mean']):.1f} ± {float(row['reach_std'] or 0):.1f}",
                            "token_held": f"{float(row['token_ood_mean_mean']):.1f}",
                            "spans": (val_span, held_span)})
    return out


def write_markdown(rows: list[dict], out: Path) -> None:
    val_span, held_span = rows[0]["spans"]
    lines = [f"| model | cell | runs | val. acc. {val_span} | held-out acc. {held_span} | held-out by seed "
             f"| held-out per token | reach |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = CELL_NAMES[r["cell"]] + (" (default)" if r["default"] else "")
        seeds = " / ".join(f"{r['held'][s]:.1f}" for s in sorted(r["held"]))
        lines.append(f"| {r['label']} | {cell} | {r['runs']} | {spread(list(r['val'].values()))} "
                     f"| {spread(list(r['held'].values()))} | {seeds} | {r['token_held']} | {r['reach']} |")
    text = ("Written by `summary.py` from the grids' `alignment.csv` and `alignment_per_length.csv`: whole strings "
            "right (%) at each run's best step (highest whole-string accuracy on the trained lengths), mean ± "
            "standard deviation over seeds; held-out per token: the grid's mean; reach: the longest length up to "
            "which every length is right in ≥ 95% of samples.\n\n" + "\n".join(lines) + "\n")
    (out / "summary.md").write_text(text, encoding="utf-8")


def draw(rows: list[dict], out: Path) -> None:
    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    width = 0.2
    for ax, key, title in ((axes[0], "val", "trained lengths"), (axes[1], "held", "held-out lengths")):
        span = rows[0]["spans"][0 if key == "val" else 1]
        for i, label in enumerate(labels):
            for j, cell in enumerate(CELLS):
                r = next((x for x in rows if x["label"] == label and x["cell"] == cell), None)
                if r is None:
                    continue
                values = [r[key][s] for s in sorted(r[key])]
                x = i + (j - 1.5) * width
                ax.bar(x, statistics.fmean(values), width * 0.9, color=COLOURS[j],
                       edgecolor="black" if r["default"] else "none", linewidth=1.2,
                       label=CELL_NAMES[cell] if i == 0 and ax is axes[0] else None)
                ax.scatter([x] * len(values), values, s=12, color="black", zorder=3)
        ax.set_ylabel(f"whole strings right, %\n({title} {span})")
        ax.set_ylim(0, 102)
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_xticks(range(len(labels)))
    axes[1].set_xticklabels([label.replace(" (", "\n(") for label in labels], fontsize=9)
    axes[0].legend(ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle("Running parity (parity-tiny): timing × write pairing; bars the mean over three seeds, dots the "
                 "seeds, framed the mixer's own cell", y=0.995, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "summary.png", dpi=120)
    plt.close(fig)


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else root
    rows = collect(root)
    if not rows:
        sys.exit(f"summary.py: no finished runs under {root}")
    write_markdown(rows, out)
    draw(rows, out)
    print((out / "summary.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
