"""A trained run's model: its configuration from config.yaml and its best or last weights."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from falcon_lab.config import RunConfig, from_dict, read_yaml, validate
from falcon_lab.eval.callback import best_weights_path
from falcon_lab.runs import RunDir
from falcon_lab.train.checkpoint_io import short_reason
from falcon_lab.train.module import lm_config
from falcon_lab.mixers import LanguageModel

WHICH = ("best", "last", "raw", "failed")


@dataclass
class RunModel:
    """A run's LanguageModel with the weights of `step`, read from `source`: its `which` ("best" or "last")."""

    cfg: RunConfig
    model: nn.Module
    step: int
    source: Path
    which: str = "best"


def load_run_model(run_dir: str | Path, which: str = "best", device: torch.device | str = "cpu",
                   abacus_offset: int | None = None, fall_back: bool = False) -> RunModel:
    """The model of the run in `run_dir` with its best weights (checkpoints/best.pt, written by the
    addition evaluation), its last ones (checkpoints/last.ckpt: with `train.ema` their moving average, what the
    run evaluated; `which="raw"` the trained weights themselves, the same as "last" without it) or, for a run
    that failed on a non-finite loss or gradient, those it had then (checkpoints/failed.pt). ValueError saying what is missing.
    `fall_back`: a run without best weights gives its last ones (the result's `which` says so).
    `abacus_offset`: evaluate the digit positions at this offset instead of the run's `eval.abacus_offset`
    (ConfigError unless the run has digit positions and the offset lies in 0..model.abacus)."""
    if which not in WHICH:
        raise ValueError(f"which={which!r} is not accepted; accepted: {', '.join(WHICH)}")
    run = RunDir(Path(run_dir).resolve())
    if not run.config.exists():
        raise ValueError(f"{run.root} is not a run folder: it has no config.yaml")
    cfg = from_dict(read_yaml(run.config))
    if abacus_offset is not None:
        cfg = replace(cfg, eval=replace(cfg.eval, abacus_offset=abacus_offset))
        validate(cfg)
    source = {"best": best_weights_path(run), "last": run.last_checkpoint, "raw": run.last_checkpoint,
              "failed": run.failed_weights}[which]
    if which == "best" and fall_back and not source.exists() and run.last_checkpoint.exists():
        which, source = "last", run.last_checkpoint
    if not source.exists():
        hint = " (it is written by runs that evaluate addition, eval.enabled)" if which == "best" else ""
        raise ValueError(f"run {run.root} has no {source.relative_to(run.root)}{hint}")
    saved = read_weights(source)
    if which in ("best", "failed"):
        state, step = saved["state_dict"], int(saved["step"])
    else:
        # with train.ema the average is what the run evaluated, so it is the run's last model
        trained = {k.removeprefix("model."): v for k, v in saved["state_dict"].items() if k.startswith("model.")}
        state = trained if which == "raw" else saved.get("ema_state_dict") or trained
        step = int(saved["global_step"])
    model = LanguageModel(lm_config(cfg))
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{source} does not hold this run's model ({short_reason(err)})") from None
    return RunModel(cfg, model.to(device).eval(), step, source, which)


def read_weights(source: Path) -> dict:
    """The checkpoint at `source`, read whole on the CPU; ValueError in one line when it cannot be (a file
    cut short, empty or not a checkpoint)."""
    if source.stat().st_size == 0:
        raise ValueError(f"{source} cannot be read (the file is empty)")
    try:
        saved = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as err:  # a cut or damaged file fails in torch, zipfile or pickle, with any of their errors
        raise ValueError(f"{source} cannot be read ({short_reason(err)})") from None
    if not isinstance(saved, dict) or "state_dict" not in saved:
        raise ValueError(f"{source} cannot be read: it holds no state_dict")
    return saved
