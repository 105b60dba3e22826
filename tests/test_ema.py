"""The weights' moving average (`train.ema`): the update it promises, the evaluations and the kept weights
reading it, a stopped run resuming onto the same average, and the option's bounds and run ids."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.eval.addition import evaluate_addition
from falcon_lab.eval.callback import eval_widths, read_evals
from falcon_lab.eval.run_weights import load_run_model
from falcon_lab.eval.training import evaluation_callbacks
from falcon_lab.train import run_training
from tests.train_util import StopAt

train = partial(run_training, evaluations=evaluation_callbacks, progress=False)
STEPS = 12
SETTINGS = [f"train.max_steps={STEPS}", "train.val_every=4", "train.ckpt_every=4", "train.batch_size=8",
            "train.log_every=1", "eval.n_per_length=2", "eval.free_per_length=0", "optim.lr=3e-3"]
DECAY = 0.8


def config(*overrides: str):
    return load_config("addition-tiny", mixer="transformer", overrides=[*SETTINGS, *overrides])


def last_checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)


class Weights(Callback):
    """The trained weights before the first step and after every step."""

    def __init__(self) -> None:
        self.seen: list[dict[str, torch.Tensor]] = []

    def _keep(self, pl_module) -> None:
        self.seen.append({k: v.detach().clone() for k, v in pl_module.model.named_parameters()})

    def on_train_start(self, trainer, pl_module) -> None:
        self._keep(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._keep(pl_module)


@pytest.fixture(scope="module")
def averaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Weights]:
    root = tmp_path_factory.mktemp("ema")
    weights = Weights()
    result = train(config(f"train.ema={DECAY}"), out=root / "run", results=root, callbacks=[weights])
    assert result.status == "finished"
    return root / "run", weights


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_average_is_the_promised_lerp_of_every_step(accumulate: int, averaged, tmp_path: Path) -> None:
    if accumulate == 1:
        run, weights = averaged
    else:  # the manual optimisation of train.accumulate updates the average as the automatic one does
        weights = Weights()
        run = tmp_path / "run"
        train(config(f"train.ema={DECAY}", f"train.accumulate={accumulate}"), out=run, results=tmp_path,
              callbacks=[weights])
    assert len(weights.seen) == STEPS + 1
    expected = {k: v.double() for k, v in weights.seen[0].items()}
    for t, w in enumerate(weights.seen[1:], start=1):
        d = min(DECAY, (1 + t) / (10 + t))
        expected = {k: d * expected[k] + (1 - d) * w[k].double() for k in expected}
    ema = last_checkpoint(run)["ema_state_dict"]
    for name, value in expected.items():
        torch.testing.assert_close(ema[name].double(), value, rtol=0, atol=1e-6, msg=name)
    # and it is not the trained weights themselves
    assert max((ema[k] - weights.seen[-1][k]).abs().max().item() for k in expected) > 1e-3


def test_evaluations_and_the_kept_weights_read_the_average(averaged) -> None:
    run, weights = averaged
    cfg = config(f"train.ema={DECAY}")
    last = load_run_model(run, "last")
    ema = last_checkpoint(run)["ema_state_dict"]
    assert all(torch.equal(v, ema[k]) for k, v in last.model.state_dict().items())
    evals = read_evals(run / "evals.csv")
    assert [e["step"] for e in evals] == [4, 8, 12]
    val_widths, ood_widths = eval_widths(cfg)
    kwargs = dict(n_per_length=cfg.eval.n_per_length, seed=cfg.eval.seed, val_widths=val_widths,
                  ood_widths=ood_widths)
    logged = evals[-1]["val_loss"]
    assert evaluate_addition(last.model, **kwargs).val_loss == pytest.approx(logged, rel=1e-5)
    raw = load_run_model(run, "raw")
    assert raw.which == "raw" and raw.step == STEPS
    trained = raw.model.state_dict()
    assert all(torch.equal(trained[k], v) for k, v in weights.seen[-1].items())
    assert evaluate_addition(raw.model, **kwargs).val_loss != pytest.approx(logged, rel=1e-3)
    # the trained weights are scored beside the average at every evaluation
    beside = read_evals(run / "evals_raw.csv")
    assert [e["step"] for e in beside] == [4, 8, 12]
    assert beside[-1]["val_loss"] == pytest.approx(evaluate_addition(raw.model, **kwargs).val_loss, rel=1e-5)
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    if best["step"] == STEPS:
        assert all(torch.equal(v, ema[k]) for k, v in best["state_dict"].items())


def test_a_stopped_run_resumes_onto_the_same_average(averaged, tmp_path: Path) -> None:
    reference, _ = averaged
    cfg = config(f"train.ema={DECAY}")
    first = train(cfg, out=tmp_path / "run", results=tmp_path, callbacks=[StopAt(6)])
    assert first.status == "stopped" and first.steps == 6
    second = train(cfg, out=tmp_path / "run", results=tmp_path)
    assert second.status == "finished" and second.resumed_from == 6
    a, b = last_checkpoint(tmp_path / "run")["ema_state_dict"], last_checkpoint(reference)["ema_state_dict"]
    for name, value in b.items():
        torch.testing.assert_close(a[name], value, rtol=0, atol=1e-6, msg=name)
    for name in ("evals.csv", "evals_raw.csv"):
        ra, rb = read_evals(tmp_path / "run" / name), read_evals(reference / name)
        assert [r["step"] for r in ra] == [r["step"] for r in rb] == [4, 8, 12]
        for x, y in zip(ra, rb):
            assert x["val_loss"] == pytest.approx(y["val_loss"], rel=1e-5)


def test_without_it_nothing_is_averaged(tmp_path: Path) -> None:
    train(config("train.max_steps=4"), out=tmp_path / "run", results=tmp_path)
    assert "ema_state_dict" not in last_checkpoint(tmp_path / "run")
    assert not (tmp_path / "run" / "evals_raw.csv").exists()


@pytest.mark.parametrize("bad", ["1.0", "-0.1", "1.5", "nan"])
def test_the_decay_lies_in_zero_to_one(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"train.ema must lie in \[0, 1\)"):
        config(f"train.ema={bad}")


def test_off_it_stays_out_of_earlier_run_ids() -> None:
    assert config_hash(config("train.ema=0.0")) == config_hash(config())
    assert config_hash(config("train.ema=0.999")) != config_hash(config())
