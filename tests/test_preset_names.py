"""One set of preset names for `lab train`, `lab reproduce` and `lab ablate`, each listed by its --help."""

import re

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, config_hash, load_config, presets
from falcon_lab.reproduce import addition, fineweb
from falcon_lab.reproduce.names import campaign_names, campaign_preset, preset_names, train_preset

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(ANSI.sub("", result.output).replace("│", " ").split())


def test_the_campaign_presets_are_named_after_their_lab_preset_or_their_track() -> None:
    assert campaign_names("addition")["addition-paper"] == "paper"
    assert campaign_names("addition")["addition-packed"] == "packed"
    assert campaign_names("addition")["addition-packed-constant"] == "packed-constant"
    assert campaign_names("addition")["addition-packed-exact"] == "packed-exact"
    assert campaign_names("fineweb") == {"fineweb-124m": "fineweb-124m", "fineweb-tiny": "tiny"}
    for track, module in (("addition", addition), ("fineweb", fineweb)):
        for name, key in campaign_names(track).items():
            base, settings = module.PRESETS[key]
            assert name == base if not settings else name.startswith(f"{track}-")
            assert campaign_preset(track, name) == campaign_preset(track, key) == key  # older spelling too


@pytest.mark.parametrize(("track", "name"), [(t, n) for t in ("addition", "fineweb") for n in campaign_names(t)])
def test_lab_train_takes_each_campaign_preset_and_makes_the_campaigns_run(track: str, name: str,
                                                                         tmp_path) -> None:
    key = campaign_preset(track, name)
    if track == "addition":
        (job,) = addition.plan(key, addition.parse_rows("transformer"), seeds=1)
    else:
        (job,) = fineweb.plan(key, fineweb.parse_rows("transformer"), seeds=1, data=tmp_path)
    base, settings = train_preset(name, "transformer")
    overrides = [*settings, *([f"data.path={tmp_path}"] if track == "fineweb" else [])]
    cfg = load_config(base, overrides=overrides, task=job.cfg.task, mixer="transformer")
    assert config_hash(cfg) == job.run_id


def test_every_name_is_accepted_and_an_unknown_one_lists_them() -> None:
    assert set(presets()) <= set(preset_names())
    for name in preset_names():
        train_preset(name)
    assert train_preset("tiny") == ("tiny", ())  # a file's name wins over a campaign's older spelling
    with pytest.raises(ConfigError, match=r"unknown preset 'paperr'; accepted: addition-cpu, .*addition-packed, .*tiny"):
        train_preset("paperr")
    with pytest.raises(ValueError, match=r"unknown preset 'small'; accepted: .*addition-paper.*older spellings"):
        campaign_preset("addition", "small")


def test_each_command_lists_its_names_in_help_and_refuses_others() -> None:
    _, text = invoke("train", "--help")
    assert all(name in text for name in preset_names()), text
    for command in (["reproduce", "addition"], ["ablate", "alignment"]):
        _, text = invoke(*command, "--help")
        assert all(name in text for name in campaign_names("addition")), text
        code, text = invoke(*command, "--preset", "fineweb-tiny")
        assert code == 2 and f"lab {command[0]}: unknown preset 'fineweb-tiny'; accepted: addition-" in text, text
    _, text = invoke("reproduce", "fineweb", "--help")
    assert "fineweb-124m" in text and "fineweb-tiny" in text
    code, text = invoke("train", "--preset", "nope", "--max-steps", "1")
    assert code == 2 and "unknown preset 'nope'; accepted:" in text and "addition-packed" in text
