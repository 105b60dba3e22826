"""`lab plot addition` and `lab plot ablation` from small synthetic CSVs: the PNGs, their panels, the
seed bands, the framed default cell, and one-line errors for missing or malformed tables."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.plots.ablation import heatmap
from falcon_lab.plots.addition import draw_curves, palette, parse_widths

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PNG = b"\x89PNG\r\n\x1a\n"
CELLS = (("raw", "shifted"), ("raw", "same_time"), ("rbw", "shifted"), ("rbw", "same_time"))


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def per_width(rows: dict[str, int], per_token: bool = True, cells: bool = False) -> pd.DataFrame:
    """A per_width.csv: for each row its number of seeds, best and last step, widths 1-48."""
    records = []
    for i, (row, seeds) in enumerate(rows.items()):
        for cell in ([f"{t}/{a}" for t, a in CELLS] if cells else [None]):
            for seed in range(seeds):
                for which in ("best", "last"):
                    for n in range(1, 49):
                        record = {"row": row, "seed": seed, "run_id": f"r{i}{seed}", "which": which, "step": 100,
                                  "width": n, "teacher_forced": max(0.0, 100.0 - 2 * n - 5 * seed - i),
                                  "free_running": ""}
                        if per_token:
                            record["per_token"] = 100.0 - n
                        if cell is not None:
                            record["cell"] = cell
                        records.append(record)
    return pd.DataFrame(records)


def alignment(mixers: dict[str, tuple[str, str]], runs: int = 1) -> pd.DataFrame:
    """An alignment.csv: four cells per mixer, its default cell given."""
    records = []
    for i, (mixer, default) in enumerate(mixers.items()):
        for j, (timing, pairing) in enumerate(CELLS):
            records.append({"row": mixer, "model": mixer, "timing": timing, "alignment": pairing,
                            "cell": f"{timing}/{pairing}", "default": (timing, pairing) == default, "runs": runs,
                            "planned": 1, "val_acc_mean": 90.0 - j, "val_acc_std": 1.5,
                            "ood_mean_mean": 40.0 + 10 * j + i, "ood_mean_std": "",
                            "token_ood_mean_mean": 70.0, "token_ood_mean_std": ""})
    return pd.DataFrame(records)


def assert_png(path: Path) -> Image.Image:
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000
    return Image.open(path)


def drawn(monkeypatch: pytest.MonkeyPatch, module: str) -> dict[str, Figure]:
    """The figures `module` saves, by file name, kept as they are written (the PNGs still written)."""
    import importlib

    target = importlib.import_module(module)
    figures: dict[str, Figure] = {}
    save = target.save_png

    def keep(fig: Figure, path: Path, source: str, command: str) -> Path:
        figures[path.name] = fig
        return save(fig, path, source, command)

    monkeypatch.setattr(target, "save_png", keep)
    return figures


def lines_of(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_addition_figure_has_a_panel_per_row_and_a_per_token_line_only_when_the_csv_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "falcon_lab.plots.addition")
    with_tokens, without = tmp_path / "a", tmp_path / "b"
    for folder, tokens in ((with_tokens, True), (without, False)):
        folder.mkdir()
        per_width({"transformer": 2, "falcon-1a.3": 1}, per_token=tokens).to_csv(folder / "per_width.csv", index=False)
        code, text = invoke("plot", "addition", "--table", str(folder))
        assert code == 0, text
        assert text.strip() == f"figure: {folder / 'per_width.png'}"
        axes = [ax for ax in figures["per_width.png"].axes if ax.get_visible()]
        assert [ax.get_title() for ax in axes] == ["transformer\n2 seeds", "falcon-1a.3\n1 seed"]
        assert lines_of(axes[0]) == (["whole answer", "per token"] if tokens else ["whole answer"])
    two = assert_png(with_tokens / "per_width.png")
    assert two.text["Description"] == f"Remade by `lab plot addition --table {with_tokens}` from the repository root."
    assert two.text["Source"] == (with_tokens / "per_width.csv").as_posix()


def test_thirteen_rows_are_thirteen_panels_named_as_the_table_names_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Panels named from table.csv's `model` column (per_width.csv without one), four to a row, bands
    within 0-100 however wide the spread."""
    figures = drawn(monkeypatch, "falcon_lab.plots.addition")
    rows = {f"falcon-{i}": 2 for i in range(13)}
    frame = per_width(rows)
    frame.loc[frame["seed"] == 1, "teacher_forced"] = 0.0  # seeds 100 apart: mean ± std past 0 and 100
    frame.to_csv(tmp_path / "per_width.csv", index=False)
    pd.DataFrame({"row": list(rows), "model": [f"Falcon-{i}A (QK-RMSNorm, ctxη-ctxλ)" for i in range(13)]}).to_csv(
        tmp_path / "table.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path))
    assert code == 0, text
    fig = figures["per_width.png"]
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 13 and len(fig.axes) == 16
    assert axes[12].get_title() == "Falcon-12A\n(QK-RMSNorm, ctxη-ctxλ)\n2 seeds"
    for ax in axes:
        for band in (c for c in ax.collections if isinstance(c, PolyCollection)):
            ys = band.get_paths()[0].vertices[:, 1]
            assert ys.min() >= 0 and ys.max() <= 100


def test_the_trained_widths_come_from_the_runs_configs_and_are_never_assumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "falcon_lab.plots.addition")
    per_width({"transformer": 1}).to_csv(tmp_path / "per_width.csv", index=False)  # no `trained` column
    code, text = invoke("plot", "addition", "--table", str(tmp_path))
    assert code == 0, text
    legend = [t.get_text() for t in figures["per_width.png"].legends[0].get_texts()]
    assert "trained widths: not recorded" in legend and not any("1–32" in t for t in legend)
    run = tmp_path / "runs" / "r00"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("task: addition\ndata:\n  widths:\n  - 1\n  - 6\n")
    code, text = invoke("plot", "addition", "--table", str(tmp_path))
    assert code == 0, text
    legend = [t.get_text() for t in figures["per_width.png"].legends[0].get_texts()]
    assert "trained widths 1–6" in legend


def test_addition_figure_goes_to_out_and_shades_the_given_widths(tmp_path: Path) -> None:
    per_width({"retnet": 1}).to_csv(tmp_path / "per_width.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path), "--out", str(tmp_path / "figs"),
                        "--train-widths", "1-8")
    assert code == 0, text
    assert_png(tmp_path / "figs" / "per_width.png")
    assert not (tmp_path / "per_width.png").exists()
    assert parse_widths("1-8") == (1, 8)
    for bad in ("8", "0-4", "9-3", "1-49", "a-b"):
        with pytest.raises(ValueError, match="--train-widths .* accepted: LO-HI with 1 <= LO <= HI <= 48"):
            parse_widths(bad)


def progress(rows: dict[str, int]) -> pd.DataFrame:
    """A progress.csv: for each row its number of seeds, evaluations every 100 steps to 500."""
    return pd.DataFrame([
        {"row": row, "seed": seed, "run_id": f"r{i}{seed}", "status": "finished", "step": step,
         "train_width": min(8, step // 50), "widths": min(8, step // 100 + seed), "val_acc": step / 10 + seed,
         "val_token_acc": 50.0, "ood_mean": 0.0}
        for i, (row, seeds) in enumerate(rows.items()) for seed in range(seeds) for step in range(100, 600, 100)])


def test_a_progress_figure_joins_when_the_table_has_progress_csv(tmp_path: Path) -> None:
    per_width({"transformer": 2, "falcon-1.3": 1}).to_csv(tmp_path / "per_width.csv", index=False)
    progress({"transformer": 2, "falcon-1.3": 1}).to_csv(tmp_path / "progress.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path), "--out", str(tmp_path / "f"))
    assert code == 0, text
    assert text.split() == ["figure:", str(tmp_path / "f" / "per_width.png"),
                            "figure:", str(tmp_path / "f" / "progress.png")]
    image = assert_png(tmp_path / "f" / "progress.png")
    assert image.text["Source"] == (tmp_path / "progress.csv").as_posix()
    # a malformed progress.csv: one line naming it, and no figure at all
    frame = progress({"transformer": 1}).astype(object)
    frame.loc[2, "widths"] = "many"
    frame.to_csv(tmp_path / "progress.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path), "--out", str(tmp_path / "g"))
    assert code == 2 and text.count("\n") == 1
    assert text.startswith(f"lab plot: {tmp_path}/progress.csv: column 'widths' holds 'many' on line 4")
    assert not (tmp_path / "g").exists()


def test_a_heat_map_joins_when_progress_csv_holds_each_widths_accuracy(tmp_path: Path) -> None:
    import numpy as np

    from falcon_lab.plots.addition import step_edges, width_columns

    per_width({"transformer": 2, "falcon-1.3": 1}).to_csv(tmp_path / "per_width.csv", index=False)
    frame = progress({"transformer": 2, "falcon-1.3": 1})
    for n in range(1, 11):  # widths 1..10, answered up to the curriculum's front
        frame[f"tf@{n}"] = np.where(n <= frame["train_width"], 100.0, 0.0)
    frame.loc[frame["row"] == "falcon-1.3", "tf@10"] = np.nan  # a width not evaluated for one row: an empty cell
    frame.to_csv(tmp_path / "progress.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path), "--out", str(tmp_path / "f"))
    assert code == 0, text
    assert text.split()[-2:] == ["figure:", str(tmp_path / "f" / "heatmap.png")]
    assert assert_png(tmp_path / "f" / "heatmap.png").text["Source"] == (tmp_path / "progress.csv").as_posix()
    assert list(width_columns(frame)) == list(range(1, 11))
    assert step_edges([100, 200, 400]) == [50.0, 150.0, 300.0, 500.0] and step_edges([7]) == [6.5, 7.5]
    # a cell that is not a number: one line naming it, and no figure
    frame = frame.astype({"tf@4": object})
    frame.loc[3, "tf@4"] = "most"
    frame.to_csv(tmp_path / "progress.csv", index=False)
    code, text = invoke("plot", "addition", "--table", str(tmp_path), "--out", str(tmp_path / "g"))
    assert code == 2 and "progress.csv: column 'tf@4' holds 'most' on line 5" in text
    assert not (tmp_path / "g").exists()


def test_the_progress_figure_draws_every_run_and_marks_the_stopped_ones() -> None:
    import matplotlib.pyplot as plt

    from falcon_lab.plots.addition import draw_runs, palette

    frame = progress({"two-seeds": 2, "one-seed": 1})
    frame = frame[~((frame["seed"] == 1) & (frame["step"] > 300))].copy()  # seed 1 stopped at step 300
    frame.loc[frame["seed"] == 1, "status"] = "stopped"
    fig, ax = plt.subplots()
    draw_runs(ax, frame, "val_acc", palette(["two-seeds", "one-seed"]))
    runs = [line for line in ax.lines if line.get_linestyle() != "None"]
    marks = [line for line in ax.lines if line.get_marker() == "x"]
    assert [len(line.get_xdata()) for line in runs] == [5, 3, 5]  # no mean across the stopped seed
    assert [line.get_linestyle() for line in runs] == ["-", "--", "-"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [300]
    assert [line.get_label() for line in runs if not line.get_label().startswith("_")] == [
        "two-seeds (2 seeds)", "one-seed"]
    plt.close(fig)


def test_a_run_is_styled_and_named_by_its_seed_not_its_rank() -> None:
    import matplotlib.pyplot as plt

    from falcon_lab.plots.addition import draw_runs, palette, seed_styles

    frame = progress({"two-seeds": 2})
    frame["seed"] += 1  # seeds 1 and 2 of a row whose seed 0 is not there
    fig, ax = plt.subplots()
    draw_runs(ax, frame, "val_acc", palette(["two-seeds"]))
    assert [line.get_linestyle() for line in ax.lines] == ["--", ":"]
    assert seed_styles(frame["seed"].unique()) == [("--", "seed 1"), (":", "seed 2")]
    assert seed_styles([0, 3, 5]) == [("-", "seed 0"), ("-.", "seeds 3–5")]
    plt.close(fig)


def test_a_band_for_rows_with_several_seeds_and_none_for_one() -> None:
    frame = per_width({"two-seeds": 2, "one-seed": 1})
    frame = frame[frame["which"] == "best"]
    ax = Figure().subplots()
    draw_curves(ax, frame, "teacher_forced", "row", palette(["two-seeds", "one-seed"]))
    assert [line.get_label() for line in ax.get_lines()] == ["two-seeds (2 seeds)", "one-seed"]
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    mean = ax.get_lines()[0].get_ydata()
    assert mean[0] == pytest.approx((98.0 + 93.0) / 2)  # width 1, seeds 0 and 1


def test_ablation_figures_from_the_ablation_tables(tmp_path: Path) -> None:
    alignment({"falcon-1a.3": ("raw", "shifted"), "deltanet": ("raw", "same_time")}).to_csv(
        tmp_path / "alignment.csv", index=False)
    code, text = invoke("plot", "ablation", "--table", str(tmp_path))
    assert code == 0, text
    assert text.strip() == f"figure: {tmp_path / 'alignment.png'}"  # no per-width CSV, no curves
    heatmaps = assert_png(tmp_path / "alignment.png")
    per_width({"falcon-1a.3": 1, "deltanet": 1}, cells=True).to_csv(tmp_path / "alignment_per_width.csv", index=False)
    code, text = invoke("plot", "ablation", "--table", str(tmp_path))
    assert code == 0, text
    assert f"figure: {tmp_path / 'alignment_per_width.png'}" in text
    assert_png(tmp_path / "alignment_per_width.png")
    assert heatmaps.size[1] > heatmaps.size[0] * 0.4  # two mixers stacked


def test_a_heatmap_frames_the_default_cell_and_reads_mean_and_std() -> None:
    frame = alignment({"deltanet": ("raw", "same_time")}).astype({"default": str})
    ax = Figure().subplots()
    heatmap(ax, frame, "val_acc", "deltanet")
    # Columns RBW, RAW; rows same-time, shifted (the paper's Fig. 11): RAW/same-time is row 0, column 1.
    (frame_patch,) = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert frame_patch.get_xy() == pytest.approx((1 - 0.47, 0 - 0.47))
    texts = {(t.get_position()): t.get_text() for t in ax.texts}
    assert texts[(1, 0)] == "89.0\n± 1.5"  # raw/same_time is the second cell: 90 - 1
    assert texts[(0, 1)] == "88.0\n± 1.5"  # rbw/shifted


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder


GOOD_HEADER = "row,seed,which,width,teacher_forced"


@pytest.mark.parametrize(("name", "text", "message"), [
    (None, None, "per_width.csv: no such file; make it with `lab reproduce addition`"),
    ("per_width.csv", "row,seed,which,width\nx,0,best,1\n",
     "per_width.csv: missing column 'teacher_forced'; expected columns: row, which, seed, width, teacher_forced"),
    ("per_width.csv", f"{GOOD_HEADER}\nx,0,best,1,50\nx,0,best,2,lots\n",
     "per_width.csv: column 'teacher_forced' holds 'lots' on line 3, not a number"),
    ("per_width.csv", f"{GOOD_HEADER}\n", "per_width.csv: no rows"),
    ("per_width.csv", "", "per_width.csv: not a readable CSV file"),
    ("per_width.csv", f"{GOOD_HEADER}\nx,0,last,1,50\n", "per_width.csv: no rows with which=best"),
    ("per_width.csv", f"{GOOD_HEADER}\nx,0,best,60,50\n", "per_width.csv: column 'width' holds 60; accepted: 1 to 48"),
])
def test_addition_refuses_a_missing_or_malformed_csv_in_one_line(name: str | None, text: str | None, message: str,
                                                                 tmp_path: Path) -> None:
    folder = _write(tmp_path / "t", name, text) if name else tmp_path / "t"
    code, out = invoke("plot", "addition", "--table", str(folder))
    assert code == 2
    assert out.count("\n") == 1 and out.startswith(f"lab plot: {folder}/{message}"), out
    assert not list(tmp_path.rglob("*.png"))


@pytest.mark.parametrize(("change", "message"), [
    ({"timing": "sideways"}, "alignment.csv: column 'timing' holds 'sideways'; accepted: rbw, raw"),
    ({"runs": 0}, "alignment.csv: no mixer has a finished run yet"),
    ({"ood_mean_mean": "high"}, "alignment.csv: column 'ood_mean_mean' holds 'high' on line 2, not a number"),
])
def test_ablation_refuses_a_malformed_csv_in_one_line(change: dict[str, object], message: str,
                                                      tmp_path: Path) -> None:
    frame = alignment({"retnet": ("raw", "same_time")})
    for column, value in change.items():
        frame[column] = frame[column].astype(object)
        frame.loc[0 if column != "runs" else slice(None), column] = value
    frame.to_csv(tmp_path / "alignment.csv", index=False)
    code, out = invoke("plot", "ablation", "--table", str(tmp_path))
    assert code == 2
    assert out.count("\n") == 1 and out.startswith(f"lab plot: {tmp_path}/{message}"), out
    assert not list(tmp_path.glob("*.png"))


def test_ablation_names_a_missing_column(tmp_path: Path) -> None:
    alignment({"retnet": ("raw", "same_time")}).drop(columns="ood_mean_mean").to_csv(
        tmp_path / "alignment.csv", index=False)
    code, out = invoke("plot", "ablation", "--table", str(tmp_path))
    assert code == 2 and "alignment.csv: missing column 'ood_mean_mean'" in out


def test_ablation_figures_name_the_mixers_and_the_widths_as_the_tables_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "falcon_lab.plots.ablation")
    frame = alignment({"falcon-1a.3": ("raw", "shifted")})
    frame["model"] = "Falcon-1A.3 (QK-RMSNorm, ctxη-ctxλ)"
    frame["acc7_mean"], frame["acc10_mean"] = 0.0, 0.0  # held out 7-10: validated on 1-6
    frame.to_csv(tmp_path / "alignment.csv", index=False)
    per_width({"falcon-1a.3": 1}, cells=True).to_csv(tmp_path / "alignment_per_width.csv", index=False)
    (tmp_path / "alignment.md").write_text("Preset `addition-tiny`: 100 steps; train widths 1–8; evaluated ...\n")
    code, text = invoke("plot", "ablation", "--table", str(tmp_path))
    assert code == 0, text
    heat = figures["alignment.png"]
    assert heat.subfigs[0]._suptitle.get_text() == "Falcon-1A.3 (QK-RMSNorm, ctxη-ctxλ)"
    titles = [ax.get_title() for ax in heat.subfigs[0].axes if ax.get_title()]
    assert titles == ["Val. acc. (widths 1–6)", "Mean 7–10", "Per-token mean 7–10"]
    curves = figures["alignment_per_width.png"]
    legend = [t.get_text() for t in curves.legends[0].get_texts()]
    assert legend == ["trained widths 1–8", "held out 33–48"]  # from alignment.md's preset line
    cells = [t.get_text() for t in curves.axes[-1].get_legend().get_texts()]
    assert cells == ["RAW · shifted (default)", "RAW · same-time", "RBW · shifted", "RBW · same-time"]


def test_the_sweep_figures_have_no_empty_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from falcon_lab.plots.sweep import plot_pairs, plot_slice

    figures = drawn(monkeypatch, "falcon_lab.plots.sweep")
    trials = pd.DataFrame({"number": range(8), "value": [30.0 + i for i in range(8)], "state": "COMPLETE",
                           "params_lr": [1e-4 * 2 ** i for i in range(8)], "params_depth": [2, 3, 4, 2, 3, 4, 2, 3],
                           "params_rule": ["falcon-1", "falcon-2"] * 4})
    trials.loc[8] = {"number": 8, "value": None, "state": "FAIL", "params_lr": 1.0, "params_depth": 9,
                     "params_rule": "falcon-3"}
    plot_slice(trials, tmp_path / "slice.png", "val_acc", "test", "test")
    plot_pairs(trials, ["lr", "depth", "rule"], tmp_path / "contour.png", "val_acc", "test", "test")
    for name, count in (("slice.png", 3), ("contour.png", 3)):
        panels = [ax for ax in figures[name].axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
        assert len(panels) == count
        for ax in panels:
            (points,) = [c for c in ax.collections if c.get_offsets().shape[0] > 0 and c.get_array() is not None
                         and c.get_offsets().shape[0] == 8]
            assert points.get_offsets().shape[0] == 8  # every complete trial, the failed one left out
    lr_depth = figures["contour.png"].axes[0]
    assert lr_depth.get_xscale() == "log" and len(lr_depth.collections) > 1  # a filled contour beneath the points
    assert [t.get_text() for t in figures["slice.png"].axes[2].get_xticklabels()] == ["falcon-1", "falcon-2"]


def test_a_long_row_name_breaks_before_its_settings_and_at_their_semicolons() -> None:
    from falcon_lab.plots.grid import two_lines

    assert two_lines("DeltaNet") == "DeltaNet"
    assert two_lines("Falcon-1A.3 (QK-RMSNorm, ctxη-ctxλ)") == "Falcon-1A.3\n(QK-RMSNorm, ctxη-ctxλ)"
    assert two_lines("Falcon-1A.1 (QK-ℓ2, ctxβ, λ̄ = 0; same-time writes, no output gate)") == (
        "Falcon-1A.1\n(QK-ℓ2, ctxβ, λ̄ = 0;\nsame-time writes, no output gate)")
