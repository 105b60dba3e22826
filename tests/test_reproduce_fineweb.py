"""`lab reproduce fineweb`: the plan (rows, run ids), one tiny end-to-end table of two rows on
synthetic shards (finite perplexities; a rerun skips and rescores nothing), and one-line errors."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.reproduce.fineweb import check_data, parse_rows, plan
from falcon_lab.reproduce.fineweb_rows import ROW_NAMES
from falcon_lab.tasks.fineweb import build_shards
from tests.fineweb_util import documents, write_parquet, write_rank_file

ANSI = re.compile(r"\x1b\[[0-9;]*m")
VOCAB = 320  # covers the synthetic tokenizer's 265 ids


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fineweb")
    ranks = write_rank_file(root / "tiny.tiktoken")
    src = write_parquet(root / "a.parquet", documents(150))
    build_shards([src], ranks, root / "shards", shard_tokens=1500, val_tokens=400)
    return root / "shards"


def test_plan_rows_and_run_ids(shards):
    assert ROW_NAMES == ("transformer", "retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1a.1",
                         "falcon-1a.2", "falcon-1a.3", "falcon-1.3", "falcon-3a.3")
    jobs = plan("tiny", parse_rows("falcon-1a.3,transformer"), seeds=2, data=shards,
                overrides=[f"data.vocab_size={VOCAB}"])
    assert [(j.cfg.mixer, j.cfg.train.seed) for j in jobs] == [
        ("falcon-1a.3", 0), ("transformer", 0), ("falcon-1a.3", 1), ("transformer", 1)]
    assert len({j.run_id for j in jobs}) == 4
    cfg = jobs[0].cfg
    assert cfg.task == "fineweb" and cfg.data.path == str(shards.resolve()) and cfg.model.d_model == 32
    assert cfg.preset == "fineweb-124m" and cfg.data.vocab_size == VOCAB
    # The same plan twice names the same runs; a setting changes them.
    assert [j.run_id for j in plan("tiny", parse_rows("falcon-1a.3"), 1, data=shards,
                                   overrides=[f"data.vocab_size={VOCAB}"])] == [jobs[0].run_id]
    assert plan("tiny", parse_rows("falcon-1a.3"), 1, max_steps=3, data=shards)[0].run_id != jobs[0].run_id
    paper = plan("fineweb-124m", parse_rows(None), 1)
    assert len(paper) == 10 and paper[0].cfg.train.batch_size == 480 and paper[0].cfg.model.d_model == 768


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"unknown row 'falcon-9'; accepted: transformer, retnet"):
        parse_rows("transformer,falcon-9")
    with pytest.raises(ValueError, match="unknown preset 'huge'; accepted: fineweb-124m, tiny"):
        plan("huge", parse_rows(None), 1)
    with pytest.raises(ValueError, match=r"does not exist; make one with `lab data fineweb"):
        check_data(tmp_path / "nowhere")
    for args in (["--rows", "falcon-9"], ["--data", str(tmp_path / "nowhere")], ["--preset", "huge"]):
        code, text = invoke("reproduce", "fineweb", *args, "--results", str(tmp_path))
        assert code == 2 and len(text.strip().splitlines()) == 1 and text.startswith("lab reproduce: "), text


def test_tiny_table_end_to_end_then_rerun_skips(shards, tmp_path):
    lambada = tmp_path / "lambada.jsonl"
    lambada.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents(4, seed=5)))
    args = ["reproduce", "fineweb", "--preset", "tiny", "--rows", "transformer,falcon-1a.3", "--max-steps", "2",
            "--set", f"data.vocab_size={VOCAB}", "--set", "data.seq_len=16", "--set", "train.batch_size=4",
            "--data", str(shards), "--lambada", str(lambada), "--results", str(tmp_path), "--gpus", "1"]
    code, text = invoke(*args)
    assert code == 0, text
    assert "(2 of 10 planned runs finished)" in text and text.count("finished in") == 2
    out = tmp_path / "fineweb" / "tiny"
    table = pd.read_csv(out / "table.csv")
    assert list(table["row"]) == list(ROW_NAMES)
    done = table[table["runs"] == 1].set_index("row")
    assert sorted(done.index) == ["falcon-1a.3", "transformer"]
    for column in ("fineweb_mean", "lambada_mean"):
        assert all(math.isfinite(v) and v > 1 for v in done[column])
    assert done["wiki_mean"].isna().all() and done.loc["transformer", "paper_fineweb"] == 17.38
    md = (out / "table.md").read_text()
    assert "lab reproduce fineweb --preset tiny" in md and "17.38" in md and "2 of 10 planned runs" in md
    # Perplexity recorded beside each run: the table's number is the run's.
    run_id = done.loc["transformer", "run_ids"]
    scored = json.loads((tmp_path / "runs" / run_id / "perplexity.json").read_text())
    assert scored["fineweb-edu-val"]["ppl"] == pytest.approx(done.loc["transformer", "fineweb_mean"])
    assert scored["fineweb-edu-val"]["step"] == 2
    stamp = (tmp_path / "runs" / run_id / "perplexity.json").stat().st_mtime_ns
    code, text = invoke(*args)
    assert code == 0, text
    assert text.count("finished before") == 2 and "finished in" not in text
    assert (tmp_path / "runs" / run_id / "perplexity.json").stat().st_mtime_ns == stamp


def test_an_option_some_rows_lack_leaves_them_out_of_the_table(shards, tmp_path):
    # RoPE off is the transformer's and RetNet's option; the rows without it are dropped from the plan rather
    # than failing the campaign, and a row asked for that lacks it still fails by name
    from falcon_lab.reproduce.fineweb import reproduce_fineweb
    from falcon_lab.runs import Registry

    Registry(tmp_path / "lab.db")  # an empty registry: a table of no runs yet
    campaign = reproduce_fineweb("tiny", parse_rows("transformer"), seeds=1, data=shards, results=tmp_path,
                                 overrides=[f"data.vocab_size={VOCAB}", "model.mixer_options.rope=false"],
                                 table_only=True)
    table = pd.read_csv(tmp_path / "fineweb" / "tiny" / "table.csv")
    assert set(table["row"]) == {"transformer", "retnet"}, table["row"].tolist()
    assert campaign is not None
    with pytest.raises(ValueError, match="unknown option.*'rope' for mixer 'deltanet'"):
        reproduce_fineweb("tiny", parse_rows("deltanet"), seeds=1, data=shards, results=tmp_path,
                          overrides=[f"data.vocab_size={VOCAB}", "model.mixer_options.rope=false"], table_only=True)
