"""The lm-evaluation-harness adapter: its three requests on a tiny random model against direct computation
(no lm-eval needed), then, where lm-eval is installed, local toy tasks through lm_eval.simple_evaluate and
`lab eval harness` on a trained run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from falcon_lab.eval.harness import RunLM
from falcon_lab.mixers import LanguageModel
from falcon_lab.mixers.model import LMConfig
from falcon_lab.tasks.fineweb import load_tokenizer
from tests.fineweb_util import documents, write_rank_file

VOCAB = 320  # covers the synthetic tokenizer's 265 ids
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return load_tokenizer(write_rank_file(tmp_path_factory.mktemp("tok") / "tiny.tiktoken"))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    # A wide init, so that the random logits have clear argmaxes and greedy is sometimes right, sometimes not.
    return LanguageModel(LMConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, init_std=0.3)).eval()


def direct_loglikelihood(model, enc, context: str, continuation: str, max_len: int) -> tuple[float, bool]:
    """One request alone: EOT + tokens of context + continuation, the last max_len + 1 of them, one forward;
    the continuation's tokens are those after the context's, less its trailing spaces (lm-eval's rule)."""
    head = [enc.eot_token, *enc.encode_ordinary(context.rstrip())]
    ids = [enc.eot_token, *enc.encode_ordinary(context + continuation)]
    n = len(ids) - len(head)
    window = torch.tensor(ids[-(max_len + 1):])
    with torch.no_grad():
        logp = F.log_softmax(model(window[None, :-1])[0].double(), -1)[-n:]
    target = window[-n:]
    return float(logp.gather(-1, target[:, None]).sum()), bool((logp[:, :enc.n_vocab].argmax(-1) == target).all())


REQUESTS = [
    ("the thing in the", " weather"),
    ("it's the other", " ring in the thing"),
    ("", "the thing"),  # an empty context reads EOT alone
    ("éclair 42 the ", "thing"),  # the context's trailing space moves to the continuation
    ("in other weather thing " * 6, " ring"),  # longer than max_len: left-truncated
    ("the", " the"),
]


def greedy_request(model, enc) -> tuple[str, str]:
    """A context and the model's own greedy next token as its continuation (so that greedy is True)."""
    for context in ["the", "the ring", "it's", "in other", "42", "weather", "thing", "other ring", "éclair"]:
        with torch.no_grad():
            logits = model(torch.tensor([[enc.eot_token, *enc.encode_ordinary(context)]]))[0, -1, :enc.n_vocab]
        word = enc.decode([int(logits.argmax())])
        if enc.encode_ordinary(context + word)[len(enc.encode_ordinary(context)):] == [int(logits.argmax())]:
            return context, word
    raise AssertionError("no context whose greedy token re-encodes alone")


def test_loglikelihood_is_the_direct_computation(model, enc):
    lm = RunLM(model, enc, max_len=24, batch_size=4)
    requests = [*REQUESTS, greedy_request(model, enc)]
    got = lm.loglikelihood(requests)
    want = [direct_loglikelihood(model, enc, c, x, 24) for c, x in requests]
    for (score, greedy), (ref, ref_greedy) in zip(got, want):
        assert score == pytest.approx(ref, rel=1e-5, abs=1e-6) and greedy == ref_greedy
    assert {g for _, g in got} == {True, False}
    # The batch size and order change nothing.
    alone = RunLM(model, enc, max_len=24, batch_size=1).loglikelihood(requests[::-1])[::-1]
    assert [s for s, _ in alone] == pytest.approx([s for s, _ in got], rel=1e-5, abs=1e-6)
    assert lm.encode_pair("the ", "thing")[1] == enc.encode_ordinary(" thing")


def test_bad_requests_are_refused_by_name(model, enc):
    lm = RunLM(model, enc, max_len=4)
    with pytest.raises(ValueError, match="encodes to no tokens"):
        lm.loglikelihood([("the thing", "")])
    with pytest.raises(ValueError, match="does not fit a context length of 4"):
        lm.loglikelihood([("the", " thing in the other weather ring")])
    with pytest.raises(ValueError, match="sampling"):
        lm.generate_until([("the", {"until": ["."], "do_sample": True})])


def test_loglikelihood_rolling_is_the_sum_over_disjoint_windows(model, enc):
    texts = [" ".join(documents(6, seed=2)), "the ring", ""]
    got = RunLM(model, enc, max_len=16, batch_size=3).loglikelihood_rolling(texts)
    for text, score in zip(texts, got):
        ids = torch.tensor([enc.eot_token, *enc.encode_ordinary(text)])
        total = 0.0
        with torch.no_grad():
            for lo in range(0, len(ids) - 1, 16):
                window = ids[lo:lo + 17]
                logp = F.log_softmax(model(window[None, :-1])[0].double(), -1)
                total += float(logp.gather(-1, window[1:, None]).sum())
        assert score == pytest.approx(total, rel=1e-5, abs=1e-9)
    assert got[2] == 0.0 and len(enc.encode_ordinary(texts[0])) > 40


def test_generate_until_is_greedy_and_stops(model, enc):
    lm = RunLM(model, enc, max_len=12)
    ids = [enc.eot_token, *enc.encode_ordinary("the thing in")]
    made = []
    with torch.no_grad():
        for _ in range(10):
            nxt = int(model(torch.tensor([(ids + made)[-12:]]))[0, -1, :enc.n_vocab].argmax())
            if nxt == enc.eot_token:
                break
            made.append(nxt)
    free = enc.decode(made)
    assert lm.generate_until([("the thing in", {"max_gen_toks": 10})]) == [free]
    stop = free[len(free) // 2:len(free) // 2 + 1] or "x"
    cut = lm.generate_until([("the thing in", {"until": [stop, "never"], "max_gen_toks": 10})])[0]
    assert cut == (free[:free.index(stop)] if stop in free else free)


def has_lm_eval() -> bool:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        return False
    return True


needs_lm_eval = pytest.mark.skipif(not has_lm_eval(), reason="lm-eval is not installed (pip install "
                                   "'falcon-lab[eval]'); the adapter's own logic is tested above without it")

TOY = [{"context": c, "target": x, "choices": [x, " ring", " other"], "gold": 0}
       for c, x in REQUESTS if c and c == c.rstrip() and len(c) < 40]


def toy_tasks(folder: Path) -> Path:
    """Four local tasks in lm-eval's YAML, one per request type, over one small JSON-lines file."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "toy.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in TOY))
    common = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    (folder / "toy_lambada.yaml").write_text(
        "task: toy_lambada\n" + common + "output_type: loglikelihood\ndoc_to_text: '{{context}}'\n"
        "doc_to_target: '{{target}}'\nmetric_list:\n  - metric: perplexity\n    aggregation: perplexity\n"
        "    higher_is_better: false\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    (folder / "toy_choice.yaml").write_text(
        "task: toy_choice\n" + common + "output_type: multiple_choice\ndoc_to_text: '{{context}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{gold}}'\nmetric_list:\n  - metric: acc\n")
    (folder / "toy_rolling.yaml").write_text(
        "task: toy_rolling\n" + common + "output_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{context}}{{target}}'\nmetric_list:\n  - metric: word_perplexity\n"
        "  - metric: byte_perplexity\n  - metric: bits_per_byte\n")
    (folder / "toy_generate.yaml").write_text(
        "task: toy_generate\n" + common + "output_type: generate_until\ndoc_to_text: '{{context}}'\n"
        "doc_to_target: '{{target}}'\ngeneration_kwargs:\n  until: ['.']\n  max_gen_toks: 4\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n")
    return folder


@needs_lm_eval
@pytest.mark.slow
def test_toy_tasks_through_lm_eval_give_the_adapters_numbers(model, enc, tmp_path):
    from falcon_lab.eval.harness import evaluate, task_metrics

    lm = RunLM(model, enc, max_len=24)
    results = evaluate(lm, ["toy_lambada", "toy_choice", "toy_rolling", "toy_generate"],
                       include_path=toy_tasks(tmp_path), bootstrap_iters=0)
    metrics = task_metrics(results)
    scores = lm.loglikelihood([(r["context"], r["target"]) for r in TOY])
    assert metrics["toy_lambada"]["acc"] == pytest.approx(np.mean([g for _, g in scores]))
    assert metrics["toy_lambada"]["perplexity"] == pytest.approx(math.exp(-np.mean([s for s, _ in scores])))
    picks = [int(np.argmax([s for s, _ in lm.loglikelihood([(r["context"], c) for c in r["choices"]])])) for r in TOY]
    assert metrics["toy_choice"]["acc"] == pytest.approx(np.mean([p == 0 for p in picks]))
    rolling = lm.loglikelihood_rolling([r["context"] + r["target"] for r in TOY])
    words = sum(len(re.split(r"\s+", r["context"] + r["target"])) for r in TOY)
    assert metrics["toy_rolling"]["word_perplexity"] == pytest.approx(math.exp(-sum(rolling) / words), rel=1e-6)
    assert 0.0 <= metrics["toy_generate"]["exact_match"] <= 1.0
    with pytest.raises(ValueError, match="toy_nothing: not a task lm-eval knows"):
        evaluate(lm, ["toy_nothing"], include_path=tmp_path)


def test_lab_eval_harness_without_lm_eval_says_how_to_get_it(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from falcon_lab.cli import app

    monkeypatch.setattr("falcon_lab.eval.harness.lm_eval_version", lambda: None)
    result = CliRunner().invoke(app, ["eval", "harness", "--run", str(tmp_path), "--tasks", "lambada_openai"])
    assert result.exit_code == 2 and "pip install 'falcon-lab[eval]'" in result.output
    result = CliRunner().invoke(app, ["eval", "harness", "--run", str(tmp_path), "--tasks", " , "])
    assert result.exit_code == 2 and "names no task" in result.output


@needs_lm_eval
@pytest.mark.slow
def test_lab_eval_harness_on_a_trained_run(tmp_path):
    from typer.testing import CliRunner

    from falcon_lab.cli import app
    from falcon_lab.tasks.fineweb import build_shards
    from tests.fineweb_util import write_parquet

    ranks = write_rank_file(tmp_path / "tiny.tiktoken")
    build_shards([write_parquet(tmp_path / "a.parquet", documents(120))], ranks, tmp_path / "shards",
                 shard_tokens=1500, val_tokens=300)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "--task", "fineweb", "--preset", "tiny", "--max-steps", "2", "--out", str(run), "--results",
        str(tmp_path), "--no-progress", "--set", f"data.path={tmp_path / 'shards'}", "--set",
        f"data.vocab_size={VOCAB}", "--set", "data.seq_len=16", "--set", "train.batch_size=4"])
    assert result.exit_code == 0, result.output
    tasks = toy_tasks(tmp_path / "tasks")
    args = ["eval", "harness", "--run", str(run), "--include-path", str(tasks), "--bootstrap-iters", "0"]
    result = CliRunner().invoke(app, [*args, "--tasks", "toy_lambada,toy_rolling", "--limit", "2"])
    text = ANSI.sub("", result.output)
    assert result.exit_code == 0, text
    assert "toy_lambada" in text and "word_perplexity" in text
    saved = json.loads((run / "harness.json").read_text())
    assert saved["toy_lambada"]["step"] == 2 and saved["toy_lambada"]["limit"] == 2
    assert 0.0 <= saved["toy_lambada"]["acc"] <= 1.0 and saved["toy_rolling"]["word_perplexity"] > 1.0
    result = CliRunner().invoke(app, [*args, "--tasks", "toy_lambada,nothing_here"])
    assert result.exit_code == 2 and "nothing_here: not a task lm-eval knows" in result.output
