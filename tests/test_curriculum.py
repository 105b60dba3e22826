"""The linear width curriculum: the range of each step, its configuration, and the batches it draws."""

import pytest

from falcon_lab.config import ConfigError, load_config
from falcon_lab.train.data import train_batch, train_widths
from falcon_lab.tasks.addition import IGNORE_INDEX
from falcon_lab.tasks.addition.curriculum import linear_widths


def test_linear_ramp_grows_the_widest_width_evenly_then_holds() -> None:
    tops = [linear_widths(s, (1, 8), 2, 12)[1] for s in range(16)]
    assert tops[0] == 2 and tops[12:] == [8, 8, 8, 8]
    assert all(a <= b for a, b in zip(tops, tops[1:]))
    # (8 - 2) widths over 12 steps: one more width every two steps.
    assert tops[:12] == [2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert {linear_widths(s, (3, 8), 3, 5)[0] for s in range(10)} == {3}
    assert linear_widths(0, (1, 32), 32, 7) == (1, 32)


@pytest.mark.parametrize(("args", "message"), [
    ((0, (1, 8), 9, 10), "start_width=9 must lie in widths"),
    ((0, (2, 8), 1, 10), "start_width=1 must lie in widths"),
    ((0, (1, 8), 2, 0), "ramp_steps must be >= 1"),
    ((-1, (1, 8), 2, 5), "step must be >= 0"),
])
def test_linear_ramp_rejects_bad_arguments(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        linear_widths(*args)


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.curriculum=linear", "data.start_width=9"], "data.start_width=9 must lie in data.widths [1, 8]"),
    (["data.curriculum=linear", "data.ramp_steps=0"], "data.ramp_steps must be >= 1"),
    (["data.curriculum=cubic"], "accepted: null, linear"),
    (["task=random", "data.curriculum=linear"], "data.curriculum applies to addition and the synthetic tasks"),
])
def test_curriculum_configuration_mistakes_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config("tiny", overrides=overrides)


def widths_of(labels) -> set[int]:
    # A row's labels are its n + 1 sum digits and EOS.
    return {int((row != IGNORE_INDEX).sum()) - 2 for row in labels}


def test_batches_follow_the_schedule_and_keep_their_shape() -> None:
    cfg = load_config("tiny", overrides=["data.curriculum=linear", "data.start_width=1", "data.ramp_steps=14",
                                         "train.batch_size=64"])
    plain = load_config("tiny", overrides=["train.batch_size=64"])
    assert train_widths(plain, 0) == (1, 8) and train_widths(cfg, 0) == (1, 1) and train_widths(cfg, 14) == (1, 8)
    first, _ = train_batch(cfg, 0, 0, 1)
    assert first.shape == train_batch(plain, 0, 0, 1)[0].shape
    assert widths_of(train_batch(cfg, 0, 0, 1)[1]) == {1}
    assert widths_of(train_batch(cfg, 6, 0, 1)[1]) <= {1, 2, 3, 4}
    assert widths_of(train_batch(cfg, 20, 0, 1)[1]) == set(range(1, 9))
    # Pure in the step: the same step gives the same rows, whatever was drawn before.
    assert train_batch(cfg, 6, 0, 1)[0].equal(train_batch(cfg, 6, 0, 1)[0])
