"""Digit positions (`model.abacus`, Abacus embeddings): the significance of each digit, the model's use of it,
generation without a recurrent step, and the configuration that turns it on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.eval.addition import greedy
from falcon_lab.eval.free_running import greedy_correct
from falcon_lab.train.module import lm_config
from falcon_lab.mixers import LanguageModel, LMConfig, PositionsConfig
from falcon_lab.mixers import positions as mixers_positions
from falcon_lab.mixers.positions import digit_significance
from falcon_lab.tasks.addition import generate_records
from falcon_lab.tasks.addition.batches import make_batch
from falcon_lab.tasks.addition.vocab import DIGIT_0, EOS, EQUALS, PAD, VOCAB_SIZE, encode

DIGITS = (DIGIT_0, DIGIT_0 + 9)


def significance(*parts: list[int]) -> list[int]:
    return digit_significance(torch.tensor([sum(parts, [])]), DIGITS, EQUALS)[0].tolist()


def test_operands_count_from_their_last_digit_and_answers_from_their_first() -> None:
    # 012 + 345 = 357, written 3530 reversed to four digits; then a second sample packed in the same row.
    row = significance(encode("012+345="), encode("7530"), [EOS], encode("9+9="), encode("81"), [EOS, PAD])
    assert row == [3, 2, 1, 0, 3, 2, 1, 0, 1, 2, 3, 4, 0, 1, 0, 1, 0, 1, 2, 0, 0]


def test_ahead_the_answer_holds_the_index_of_the_digit_it_predicts() -> None:
    """``ahead``: the marker predicts the units (index 1), the answer's k-th digit predicts digit k + 1; the
    operands are as before."""
    ids = torch.tensor([encode("012+345=") + encode("7530") + [EOS] + encode("9+9=") + encode("81") + [EOS, PAD]])
    row = digit_significance(ids, DIGITS, EQUALS, ahead=True)[0].tolist()
    assert row == [3, 2, 1, 0, 3, 2, 1, 1, 2, 3, 4, 5, 0, 1, 0, 1, 1, 2, 3, 0, 0]
    # the token that predicts significance k (the marker or answer digit k - 1) holds index k
    plain = significance(encode("012+345="), encode("7530"), [EOS])
    assert row[8:12] == [k + 1 for k in plain[8:12]]


def test_ahead_needs_digit_positions_and_keeps_earlier_run_ids() -> None:
    cfg = load_config(preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_ahead=true"])
    assert lm_config(cfg).positions.abacus_ahead
    off = load_config(preset="addition-tiny", overrides=["model.abacus=0"])
    assert not lm_config(off).positions.abacus_ahead and config_hash(off) != config_hash(cfg)
    assert config_hash(off) == config_hash(load_config(preset="addition-tiny",
                                                       overrides=["model.abacus=0", "model.abacus_ahead=false"]))
    with pytest.raises(ConfigError, match="model.abacus_ahead .* needs model.abacus"):
        load_config(preset="addition-tiny", overrides=["model.abacus_ahead=true"])


def test_a_digit_keeps_its_index_as_the_answer_grows() -> None:
    """Generation re-runs the prefix: no index may change when a token is appended."""
    full = encode("4821+0937=") + encode("85750")
    for t in range(len(encode("4821+0937=")), len(full) + 1):
        assert significance(full[:t]) == significance(full)[:t]
        ahead = [digit_significance(torch.tensor([ids]), DIGITS, EQUALS, ahead=True)[0].tolist() for ids in
                 (full[:t], full)]
        assert ahead[0] == ahead[1][:t]


def abacus_model(mixer: str = "transformer", offset: int = 4, seed: int = 0, embed: str = "learned",
                 shift_frac: float = 1.0, start: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=VOCAB_SIZE, d_model=32, n_layers=2, n_heads=2, mixer=mixer, positions=PositionsConfig(
        abacus=offset, abacus_size=offset + 20, digit_ids=DIGITS, answer_marker=EQUALS, abacus_embed=embed,
        abacus_shift_frac=shift_frac, abacus_start=start))
    return LanguageModel(cfg).double()


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1.3"])
def test_the_digit_positions_change_the_digits_only_and_train_with_a_random_offset(mixer: str) -> None:
    lm = abacus_model(mixer).eval()
    ids = make_batch(seed=0, step=0, batch_size=3, digits=(1, 5), seq_len=40, pack=True).input_ids
    plain = LanguageModel(lm.cfg.__class__(**{**lm.cfg.to_dict(), "positions": None})).double()
    plain.load_state_dict({k: v for k, v in lm.state_dict().items() if not k.startswith("positions.")})
    # The first token of every row is a digit, so the models part from position 0; with the digit vectors
    # zeroed they agree everywhere.
    assert not torch.allclose(lm(ids), plain(ids))
    with torch.no_grad():
        lm.positions.digit_embed.weight.zero_()
    torch.testing.assert_close(lm(ids), plain(ids))
    # Eval: one index per digit, so the same logits every call; training: a random offset per row.
    lm = abacus_model(mixer)
    lm.eval()
    torch.testing.assert_close(lm(ids), lm(ids))
    lm.train()
    torch.manual_seed(1)
    first = lm(ids)
    assert any(not torch.allclose(first, lm(ids)) for _ in range(5))
    index = lm.positions.digit_positions(ids)
    shift = index - digit_significance(ids, DIGITS, EQUALS)
    assert ((shift >= 0) & (shift <= 4)).all() and (shift[index == 0] == 0).all()
    assert all(len(set(row[row > 0].tolist())) == 1 for row in shift)  # one offset a row


@pytest.mark.parametrize("frac", [0.0, 0.5, 1.0])
def test_only_the_shifted_fraction_of_rows_takes_the_offset(frac: float) -> None:
    """``abacus_shift_frac``: a row keeps the exact significance unless it is drawn for the offset; over many
    rows the shifted share is near ``frac`` (a shifted row draws 0 too, one time in offset + 1)."""
    lm = abacus_model(offset=8, shift_frac=frac).train()
    ids = make_batch(seed=0, step=0, batch_size=400, digits=(1, 5), seq_len=40, pack=True).input_ids
    torch.manual_seed(5)
    shift = lm.positions.digit_positions(ids) - digit_significance(ids, DIGITS, EQUALS)
    digit = digit_significance(ids, DIGITS, EQUALS) > 0
    assert (shift[~digit] == 0).all() and ((shift >= 0) & (shift <= 8)).all()
    assert all(len(set(row[d].tolist())) == 1 for row, d in zip(shift, digit))  # still one offset a row
    exact = (shift.amax(1) == 0).double().mean().item()
    assert exact == pytest.approx(1 - frac + frac / 9, abs=0.07)


def test_the_shifted_fraction_is_checked_and_keeps_earlier_run_ids() -> None:
    cfg = load_config(preset="addition-tiny", overrides=["model.abacus=16", "model.abacus_shift_frac=0.5"])
    assert lm_config(cfg).positions.abacus_shift_frac == 0.5
    plain = load_config(preset="addition-tiny", overrides=["model.abacus=16"])
    assert config_hash(plain) != config_hash(cfg)
    assert config_hash(plain) == config_hash(load_config(preset="addition-tiny", overrides=[
        "model.abacus=16", "model.abacus_shift_frac=1.0"]))
    with pytest.raises(ConfigError, match="model.abacus_shift_frac must be a number in"):
        load_config(preset="addition-tiny", overrides=["model.abacus=16", "model.abacus_shift_frac=1.5"])
    with pytest.raises(ConfigError, match="model.abacus_shift_frac=0.5 .* needs model.abacus >= 1"):
        load_config(preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_shift_frac=0.5"])


def test_the_offset_starts_after_abacus_start_training_passes_and_the_count_is_kept() -> None:
    """``abacus_start``: exact positions for the first passes in training (evaluations do not count), the offset
    after them; the count is a buffer, so a checkpoint resumes it."""
    lm = abacus_model(offset=8, start=3)
    ids = make_batch(seed=0, step=0, batch_size=64, digits=(1, 5), seq_len=40, pack=True).input_ids
    exact = digit_significance(ids, DIGITS, EQUALS)
    torch.manual_seed(2)
    lm.eval()
    for _ in range(4):
        assert torch.equal(lm.positions.digit_positions(ids), exact)
    lm.train()
    for _ in range(3):
        assert torch.equal(lm.positions.digit_positions(ids), exact)
    assert int(lm.positions.seen) == 3
    assert not torch.equal(lm.positions.digit_positions(ids), exact)  # the fourth pass: shifted rows
    state = lm.state_dict()
    assert int(state["positions.seen"]) == 4
    again = abacus_model(offset=8, start=3, seed=1)
    again.load_state_dict(state)
    assert int(again.positions.seen) == 4 and not torch.equal(again.train().positions.digit_positions(ids), exact)
    assert "positions.seen" not in abacus_model(offset=8).state_dict()  # earlier checkpoints still load


def test_the_start_is_checked_counted_in_passes_and_keeps_earlier_run_ids() -> None:
    cfg = load_config(preset="addition-tiny", overrides=["model.abacus=16", "model.abacus_start=500",
                                                          "train.accumulate=2"])
    assert lm_config(cfg).positions.abacus_start == 1000  # two passes a step
    plain = load_config(preset="addition-tiny", overrides=["model.abacus=16"])
    assert config_hash(plain) == config_hash(load_config(preset="addition-tiny", overrides=[
        "model.abacus=16", "model.abacus_start=0"]))
    with pytest.raises(ConfigError, match="model.abacus_start must be an integer >= 0"):
        load_config(preset="addition-tiny", overrides=["model.abacus=16", "model.abacus_start=-1"])
    with pytest.raises(ConfigError, match="model.abacus_start=5 .* needs model.abacus >= 1"):
        load_config(preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_start=5"])


def test_the_vector_of_non_digits_stays_zero() -> None:
    lm = abacus_model().train()
    ids = make_batch(seed=0, step=0, batch_size=2, digits=(1, 4), seq_len=30, pack=True).input_ids
    lm(ids).sum().backward()
    embed = lm.positions.digit_embed
    assert embed.weight.grad[0].abs().sum() == 0 and embed.weight[0].abs().sum() == 0


def test_sinusoidal_positions_are_one_rotation_per_index_step_and_zero_off_the_digits() -> None:
    """``abacus_embed="sinusoidal"``: the features of index k + 1 are one fixed rotation of index k's, for
    indices far past any trained width too, so the learned map that reads them is the same for every index."""
    positions = abacus_model(embed="sinusoidal").positions
    assert positions.digit_embed is None and positions.digit_proj is not None
    index = torch.arange(0, 200)
    f = positions.digit_sines(index).double()
    assert f[0].abs().sum() == 0
    torch.testing.assert_close(f[1:].norm(dim=-1), torch.ones(199, dtype=torch.float64), atol=1e-6, rtol=0)
    n = len(positions.frequencies)
    # the one rotation: each (sin, cos) pair turns by its period's angle
    rotation = torch.linalg.lstsq(f[1:100], f[2:101]).solution
    torch.testing.assert_close(f[100:199] @ rotation, f[101:200], atol=1e-4, rtol=0)
    angle = (2 * torch.pi / torch.tensor(mixers_positions.SINE_PERIODS, dtype=torch.float64))
    torch.testing.assert_close(rotation[:n, :n].diagonal(), angle.cos(), atol=1e-4, rtol=0)
    # distinct indices, near or far, have distinct features
    gram = f[1:] @ f[1:].T
    assert (gram - torch.eye(199, dtype=torch.float64)).max() < 0.999


def test_sinusoidal_positions_train_and_read_every_index() -> None:
    lm = abacus_model("falcon-1.3", embed="sinusoidal").train()
    ids = make_batch(seed=0, step=0, batch_size=2, digits=(1, 4), seq_len=30, pack=True).input_ids
    lm(ids).sum().backward()
    assert lm.positions.digit_proj.weight.grad.abs().sum() > 0
    plain = LanguageModel(lm.cfg.__class__(**{**lm.cfg.to_dict(), "positions": None})).double().eval()
    plain.load_state_dict({k: v for k, v in lm.state_dict().items() if not k.startswith("positions.")})
    lm.eval()
    assert not torch.allclose(lm(ids), plain(ids))
    with torch.no_grad():
        lm.positions.digit_proj.weight.zero_()
    torch.testing.assert_close(lm(ids), plain(ids))


def test_sinusoidal_positions_in_the_config() -> None:
    cfg = load_config(preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_embed=sinusoidal"])
    assert lm_config(cfg).positions.abacus_embed == "sinusoidal"
    learned = load_config(preset="addition-tiny", overrides=["model.abacus=0"])
    assert lm_config(learned).positions.abacus_embed == "learned" and config_hash(learned) != config_hash(cfg)
    assert config_hash(learned) == config_hash(load_config(
        preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_embed=learned"]))
    with pytest.raises(ConfigError, match="model.abacus_embed='rotary' is not one of"):
        load_config(preset="addition-tiny", overrides=["model.abacus=0", "model.abacus_embed=rotary"])
    with pytest.raises(ConfigError, match="model.abacus_embed='sinusoidal' .* needs model.abacus"):
        load_config(preset="addition-tiny", overrides=["model.abacus_embed=sinusoidal"])
    with pytest.raises(ValueError, match="abacus_embed must be one of"):
        PositionsConfig(abacus=0, abacus_size=4, digit_ids=DIGITS, answer_marker=EQUALS, abacus_embed="rotary")


def test_generation_reruns_the_prefix_and_agrees_with_one_forward_pass() -> None:
    lm = abacus_model("falcon-1.3").eval()
    assert not lm.can_step
    with pytest.raises(ValueError, match="cannot generate token by token"):
        lm.init_cache(2)
    records = list(generate_records("val", (3, 3), 4, seed=0))
    assert torch.equal(greedy(lm, records, torch.device("cpu")), greedy_correct(lm, records, torch.device("cpu")))
    # The tokens written one at a time are the argmax of one pass over the finished sequence.
    seq = torch.tensor([encode(r["prompt"]) for r in records])
    start = seq.shape[1]
    with torch.no_grad():
        for _ in range(5):
            seq = torch.cat([seq, lm(seq)[:, -1].argmax(-1, keepdim=True)], 1)
        assert torch.equal(lm(seq)[:, start - 1:-1].argmax(-1), seq[:, start:])


def test_a_run_longer_than_the_table_is_named() -> None:
    lm = abacus_model().eval()
    ids = torch.tensor([encode("1" * 25 + "+" + "2" * 25 + "=")])
    with pytest.raises(ValueError, match="a run of 25 digits is longer than the digit positions cover"):
        lm(ids)


def test_the_configuration() -> None:
    cfg = load_config(preset="addition-tiny", overrides=["model.abacus=8"])
    lm = lm_config(cfg).positions
    assert (lm.abacus, lm.digit_ids, lm.answer_marker) == (8, DIGITS, EQUALS)
    assert lm.abacus_size == 8 + 2 + 128
    # Off by default, and then absent from the run id: runs made before the option keep their ids.
    plain = load_config(preset="addition-tiny")
    assert plain.model.abacus is None and lm_config(plain).positions is None
    assert config_hash(plain) != config_hash(cfg)
    assert config_hash(plain) == config_hash(load_config(preset="addition-tiny", overrides=["model.abacus=null"]))
    with pytest.raises(ConfigError, match="model.abacus must be null"):
        load_config(preset="addition-tiny", overrides=["model.abacus=-1"])
    with pytest.raises(ConfigError, match="is for task addition"):
        load_config(preset="tiny", overrides=["task=random", "model.abacus=4"])


def test_weights_saved_with_the_digit_positions_on_the_model_still_load() -> None:
    # before the positions were a component of their own, the model held them as `digit_embed.weight`
    saved = abacus_model(seed=1).state_dict()
    older = {("digit_embed.weight" if k == "positions.digit_embed.weight" else k): v for k, v in saved.items()}
    assert "digit_embed.weight" in older
    lm = abacus_model(seed=2)
    lm.load_state_dict(older)
    torch.testing.assert_close(lm.positions.digit_embed.weight, saved["positions.digit_embed.weight"])
    wrapped = nn.ModuleDict({"model": abacus_model(seed=3)})  # as lab's LabModule holds it: model.digit_embed.weight
    wrapped.load_state_dict({f"model.{k}": v for k, v in older.items()})
    torch.testing.assert_close(wrapped["model"].positions.digit_embed.weight, saved["positions.digit_embed.weight"])
