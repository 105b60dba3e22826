"""Sweep search spaces: the shipped spaces, conditional parameters, the mapping onto `lab train`
configurations, and one-line errors for malformed space files."""

from pathlib import Path

import optuna
import pytest

from falcon_lab.sweep.space import SpaceError, grid_of, load_space, suggest
from falcon_lab.sweep.spec import SweepSpec, check_space, trial_config
from falcon_lab.sweeps import space_path, spaces

RULES_WITH_WINDOW = {"falcon-3", "falcon-3a"}


def spec_for(space: Path, **kwargs) -> SweepSpec:
    return SweepSpec(study="t", space=str(space), storage="unused", results="unused", trials=1, **kwargs)


def draws(path: Path, n: int) -> list[dict]:
    """n draws of the space through Optuna's random sampler, each with its values."""
    space = load_space(path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), direction="maximize")
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(suggest(trial, space))
        study.tell(trial, 0.0)
    return out


def test_the_shipped_spaces_are_regime_and_rules_and_pass_their_checks() -> None:
    assert {"regime", "rules"} <= set(spaces())
    check_space(spec_for(space_path("rules")), load_space(space_path("rules")))
    for mixer in ("falcon-1a.3", "transformer", "mamba2"):
        check_space(spec_for(space_path("regime"), mixer=mixer), load_space(space_path("regime")))


def test_rules_space_draws_each_knob_only_where_it_means_something() -> None:
    seen = {"beta>1": False, "lam=0": False, "window": False, "const_beta": False}
    for values in draws(space_path("rules"), 300):
        assert values["rule"].startswith("falcon-")
        assert values["qk_norm"] in ("rmsnorm", "l2")
        assert 1e-4 <= values["lr"] <= 1e-2
        assert ("beta" in values) == (values["gain"] == "const_beta")
        if "beta" in values:
            assert 0 < values["beta"] < 2
            seen["beta>1"] |= values["beta"] > 1
            seen["const_beta"] = True
        assert ("window" in values) == (values["rule"] in RULES_WITH_WINDOW)
        if "window" in values:
            assert values["window"] in (1, 2, 4, 8, 16)
            seen["window"] = True
        assert ("lam_kind" in values) == (values["ridge"] == "const_lambda")
        assert ("lam" in values) == (values.get("lam_kind") == "log")
        if "lam" in values:
            assert 1e-4 <= values["lam"] <= 1.0
        seen["lam=0"] |= values.get("lam_kind") == "zero"
    assert all(seen.values()), seen


def test_rules_values_become_the_trial_configuration() -> None:
    path = space_path("rules")
    space = load_space(path)
    values = {"rule": "falcon-3a", "gain": "const_beta", "beta": 1.5, "ridge": "const_lambda", "lam_kind": "zero",
              "window": 8, "qk_norm": "l2", "lr": 2e-3}
    cfg = trial_config(spec_for(path, sets=["train.max_steps=7"]), space, values)
    assert cfg.mixer == "falcon-3a" and cfg.preset == "addition-paper"
    opts = cfg.model.mixer_options
    assert opts == {"gain": "const_beta", "beta": 1.5, "ridge": "const_lambda", "lam": 0.0, "window": 8,
                    "qk_norm": "l2"}
    assert cfg.optim.lr == 2e-3 and cfg.train.max_steps == 7
    assert cfg.eval.enabled and cfg.train.devices == 1  # the sweep's own settings
    logged = trial_config(spec_for(path), space, {**values, "lam_kind": "log", "lam": 0.03})
    assert logged.model.mixer_options["lam"] == 0.03


def test_regime_space_maps_width_to_heads_of_64_and_curriculum_to_its_ramp() -> None:
    path = space_path("regime")
    space = load_space(path)
    values = {"lr": 1e-3, "batch_size": 128, "width": 512, "depth": 3, "steps": 2000, "curriculum": "linear",
              "ramp_steps": 400}
    cfg = trial_config(spec_for(path, mixer="falcon-1a.3"), space, values)
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers) == (512, 8, 3)
    assert (cfg.train.batch_size, cfg.train.max_steps, cfg.data.curriculum, cfg.data.ramp_steps) == (128, 2000,
                                                                                                    "linear", 400)
    assert cfg.mixer == "falcon-1a.3"
    for values in draws(path, 60):
        assert ("ramp_steps" in values) == (values["curriculum"] == "linear")


def test_grid_of_a_discrete_space_and_the_error_for_a_continuous_one(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text("params:\n  a: {key: optim.lr, type: float, low: 0.001, high: 0.003, step: 0.001}\n"
                    "  b: {key: train.batch_size, type: int, low: 8, high: 16, step: 8}\n"
                    "  c: {key: model.mixer_options.qk_norm, type: categorical, choices: [l2, rmsnorm]}\n")
    grid = grid_of(load_space(path))
    assert [round(v, 6) for v in grid["a"]] == [0.001, 0.002, 0.003]
    assert grid["b"] == [8, 16] and grid["c"] == ["l2", "rmsnorm"]
    with pytest.raises(SpaceError, match=r"rules.yaml: parameter beta: a grid needs discrete values"):
        grid_of(load_space(space_path("rules")))


BAD = [
    ("params: [1, 2]", "params must map parameter names"),
    ("params:\n  lr: {key: optim.lr, type: real, low: 1, high: 2}", "parameter lr: type 'real' is not accepted"),
    ("params:\n  lr: {key: optim.lr, type: float, low: 0.1, high: 0.01}", "parameter lr: low must be < high"),
    ("params:\n  lr: {key: optim.lr, type: float, low: 0, high: 0.1, log: true}",
     "parameter lr: a log scale needs low > 0"),
    ("params:\n  lr: {key: optim.lr, type: float, low: 1e-4, high: 1e-2, log: true, step: 1e-3}",
     "parameter lr: step and log cannot be combined"),
    ("params:\n  lr: {key: optim.lr, type: float, lo: 0.1, high: 0.2}", "parameter lr: unknown field 'lo'"),
    ("params:\n  n: {key: train.batch_size, type: int, low: 1.5, high: 4}", "parameter n: low must be an integer"),
    ("params:\n  g: {key: model.mixer_options.gain, type: categorical, choices: []}",
     "parameter g: choices must be a non-empty list"),
    ("params:\n  beta: {key: model.mixer_options.beta, type: float, low: 0.1, high: 1.9, when: {gain: const_beta}}",
     "parameter beta: when names 'gain', which is not a parameter declared before it"),
    ("params:\n  g: {key: model.mixer_options.gain, type: categorical, choices: [ctx_beta]}\n"
     "  beta: {key: model.mixer_options.beta, type: float, low: 0.1, high: 1.9, when: {g: const_beta}}",
     "parameter beta: when g='const_beta' can never hold"),
    ("params:\n  s: {type: categorical, choices: [a, b]}", "parameter s: it has no key and no parameter depends on it"),
    ("params:\n  a: {key: optim.lr, type: float, low: 0.1, high: 0.2}\n"
     "  b: {key: optim.lr, type: float, low: 0.1, high: 0.2}",
     "parameter b: key optim.lr is already set by parameter a"),
    ("params:\n  w: {key: model.d_model, type: categorical, choices: [64, 128], also: {model.n_heads: [1]}}",
     "parameter w: also.model.n_heads must list one value per choice"),
    ("prams: {}", "unknown key 'prams'"),
    ("params: {a: [", "not valid YAML"),
]


@pytest.mark.parametrize("text,problem", BAD)
def test_a_malformed_space_file_names_the_file_the_parameter_and_the_problem(tmp_path: Path, text: str,
                                                                            problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SpaceError) as err:
        load_space(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message


@pytest.mark.parametrize("text,problem", [
    ("mixer: falcon-1\nparams:\n  beta: {key: model.mixer_options.beta, type: float, low: 0.5, high: 2.0}",
     "parameter beta: value 2.0 is not accepted: model.mixer_options: mixer 'falcon-1': beta must be"),
    ("mixer: falcon-1\nparams:\n  x: {key: optim.learning_rate, type: float, low: 0.1, high: 0.2}",
     "parameter x: value 0.1 is not accepted: unknown key 'optim.learning_rate'"),
    ("mixer: falcon-1\nparams:\n  d: {key: model.n_layers, type: float, low: 1.0, high: 2.5}",
     "parameter d: value 1.0 is not accepted: model.n_layers expects int, got 1.0"),
])
def test_a_space_whose_values_lab_train_rejects_is_named_before_anything_runs(tmp_path: Path, text: str,
                                                                              problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SpaceError) as err:
        check_space(spec_for(path, preset="tiny"), load_space(path))
    assert str(err.value).startswith(f"{path}: ") and problem in str(err.value), str(err.value)
