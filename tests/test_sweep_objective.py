"""One trial in this process: pruning stops the run after the evaluation the pruner rejects, the two-objective
sweep returns accuracy and tokens/s, and its report draws the Pareto front."""

import math
from pathlib import Path

import optuna
import pytest

from falcon_lab.sweep.objective import Objective
from falcon_lab.sweep.report import write_report
from falcon_lab.sweep.space import load_space
from falcon_lab.sweep.spec import SweepSpec
from falcon_lab.sweep.study import make_pruner

SPACE = """\
preset: addition-tiny
mixer: falcon-1a
fixed: {train.max_steps: 8, train.val_every: 2, train.log_every: 1, train.ckpt_every: 100,
        eval.n_per_length: 1, eval.free_per_length: 0}
params:
  lr: {key: optim.lr, type: float, low: 1.0e-3, high: 3.0e-2, log: true}
  qk_norm: {key: model.mixer_options.qk_norm, type: categorical, choices: [rmsnorm, l2]}
"""


class PruneAfterFirst(optuna.pruners.BasePruner):
    """Prunes a trial as soon as it has one intermediate value."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return len(trial.intermediate_values) >= 1


def setup(tmp_path: Path, objective: str) -> tuple[SweepSpec, object]:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPACE)
    spec = SweepSpec(study="one", space=str(path), storage="unused", results=str(tmp_path / "results"), trials=2,
                     objective=objective)
    return spec, load_space(path)


def test_a_pruned_trial_stops_training_after_the_rejected_evaluation(tmp_path: Path) -> None:
    spec, space = setup(tmp_path, "ood_mean")
    study = optuna.create_study(direction="maximize", pruner=PruneAfterFirst(),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(Objective(spec, space), n_trials=1)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [2]
    # The evaluation of step 2 is read at the start of step 3, which still trains; no further step does.
    assert trial.user_attrs["steps"] == 3
    run_state = (spec.trial_dir(0) / "run.json").read_text()
    assert '"status": "stopped"' in run_state


def test_the_hyperband_pruner_spans_the_first_evaluation_to_the_run_length(tmp_path: Path) -> None:
    spec, _ = setup(tmp_path, "ood_mean")
    pruner = make_pruner(spec, 100, 2000)
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    assert (pruner._min_resource, pruner._max_resource) == (100, 2000)
    assert isinstance(make_pruner(setup(tmp_path, "multi")[0], 100, 2000), optuna.pruners.NopPruner)
    spec.prune_after = 500  # --prune-after: a later first rung
    assert make_pruner(spec, 100, 2000)._min_resource == 500


def test_the_two_objective_sweep_returns_accuracy_and_throughput_and_reports_the_front(tmp_path: Path) -> None:
    spec, space = setup(tmp_path, "multi")
    study = optuna.create_study(directions=spec.directions, sampler=optuna.samplers.RandomSampler(seed=1))
    study.set_user_attr("metric_names", spec.metric_names)
    study.optimize(Objective(spec, space), n_trials=2)
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        acc, rate = t.values
        assert math.isfinite(acc) and rate == pytest.approx(t.user_attrs["tokens_per_s"]) and rate > 0
        assert not t.intermediate_values  # Optuna takes none for two objectives
    report = write_report(study, tmp_path / "report")
    names = {p.name for p in report.files}
    assert {"pareto.png", "history-val_acc.png", "history-tokens_per_s.png", "best.yaml", "report.md"} <= names
    assert report.best in study.best_trials
    assert "Pareto front: " in (tmp_path / "report" / "report.md").read_text()


def test_the_per_token_objective_reports_each_evaluation_and_returns_the_last(tmp_path: Path) -> None:
    spec, space = setup(tmp_path, "val_token_acc")
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner(),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(Objective(spec, space), n_trials=1)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == [2, 4, 6, 8]
    # per-token accuracy (%) of the last evaluation: not all-or-nothing like whole answers
    assert trial.value == trial.intermediate_values[8] and 0.0 < trial.value < 100.0
