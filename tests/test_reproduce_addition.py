"""`lab reproduce addition`: the plan, the table's arithmetic, end to end on a CPU (in this process and
as two processes, and one run over two), skipping finished runs, and one-line errors."""

from __future__ import annotations

import csv
import os
import re
import statistics
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, config_hash, read_yaml
from falcon_lab.reproduce import launch
from falcon_lab.reproduce.addition import ROW_NAMES, ROWS, parse_rows, plan
from falcon_lab.reproduce.addition_table import summary_rows
from falcon_lab.reproduce.launch import CODE_ROOT, _child_env, check_slots
from falcon_lab.runs import Registry

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PAPER_ROWS = ["transformer", "retnet", "mamba2", "falcon-1a.1", "falcon-1a.2", "falcon-1a.3", "falcon-3a.3",
              "falcon-1.3"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_rows_hold_the_papers_table_first_with_its_numbers() -> None:
    assert list(ROW_NAMES[:8]) == PAPER_ROWS
    assert all(r.paper is not None for r in ROWS[:8]) and all(r.paper is None for r in ROWS[8:])
    assert {"deltanet", "gated-deltanet", "falcon-2", "falcon-3", "falcon-2a"} <= set(ROW_NAMES)
    f3a = ROWS[ROW_NAMES.index("falcon-3a.3")].paper
    assert (f3a.best_step, f3a.val_acc, f3a.ood_mean, f3a.acc33, f3a.acc48) == (2000, 99.9, 87.2, 100.0, 69.0)
    from falcon_lab.mixers import MIXERS

    assert set(ROW_NAMES) <= set(MIXERS)


def test_parse_rows_keeps_order_drops_repeats_and_names_what_is_accepted() -> None:
    assert [r.name for r in parse_rows(" falcon-1a.3,transformer,falcon-1a.3 ")] == ["falcon-1a.3", "transformer"]
    assert len(parse_rows(None)) == len(ROWS)
    with pytest.raises(ValueError, match="unknown row 'nope'; accepted: transformer, retnet"):
        parse_rows("transformer,nope")
    with pytest.raises(ValueError, match="--rows is empty"):
        parse_rows(" , ")


def test_plan_goes_seed_by_seed_with_one_run_id_per_row_and_seed() -> None:
    jobs = plan("tiny", parse_rows("transformer,mamba2"), seeds=2, max_steps=7, overrides=["optim.lr=1e-3"])
    assert [(j.cfg.train.seed, j.cfg.mixer) for j in jobs] == [(0, "transformer"), (0, "mamba2"),
                                                              (1, "transformer"), (1, "mamba2")]
    assert len({j.run_id for j in jobs}) == 4
    assert all(j.cfg.train.max_steps == 7 and j.cfg.optim.lr == 1e-3 and j.cfg.eval.enabled for j in jobs)
    paper = plan("paper", parse_rows("transformer"), seeds=1)[0].cfg
    assert (paper.train.max_steps, paper.train.batch_size, paper.train.val_every) == (2000, 256, 100)
    assert paper.data.widths == (1, 32) and paper.eval.n_per_length == 100
    # packed: the paper's preset with the curriculum and packed rows, nothing else changed
    packed = plan("packed", parse_rows("transformer"), seeds=1)[0]
    d = packed.cfg.data
    assert (d.curriculum, d.start_width, d.ramp_steps, d.packing, d.seq_len) == ("linear", 1, 1500, True, 256)
    same = plan("paper", parse_rows("transformer"), seeds=1, overrides=[
        "data.curriculum=linear", "data.start_width=1", "data.ramp_steps=1500", "data.packing=true",
        "data.seq_len=256"])[0]
    assert packed.run_id == same.run_id  # the runs made with --preset paper --set ... join its table
    constant = plan("packed-constant", parse_rows("transformer"), seeds=1)[0].cfg
    assert constant.optim.min_lr_ratio == 1.0 and constant.data == packed.cfg.data
    exact = plan("packed-exact", parse_rows("transformer"), seeds=1)[0]
    assert exact.cfg.model.abacus == 0 and exact.cfg.data == packed.cfg.data
    # evaluated as the regime's runs were (records/addition/regime-2026-12-03), so that those runs are this preset's
    exact_settings = ["model.abacus=0", "train.val_every=200", "eval.n_per_length=50", "eval.free_per_length=0",
                      "train.ckpt_every=100000"]
    assert exact.run_id == plan("packed", parse_rows("transformer"), seeds=1, overrides=exact_settings)[0].run_id
    assert plan("packed-exact", parse_rows("falcon-1.3"), seeds=2)[1].run_id == "bc9cce04d6"  # f13-ab0-s1's id
    from falcon_lab.reproduce.addition_table import settings_sentence
    assert "(warm-up 100, cosine to 0.1×)" in settings_sentence([packed])  # the table says which schedule ran
    assert "(warm-up 100, then constant)" in settings_sentence(plan("packed-constant", parse_rows("transformer"), 1))
    later = plan("packed", parse_rows("transformer"), seeds=1, overrides=["data.ramp_steps=1000"])[0]
    assert later.cfg.data.ramp_steps == 1000  # --set goes over the preset's settings
    with pytest.raises(ValueError, match="unknown preset 'huge'; accepted: tiny, paper"):
        plan("huge", ROWS, 1)
    with pytest.raises(ValueError, match="--seeds must be >= 1"):
        plan("tiny", ROWS, 0)
    with pytest.raises(ConfigError, match="unknown key 'optim.lrr'"):
        plan("tiny", ROWS, 1, overrides=["optim.lrr=1"])


def test_isolated_same_time_moves_the_falcon_rows_alone_and_its_runs_are_the_recorded_ones() -> None:
    rows = parse_rows("falcon-1.3,falcon-1a.1,falcon-3,deltanet,gated-deltanet,retnet,transformer")
    same = {j.cfg.mixer: j for j in plan("same-time", rows, seeds=1)}
    offsets = {j.cfg.mixer: j for j in plan("isolated-offsets", rows, seeds=1)}
    for mixer in ("falcon-1.3", "falcon-1a.1", "falcon-3"):
        assert same[mixer].cfg.model.mixer_options == {"output_gate": False, "alignment": "same_time",
                                                       "ridge": "const_lambda", "lam": 0.0}
        assert same[mixer].cfg.data == offsets[mixer].cfg.data and same[mixer].run_id != offsets[mixer].run_id
    for mixer in ("deltanet", "gated-deltanet", "transformer"):  # the baselines keep their own options
        assert same[mixer].run_id == offsets[mixer].run_id
    # but RetNet, which fits the trained widths only without RoPE, goes without it; its seed 0 is the recorded run
    # records/addition/same-time/stopped/5a049f1a2d
    assert same["retnet"].cfg.model.mixer_options == {**offsets["retnet"].cfg.model.mixer_options, "rope": False}
    assert same["retnet"].run_id == "5a049f1a2d"
    # the falcon-same-time runs and isolated-offsets' DeltaNet runs are this preset's (records/addition/same-time)
    ids = {(j.cfg.mixer, j.cfg.train.seed): j.run_id
           for j in plan("same-time", parse_rows("falcon-1.3,falcon-1a.3,deltanet"), seeds=3)}
    assert ids[("falcon-1.3", 0)] == "b75dabe9ce" and ids[("falcon-1a.3", 2)] == "b9a12b086b"
    assert ids[("deltanet", 1)] == "852e77770d"
    forced = plan("same-time", parse_rows("falcon-1.3"), 1, overrides=["model.mixer_options.lam=0.01"])[0]
    assert forced.cfg.model.mixer_options["lam"] == 0.01  # --set goes over the row's settings


def test_the_tiny_preset_trains_widths_1_to_6_and_holds_out_7_to_10_in_a_few_rows() -> None:
    jobs = plan("tiny", parse_rows(None, "tiny"), seeds=2)
    assert [(j.cfg.mixer, j.cfg.train.seed) for j in jobs] == [("transformer", 0), ("falcon-1.3", 0),
                                                               ("transformer", 1), ("falcon-1.3", 1)]
    for job in jobs:
        cfg = job.cfg
        assert cfg.preset == "addition-cpu" and cfg.data.widths == (1, 6) and cfg.eval.enabled
        assert (cfg.eval.widths, cfg.eval.held_out_from) == ((1, 10), 7)
    # the rows' own settings: digit positions and samples kept apart, and no RoPE for the transformer; for
    # falcon-1.3 keys at each digit's own position read before the write, no short convolutions, no ridge or output
    # gate, two heads and its own rate; other rows have none
    transformer, falcon = jobs[0].cfg.model, jobs[1].cfg.model
    assert (transformer.mixer_options, transformer.abacus, transformer.isolate_samples) == ({"rope": False}, 4, True)
    assert (transformer.n_heads, transformer.abacus_ahead, jobs[0].cfg.optim.lr) == (4, False, 2e-3)
    assert jobs[0].cfg.optim.min_lr_ratio == 1.0
    assert falcon.mixer_options == {"output_gate": False, "alignment": "same_time", "ridge": "const_lambda",
                                    "lam": 0.0, "conv": False, "timing": "rbw"}
    assert (falcon.abacus, falcon.isolate_samples, falcon.abacus_ahead, falcon.n_heads) == (4, True, True, 2)
    assert (jobs[1].cfg.optim.lr, jobs[1].cfg.optim.min_lr_ratio) == (1e-3, 0.1)
    # the transformer's cheaper steps: more of them in the time falcon-1.3 takes beside it
    assert (jobs[0].cfg.train.max_steps, jobs[1].cfg.train.max_steps) == (1000, 700)
    (mamba,) = plan("tiny", parse_rows("mamba2"), seeds=1)
    assert (mamba.cfg.model.abacus, mamba.cfg.model.isolate_samples) == (None, False)
    # every row stays at hand, and --set comes after a row's settings
    assert [r.name for r in parse_rows("retnet,transformer", "tiny")] == ["retnet", "transformer"]
    assert len(parse_rows(None, "paper")) == len(ROWS)
    (again,) = plan("tiny", parse_rows("transformer"), seeds=1, overrides=["model.abacus=8"])
    assert again.cfg.model.abacus == 8 and again.cfg.model.isolate_samples


def test_the_tables_name_the_widths_the_runs_were_trained_and_tested_on(tmp_path: Path) -> None:
    from rich.console import Console

    from falcon_lab.reproduce.addition_console import summary_table
    from falcon_lab.reproduce.addition_table import render_markdown, settings_sentence

    def shown(jobs: list) -> tuple[str, str]:
        console = Console(width=250, record=True, file=open(os.devnull, "w"))
        console.print(summary_table(jobs, tmp_path))
        return render_markdown(jobs, summary_rows(jobs, []), [], "lab reproduce addition"), console.export_text()

    wider = plan("tiny", parse_rows("falcon-1.3"), seeds=1,
                 overrides=["data.widths=[1,8]", "eval.widths=[1,12]", "eval.held_out_from=9"])
    markdown, printed = shown(wider)
    assert "| Val. acc. 1–8 | Mean 9–12 | Acc@9 | Acc@12 |" in markdown
    assert "Per-token val. acc. 1–8 | Per-token mean 9–12 | Per-token Acc@9 | Per-token Acc@12" in markdown
    assert "(paper) |" not in markdown and "| Mean 33–48" not in markdown and "Acc@33" not in markdown
    assert "evaluated every 100 steps on widths 1–12 (held out from 9)" in settings_sentence(wider)
    assert "widths 1–8, held out 9–12" in printed and "Widths 1–8" in printed and "Per token 9–12" in printed
    markdown, printed = shown(plan("packed", parse_rows("falcon-1.3"), seeds=1))
    assert "| Val. acc. 1–32 (paper) | Val. acc. 1–32 | Mean 33–48 (paper) | Mean 33–48 |" in markdown
    assert "Held out 33–48" in printed
    # rows of their own settings: the settings sentence names them row by row
    both = settings_sentence(plan("tiny", parse_rows("transformer,falcon-1.3"), seeds=1))
    assert "2 layers, heads by row; steps by row of batch 32, lr by row; train widths" in both
    assert ("Options by row: Transformer (NoPE): 1000 steps, 4 heads, lr 0.002 (warm-up 50, then constant), "
            "rope=False, digit positions (Abacus embeddings) with a random offset of 0–4 in training per sample, "
            "attention within each packed sample; Falcon-1.3 (QK-RMSNorm, ctxη, λ̄ = 0; same-time writes, no output "
            "gate, read before write, no short conv): 700 steps, 2 heads, lr 0.001 (warm-up 50, cosine to 0.1×), "
            "alignment=same_time, conv=False, lam=0.0, output_gate=False, ridge=const_lambda, timing=rbw, digit "
            "positions (Abacus embeddings) with a random offset of 0–4 in training per sample, the answer carrying "
            "the index of the digit it predicts, the state restarted at each packed sample.") in both


def test_the_table_names_the_transformer_without_rope_and_the_digit_positions() -> None:
    from falcon_lab.reproduce.addition import ROW_BY_NAME
    from falcon_lab.reproduce.addition_table import row_label, settings_sentence

    rows = parse_rows("transformer,falcon-1.3")
    plain = plan("packed", rows, seeds=1)
    assert [row_label(ROW_BY_NAME[j.cfg.mixer], j.cfg) for j in plain] == [
        "Transformer (RoPE)", ROW_BY_NAME["falcon-1.3"].label]
    sentence = settings_sentence(plain)
    assert "digit positions" not in sentence and "rope=" not in sentence
    nope = plan("packed", parse_rows("transformer"), seeds=1,
                overrides=["model.mixer_options.rope=false", "model.abacus=32"])
    assert row_label(ROW_BY_NAME["transformer"], nope[0].cfg) == "Transformer (NoPE)"
    # the same-time preset's Falcon rows say what they were given in place of the paper's options
    same = {j.cfg.mixer: row_label(ROW_BY_NAME[j.cfg.mixer], j.cfg)
            for j in plan("same-time", parse_rows("falcon-1a.1,falcon-2,deltanet,retnet"), seeds=1)}
    assert same == {"falcon-1a.1": "Falcon-1A.1 (QK-ℓ2, ctxβ, λ̄ = 0; same-time writes, no output gate)",
                    "falcon-2": "Falcon-2 (.3 settings; λ̄ = 0, same-time writes, no output gate)",
                    "deltanet": "DeltaNet", "retnet": "RetNet (NoPE)"}
    sentence = settings_sentence(nope)
    assert "6 heads, rope=False, digit positions (Abacus embeddings) with a random offset of 0–32 in training;" \
        in sentence
    assert "6 heads, exact digit positions (Abacus embeddings, no random offset);" in settings_sentence(
        plan("packed-exact", parse_rows("transformer"), seeds=1))
    isolated = plan("packed", parse_rows("transformer"), seeds=1,
                    overrides=["model.abacus=32", "model.isolate_samples=true", "eval.abacus_offset=8"])
    assert ("digit positions (Abacus embeddings) with a random offset of 0–32 in training per sample, 8 in "
            "evaluation, attention within each packed sample;") in settings_sentence(isolated)
    both = plan("packed", parse_rows("transformer,falcon-1.3,deltanet"), seeds=1,
                overrides=["model.isolate_samples=true"])
    assert ("packed samples kept apart (attention within each packed sample; the state restarted at each packed "
            "sample, by mixer)") in settings_sentence(both)
    for row in ("falcon-1.3", "deltanet", "retnet", "mamba2", "gated-deltanet"):  # every recurrent row restarts
        one = plan("packed", parse_rows(row), seeds=1, overrides=["model.isolate_samples=true"])
        assert "the state restarted at each packed sample;" in settings_sentence(one), row


def test_widths_answered_counts_widths_in_a_row_from_one_up_to_the_widest_trained() -> None:
    from falcon_lab.reproduce.addition_table import widths_answered

    assert widths_answered({1: 100.0, 2: 95.0, 3: 94.9, 4: 100.0}, widest=32) == 2
    assert widths_answered({n: 100.0 for n in range(1, 49)}, widest=32) == 32  # 33-48 are not trained widths
    assert widths_answered({2: 100.0}, widest=8) == 0 and widths_answered({}, widest=8) == 0
    nineteen_of_twenty = 100.0 * torch.tensor([1.0] * 19 + [0.0]).mean().item()  # a float32 mean: 94.9999988
    assert widths_answered({1: nineteen_of_twenty, 2: nineteen_of_twenty}, widest=8) == 2
    assert widths_answered({1: 80.0, 2: 70.0}, widest=8, threshold=50.0) == 2


def test_a_run_trained_at_the_commits_of_its_last_start_and_the_resumes_since(tmp_path: Path) -> None:
    import json

    from falcon_lab.reproduce.addition_table import trained_commits

    folder = tmp_path / "run"
    folder.mkdir()
    registry = {"commit": "aaaaaaaaaaaaaaaa"}
    # no provenance.json: the registry's commit
    assert trained_commits({"dir": folder, "registry": registry}) == ["aaaaaaaaaaaa"]
    assert trained_commits({"registry": {"commit": None}}) == ["unknown"]
    # begun at one commit, resumed from a checkpoint at another
    (folder / "provenance.json").write_text(json.dumps(
        {"commit": "aaaaaaaaaaaaaaaa", "resumed_from_step": None,
         "resumes": [{"commit": "bbbbbbb", "resumed_from_step": 150}]}))
    assert trained_commits({"dir": folder, "registry": registry}) == ["aaaaaaaaaaaa", "bbbbbbb"]
    # ... then started again from step 0 (its checkpoint lost) at a third, and resumed there: the first two
    # trained nothing of the weights
    (folder / "provenance.json").write_text(json.dumps(
        {"commit": "aaaaaaaaaaaaaaaa", "resumed_from_step": None,
         "resumes": [{"commit": "bbbbbbb", "resumed_from_step": 150}, {"commit": "ccccccc", "resumed_from_step": None},
                     {"commit": "ccccccc", "resumed_from_step": 1214}]}))
    assert trained_commits({"dir": folder, "registry": registry}) == ["ccccccc", "ccccccc"]


def test_a_commit_named_short_and_long_counts_once() -> None:
    from falcon_lab.reproduce.addition_table import distinct_commits

    assert distinct_commits(["c024cda", "b1748169b6c5", "b174816", "c024cda", "unknown"]) == \
        ["b1748169b6c5", "c024cda", "unknown"]
    assert distinct_commits([]) == []


def test_table_rows_are_mean_and_sample_std_over_finished_seeds() -> None:
    jobs = plan("paper", parse_rows("transformer,retnet"), seeds=3)
    values = [61.0, 70.0, 67.0]
    runs = [{"job": j, "seed": j.cfg.train.seed, "registry": {"n_params": 1234},
             "metrics": {"best_step": 100.0 * (j.cfg.train.seed + 1), "best_ood_mean": values[j.cfg.train.seed]}}
            for j in jobs if j.cfg.mixer == "transformer"]
    runs.append({"job": jobs[1], "seed": 0, "registry": {"n_params": 99}, "metrics": {"best_ood_mean": 5.0}})
    transformer, retnet = summary_rows(jobs, runs)
    assert (transformer["runs"], transformer["planned"], transformer["params"]) == (3, 3, 1234)
    assert transformer["ood_mean_mean"] == pytest.approx(statistics.fmean(values))
    assert transformer["ood_mean_std"] == pytest.approx(statistics.stdev(values))
    assert transformer["best_step_mean"] == 200.0 and transformer["paper_ood_mean"] == 65.8
    assert transformer["val_acc_mean"] is None
    assert (retnet["runs"], retnet["ood_mean_mean"], retnet["ood_mean_std"]) == (1, 5.0, None)
    assert transformer["ood_mean_seeds"] == "61.0 70.0 67.0" and transformer["ood_mean_median"] == 67.0
    assert retnet["ood_mean_median"] == 5.0 and transformer["val_acc_median"] is None
    # runs evaluated on other widths than the paper's 1-32 and 33-48 have no paper numbers beside them
    tiny = plan("tiny", parse_rows("transformer"), seeds=1)
    (row,) = summary_rows(tiny, [{"job": tiny[0], "seed": 0, "registry": {"n_params": 1},
                                  "metrics": {"best_acc@7": 40.0, "best_acc@10": 2.5}}])
    assert not any(key.startswith("paper_") for key in row)
    assert (row["acc7_mean"], row["acc10_mean"]) == (40.0, 2.5) and "acc33_mean" not in row


def test_each_process_sees_its_own_gpu_or_its_share_of_the_cores() -> None:
    assert _child_env(1, 2, ["3", "5"])["CUDA_VISIBLE_DEVICES"] == "5"
    # --per-gpu P: slot i of G·P runs on GPU i mod G
    assert [_child_env(i, 4, ["3", "5"])["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["3", "5", "3", "5"]
    env = _child_env(0, 2, [])
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(CODE_ROOT)
    with pytest.raises(ValueError, match="--gpus must be >= 1"):
        check_slots(0)


def test_per_gpu_slots_share_the_first_k_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "visible_gpus", lambda: [str(i) for i in range(8)])
    assert launch.slot_gpus(8, per_gpu=8) == ["0"]          # --gpus 1 --per-gpu 8: one GPU, eight runs
    assert launch.slot_gpus(8, per_gpu=2) == ["0", "1", "2", "3"]
    assert launch.slot_gpus(3) == ["0", "1", "2"]           # --gpus 3
    check_slots(16, per_gpu=2)
    with pytest.raises(ValueError, match="more GPUs than the 8 visible"):
        check_slots(18, per_gpu=2)


ARGS = ["reproduce", "addition", "--preset", "tiny", "--rows", "transformer,falcon-1a.3", "--seeds", "1",
        "--max-steps", "20"]


def test_runs_over_several_gpus_take_gpus_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # --gpus-per-run R: slot i of K sees GPUs iR .. iR + R - 1; on a CPU, K·R processes share the cores
    assert [_child_env(i, 2, ["3", "5", "6", "7"], 2)["CUDA_VISIBLE_DEVICES"] for i in range(2)] == ["3,5", "6,7"]
    env = _child_env(0, 1, [], 2)
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    monkeypatch.setattr(launch, "visible_gpus", lambda: [str(i) for i in range(8)])
    assert launch.slot_gpus(2, gpus_per_run=4) == [str(i) for i in range(8)]
    assert launch.slot_gpus(1, gpus_per_run=2) == ["0", "1"]
    check_slots(4, gpus_per_run=2)
    with pytest.raises(ValueError, match="asks for 10 GPUs, more than the 8 visible; accepted: --gpus 1 to 4"):
        check_slots(5, gpus_per_run=2)
    with pytest.raises(ValueError, match="a run shares its GPU or spans several, not both"):
        check_slots(2, per_gpu=2, gpus_per_run=2)
    from falcon_lab.cli._common import campaign_slots

    assert campaign_slots(None, gpus_per_run=2) == 4 and campaign_slots(None, gpus_per_run=8) == 1
    # the run placed on R devices is the same run: its id and its data do not change
    (job,) = plan("tiny", parse_rows("falcon-1.3"), seeds=1)
    two = launch.placed(job, 2)
    assert two.train.devices == 2 and config_hash(two) == job.run_id and launch.placed(job, 1) == job.cfg
    (asks,) = plan("tiny", parse_rows("falcon-1.3"), seeds=1, overrides=["train.devices=2"])
    assert launch.placed(asks, 2).train.devices == 2
    with pytest.raises(ValueError, match="sets train.devices=2, train.num_nodes=1: .* use --gpus-per-run 2"):
        launch.placed(asks, 1)


def test_tiny_reproduction_end_to_end_then_a_rerun_skips_what_is_finished(tmp_path: Path) -> None:
    code, text = invoke(*ARGS, "--results", str(tmp_path))
    assert code == 0, text
    out = tmp_path / "addition" / "tiny"
    # the preset's rows (transformer, falcon-1.3) are planned beside the rows run now
    assert f"table: {out / 'table.md'} (2 of 3 planned runs finished)" in text
    assert text.count("finished in") == 2
    assert "run 1 of 2 started: transformer seed 0" in text and "run 2 of 2 falcon-1a.3 seed 0" in text
    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    assert list(table) == ["transformer", "falcon-1a.3", "falcon-1.3"]
    assert table["transformer"]["runs"] == "1" and table["falcon-1.3"]["runs"] == "0"
    assert table["transformer"]["model"] == "Transformer (NoPE)"  # the preset's own settings of the row
    assert float(table["falcon-1a.3"]["best_step_mean"]) == 20.0  # one evaluation: the last step
    assert 0 <= float(table["falcon-1a.3"]["widths_mean"]) <= 6  # widths answered, of the trained 1-6
    progress = read_csv(out / "progress.csv")  # every evaluation of both runs: one, at step 20
    assert [(r["row"], r["step"]) for r in progress] == [("transformer", "20"), ("falcon-1a.3", "20")]
    assert 0.0 <= float(table["falcon-1a.3"]["ood_mean_mean"]) <= 100.0
    # per token at the first and last held-out widths: the run's own per-width figures at its best step
    best = {r["width"]: r for r in read_csv(out / "per_width.csv") if r["row"] == "falcon-1a.3" and r["which"] == "best"}
    assert float(table["falcon-1a.3"]["token_acc7_mean"]) == pytest.approx(float(best["7"]["per_token"]))
    assert float(table["falcon-1a.3"]["token_acc10_mean"]) == pytest.approx(float(best["10"]["per_token"]))
    per_width = read_csv(out / "per_width.csv")
    assert len(per_width) == 2 * 2 * 10  # two runs, best and last, the widths 1-10 of the preset
    assert {(r["width"], r["trained"], r["held_out"]) for r in per_width} == {
        *((str(n), "True", "False") for n in range(1, 7)), *((str(n), "False", "True") for n in range(7, 11))}
    markdown = (out / "table.md").read_text()
    assert "`lab reproduce addition --preset tiny --rows transformer,falcon-1a.3 --seeds 1 --max-steps 20" in markdown
    assert "| Transformer (NoPE) |" in markdown and "2 of 3 planned runs finished" in markdown
    assert "| Val. acc. 1–6 | Mean 7–10 | Acc@7 | Acc@10 |" in markdown and "(paper)" not in markdown
    # the table as printed, its headers from the runs' configuration, and the figure beside table.md
    assert "Widths 1–6" in text and "Held out 7–10" in text and "Per token 7–10" in text and "33–48" not in text
    assert f"figure: {out / 'per_width.png'}" in text
    assert (out / "per_width.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    registry = Registry(tmp_path / "lab.db")
    assert [r["status"] for r in registry.rows()] == ["finished", "finished"]
    stamps = [r["updated_at"] for r in registry.rows()]

    code, text = invoke(*ARGS, "--results", str(tmp_path))
    assert code == 0, text
    assert text.count("finished before") == 2 and "finished in" not in text
    assert [r["updated_at"] for r in registry.rows()] == stamps

    # --table-only: the table from the runs already there, elsewhere, and nothing trained
    code, text = invoke(*ARGS, "--results", str(tmp_path), "--table-only", "--out", str(tmp_path / "again"))
    assert code == 0, text
    assert "finished" not in text.replace("planned runs finished", "")
    assert f"table: {tmp_path / 'again' / 'table.md'} (2 of 3 planned runs finished)" in text
    assert read_csv(tmp_path / "again" / "table.csv") == read_csv(out / "table.csv")
    assert "--table-only" not in (tmp_path / "again" / "table.md").read_text()
    assert [r["updated_at"] for r in registry.rows()] == stamps
    # ... and from a folder with no registry: one line, nothing written
    code, text = invoke(*ARGS, "--results", str(tmp_path / "none"), "--table-only")
    assert code == 2 and text.count("\n") == 1
    assert text.startswith(f"lab reproduce: --table-only: no registry {tmp_path / 'none' / 'lab.db'}")
    assert not (tmp_path / "none").exists()


def test_a_run_over_two_processes_is_the_run_of_one(tmp_path: Path) -> None:
    # --gpus-per-run 2 on a CPU: one DDP run over two gloo processes, registered under the plan's run id
    code, text = invoke("reproduce", "addition", "--preset", "tiny", "--rows", "deltanet", "--max-steps", "2",
                        "--gpus-per-run", "2", "--results", str(tmp_path), "--out", str(tmp_path / "t"))
    assert code == 0, text
    (job,) = plan("tiny", parse_rows("deltanet"), seeds=1, max_steps=2)
    assert f"(run {job.run_id}): finished in" in text
    assert read_yaml(tmp_path / "runs" / job.run_id / "config.yaml")["train"]["devices"] == 2
    assert {r["row"]: r for r in read_csv(tmp_path / "t" / "table.csv")}["deltanet"]["runs"] == "1"


def test_two_runs_at_once_as_processes(tmp_path: Path) -> None:
    code, text = invoke("reproduce", "addition", "--preset", "tiny", "--rows", "transformer,deltanet",
                        "--max-steps", "3", "--gpus", "2", "--results", str(tmp_path), "--out", str(tmp_path / "t"))
    assert code == 0, text
    assert text.count("finished in") == 2
    table = {r["row"]: r for r in read_csv(tmp_path / "t" / "table.csv")}
    assert table["transformer"]["runs"] == table["deltanet"]["runs"] == "1"
    logs = sorted(tmp_path.glob("runs/*/train.log"))
    assert len(logs) == 2


@pytest.mark.parametrize("gpus", [[], ["--gpus", "2"]])
def test_start_within_starts_no_run_once_its_time_is_up(gpus: list[str], tmp_path: Path) -> None:
    from falcon_lab.reproduce import launch

    try:
        code, text = invoke("reproduce", "addition", "--preset", "tiny", "--rows", "transformer,deltanet",
                            "--max-steps", "2", *gpus, "--start-within", "0", "--results", str(tmp_path),
                            "--out", str(tmp_path / "t"))
        assert code == 0, text
        assert ("--start-within: its time is up, so 2 run(s) were not started: transformer seed 0, deltanet seed 0"
                in text)
        assert "finished in" not in text and not (tmp_path / "runs").exists()
        assert "planned runs finished)" in text and "(0 of " in text
        assert "--start-within" not in (tmp_path / "t" / "table.md").read_text()  # it changes no number
        launch.start_within(3600)
        assert launch.may_start()
        with pytest.raises(ValueError, match="--start-within must be >= 0 seconds, got -1"):
            launch.start_within(-1)
    finally:
        launch.start_within(None)
    assert launch.may_start()
    code, text = invoke("reproduce", "addition", "--preset", "tiny", "--start-within", "-1")
    assert code == 2 and text == "lab reproduce: --start-within must be >= 0 seconds, got -1\n"


def test_a_run_starts_only_if_one_like_it_would_end_in_time(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                           tmp_path: Path) -> None:
    """Runs made one after another start only while the longest finished run of their mixer (else of any) would
    still end before --start-within's time: the first always starts; after a transformer run of 30 s with 60 s
    left a second transformer run starts, with 20 s left neither it nor a DeltaNet run does."""
    from falcon_lab.reproduce.jobs import Outcome

    jobs = plan("tiny", parse_rows("transformer"), seeds=2, max_steps=2) + plan("tiny", parse_rows("deltanet"),
                                                                                 seeds=1, max_steps=2)
    clock = [0.0]
    left_after = iter([60.0, 20.0])
    made: list[str] = []

    def fake_run(job, results, registry, argv):  # a run of 30 s, after which `left_after` seconds are left
        made.append(f"{job.cfg.mixer} {job.cfg.train.seed}")
        clock[0] = 1000.0 - next(left_after)
        return Outcome(job, "finished", 30.0)

    monkeypatch.setattr(launch, "_run_here", fake_run)
    monkeypatch.setattr(launch.time, "monotonic", lambda: clock[0])
    try:
        launch.start_within(1000.0)
        outcomes = launch.run_jobs(jobs, tmp_path)
    finally:
        launch.start_within(None)
    assert made == ["transformer 0", "transformer 1"] and len(outcomes) == 2
    assert ("--start-within: too little of its time is left for a run of about 30 s, so 1 run(s) were not started: "
            "deltanet seed 0") in capsys.readouterr().err
    assert launch.expected_seconds(jobs[2], {"transformer": 30.0, "retnet": 45.0}) == 45.0
    assert launch.expected_seconds(jobs[0], {"transformer": 30.0, "retnet": 45.0}) == 30.0
    assert launch.expected_seconds(jobs[0], {}) == 0.0


@pytest.mark.parametrize(("args", "message"), [
    (["--rows", "transformer,nope"], "lab reproduce: unknown row 'nope'; accepted: transformer, retnet, "),
    (["--preset", "huge"], "lab reproduce: unknown preset 'huge'; accepted: addition-cpu, addition-paper"),
    (["--seeds", "0"], "lab reproduce: --seeds must be >= 1, got 0"),
    (["--gpus", "0"], "lab reproduce: --gpus must be >= 1, got 0"),
    (["--per-gpu", "0"], "lab reproduce: --per-gpu must be >= 1, got 0"),
    (["--gpus-per-run", "0"], "lab reproduce: --gpus-per-run must be >= 1, got 0"),
    (["--per-gpu", "2", "--gpus-per-run", "2"], "lab reproduce: --per-gpu 2 and --gpus-per-run 2: a run shares"),
    (["--set", "train.devices=2"], "lab reproduce: run "),
    (["--gpus-per-run", "3"], "lab reproduce: --gpus-per-run 3: train.batch_size=32 (global) is not divisible by"),
    (["--set", "optim.lrr=1"], "lab reproduce: unknown key 'optim.lrr'"),
])
def test_mistakes_are_one_line_with_exit_2_and_nothing_run(args: list[str], message: str, tmp_path: Path) -> None:
    code, text = invoke("reproduce", "addition", "--preset", "tiny", *args, "--results", str(tmp_path))
    assert code == 2
    assert text.count("\n") == 1 and text.startswith(message) and "Traceback" not in text
    assert not (tmp_path / "runs").exists() and not (tmp_path / "addition").exists()


def test_with_overrides_the_table_plans_the_rows_run_now_and_those_begun_with_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from falcon_lab.reproduce import addition

    seen = {}
    monkeypatch.setattr(addition, "run_campaign", lambda jobs, everything, *a, **k: seen.update(
        jobs=jobs, everything=everything) or launch.Campaign([], tmp_path, 0, len(everything)))
    addition.reproduce_addition("tiny", rows=parse_rows("falcon-1.3"), seeds=2, results=tmp_path,
                                overrides=["model.mixer_options.conv_size=8"])
    assert [(j.label, j.cfg.train.seed) for j in seen["jobs"]] == [("falcon-1.3", 0), ("falcon-1.3", 1)]
    assert seen["everything"] == seen["jobs"]  # no other row has runs with these overrides
    # A row begun before with the same overrides joins the table's plan, in the table's order.
    (begun,) = plan("tiny", parse_rows("falcon-1a.3"), 1, overrides=["model.mixer_options.conv_size=8"])
    (tmp_path / "runs" / begun.run_id).mkdir(parents=True)
    addition.reproduce_addition("tiny", rows=parse_rows("falcon-1.3"), seeds=2, results=tmp_path,
                                overrides=["model.mixer_options.conv_size=8"])
    assert [(j.label, j.cfg.train.seed) for j in seen["everything"]] == [
        ("falcon-1a.3", 0), ("falcon-1.3", 0), ("falcon-1.3", 1)]
    assert all(j.cfg.model.mixer_options["conv_size"] == 8 for j in seen["everything"])
    # An option the rows run now lack is still an error.
    with pytest.raises(ConfigError, match="conv_size"):
        addition.reproduce_addition("tiny", rows=parse_rows("transformer"), results=tmp_path,
                                    overrides=["model.mixer_options.conv_size=8"])


def test_the_table_lists_runs_begun_but_not_finished_at_their_last_evaluation(tmp_path: Path) -> None:
    from falcon_lab.eval.callback import evals_path, write_evals
    from falcon_lab.reproduce.addition_table import write_tables
    from falcon_lab.runs import run_dir_for

    jobs = plan("tiny", parse_rows("transformer,falcon-1a.3"), seeds=1)
    registry = Registry(tmp_path / "lab.db")
    begun, fresh = jobs[1], jobs[0]
    registry.upsert(begun.run_id, status="interrupted", mixer=begun.cfg.mixer, steps=60)
    registry.upsert(fresh.run_id, status="interrupted", mixer=fresh.cfg.mixer, steps=0)  # no evaluation yet
    write_evals(evals_path(run_dir_for(begun.run_id, results=tmp_path)),
                [{"step": 50, "val_acc": 1.0, "ood_mean": 0.0, "val_token_acc": 30.0, "ood_token_mean": 10.0},
                 {"step": 100, "val_acc": 6.5, "ood_mean": 0.0, "val_token_acc": 43.5, "ood_token_mean": 19.6,
                  "teacher_forced": {1: 100.0, 2: 96.0, 3: 40.0, 4: 100.0}}])
    assert write_tables(jobs, tmp_path, tmp_path / "out", "lab reproduce addition --preset tiny") == 0
    text = (tmp_path / "out" / "table.md").read_text()
    assert "Runs begun but not finished" in text
    line = next(li for li in text.splitlines() if f"`{begun.run_id}`" in li)
    assert line.split(" | ")[3:] == ["interrupted", "100", "6.5", "0.0", "43.5", "19.6", "2 |"]
    assert fresh.run_id not in text
    # none of it enters the means
    assert next(r for r in read_csv(tmp_path / "out" / "table.csv") if r["row"] == "falcon-1a.3")["runs"] == "0"


def test_hand_written_notes_end_the_table_and_survive_every_rewrite(tmp_path: Path) -> None:
    from falcon_lab.reproduce.addition_table import write_tables

    jobs = plan("tiny", parse_rows("transformer"), seeds=1)
    out = tmp_path / "out"
    write_tables(jobs, tmp_path, out, "lab reproduce addition --preset tiny")
    assert "## Notes" not in (out / "table.md").read_text()
    (out / "notes.md").write_text("Seeds 1 and 2 part from seed 0 because ...\n")
    for _ in range(2):
        write_tables(jobs, tmp_path, out, "lab reproduce addition --preset tiny")
        text = (out / "table.md").read_text()
        assert text.count("## Notes") == 1 and text.endswith("Seeds 1 and 2 part from seed 0 because ...\n")
    assert (out / "notes.md").read_text() == "Seeds 1 and 2 part from seed 0 because ...\n"


def test_progress_follows_every_evaluation_with_the_curriculums_widest_width(tmp_path: Path) -> None:
    from falcon_lab.eval.callback import evals_path, write_evals
    from falcon_lab.reproduce.addition_table import progress_rows
    from falcon_lab.runs import run_dir_for

    job = plan("packed", parse_rows("falcon-1.3"), seeds=1)[0]  # widths 1 -> 32 over 1500 steps
    Registry(tmp_path / "lab.db").upsert(job.run_id, status="stopped", mixer="falcon-1.3", steps=1600)
    tf = {n: 100.0 for n in range(1, 6)}
    write_evals(evals_path(run_dir_for(job.run_id, results=tmp_path)),
                [{"step": s, "val_acc": 1.0, "teacher_forced": tf} for s in (100, 750, 1600)])
    rows = progress_rows([job], tmp_path)
    assert [(r["step"], r["train_width"], r["widths"], r["status"]) for r in rows] == [
        (100, 3, 5, "stopped"), (750, 16, 5, "stopped"), (1600, 32, 5, "stopped")]
    assert all(r["tf@3"] == 100.0 and "tf@6" not in r for r in rows)  # each width's whole answers, the heat map's
    from falcon_lab.reproduce.addition_table import progress_columns
    columns = progress_columns([job])
    assert columns[-48:] == [f"tf@{n}" for n in range(1, 49)] and columns[:2] == ["row", "seed"]


@pytest.mark.parametrize(("rows", "placement"), [("transformer,deltanet", ["--gpus", "2"]),
                                                 ("deltanet", ["--gpus-per-run", "2"])], ids=["two-runs", "ddp"])
def test_an_interrupted_campaign_stops_each_run_at_a_checkpoint_and_keeps_its_table(
        rows: str, placement: list[str], tmp_path: Path) -> None:
    """SIGINT to the campaign's process group (as `timeout --signal=INT` sends it): every run ends after its
    current step with a checkpoint at that step, resumable, and the table lists them as begun. The campaign
    starts with SIGINT ignored, as a script's background job does, and must stop all the same; a run over two
    processes (DDP) stops at one step on both."""
    import signal
    import subprocess
    import sys
    import time

    import torch

    out = tmp_path / "t"
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "falcon_lab", "reproduce", "addition", "--preset", "tiny", "--rows",
                             rows, "--max-steps", "5000", "--set", "train.ckpt_every=5", "--set",
                             "train.val_every=5", *placement, "--results", str(tmp_path), "--out", str(out)],
                            cwd=CODE_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    registry = Registry(tmp_path / "lab.db")
    deadline = time.monotonic() + 180
    every = ["train.ckpt_every=5", "train.val_every=5"]  # a checkpoint and an evaluation every 5 steps
    while time.monotonic() < deadline:  # every run past its first checkpoint (every 5 steps)
        begun = [registry.get(j.run_id) for j in plan("tiny", parse_rows(rows), 1, 5000, every)]
        if all(r is not None and (r.get("steps") or 0) >= 5 for r in begun):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"the runs of {rows} did not reach step 5 in 180 s")
    os.killpg(proc.pid, signal.SIGINT)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, text
    for job in plan("tiny", parse_rows(rows), 1, 5000, every):
        row = registry.get(job.run_id)
        assert row["status"] == "stopped", (row, text)
        assert 5 <= row["steps"] < 5000
        ckpt = tmp_path / "runs" / job.run_id / "checkpoints" / "last.ckpt"
        assert torch.load(ckpt, weights_only=False, map_location="cpu")["global_step"] == row["steps"]
    table = (out / "table.md").read_text()
    assert "Runs begun but not finished" in table and table.count("| stopped |") == len(parse_rows(rows))


def test_a_run_out_of_gpu_memory_beside_others_starts_again_when_one_ends(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """Three runs share one GPU; the second fails with CUDA's out-of-memory error while the others run: it is
    started again (its checkpoint resumes it) only once one of them has ended, and the GPU takes two at a time
    from then on. A run that fails so alone on its GPU, or of anything else, fails as before."""
    from falcon_lab.reproduce.jobs import Outcome

    jobs = plan("tiny", parse_rows("transformer,deltanet,falcon-1.3"), seeds=1, max_steps=2)
    a, b, c = (j.run_id for j in jobs)
    starts: list[tuple[str, int]] = []  # (run id, runs going when it started)
    going: set[str] = set()
    ends = {a: 0.6, b: 0.0, c: 0.3}  # seconds each child lives

    def command(config: Path, results: Path) -> list[str]:
        run_id = config.stem
        starts.append((run_id, len(going)))
        going.add(run_id)
        return [sys.executable, "-c", f"import time; time.sleep({ends[run_id]})"]

    failures = {b: 1}

    def outcome(job, code, seconds, results, registry):
        going.discard(job.run_id)
        if failures.get(job.run_id):
            failures[job.run_id] -= 1
            return Outcome(job, "failed", seconds, "OutOfMemoryError: CUDA out of memory. Tried to allocate 380 MiB")
        return Outcome(job, "finished", seconds)

    monkeypatch.setattr(launch, "_train_command", command)
    monkeypatch.setattr(launch, "_process_outcome", outcome)
    monkeypatch.setattr(launch, "slot_gpus", lambda slots, per_gpu=1, gpus_per_run=1: ["0"])
    ended: list[Outcome] = []
    launch._run_in_processes(jobs, tmp_path, Registry(tmp_path / "lab.db"), 3, ended.append, per_gpu=3)
    assert [o.status for o in ended] == ["finished"] * 3 and sorted(o.job.run_id for o in ended) == sorted([a, b, c])
    assert [s[0] for s in starts] == [a, b, c, b]
    assert starts[3][1] <= 1  # started again beside one run at most, after c ended

    # alone on its GPU, or failing of something else beside others: no second start
    for chosen, slots, message in ((jobs[:1], 1, "OutOfMemoryError: CUDA out of memory"),
                                   (jobs, 3, "ValueError: a NaN loss at step 2")):
        starts.clear()
        going.clear()
        failures = {chosen[-1].run_id: 1}

        def failing(job, code, seconds, results, registry, message=message):
            going.discard(job.run_id)
            if failures.pop(job.run_id, 0):
                return Outcome(job, "failed", seconds, message)
            return Outcome(job, "finished", seconds)

        monkeypatch.setattr(launch, "_process_outcome", failing)
        ended = []
        launch._run_in_processes(chosen, tmp_path, Registry(tmp_path / "lab.db"), slots, ended.append, per_gpu=slots)
        assert sorted(o.status for o in ended) == ["failed"] + ["finished"] * (len(chosen) - 1)
        assert len(starts) == len(chosen)
