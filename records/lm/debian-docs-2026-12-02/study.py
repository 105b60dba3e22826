"""Six mixers on the Debian documentation corpus on one GPU (`records/device/lm_gpu.sh`): the table of each run's
steps, tokens, losses, validation perplexity and tokens/s, and the training-loss figure.

    python records/lm/debian-docs-2026-12-02/study.py [CALL [OUT]]   # CALL: the call's extracted lm.tgz (runs/,
                                                                    # bench-1024/, bench-4096/; default: this
                                                                    # folder); writes table.md, table.csv, loss.png
                                                                    # to OUT (default: this folder)
Per run (CALL/runs/<mixer>/): steps and tokens from run.json (a run stopped by the call's limit says so), the last
logged training loss (one batch; its step where that is not the last) from metrics.csv, tokens seen as steps ×
rows × row length (config.yaml), the NLL and perplexity over the whole val shard from
perplexity.json (`lab eval ppl`; the val shard's entry, whatever its name), and the training rate from step 20 (the
first rows hold compilation) to the last logged row, evaluation excluded, beside the mean number of runs training on
the GPU over that stretch (from every run's run.json times, to the second). The step alone at 1K and 4K context
comes from CALL/bench-<T>/step.csv (`lab bench step`), with each mixer's tokens/s as a fraction of the
transformer's. The paper's rows (Table 1, FineWeb-Edu, 124-130M parameters, ~49.2B tokens) are printed beside,
from falcon_lab.reproduce.fineweb_rows: other data, size and budget, not comparable in absolute value.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml
from falcon_lab.compact import open_text

HERE = Path(__file__).resolve().parent
MIXERS = (("transformer", "Transformer", "tab:grey"), ("mamba2", "Mamba-2", "tab:olive"),
          ("deltanet", "DeltaNet", "tab:green"), ("gated-deltanet", "Gated DeltaNet", "tab:cyan"),
          ("falcon-1a.3", "Falcon-1A.3", "tab:blue"), ("falcon-3a.3", "Falcon-3A.3", "tab:purple"))
CONTEXTS = (1024, 4096)
STEADY_FROM = 20  # the first logged rows include torch.compile's first compilation


def metrics(run: Path) -> list[dict[str, float]]:
    rows = []
    for row in csv.DictReader(open_text(run / "metrics.csv")):
        rows.append({k: float(v) for k, v in row.items() if v not in ("", None)})
    return rows


def val_entry(run: Path) -> dict | None:
    """The val shard's entry of perplexity.json: the one scored on the shard folder (no --text file)."""
    path = run / "perplexity.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    found = [v for k, v in saved.items() if k.endswith("-val")]
    return found[0] if found else None


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def steady_rate(rows: list[dict[str, float]]) -> tuple[float, float, float] | None:
    """(tokens/s, start, end) from the row at STEADY_FROM to the last row with tokens; times in the run's own
    seconds since its first step (elapsed_s), evaluation excluded from the rate."""
    logged = [r for r in rows if "tokens" in r]
    first = next((r for r in logged if r["step"] >= STEADY_FROM), None)
    last = logged[-1] if logged else None
    if first is None or last is None or last["step"] <= first["step"]:
        return None
    busy = (last["elapsed_s"] - last["eval_s"]) - (first["elapsed_s"] - first["eval_s"])
    return (last["tokens"] - first["tokens"]) / busy, first["elapsed_s"], last["elapsed_s"]


def at_once(window: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    """Mean number of spans covering the window, sampled every second."""
    lo, hi = window
    ticks = [lo + i for i in range(max(int(hi - lo), 1))]
    return sum(sum(a <= t < b for a, b in spans) for t in ticks) / len(ticks)


def bench(call: Path, ctx: int) -> dict[str, float]:
    path = call / f"bench-{ctx}" / "step.csv"
    if not path.exists():
        return {}
    return {r["mixer"]: float(r["tokens_per_s"]) for r in csv.DictReader(open(path))}


def main() -> None:
    call = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE
    out.mkdir(parents=True, exist_ok=True)
    runs = {m: call / "runs" / m for m, _, _ in MIXERS if (call / "runs" / m / "run.json").exists()}
    info = {m: json.loads((r / "run.json").read_text()) for m, r in runs.items()}
    spans = {m: (when(i["created_at"]), when(i["updated_at"])) for m, i in info.items()}
    speeds = {ctx: bench(call, ctx) for ctx in CONTEXTS}
    table, curves = [], {}
    for mixer, label, _ in MIXERS:
        if mixer not in runs:
            continue
        run, i = runs[mixer], info[mixer]
        prov = json.loads((run / "provenance.json").read_text())
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        per_step = cfg["train"]["batch_size"] * cfg["data"]["seq_len"] * prov.get("world_size", 1)
        rows = metrics(run)
        curves[mixer] = rows
        losses = [r for r in rows if "loss" in r]
        ppl = val_entry(run)
        rate = steady_rate(rows)
        shared = None
        if rate is not None:  # the run's steady stretch in wall-clock time: its end is run.json's updated_at
            end = spans[mixer][1] - (losses[-1]["elapsed_s"] - rate[2])
            shared = at_once((end - (rate[2] - rate[1]), end), list(spans.values()))
        row = {"mixer": mixer, "label": label, "params": prov.get("n_params"), "status": i["status"],
               "steps": i["steps"], "max_steps": i["max_steps"], "tokens_seen": i["steps"] * per_step,
               "final_train_loss": losses[-1]["loss"], "final_train_loss_step": int(losses[-1]["step"]), "val_nll": ppl and ppl["nll"], "val_ppl": ppl and ppl["ppl"],
               "val_tokens": ppl and ppl["tokens"], "train_tokens_per_s_shared": rate and rate[0],
               "runs_at_once": shared}
        for ctx in CONTEXTS:
            alone, base = speeds[ctx].get(mixer), speeds[ctx].get("transformer")
            row[f"step_tokens_per_s_{ctx}"] = alone
            row[f"ratio_to_transformer_{ctx}"] = alone / base if alone and base else None
        table.append(row)

    keys = ["mixer", "params", "status", "steps", "max_steps", "tokens_seen", "final_train_loss", "final_train_loss_step", "val_nll", "val_ppl",
            "val_tokens", "train_tokens_per_s_shared", "runs_at_once",
            *(f"{k}_{ctx}" for ctx in CONTEXTS for k in ("step_tokens_per_s", "ratio_to_transformer"))]
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(table)

    def num(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    lines = ["| model | params | steps | tokens seen | final train loss | val NLL | val ppl | train tok/s "
             "(shared; runs at once) | step tok/s alone, 1K | × transformer, 1K | step tok/s alone, 4K | "
             "× transformer, 4K |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        steps = f"{r['steps']}/{r['max_steps']}" + (" (stopped)" if r["status"] != "finished" else "")
        lines.append(
            f"| {r['label']} | {r['params'] / 1e6:.1f}M | {steps} | {r['tokens_seen'] / 1e6:.2f}M | "
            f"{r['final_train_loss']:.3f}{'' if r['final_train_loss_step'] == r['steps'] else ' (step ' + str(r['final_train_loss_step']) + ')'} | {num(r['val_nll'], '.4f')} | {num(r['val_ppl'], '.2f')} | "
            f"{num(r['train_tokens_per_s_shared'] and r['train_tokens_per_s_shared'] / 1e3, ',.0f')}k "
            f"({num(r['runs_at_once'], '.1f')}) | "
            + " | ".join(f"{num(r[f'step_tokens_per_s_{c}'] and r[f'step_tokens_per_s_{c}'] / 1e3, ',.0f')}k | "
                         f"{num(r[f'ratio_to_transformer_{c}'], '.2f')}" for c in CONTEXTS) + " |")
    paper = ["", "The paper's rows beside (Table 1: FineWeb-Edu, 124–130M parameters, 100k steps × 480 × 1024 ≈ "
             "49.2B tokens; other data, size and budget, not comparable in absolute value):", "",
             "| model (paper) | Wiki. ppl | LAMBADA ppl | FineWeb-Edu val ppl |", "|---|---|---|---|"]
    try:
        from falcon_lab.reproduce.fineweb_rows import ROW_BY_NAME
        paper += [f"| {ROW_BY_NAME[r['mixer']].label} | {ROW_BY_NAME[r['mixer']].paper.wiki:.2f} | "
                  f"{ROW_BY_NAME[r['mixer']].paper.lambada:.2f} | {ROW_BY_NAME[r['mixer']].paper.fineweb:.2f} |"
                  for r in table if r["mixer"] in ROW_BY_NAME]
    except ImportError:  # outside the lab's environment: the table without the paper's rows
        paper = []
    (out / "table.md").write_text("\n".join(lines + paper) + "\n")
    print("\n".join(lines + paper))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for ax, zoom in ((axes[0], False), (axes[1], True)):
        for mixer, label, colour in MIXERS:
            if mixer not in curves:
                continue
            rows = [r for r in curves[mixer] if "loss" in r]
            ax.plot([r["tokens"] / 1e6 for r in rows], [r["loss"] for r in rows], color=colour, lw=1.6,
                    marker="." if zoom else None, label=label)
            if zoom:
                vals = [(r["step"], r["val_loss"]) for r in curves[mixer] if "val_loss" in r]
                per_step = rows[0]["tokens"] / rows[0]["step"]
                ax.plot([s * per_step / 1e6 for s, _ in vals], [v for _, v in vals], color=colour, ls="none",
                        marker="D", mfc="white", ms=7, mew=1.6, zorder=4)
        ax.set_xlabel("training tokens seen (millions)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("training loss (nats/token, one batch)")
    axes[0].set_title("whole run", fontsize=10)
    axes[1].set_xlim(3.5, 10.2)
    axes[1].set_ylim(3.2, 4.8)
    axes[1].set_title("from 3.5M tokens (validation: the val shard's first 64 windows)", fontsize=10)
    axes[0].legend(fontsize=9, loc="upper right")
    axes[1].legend(handles=[plt.Line2D([], [], color="black", marker=".", lw=1.6, label="training loss, every 10 steps"),
                            plt.Line2D([], [], color="black", marker="D", mfc="white", ls="none",
                                       label="validation loss, steps 150 and last")], fontsize=9, loc="upper right")
    meta = json.loads((next(iter(runs.values())) / "provenance.json").read_text()) if runs else {}
    fig.suptitle(f"Six mixers, ~45–51M parameters, on Debian's documentation (GPT-2 BPE, rows of 1024, 32 a step); "
                 f"{meta.get('device', '?')}, commit {meta.get('commit', '?')}, {meta.get('date', '?')[:10]}",
                 fontsize=10)
    fig.savefig(out / "loss.png", dpi=110)


if __name__ == "__main__":
    main()
