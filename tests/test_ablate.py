"""`lab ablate alignment`: the plan (four cells per mixer, distinct runs, the default cell shared with
`lab reproduce addition`), the table's differences from the default cell, refusals, and one tiny run
end to end on a CPU with a rerun that skips what is finished."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from falcon_lab.ablate.alignment import (
    CELLS,
    DEFAULT_MIXERS,
    Cell,
    ablatable_mixers,
    cell_of,
    default_cell,
    parse_mixers,
    plan,
)
from falcon_lab.ablate.alignment_table import summary_rows
from falcon_lab.cli import app
from falcon_lab.reproduce import addition as reproduce
from falcon_lab.reproduce.jobs import Job
from falcon_lab.runs import Registry

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_four_cells_in_the_order_of_the_design() -> None:
    assert [c.name for c in CELLS] == ["raw/shifted", "raw/same_time", "rbw/shifted", "rbw/same_time"]
    assert [c.label for c in CELLS] == ["RAW · shifted", "RAW · same-time", "RBW · shifted", "RBW · same-time"]


def test_every_recurrent_mixer_takes_the_ablation_and_the_transformer_does_not() -> None:
    accepted = ablatable_mixers()
    assert set(DEFAULT_MIXERS) <= set(accepted)
    assert "transformer" not in accepted
    assert {"falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a"} <= set(accepted)


def test_default_cells_are_each_papers_own() -> None:
    for mixer in ("falcon-1a.3", "falcon-3a.3", "falcon-1.3"):
        assert default_cell(mixer) == Cell("raw", "shifted")
    for mixer in ("deltanet", "gated-deltanet", "mamba2", "retnet"):
        assert default_cell(mixer) == Cell("raw", "same_time")


def test_plan_has_four_distinct_cells_per_mixer_and_seed() -> None:
    jobs = plan("tiny", ["falcon-1a.3", "deltanet"], seeds=2, max_steps=7, overrides=["optim.lr=1e-3"])
    assert len(jobs) == 2 * 2 * 4
    assert len({j.run_id for j in jobs}) == len(jobs)
    assert [j.cfg.train.seed for j in jobs] == [0] * 8 + [1] * 8
    for seed in (0, 1):
        for mixer in ("falcon-1a.3", "deltanet"):
            mine = [j for j in jobs if j.cfg.mixer == mixer and j.cfg.train.seed == seed]
            assert [cell_of(j) for j in mine] == list(CELLS)
            assert [j.label for j in mine] == [f"{mixer} {c.name}" for c in CELLS]
    assert all(j.cfg.train.max_steps == 7 and j.cfg.optim.lr == 1e-3 and j.cfg.eval.enabled for j in jobs)


def test_the_default_cell_is_the_reproduce_run_itself() -> None:
    # Cells set only the options that differ from the mixer's defaults, so the default cell's config,
    # and with it the run id, is that of `lab reproduce addition`: one run serves both tables.
    jobs = {(j.cfg.mixer, cell_of(j)): j for j in plan("tiny", ["falcon-1a.3", "deltanet"], seeds=1)}
    rows = {j.cfg.mixer: j for j in reproduce.plan("tiny", reproduce.parse_rows("falcon-1a.3,deltanet"), seeds=1)}
    for mixer, default in (("falcon-1a.3", Cell("raw", "shifted")), ("deltanet", Cell("raw", "same_time"))):
        assert jobs[(mixer, default)].run_id == rows[mixer].run_id
        assert jobs[(mixer, default)].cfg.model.mixer_options == {}
    assert jobs[("falcon-1a.3", Cell("rbw", "same_time"))].cfg.model.mixer_options == {
        "timing": "rbw", "alignment": "same_time"}
    assert jobs[("deltanet", Cell("raw", "shifted"))].cfg.model.mixer_options == {"alignment": "shifted"}


def test_cells_keep_the_presets_row_settings_but_their_own_timing_and_pairing() -> None:
    # same-time gives the Falcon rows same-time writes, no gate, no ridge: every cell keeps the gate off and
    # λ̄ = 0, the cells set the pairing, and the RAW/same-time cell is the table's run
    jobs = {cell_of(j): j for j in plan("same-time", ["falcon-1.3"], seeds=1)}
    row = reproduce.plan("same-time", reproduce.parse_rows("falcon-1.3"), seeds=1)[0]
    assert jobs[Cell("raw", "same_time")].run_id == row.run_id
    assert jobs[Cell("raw", "shifted")].cfg.model.mixer_options == {"output_gate": False, "ridge": "const_lambda",
                                                                      "lam": 0.0}
    assert jobs[Cell("rbw", "shifted")].cfg.model.mixer_options["timing"] == "rbw"
    assert len({j.run_id for j in jobs.values()}) == 4
    # the tiny preset's digit positions for falcon-1.3 hold in its cells too, and its RBW/same-time cell is the
    # table's run
    tiny = {cell_of(j): j for j in plan("tiny", ["falcon-1.3"], seeds=1)}
    (table_run,) = reproduce.plan("tiny", reproduce.parse_rows("falcon-1.3"), 1)
    assert tiny[Cell("rbw", "same_time")].run_id == table_run.run_id
    assert all(j.cfg.model.isolate_samples and j.cfg.model.n_heads == 2 for j in tiny.values())
    assert tiny[Cell("raw", "shifted")].cfg.model.mixer_options == {"output_gate": False, "ridge": "const_lambda",
                                                                      "lam": 0.0, "conv": False}


def test_set_may_not_move_a_cell() -> None:
    for item in ("model.mixer_options.timing=rbw", "model.mixer_options.alignment=shifted"):
        with pytest.raises(ValueError, match="--set may not change model.mixer_options.timing or .alignment"):
            plan("tiny", ["deltanet"], seeds=1, overrides=[item])


def test_parse_mixers_keeps_order_drops_repeats_and_names_what_is_accepted() -> None:
    assert parse_mixers(None) == list(DEFAULT_MIXERS)
    assert parse_mixers(" retnet, falcon-1a.3,retnet ") == ["retnet", "falcon-1a.3"]
    with pytest.raises(ValueError, match=r"mixer 'transformer' has no timing or alignment to ablate; the ablation "
                                         r"takes the recurrent mixers: .*falcon-1a\.3"):
        parse_mixers("falcon-1a.3,transformer")
    with pytest.raises(ValueError, match="unknown mixer 'nope'; the ablation takes the recurrent mixers"):
        parse_mixers("nope")
    with pytest.raises(ValueError, match="--mixers is empty"):
        parse_mixers(" , ")


def _run(job: Job, **metrics: float) -> dict[str, Any]:
    """A finished run's record as `finished_runs` makes it."""
    return {"job": job, "seed": job.cfg.train.seed, "metrics": metrics, "registry": {"n_params": 1000}}


def test_table_rows_hold_mean_std_and_the_difference_from_the_default_cell() -> None:
    jobs = plan("tiny", ["deltanet", "falcon-1a.3"], seeds=2)
    by = {(j.cfg.mixer, cell_of(j).name, j.cfg.train.seed): j for j in jobs}
    runs = [
        _run(by[("deltanet", "raw/same_time", 0)], best_ood_mean=10.0, best_val_acc=50.0),
        _run(by[("deltanet", "raw/same_time", 1)], best_ood_mean=20.0, best_val_acc=70.0),
        _run(by[("deltanet", "raw/shifted", 0)], best_ood_mean=40.0, best_val_acc=55.0),
        _run(by[("falcon-1a.3", "rbw/shifted", 0)], best_ood_mean=5.0),
    ]
    table = summary_rows(jobs, runs)
    assert [(r["row"], r["cell"]) for r in table] == [(m, c.name) for m in ("deltanet", "falcon-1a.3") for c in CELLS]
    rows = {(r["row"], r["cell"]): r for r in table}
    base = rows[("deltanet", "raw/same_time")]
    assert base["default"] and (base["runs"], base["planned"]) == (2, 2)
    assert base["ood_mean_mean"] == 15.0 and base["ood_mean_std"] == pytest.approx(7.0710678)
    assert base["ood_mean_delta"] == 0.0
    shifted = rows[("deltanet", "raw/shifted")]
    assert not shifted["default"] and shifted["ood_mean_delta"] == 25.0 and shifted["val_acc_delta"] == -5.0
    assert shifted["ood_mean_std"] is None  # one seed: no spread
    assert rows[("deltanet", "rbw/shifted")]["ood_mean_delta"] is None  # no runs
    # falcon-1a.3's default cell has no runs: no difference can be taken.
    assert rows[("falcon-1a.3", "rbw/shifted")]["ood_mean_mean"] == 5.0
    assert rows[("falcon-1a.3", "rbw/shifted")]["ood_mean_delta"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--mixers", "transformer"], ("lab ablate: mixer 'transformer' has no timing or alignment to ablate; "
                                   "the ablation takes the recurrent mixers: ")),
    (["--mixers", "falcon-1a.3,nope"], "lab ablate: unknown mixer 'nope'; the ablation takes"),
    (["--preset", "huge"], "lab ablate: unknown preset 'huge'; accepted: addition-cpu, addition-paper"),
    (["--seeds", "0"], "lab ablate: --seeds must be >= 1, got 0"),
    (["--set", "model.mixer_options.alignment=same_time"], "lab ablate: --set may not change"),
])
def test_mistakes_are_one_line_with_exit_2_and_nothing_run(args: list[str], message: str, tmp_path: Path) -> None:
    code, text = invoke("ablate", "alignment", "--preset", "tiny", *args, "--results", str(tmp_path))
    assert code == 2
    assert text.count("\n") == 1 and text.startswith(message) and "Traceback" not in text
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ablation").exists()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread for the tiny runs: on a small shared machine more threads only contend."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


ARGS = ["ablate", "alignment", "--preset", "tiny", "--mixers", "falcon-1a.3", "--max-steps", "10"]


@pytest.mark.usefixtures("one_thread")
def test_tiny_ablation_end_to_end_then_a_rerun_skips_what_is_finished(tmp_path: Path) -> None:
    code, text = invoke(*ARGS, "--results", str(tmp_path))
    assert code == 0, text
    out = tmp_path / "ablation" / "tiny"
    planned = 4 * len(DEFAULT_MIXERS)
    assert f"table: {out / 'alignment.md'} (4 of {planned} planned runs finished)" in text
    assert text.count("finished in") == 4
    table = read_csv(out / "alignment.csv")
    mine = [r for r in table if r["row"] == "falcon-1a.3"]
    assert [r["cell"] for r in mine] == [c.name for c in CELLS]
    assert [r["default"] for r in mine] == ["True", "False", "False", "False"]
    assert all(r["runs"] == "1" and float(r["best_step_mean"]) == 10.0 for r in mine)
    assert all(r["runs"] == "0" for r in table if r["row"] != "falcon-1a.3")
    for r in mine:
        assert float(r["ood_mean_delta"]) == pytest.approx(float(r["ood_mean_mean"]) - float(mine[0]["ood_mean_mean"]))
    per_width = read_csv(out / "alignment_per_width.csv")
    assert len(per_width) == 4 * 2 * 10  # four runs, best and last, the tiny preset's widths 1-10
    assert {r["cell"] for r in per_width} == {c.name for c in CELLS}
    markdown = (out / "alignment.md").read_text()
    assert f"`lab ablate alignment --preset tiny --mixers falcon-1a.3 --max-steps 10 --results {tmp_path}`" in markdown
    assert "| RAW · shifted (default) | 1/1 |" in markdown and "| RBW · same-time | 1/1 |" in markdown
    assert "| Val. acc. 1–6 | Δ | Mean 7–10 | Δ | Acc@7 | Δ | Acc@10 |" in markdown  # the runs' own widths
    assert "Not yet run: falcon-3a.3, falcon-1.3" in markdown
    registry = Registry(tmp_path / "lab.db")
    stamps = [r["updated_at"] for r in registry.rows()]
    assert len(stamps) == 4

    code, text = invoke(*ARGS, "--results", str(tmp_path))
    assert code == 0, text
    assert text.count("finished before") == 4 and "finished in" not in text
    assert [r["updated_at"] for r in registry.rows()] == stamps

    code, text = invoke("plot", "ablation", "--table", str(out), "--train-widths", "1-6")
    assert code == 0, text
    for name in ("alignment.png", "alignment_per_width.png"):
        assert f"figure: {out / name}" in text and (out / name).stat().st_size > 10_000


def test_on_a_synthetic_task_the_default_cell_is_the_reproduce_run_itself() -> None:
    from falcon_lab.reproduce import sequences

    jobs = {(j.cfg.mixer, cell_of(j)): j for j in plan("mqar-tiny", ["falcon-1a.3", "deltanet"], seeds=1,
                                                       task="mqar")}
    assert len(jobs) == 8 and {j.cfg.task for j in jobs.values()} == {"mqar"}
    assert {j.cfg.preset for j in jobs.values()} == {"mqar-tiny"}
    rows = {j.cfg.mixer: j for j in sequences.plan("mqar", ["falcon-1a.3", "deltanet"], seeds=1)}
    assert jobs[("falcon-1a.3", Cell("raw", "shifted"))].run_id == rows["falcon-1a.3"].run_id
    assert jobs[("deltanet", Cell("raw", "same_time"))].run_id == rows["deltanet"].run_id
    assert jobs[("deltanet", Cell("rbw", "shifted"))].cfg.model.mixer_options == {
        "timing": "rbw", "alignment": "shifted"}
    with pytest.raises(ValueError, match="unknown task 'sorting'; the ablation runs on: addition, mqar, parity"):
        plan("mqar-tiny", ["deltanet"], seeds=1, task="sorting")


@pytest.mark.parametrize(("args", "message"), [
    (["--task", "sorting"], "lab ablate: unknown task 'sorting'; the ablation runs on: addition, mqar"),
    (["--task", "parity", "--preset", "tiny"], "lab ablate: --preset tiny is an addition campaign preset; a "
                                               "synthetic task runs its tiny preset (parity-tiny: change it"),
])
def test_a_synthetic_task_refuses_what_it_cannot_run(args: list[str], message: str, tmp_path: Path) -> None:
    code, text = invoke("ablate", "alignment", *args, "--results", str(tmp_path))
    assert code == 2
    assert text.count("\n") == 1 and text.startswith(message) and "Traceback" not in text
    assert not (tmp_path / "runs").exists()


def test_only_keeps_the_tables_to_the_mixers_asked_for(tmp_path: Path) -> None:
    # without --only the table holds every default mixer beside the ones asked for (the tests above); with it,
    # the grid's own mixers alone, so that a declared grid is finished when its own cells are
    from falcon_lab.experiments.declare import AlignmentGrid, check_words

    args = ["ablate", "alignment", "--preset", "tiny", "--mixers", "falcon-1a.3,deltanet", "--only", "--table-only",
            "--results", str(tmp_path)]
    Registry(tmp_path / "lab.db")  # an empty registry: a table of no runs, nothing trained
    code, text = invoke(*args)
    assert code == 0, text
    out = tmp_path / "ablation" / "tiny"
    assert f"table: {out / 'alignment.md'} (0 of 8 planned runs finished)" in text
    assert [(r["row"], r["runs"]) for r in read_csv(out / "alignment.csv")] == [
        (mixer, "0") for mixer in ("falcon-1a.3", "deltanet") for _ in CELLS]
    assert "lab ablate alignment --only --preset tiny --mixers falcon-1a.3,deltanet" in (
        out / "alignment.md").read_text(encoding="utf-8")
    grid = AlignmentGrid(preset="tiny", mixers=("falcon-1a.3", "deltanet"), only=True)
    assert grid.words()[:4] == ["lab", "ablate", "alignment", "--only"]
    check_words(grid.words()[1:])


@pytest.mark.usefixtures("one_thread")
def test_an_option_some_mixers_lack_ablates_the_ones_that_take_it(tmp_path: Path) -> None:
    # falcon-1 with ctxβ and ℓ2 keys on parity: the baselines have no such options, so they leave the plan
    # (and the table) rather than refuse the campaign
    args = ["ablate", "alignment", "--task", "parity", "--mixers", "falcon-1", "--seeds", "1", "--max-steps", "2",
            "--set", "model.mixer_options.gain=ctx_beta", "--set", "model.mixer_options.qk_norm=l2",
            "--set", "train.val_every=2", "--results", str(tmp_path), "--out", str(tmp_path / "grid")]
    code, text = invoke(*args)
    assert code == 0, text
    takers = [m for m in DEFAULT_MIXERS if m.startswith("falcon-")]
    assert f"(4 of {4 * (len(takers) + 1)} planned runs finished)" in text
    table = read_csv(tmp_path / "grid" / "alignment.csv")
    assert {r["row"] for r in table} == {*takers, "falcon-1"}
    assert [r["runs"] for r in table if r["row"] == "falcon-1"] == ["1"] * 4


@pytest.mark.usefixtures("one_thread")
def test_mqar_ablation_end_to_end_writes_its_tables_and_heat_maps(tmp_path: Path) -> None:
    args = ["ablate", "alignment", "--task", "mqar", "--mixers", "deltanet", "--seeds", "1", "--max-steps", "6",
            "--set", "train.val_every=3", "--results", str(tmp_path)]
    code, text = invoke(*args)
    assert code == 0, text
    out = tmp_path / "ablation" / "mqar"
    assert f"table: {out / 'alignment.md'} (4 of {4 * len(DEFAULT_MIXERS)} planned runs finished)" in text
    table = [r for r in read_csv(out / "alignment.csv") if r["row"] == "deltanet"]
    assert [(r["cell"], r["default"], r["runs"]) for r in table] == [
        (c.name, str(c == Cell("raw", "same_time")), "1") for c in CELLS]
    assert {(r["val_lengths"], r["held_lengths"]) for r in table} == {("16–32", "33–64")}
    base = next(r for r in table if r["default"] == "True")
    for r in table:
        assert float(r["val_acc_delta"]) == pytest.approx(float(r["val_acc_mean"]) - float(base["val_acc_mean"]))
        assert 0.0 <= float(r["token_ood_mean_mean"]) <= 100.0
    per_length = read_csv(out / "alignment_per_length.csv")
    assert {r["cell"] for r in per_length} == {c.name for c in CELLS}
    assert sorted({int(r["length"]) for r in per_length}) == [*range(16, 33), *range(33, 65)]
    markdown = (out / "alignment.md").read_text()
    assert "# Ablation: timing × write pairing on mqar" in markdown
    assert "| DeltaNet | RAW · same-time (default) | 1/1 |" in markdown
    assert "`lab ablate alignment --task mqar --mixers deltanet --seeds 1 --max-steps 6 --set train.val_every=3" in markdown

    code, text = invoke("plot", "ablation", "--table", str(out))
    assert code == 0, text
    assert f"figure: {out / 'alignment.png'}" in text and (out / "alignment.png").stat().st_size > 10_000
