"""Run configuration: presets, layering, typed overrides, one-line errors, YAML round trip, run ids."""

from pathlib import Path

import pytest

from falcon_lab.config import (
    ConfigError,
    RunConfig,
    config_hash,
    dump_yaml,
    from_dict,
    load_config,
    presets,
    to_dict,
)


def test_presets_load_and_tiny_is_the_default() -> None:
    assert {"tiny", "small"} <= set(presets())
    cfg = load_config()
    assert cfg.preset == "tiny"
    assert cfg == load_config("tiny")
    assert cfg.model.d_model < load_config("small").model.d_model


def test_small_preset_has_about_ten_million_parameters() -> None:
    from falcon_lab.mixers import LanguageModel, LMConfig

    m = load_config("small").model
    shape = LMConfig(vocab_size=15, d_model=m.d_model, n_layers=m.n_layers, n_heads=m.n_heads)
    n = LanguageModel(shape).num_parameters()
    assert 8e6 <= n <= 13e6, n


def test_overrides_are_parsed_by_the_declared_type() -> None:
    cfg = load_config("tiny", overrides=[
        "optim.lr=3e-3", "train.max_steps=7", "data.packing=true", "data.seq_len=64",
        "optim.betas=0.8,0.99", "model.mixer_options.rope_base=500", "model.mup=yes", "train.precision=32-true",
    ])
    assert cfg.optim.lr == pytest.approx(3e-3) and isinstance(cfg.optim.lr, float)
    assert cfg.train.max_steps == 7 and isinstance(cfg.train.max_steps, int)
    assert cfg.data.packing is True and cfg.data.seq_len == 64
    assert cfg.optim.betas == (0.8, 0.99)
    assert cfg.model.mixer_options == {"rope_base": 500}
    assert cfg.model.mup is True and cfg.train.precision == "32-true"
    assert load_config("tiny", overrides=["data.seq_len=64", "data.seq_len=null"]).data.seq_len is None


def test_layers_override_in_order(tmp_path: Path) -> None:
    file = tmp_path / "run.yaml"
    file.write_text("preset: small\noptim:\n  lr: 2e-3\ntrain:\n  seed: 5\n  max_steps: 11\n")
    cfg = load_config(config_file=file)
    small = load_config("small")
    assert cfg.preset == "small" and cfg.model == small.model  # the file's preset key picks the base
    assert cfg.optim.lr == pytest.approx(2e-3) and cfg.train.seed == 5
    cfg = load_config("tiny", config_file=file, overrides=["train.seed=6", "train.max_steps=12"],
                      train__max_steps=13, mixer=None)
    assert cfg.preset == "tiny" and cfg.model == load_config("tiny").model  # the flag beats the file
    assert cfg.train.seed == 6 and cfg.train.max_steps == 13 and cfg.mixer == "transformer"


@pytest.mark.parametrize(("override", "expected"), [
    ("optim.lrr=1", "unknown key 'optim.lrr'; accepted keys in optim: lr, betas, weight_decay"),
    ("trian.seed=1", "accepted keys in the top level: task, mixer, preset, model, optim, train, data"),
    ("optim.lr=fast", "optim.lr expects float, got 'fast'"),
    ("train.max_steps=2.5", "train.max_steps expects int, got 2.5"),
    ("data.packing=maybe", "data.packing expects bool"),
    ("optim.betas=0.9", "optim.betas expects tuple[float, float]"),
    ("mixer=nope", "unknown mixer 'nope'; accepted: "),
    ("task=chess", "task='chess' is not accepted; accepted: addition, random"),
    ("model.n_heads=3", "model.d_model=32 is not divisible by model.n_heads=3; accepted n_heads: 1, 2, 4, 8"),
    ("train.devices=3", "not divisible by devices*num_nodes=3"),
    ("train.precision=bf16", "accepted: auto, 32-true, bf16-mixed"),
    ("data.seq_len=10", "data.seq_len=10 is too short for width 8; accepted: >= 27"),
    ("model.mixer_options.window=4", "unknown option(s) 'window' for mixer 'transformer'; accepted: "),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio must lie in [0, 1]"),
    ("train.max_steps=0", "train.max_steps must be >= 1"),
    ("data.curriculum=cubic", "accepted: null, linear"),
    ("optim.lr", "must look like key=value"),
    ("eval.held_out_from=49", "eval.widths=[1, 48] and eval.held_out_from=49 must satisfy 1 <= widths[0] < "
                              "held_out_from <= widths[1]"),
    ("eval.widths=[1,20]", "eval.widths=[1, 20] and eval.held_out_from=33 must satisfy"),
])
def test_mistakes_raise_one_line_naming_what_is_accepted(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", overrides=[override])
    message = str(err.value)
    assert "\n" not in message
    assert expected in message


def test_bad_files_and_presets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown preset 'huge'; accepted: .*tiny"):
        load_config("huge")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(config_file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(config_file=bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(config_file=bad)
    bad.write_text("optim: 3\n")
    with pytest.raises(ConfigError, match="optim must be a mapping"):
        load_config(config_file=bad)


def test_yaml_round_trip_keeps_config_and_id(tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides=["optim.betas=0.8,0.9", "model.mixer_options.head_dim=8", "task=random"])
    file = tmp_path / "config.yaml"
    file.write_text(dump_yaml(cfg))
    again = load_config(config_file=file)
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)
    assert from_dict(to_dict(cfg)) == cfg


def test_run_id_follows_what_is_computed_not_where() -> None:
    base = load_config("tiny")
    assert config_hash(base) == config_hash(load_config("tiny"))
    assert len(config_hash(base)) == 10
    assert config_hash(load_config("tiny", overrides=["optim.lr=1e-2"])) != config_hash(base)
    assert config_hash(load_config("tiny", overrides=["train.seed=1"])) != config_hash(base)
    assert config_hash(load_config("tiny", overrides=["train.devices=2"])) == config_hash(base)
    assert config_hash(load_config("tiny", overrides=["train.compile=true"])) == config_hash(base)
    # the evaluation's widths came later: at the paper's (1-48, held out from 33) the ids of runs made before
    # them stay what they were
    assert config_hash(load_config("addition-paper", task="addition", mixer="falcon-1.3")) == "49fce80a69"
    assert config_hash(load_config("addition-paper", task="addition", mixer="falcon-1.3",
                                   overrides=["eval.widths=[1,40]"])) != "49fce80a69"


def test_defaults_follow_the_paper_optimiser() -> None:
    o = RunConfig().optim
    assert o.betas == (0.9, 0.95) and o.grad_clip == 1.0


@pytest.mark.parametrize("preset, task, mixer, settings, run_id", [
    ("parity-tiny", "parity", "falcon-1", (), "59594b70df"),
    ("mqar-tiny", "mqar", "deltanet", (), "2148985655"),
    ("permutation-tiny", "permutation", "falcon-2a", ("data.group=A5",), "e9fda74b69"),
    ("tiny", "random", "falcon-3", (), "d91e5665e7"),
    ("tiny", "addition", "falcon-1a.3", ("model.abacus=0", "model.isolate_samples=true"), "27b0c4e1d4"),
    ("parity-tiny", "parity", "falcon-3a.3", ("data.curriculum=linear", "data.start_width=2"), "e57cfac5c8"),
])
def test_run_ids_of_every_task_and_rule_family_stay_as_recorded(preset, task, mixer, settings, run_id) -> None:
    """The ids of runs on each task, through the rule and task registries, are the ids these configs had before
    them: a run id is a hash of the configuration alone."""
    assert config_hash(load_config(preset, overrides=list(settings), task=task, mixer=mixer)) == run_id
