"""Train one run end to end: its folder, provenance and registry row, skip or resume, fit, final state.

Every rank of a DDP run executes this; only rank zero writes files and the registry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only

from falcon_lab.config import ConfigError, RunConfig, config_hash, dump_yaml, from_dict, read_yaml, to_dict
from falcon_lab.console import say
from falcon_lab.paths import cache_root, results_root
from falcon_lab.runs import (
    Registry,
    RunDir,
    RunLock,
    atomic_write_text,
    now,
    process_age,
    provenance,
    record_provenance,
    run_dir_for,
)
from falcon_lab.train.callbacks import Phases, StopOnInterrupt, read_metrics
from falcon_lab.train.checkpoint_io import AtomicCheckpointIO, resume_point, save_keeping_previous
from falcon_lab.train.data import LabData
from falcon_lab.train.module import LabModule, NonFiniteError
from falcon_lab.train.trainer import (
    check_logger,
    has_validation,
    make_trainer,
    resolve_accelerator,
    resolve_precision,
    without_known_warnings,
)
from falcon_lab.mixers import default_options


@dataclass
class RunResult:
    """What `run_training` did: status is "finished", "stopped" (ended before max_steps, resumable)
    or "skipped" (the run was already finished); `signum` is the signal that stopped it, if one did."""

    run_id: str
    run_dir: Path
    status: str
    steps: int
    metrics: dict[str, float] = field(default_factory=dict)
    resumed_from: int | None = None
    signum: int | None = None


class RunFailed(RuntimeError):
    """Training stopped on an error; the message names the run, the cause and the last checkpoint."""


def final_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The last logged value of each metric."""
    out: dict[str, float] = {}
    for row in rows:
        out.update({k: v for k, v in row.items() if k != "step"})
    return out


def check_placement(cfg: RunConfig) -> None:
    """ConfigError when a device or logger option cannot hold where the run goes (before anything is written)."""
    check_logger(cfg)
    t = cfg.train
    if t.cuda_graphs:
        if t.devices * t.num_nodes > 1:
            raise ConfigError(f"train.cuda_graphs captures one process's steps; this run spans "
                              f"{t.devices * t.num_nodes} devices (DDP): drop one of the two")
        if t.accumulate > 1:
            # the graphed backward returns its gradients in static buffers that the next micro-batch's
            # replay overwrites: accumulated gradients would be wrong
            raise ConfigError(f"train.cuda_graphs cannot accumulate gradients (train.accumulate={t.accumulate}); "
                              f"drop one of the two")
        if resolve_precision(cfg, resolve_accelerator(cfg)) == "16-mixed":
            raise ConfigError("train.cuda_graphs is not set up for fp16 loss scaling (16-mixed); use bf16-mixed")
        if resolve_accelerator(cfg) != "gpu":
            raise ConfigError("train.cuda_graphs needs a CUDA GPU; this run trains on the CPU")


CACHE_VARIABLES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def compile_caches(results: Path) -> dict[str, str]:
    """Point torch.compile's and Triton's on-disk caches at `<results>/cache/` unless the environment already
    names them: every run under one results folder (one machine's campaign, or a results folder carried from
    one machine to the next) reuses the kernels and graphs the first run of a shape compiled. Returns the
    variables set. Read lazily by Inductor and Triton, so setting them before the first compilation suffices."""
    chosen = {}
    for variable, folder in CACHE_VARIABLES.items():
        if not os.environ.get(variable):
            path = cache_root(results) / folder
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError:  # an unwritable results folder is reported where the run writes; keep the defaults
                continue
            os.environ[variable] = chosen[variable] = str(path)
    return chosen


# Runs of one process (a campaign's single slot, a sweep's trials) share torch.compile's compiled code: a model
# configured as an earlier run's reuses its graphs (its weights are the graphs' inputs), and each other
# configuration adds an entry to the same functions' caches. Past Dynamo's default of 8 entries a function the later
# runs would train eagerly without a word; a campaign or a sweep holds a few hundred configurations at most.
COMPILED_CONFIGS = 256


def room_for_compiled_runs(entries: int = COMPILED_CONFIGS) -> None:
    """Let this process keep the compiled code of ``entries`` model configurations (no fewer than it keeps now)."""
    import torch._dynamo

    config = torch._dynamo.config
    if not hasattr(config, "recompile_limit"):  # torch before 2.6 names it cache_size_limit
        config.cache_size_limit = max(config.cache_size_limit, entries)
        return
    for name in ("recompile_limit", "accumulated_recompile_limit"):
        setattr(config, name, max(getattr(config, name), entries))


def collect_earlier_runs() -> None:
    """Free what an earlier run of this process left in reference cycles (its CUDA graphs among them) before this
    run's DataLoader forks its workers: a forked worker that collected them would call CUDA, which a child of a
    process that has initialised CUDA cannot, and die ("CUDA error: initialization error"), failing the run."""
    import gc

    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


def run_training(
    cfg: RunConfig,
    out: str | Path | None = None,
    results: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    progress: bool | None = None,
    argv: Sequence[str] | None = None,
    stop_on_interrupt: bool = False,
    evaluations: Callable[[RunConfig, RunDir], Sequence[Callback]] | None = None,
) -> RunResult:
    """Train `cfg` in its run folder (`out`, else `<results>/runs/<id>`), recording it in
    `<results>/lab.db`. A finished run is skipped; an unfinished one resumes from its last
    checkpoint, or from the one before it when the last cannot be read (CheckpointError, a ConfigError,
    when neither can, before anything is written). Raises RunFailed when training stops on a non-finite loss or gradient (the run is
    marked failed and keeps its last good checkpoint); ConfigError when the folder holds another run;
    RunBusy when another process trains in that folder.

    `stop_on_interrupt`: SIGINT or SIGTERM ends training after the current step with a checkpoint there
    (status "stopped", resumed exactly by the next call, `signum` set) instead of aborting it
    (callbacks.StopOnInterrupt).

    `evaluations(cfg, run)` makes the callbacks that evaluate the run as it trains (the caller chooses them:
    `falcon_lab.eval.training.evaluation_callbacks`); ConfigError when `eval.enabled` asks for them and none is given.
    """
    check_placement(cfg)
    if cfg.eval.enabled and evaluations is None:
        raise ConfigError("eval.enabled asks for evaluation during training, and run_training was given no "
                          "evaluations; pass evaluations=falcon_lab.eval.training.evaluation_callbacks")
    run_id = config_hash(cfg)
    results = Path(results).resolve() if results is not None else results_root()
    run = run_dir_for(run_id, out, results)
    if cfg.train.compile:
        compile_caches(results)
        room_for_compiled_runs()
    collect_earlier_runs()
    # Rank zero holds the folder; the other ranks are its own children.
    with RunLock(run) if rank_zero_only.rank == 0 else nullcontext():
        if not stop_on_interrupt:
            return _run_in_folder(cfg, run, run_id, results, callbacks, progress, argv, evaluations)
        stopper = StopOnInterrupt()
        with stopper.installed():
            result = _run_in_folder(cfg, run, run_id, results, [*callbacks, stopper], progress, argv, evaluations)
        if result.status == "stopped":
            result.signum = stopper.signum
        return result


def _run_in_folder(cfg: RunConfig, run: RunDir, run_id: str, results: Path, callbacks: Sequence[Callback],
                   progress: bool | None, argv: Sequence[str] | None,
                   evaluations: Callable[[RunConfig, RunDir], Sequence[Callback]] | None) -> RunResult:
    if run.config.exists():
        held = config_hash(from_dict(read_yaml(run.config)))
        if held != run_id:
            raise ConfigError(f"folder {run.root} holds run {held}, whose configuration differs from this "
                              f"one ({run_id}); choose another --out")
    state = run.read_state()
    if state.get("status") == "finished":
        return RunResult(run_id, run.root, "skipped", state.get("steps", cfg.train.max_steps),
                         state.get("metrics", {}))
    # Every checkpoint is loaded whole before anything of the run is touched: an unreadable last one is set
    # aside (kept) and the run resumes from the one before it.
    point = resume_point(run.last_checkpoint, run.previous_checkpoint)
    ckpt, resumed_from = point.path, point.step
    rank0 = rank_zero_only.rank == 0
    if point.skipped is not None and rank0:
        aside = run.last_checkpoint.with_name(run.last_checkpoint.name + ".unreadable")
        if run.last_checkpoint.exists():
            os.replace(run.last_checkpoint, aside)
        say(f"lab train: {point.skipped}; kept as {aside.name}, resuming from {ckpt.name} (step {resumed_from})",
            err=True)
    registry = Registry(results / "lab.db") if rank0 else None
    entered, age = time.perf_counter(), process_age()

    pl.seed_everything(cfg.train.seed, workers=True, verbose=False)
    module = LabModule(cfg)
    if rank0:
        _start(cfg, run, run_id, registry, state, module.model.num_parameters(), argv, resumed_from)

    def saved(step: int) -> None:
        run.write_state(steps=step)
        registry.upsert(run_id, steps=step)

    phases = Phases()
    callbacks = [*callbacks, *(evaluations(cfg, run) if evaluations is not None else ()), phases]
    trainer = make_trainer(cfg, run, callbacks, progress, on_checkpoint=saved)
    data = LabData(cfg)
    try:
        with without_known_warnings():
            trainer.fit(module, datamodule=data, ckpt_path=ckpt)
        step = trainer.global_step
        module.check_finite()
        if step >= cfg.train.max_steps:
            for callback in callbacks:
                # What a resumed run whose checkpoint is its last step still owes (the evaluations).
                getattr(callback, "complete", lambda *_: None)(trainer, module)
        if step % cfg.train.ckpt_every:
            save_keeping_previous(trainer, run.last_checkpoint, run.previous_checkpoint)
            if rank0:
                saved(step)
        if has_validation(cfg) and step % cfg.train.val_every and step == cfg.train.max_steps:
            with without_known_warnings():
                trainer.validate(module, datamodule=data, verbose=False)
    except NonFiniteError as err:
        message = f"{err}; last good checkpoint: {_last_good(run)}"
        if rank0:
            message += _keep_failed_weights(run, module, trainer.global_step, err)
            _end(run, run_id, registry, "failed", message=message)
        raise RunFailed(f"run {run_id} failed: {message}") from err
    except BaseException as err:
        if rank0:
            interrupted = isinstance(err, (KeyboardInterrupt, SystemExit))
            _end(run, run_id, registry, "interrupted" if interrupted else "failed",
                 message=f"{type(err).__name__}: {err}".splitlines()[0])
        raise
    status = "finished" if step >= cfg.train.max_steps else "stopped"
    metrics = final_metrics(read_metrics(run.metrics))
    for callback in callbacks:
        # Evaluation callbacks add their summary: the best and the last evaluation.
        metrics.update(getattr(callback, "run_metrics", dict)())
    if rank0:
        _end(run, run_id, registry, status, steps=step, metrics=metrics,
             timings=timings(age, entered, phases, time.perf_counter()))
    return RunResult(run_id, run.root, status, step, metrics, resumed_from)


def timings(age: float | None, entered: float, phases: Phases, ended: float) -> dict[str, float | None]:
    """This session's wall time in phases, seconds: `start_s` from the process's start to `run_training` (imports,
    the command line), `setup_s` from there to the first step's clock (the model, the trainer, moving to the
    device), `train_s` the training loop (compilation and every evaluation in it), `finish_s` what follows (the
    last checkpoint, a final validation, the records)."""
    marks = {"start_s": (0.0, age), "setup_s": (entered, phases.train_start),
             "train_s": (phases.train_start, phases.train_end), "finish_s": (phases.train_end, ended)}
    return {k: None if a is None or b is None else round(b - a, 2) for k, (a, b) in marks.items()}


def _keep_failed_weights(run: RunDir, module: LabModule, step: int, err: NonFiniteError) -> str:
    """Write the model's weights at the failure to checkpoints/failed.pt (best.pt's layout: "step", "state_dict",
    "metrics"), for a look at what diverged (`load_run_model(run, "failed")`): the flagged step was never applied,
    so they are finite unless an earlier step made them otherwise, in which case nothing is written. The part of
    the run's message that says so."""
    state = {k: v.detach().cpu() for k, v in module.model.state_dict().items()}
    if not all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()):
        return "; its weights are not finite, none kept"
    path = run.failed_weights
    AtomicCheckpointIO().save_checkpoint(
        {"step": step, "state_dict": state, "metrics": {"failed_step": err.step, err.what: err.value}}, path)
    return f"; its weights after step {step} (the flagged step not applied): {path}"


def _last_good(run: RunDir) -> str:
    steps = run.read_state().get("steps")
    return f"{run.last_checkpoint} (step {steps})" if run.last_checkpoint.exists() else "none"


def _start(cfg: RunConfig, run: RunDir, run_id: str, registry: Registry, state: dict[str, Any],
           n_params: int, argv: Sequence[str] | None, resumed_from: int | None) -> None:
    """Write config.yaml, provenance.json, run.json and the registry row of a starting run."""
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run.config, dump_yaml(cfg))
    accelerator = resolve_accelerator(cfg)
    # Every mixer option, defaults included: what the run computed even if a default changes later.
    options = {**default_options(cfg.mixer), **cfg.model.mixer_options}
    info = provenance(argv, run_id=run_id, accelerator=accelerator, precision=resolve_precision(cfg, accelerator),
                      world_size=cfg.train.devices * cfg.train.num_nodes, resumed_from_step=resumed_from,
                      mixer_options=options, n_params=n_params)
    record_provenance(run, info)
    started = state.get("created_at") or now()
    run.write_state(id=run_id, status="running", steps=resumed_from or 0, max_steps=cfg.train.max_steps,
                    created_at=started)
    registry.upsert(
        run_id, task=cfg.task, mixer=cfg.mixer, preset=cfg.preset, status="running", steps=resumed_from or 0,
        max_steps=cfg.train.max_steps, n_params=n_params, run_dir=str(run.root),
        checkpoint_dir=str(run.checkpoints), config=to_dict(cfg), commit=info["commit"],
        dirty=info["dirty"], host=info["hostname"], device=info["device"], message=None, created_at=started,
        finished_at=None,
    )


def _end(run: RunDir, run_id: str, registry: Registry, status: str, steps: int | None = None,
         metrics: dict[str, float] | None = None, message: str | None = None,
         timings: dict[str, float | None] | None = None) -> None:
    """Record how a run ended in run.json (with `timings`, its phases) and the registry."""
    fields: dict[str, Any] = {"status": status, "message": message}
    if timings is not None:
        fields["timings"] = timings
    if steps is not None:
        fields["steps"] = steps
    if metrics is not None:
        fields["metrics"] = metrics
    state = run.write_state(**fields)
    row: dict[str, Any] = {"status": status, "message": message, "steps": state.get("steps")}
    if metrics is not None:
        row.update(metrics=metrics, final_loss=metrics.get("loss"), final_val_loss=metrics.get("val_loss"),
                   final_val_acc=metrics.get("val_acc"))
    if status == "finished":
        row["finished_at"] = now()
    registry.upsert(run_id, **row)
