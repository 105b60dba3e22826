"""Isolated samples (`model.isolate_samples`) and the evaluation offset of digit positions
(`eval.abacus_offset`): the samples of a packed row read as separate sequences, each with its own offset in
training; the fixed offset outside training; the configuration and `lab eval addition --abacus-offset`."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.eval.addition import greedy
from falcon_lab.eval.free_running import greedy_correct
from falcon_lab.eval.training import evaluation_callbacks
from falcon_lab.train import run_training
from falcon_lab.train.module import lm_config
from falcon_lab.mixers import LanguageModel, LMConfig, PositionsConfig
from falcon_lab.mixers.positions import digit_significance, sample_index, sample_mask
from falcon_lab.tasks.addition import generate_records
from falcon_lab.tasks.addition.batches import make_batch
from falcon_lab.tasks.addition.vocab import DIGIT_0, EOS, EQUALS, PAD, VOCAB_SIZE, encode

# Training with the evaluations its configuration asks for, as `lab train` runs it.
train = partial(run_training, evaluations=evaluation_callbacks)

DIGITS = (DIGIT_0, DIGIT_0 + 9)


def model(isolate: bool = True, abacus: int | None = 4, rope: bool = True, eval_offset: int = 0,
          seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    digits = {} if abacus is None else {"abacus": abacus, "abacus_size": abacus + 20, "digit_ids": DIGITS,
                                        "answer_marker": EQUALS, "abacus_eval_offset": eval_offset}
    positions = PositionsConfig(sample_end=EOS if isolate else None, **digits)
    cfg = LMConfig(vocab_size=VOCAB_SIZE, d_model=32, n_layers=2, n_heads=2, mixer="transformer",
                   mixer_options={"rope": rope}, positions=positions)
    return LanguageModel(cfg).double()


def sample(prompt: str, target: str) -> list[int]:
    return encode(prompt) + encode(target) + [EOS]


def test_samples_are_numbered_from_the_token_that_ends_them() -> None:
    row = torch.tensor([sample("1+2=", "30") + sample("12+34=", "640") + [PAD, PAD]])
    assert sample_index(row, EOS)[0].tolist() == [0] * 7 + [1] * 10 + [2, 2]
    mask = sample_mask(sample_index(row, EOS))[0, 0]
    assert mask.shape == (19, 19)
    assert mask[6, :7].all() and not mask[6, 7:].any()  # the EOS closing sample 0 sees sample 0 only
    assert mask[8, 7:9].all() and not mask[8, :7].any() and not mask[8, 9:].any()
    assert mask[18, 17:].all() and not mask[18, :17].any()


@pytest.mark.parametrize(("rope", "abacus"), [(True, None), (False, None), (False, 4), (True, 4)])
def test_a_packed_sample_reads_as_if_alone(rope: bool, abacus: int | None) -> None:
    """Under the mask a sample's logits do not depend on what its row packs before it (RoPE is relative);
    without it they do."""
    first, second = sample("97+58=", "551"), sample("123+456=", "9750")
    for isolate in (True, False):
        lm = model(isolate, abacus, rope).eval()
        with torch.no_grad():
            packed = lm(torch.tensor([first + second]))[0, len(first):]
            alone = lm(torch.tensor([second]))[0]
        assert torch.allclose(packed, alone) == isolate


def test_each_packed_sample_draws_its_own_offset_in_training() -> None:
    ids = make_batch(seed=0, step=0, batch_size=8, digits=(1, 5), seq_len=60, pack=True).input_ids
    samples = sample_index(ids, EOS)
    lm = model(abacus=16).train()
    torch.manual_seed(3)
    shift = lm.positions.digit_positions(ids, samples) - digit_significance(ids, DIGITS, EQUALS)
    digit = digit_significance(ids, DIGITS, EQUALS) > 0
    assert (shift[~digit] == 0).all() and (shift[digit] >= 0).all() and (shift[digit] <= 16).all()
    offsets = [{k: set(shift[r][digit[r] & (samples[r] == k)].tolist()) for k in samples[r].unique().tolist()}
               for r in range(ids.shape[0])]
    assert all(len(s) <= 1 for row in offsets for s in row.values())  # one offset a sample
    per_row = [{next(iter(s)) for s in row.values() if s} for row in offsets]
    assert any(len(s) > 1 for s in per_row)  # and samples of one row differ
    # The model draws them itself: two forward passes in training differ, in evaluation they agree.
    assert not torch.allclose(lm(ids), lm(ids))
    lm.eval()
    torch.testing.assert_close(lm(ids), lm(ids))


def test_the_evaluation_offset_shifts_every_digit_outside_training() -> None:
    ids = torch.tensor([sample("4821+0937=", "85750")])
    plain, shifted = model(abacus=8).eval(), model(abacus=8, eval_offset=5).eval()
    base = digit_significance(ids, DIGITS, EQUALS)
    assert torch.equal(shifted.positions.digit_positions(ids), torch.where(base > 0, base + 5, 0))
    assert torch.equal(plain.positions.digit_positions(ids), base)
    with torch.no_grad():
        assert not torch.allclose(plain(ids), shifted(ids))
    shifted(torch.tensor([encode("1" * 19 + "+" + "2" * 19 + "=")]))  # index 19 + 5 of a table of 28: fine
    with pytest.raises(ValueError, match="a run of 23 digits at offset 5 is longer than the digit positions "
                                         r"cover \(27\)"):
        shifted(torch.tensor([encode("1" * 23 + "+" + "2" * 23 + "=")]))


def test_an_isolated_model_generates_by_rerunning_the_prefix() -> None:
    lm = model(abacus=None).eval()
    assert not lm.can_step
    with pytest.raises(ValueError, match="isolated samples .* cannot generate token by token"):
        lm.init_cache(2)
    records = list(generate_records("val", (3, 3), 4, seed=0))
    assert torch.equal(greedy(lm, records, torch.device("cpu")), greedy_correct(lm, records, torch.device("cpu")))


def test_lmconfig_names_what_it_rejects() -> None:
    with pytest.raises(ValueError, match="abacus_eval_offset shifts digit positions: it needs abacus"):
        PositionsConfig(abacus_eval_offset=2)
    with pytest.raises(ValueError, match="abacus_eval_offset must be an integer >= 0"):
        model(eval_offset=-1)


def test_the_configuration() -> None:
    plain = load_config(preset="addition-tiny", overrides=["model.abacus=8"])
    cfg = load_config(preset="addition-tiny",
                      overrides=["model.abacus=8", "model.isolate_samples=true", "eval.abacus_offset=3"])
    lm = lm_config(cfg).positions
    assert (lm.sample_end, lm.abacus_eval_offset) == (EOS, 3)
    assert (lm_config(plain).positions.sample_end, lm_config(plain).positions.abacus_eval_offset) == (None, 0)
    # Off by default, and then absent from the run id: runs made before the options keep their ids.
    assert config_hash(plain) == config_hash(load_config(
        preset="addition-tiny", overrides=["model.abacus=8", "model.isolate_samples=false", "eval.abacus_offset=0"]))
    assert config_hash(plain) != config_hash(cfg)
    for overrides, message in (
        (["eval.abacus_offset=2"], r"eval.abacus_offset=2 must lie in 0..model.abacus .*model.abacus is None"),
        (["model.abacus=8", "eval.abacus_offset=9"], r"eval.abacus_offset=9 must lie in 0..model.abacus"),
        (["model.isolate_samples=true", "mixer=falcon-2a", "train.cuda_graphs=true"],
         "changes the work of a step with its samples.*train.cuda_graphs replays one fixed step"),
        (["model.isolate_samples=true", "mixer=nonesuch"], "unknown mixer 'nonesuch'"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(preset="addition-tiny", overrides=overrides)
    # Every mixer keeps the packed rows; the model reads the samples from them.
    for mixer in ("falcon-1.3", "deltanet"):
        isolated = load_config(preset="addition-tiny", mixer=mixer, overrides=["model.isolate_samples=true"])
        assert lm_config(isolated).positions.sample_end == EOS
    with pytest.raises(ConfigError, match="model.isolate_samples is for task addition"):
        load_config(preset="tiny", overrides=["task=random", "model.isolate_samples=true"])


def test_lab_eval_addition_evaluates_at_another_offset(tmp_path: Path) -> None:
    cfg = load_config("addition-tiny", mixer="transformer", overrides=[
        "train.max_steps=4", "train.val_every=4", "train.ckpt_every=4", "train.batch_size=4", "eval.n_per_length=1",
        "eval.free_per_length=0", "model.abacus=6", "model.isolate_samples=true", "data.packing=true",
        "data.seq_len=48"])
    assert train(cfg, out=tmp_path / "run", results=tmp_path, progress=False).status == "finished"
    positions = tmp_path / "positions.csv"
    runner = CliRunner()
    at = runner.invoke(app, ["eval", "addition", "--run", str(tmp_path / "run"), "--per-n", "1", "--free-per-n", "0",
                             "--abacus-offset", "6", "--positions", str(positions)])
    assert at.exit_code == 0, at.output
    assert "digit positions at offset 6" in at.output
    assert set(pd.read_csv(positions)["abacus_offset"]) == {6}
    wrong = runner.invoke(app, ["eval", "addition", "--run", str(tmp_path / "run"), "--abacus-offset", "7"])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
    assert wrong.output.startswith("lab eval: eval.abacus_offset=7 must lie in 0..model.abacus")


def test_samples_apart_are_the_packed_samples_one_to_a_row() -> None:
    packed = make_batch(seed=2, step=5, batch_size=6, digits=(1, 9), seq_len=64, pack=True)
    apart = make_batch(seed=2, step=5, batch_size=6, digits=(1, 9), seq_len=64, pack=True, apart=True)
    assert apart.input_ids.shape == (len(packed.spans), 3 * 9 + 3)
    assert [s.n for s in apart.spans] == [s.n for s in packed.spans] and {s.row for s in apart.spans} == set(
        range(len(packed.spans)))

    def tokens(batch, labels=False):
        t = batch.labels if labels else batch.input_ids
        return [v for row in t.tolist() for v in row if v not in (PAD, EOS, -100)]

    # The same prompts and targets in the same order (an input row drops its last token, which may be an
    # EOS in either layout), and the same labelled tokens, end tokens included.
    assert tokens(apart) == tokens(packed)
    assert [v for v in apart.labels.flatten().tolist() if v != -100] == [
        v for v in packed.labels.flatten().tolist() if v != -100]


def test_a_masked_packed_batch_and_its_samples_apart_give_one_loss() -> None:
    """The two forms of isolated samples: the transformer's mask over packed rows, and the rows apart that
    every other mixer gets, are one objective."""
    from falcon_lab.train.module import token_loss_sum

    masked, plain = model(abacus=None).eval(), model(isolate=False, abacus=None).eval()
    plain.load_state_dict(masked.state_dict())
    packed = make_batch(seed=0, step=3, batch_size=4, digits=(1, 6), seq_len=48, pack=True)
    apart = make_batch(seed=0, step=3, batch_size=4, digits=(1, 6), seq_len=48, pack=True, apart=True)
    with torch.no_grad():
        loss, count = token_loss_sum(masked(packed.input_ids), packed.labels)
        loss_apart, count_apart = token_loss_sum(plain(apart.input_ids), apart.labels)
        unmasked, _ = token_loss_sum(plain(packed.input_ids), packed.labels)
    assert count == count_apart
    torch.testing.assert_close(loss, loss_apart)
    assert not torch.allclose(loss, unmasked)


@pytest.mark.parametrize("mixer", ["deltanet", "falcon-1.3"])
def test_a_recurrent_mixer_trains_on_isolated_packed_samples(mixer: str, tmp_path: Path) -> None:
    from falcon_lab.train.data import train_batch

    cfg = load_config("addition-tiny", mixer=mixer, overrides=[
        "train.max_steps=2", "train.val_every=2", "train.ckpt_every=2", "train.batch_size=4", "train.accumulate=2",
        "eval.n_per_length=1", "eval.free_per_length=0", "model.abacus=4", "model.isolate_samples=true",
        "data.packing=true", "data.seq_len=48"])
    ids, labels = train_batch(cfg, 0, 0, 1)
    packed = make_batch(cfg.train.seed, 0, 4, (1, 8), 48, True)
    assert torch.equal(ids, packed.input_ids)  # the packed rows themselves: the model keeps the samples apart
    result = train(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    assert result.status == "finished"


@pytest.mark.parametrize("mixer", ["falcon-1.3", "falcon-1a.3", "falcon-2", "falcon-3a.3", "deltanet",
                                   "gated-deltanet", "retnet", "mamba2"])
def test_a_recurrent_mixer_over_packed_samples_gives_the_loss_of_its_samples_apart(mixer: str) -> None:
    """The packed rows stay: every recurrent mixer restarts its state and convolutions at every sample (the
    Falcon rules and DeltaNet on packed sequences, the other scans over the samples laid one to a row).
    Either way one objective with the batch of the samples laid one to a row, gradients included; and a
    sample's logits do not depend on what its row packs before it."""
    from falcon_lab.train.module import token_loss_sum

    torch.manual_seed(0)
    cfg = dict(vocab_size=VOCAB_SIZE, d_model=32, n_layers=2, n_heads=2, mixer=mixer)
    restarting = LanguageModel(LMConfig(**cfg, positions=PositionsConfig(sample_end=EOS))).double()
    plain = LanguageModel(LMConfig(**cfg)).double()
    plain.load_state_dict(restarting.state_dict())
    packed = make_batch(seed=0, step=3, batch_size=4, digits=(1, 6), seq_len=48, pack=True)
    apart = make_batch(seed=0, step=3, batch_size=4, digits=(1, 6), seq_len=48, pack=True, apart=True)
    loss, count = token_loss_sum(restarting(packed.input_ids), packed.labels)
    loss_apart, count_apart = token_loss_sum(plain(apart.input_ids), apart.labels)
    assert count == count_apart
    torch.testing.assert_close(loss, loss_apart)
    loss.backward()
    loss_apart.backward()
    for (name, a), b in zip(restarting.named_parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    with torch.no_grad():
        unrestarted, _ = token_loss_sum(plain(packed.input_ids), packed.labels)
    assert not torch.allclose(loss.detach(), unrestarted)
    first, second = sample("97+58=", "551"), sample("123+456=", "9750")
    with torch.no_grad():
        alone = restarting(torch.tensor([second]))[0]
        after = restarting(torch.tensor([first + second]))[0, len(first):]
    torch.testing.assert_close(after, alone)


def test_sample_rows_lay_each_sample_on_a_row_and_fit_the_chunk_to_the_longest() -> None:
    from falcon_lab.mixers.layers import SampleRows, padded_length, sample_bounds

    samples = torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 1, 1]])
    rows = SampleRows(samples)
    x = torch.arange(10.0).view(2, 5, 1)
    apart = rows.apart(x)
    assert apart.shape == (4, 16, 1)  # 4 tokens at most, padded as the chunked forms pad them
    assert apart[:, :4, 0].tolist() == [[0, 1, 2, 0], [3, 4, 0, 0], [5, 0, 0, 0], [6, 7, 8, 9]]
    assert not apart[:, 4:].any()
    assert torch.equal(rows.back(apart), x)
    assert rows.places().tolist() == [[0, 1, 2, 0, 1], [0, 0, 1, 2, 3]]
    assert sample_bounds(samples).tolist() == [0, 3, 5, 6, 10]
    assert (rows.chunk(64), rows.chunk(8)) == (16, 8)  # the smallest chunk from 16
    long = SampleRows(torch.zeros(1, 100, dtype=torch.long))
    assert long.longest == 128 and (long.chunk(64), long.chunk(256)) == (64, 128)
    assert [padded_length(n) for n in (1, 16, 17, 33, 64, 65, 129, 192, 193)] == [16, 16, 32, 64, 64, 128, 192, 192,
                                                                                   256]


def test_a_compiled_mixer_over_samples_apart_recompiles_for_a_few_row_lengths_only() -> None:
    """Under torch.compile the samples' row length is a guarded constant: padded as the chunked forms pad it
    (``padded_length``), a curriculum whose longest sample grows token by token compiles once per bucket, where
    the longest itself would recompile at every step until Dynamo's limit (8) left the forms eager."""
    import torch._dynamo

    from falcon_lab.mixers.registry import build_mixer

    torch.manual_seed(0)
    mixer = build_mixer("mamba2", 32, 2, d_state=16)  # on a CPU: the chunk form over the samples' rows
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(mixer, backend=count)
    for longest in range(17, 31, 2):  # seven longest samples, one bucket (32 tokens)
        ids = [0] * longest + [1 + i // 8 for i in range(48 - longest)]  # then samples of 8 tokens at most
        compiled(torch.randn(2, 48, 32), samples=torch.tensor([ids, ids])).sum().backward()
        if longest == 17:
            first = len(graphs)
    torch._dynamo.reset()
    assert len(graphs) <= first + 1  # one recompile, where the number of samples changes and turns dynamic


@pytest.mark.parametrize("mixer, options", [("retnet", {}), ("mamba2", {"d_state": 16})])
def test_retnet_and_mamba2_on_the_fused_kernels_give_the_chunk_forms_loss(mixer: str, options: dict) -> None:
    """backend="triton" (falcon-1a's kernels with η = 1; Triton's interpreter here) against the PyTorch chunk form,
    float32, over packed samples kept apart: one loss and the same gradients."""
    torch.manual_seed(0)
    # one layer: the kernels' every gradient reaches the parameters through it (a second adds only interpreter time)
    cfg = dict(vocab_size=VOCAB_SIZE, d_model=32, n_layers=1, n_heads=2, mixer=mixer,
               positions=PositionsConfig(sample_end=EOS))
    fused = LanguageModel(LMConfig(**cfg, mixer_options={**options, "backend": "triton"}))
    chunk = LanguageModel(LMConfig(**cfg, mixer_options={**options, "backend": "chunk"}))
    chunk.load_state_dict(fused.state_dict())
    _same_loss_and_gradients((fused, lambda: None), (chunk, lambda: None), rtol=1e-3, atol=1e-5)


def _same_loss_and_gradients(*models: tuple, rtol: float, atol: float) -> None:
    """Two models (each with what to set before its pass) over one packed addition batch: the same loss, and the
    same gradient of every parameter within rtol/atol."""
    from falcon_lab.train.module import token_loss_sum

    batch = make_batch(seed=0, step=3, batch_size=4, digits=(1, 6), seq_len=48, pack=True)
    losses = []
    for m, setup in models:
        setup()
        loss, _ = token_loss_sum(m(batch.input_ids), batch.labels)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(models[0][0].named_parameters(), models[1][0].parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("mixer", ["falcon-1a.3", "falcon-2", "falcon-3"])
def test_samples_by_id_on_the_kernels_give_the_packed_sequences_loss(monkeypatch: pytest.MonkeyPatch,
                                                                     mixer: str) -> None:
    """``falcon_lab.mixers.layers.SAMPLE_IDS`` (``LAB_SAMPLE_IDS=1``): falcon-1a.3, falcon-2 and falcon-3 over packed
    samples on the kernels by their ids, the rows as they are in chunks of 16 tokens, give the loss and the
    gradients of the samples as packed sequences (falcon-3's laid one to a row; float32, Triton's interpreter here;
    decayed attention's mixers by id: tests/test_decayed.py)."""
    from falcon_lab.mixers import layers

    torch.manual_seed(0)
    cfg = dict(vocab_size=VOCAB_SIZE, d_model=32, n_layers=1, n_heads=2, mixer=mixer,
               mixer_options={"backend": "triton", "chunk_size": 16}, positions=PositionsConfig(sample_end=EOS))
    by_id, packed_rows = LanguageModel(LMConfig(**cfg)), LanguageModel(LMConfig(**cfg))
    packed_rows.load_state_dict(by_id.state_dict())
    _same_loss_and_gradients((by_id, lambda: monkeypatch.setattr(layers, "SAMPLE_IDS", True)),
                             (packed_rows, lambda: monkeypatch.setattr(layers, "SAMPLE_IDS", False)),
                             rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("lengths", "size", "chunk"), [
    ([40] * 10, 64, 32), ([20, 60, 100, 2], 64, 32), ([10, 12, 3], 64, 16), ([64, 64], 64, 64), ([300, 900], 64, 64),
    ([300, 900], 32, 32), ([40] * 10, 16, 16), ([1], 64, 16)])
def test_packed_samples_take_the_kernels_chunks_of_about_their_mean_length(lengths: list[int], size: int,
                                                                          chunk: int) -> None:
    """Each packed sample begins a chunk of the kernels: chunks of 16, 32 or 64 tokens, the largest no longer than the
    samples' mean length and no longer than the mixer's chunk size."""
    from falcon_lab.mixers.layers import packed_chunk

    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    assert packed_chunk(bounds, size) == chunk
