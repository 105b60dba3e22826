"""Typed run configuration: dataclasses, YAML presets, a `--config` file, `--set key=value` overrides.

A configuration resolves in layers, each overriding the one before: the dataclass defaults, the
preset (`falcon_lab/presets/<name>.yaml`), the `--config` file, the `--set` overrides, then the explicit
command-line flags. Every mistake (an unknown key, a value of the wrong type, an unknown mixer, an
impossible shape) raises `ConfigError`, whose message is one line naming what is accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from falcon_lab.task import SEQUENCE_TASKS, TASKS, task_of, tasks
from falcon_lab.typed import ConfigError, build, check_value, hint_of, merge, parse_text, set_dotted, yaml_problem

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
# TASKS: the registered tasks (falcon_lab.task); SEQUENCE_TASKS: those with a length axis, trained on data.lengths and
# tested on data.test_lengths (the synthetic tasks of falcon_lab.tasks.synthetic and any registered like them).
CURRICULA = ("linear",)
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "64-true")
STRATEGIES = ("auto", "ddp", "ddp_find_unused_parameters_true")
ACCELERATORS = ("auto", "cpu", "gpu")
# Lightning loggers beside the run's own metrics.csv: its CSV log always, and TensorBoard or W&B when asked.
LOGGERS = ("csv", "tensorboard", "wandb")
# Random-token runs with no data.seq_len train on rows of this many positions.
DEFAULT_RANDOM_SEQ_LEN = 128
# Keys that change where or how a run executes or logs but not what it computes: the data of a step is a pure
# function of (seed, step, global row), so a run may resume on another number of devices; torch.compile
# and CUDA graphs run the same model and optimiser (to float rounding, as another device count does), so a
# table may mix runs made with and without them and a run may resume under the other setting.
PLACEMENT_KEYS = ("train.devices", "train.num_nodes", "train.strategy", "train.accelerator", "train.compile",
                  "train.cuda_graphs", "train.deterministic", "train.logger")
# Keys added after runs were recorded: left out of the run id while at these defaults, so that
# the ids of earlier runs do not change.
LATER_KEYS = {"data.path": None, "data.val_windows": 16, "train.accumulate": 1, "model.abacus": None,
              "model.isolate_samples": False, "eval.abacus_offset": 0, "data.lengths": [1, 16],
              "model.abacus_ahead": False, "model.abacus_embed": "learned",
              "model.abacus_shift_frac": 1.0, "model.abacus_start": 0,
              "data.test_lengths": [17, 64], "data.group": "S5", "data.tokens_per_pair": 8, "eval.widths": [1, 48],
              "eval.held_out_from": 33, "eval.best_ties": "earliest", "train.ema": 0.0}


@dataclass
class ModelConfig:
    """Model shape: width, depth, heads, options passed to the mixer, and μP-style width scaling.

    `abacus` (addition only): None, or digit-position embeddings (each digit's significance, the Abacus
    embeddings of McLeish et al., 2024; `falcon_lab.mixers.positions`) whose indices are shifted in training by a random
    offset of at most `abacus` per row (per sample with `isolate_samples`). `abacus_ahead`: the answer's tokens
    carry the index of the digit they predict (the marker 1, the k-th answer digit k + 1) instead of their own,
    so the token that predicts significance k holds the index of the operand digits it adds. `abacus_embed`:
    "learned" (a vector per index) or "sinusoidal" (fixed sines and cosines of the index, mapped by a learned linear
    layer: index k + 1 is a fixed rotation of index k, one linear map for every index, trained or not).
    `abacus_shift_frac`: the fraction of rows (of samples, with `isolate_samples`) whose indices take the random
    offset in training; the rest keep the exact significance (offset 0), so exact rows anchor the reading of each
    index while shifted rows train the indices past the trained widths. `abacus_start`: the training steps with
    exact positions before any row takes the offset (fit first, then shift).

    `isolate_samples` (addition): the samples packed in a row do not see each other, and each draws its own
    digit-position offset; without it a sample attends to those packed before it (a recurrent state carries
    into it). The packed rows stay: attention mixers mask attention to each sample (block-diagonal, causal),
    the recurrent mixers restart their state and convolutions at each sample (`falcon_lab.mixers.positions`), any other
    mixer mixes each sample laid on a row of its own (`falcon_lab.mixers.positions.samples_apart`)."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    mixer_options: dict[str, Any] = field(default_factory=dict)
    mup: bool = False
    abacus: int | None = None
    abacus_ahead: bool = False
    abacus_embed: str = "learned"
    abacus_shift_frac: float = 1.0
    abacus_start: int = 0
    isolate_samples: bool = False


@dataclass
class OptimConfig:
    """AdamW with linear warm-up then cosine decay to `min_lr_ratio * lr`; `grad_clip` 0 disables clipping."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0

    def schedule(self) -> str:
        """The learning-rate schedule in words, as the tables state it."""
        after = "then constant" if self.min_lr_ratio == 1 else f"cosine to {self.min_lr_ratio:g}×"
        return f"warm-up {self.warmup_steps}, {after}"


@dataclass
class TrainConfig:
    """Length, global batch, seed, numerics and placement of a run, and how often it logs and saves.

    `accumulate` splits each rank's rows of a step into that many micro-batches whose gradients add
    up before the one optimiser step: same loss and update, less activation memory. `compile` runs the
    training forward through torch.compile (the sequence-mixing kernels stay outside its graph; the
    evaluation and generation stay eager): fewer, fused kernels for the same model, at the price of a
    compilation at the first step. `cuda_graphs` replays the training forward and backward from CUDA
    graphs captured at the start (one GPU; falcon_lab/train/graphs.py), so the host no longer issues each kernel;
    with `compile` as well, the compiled forward is what is captured. `deterministic` asks PyTorch for its
    deterministic algorithms (warning, not failing, where an op has none: the warning names it) and a fixed
    cuBLAS workspace, so the same config and seed give the same loss curve bit for bit on a CPU, and on one
    GPU as far as its kernels allow. `ema`: 0 (off) or the decay d of an exponential moving average of the
    weights, A ← d_t A + (1 − d_t) W after optimiser step t = 1, 2, … with d_t = min(d, (1 + t) / (10 + t));
    with it on, every evaluation, the best and the last weights a run keeps are the averaged ones (the training
    goes on from the raw weights). `logger`: the Lightning loggers fed the
    rows of metrics.csv, under `<run>/logs/`: "csv" (Lightning's CSV log alone, always kept), "tensorboard"
    (and a TensorBoard log; needs the package tensorboard) or "wandb" (and Weights & Biases; needs wandb).
    """

    max_steps: int = 2000
    batch_size: int = 64
    seed: int = 0
    precision: str = "auto"
    accelerator: str = "auto"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    log_every: int = 10
    val_every: int = 100
    ckpt_every: int = 100
    accumulate: int = 1
    compile: bool = False
    cuda_graphs: bool = False
    deterministic: bool = False
    ema: float = 0.0
    logger: str = "csv"


@dataclass
class DataConfig:
    """Task options: addition widths (inclusive), row length, packing, validation size, vocabulary, shards.

    `seq_len` None means the task's natural length: the widest addition sample, or
    DEFAULT_RANDOM_SEQ_LEN random tokens. `curriculum` "linear" grows the widest training width
    from `start_width` at step 0 to widths[1] at step `ramp_steps` (null: every step draws from
    all of `widths`); validation always covers all of `widths`. For a synthetic task it grows the longest
    training length the same way, from `start_width` to lengths[1] (validation covers all of `lengths`).
    `path` is the folder of FineWeb-Edu token shards (`lab data fineweb`); fineweb validates on the first
    `val_windows` non-overlapping windows of its val shard, and `vocab_size` must cover the shards'
    tokenizer (50257 for GPT-2).

    The synthetic tasks (mqar, parity, permutation; `falcon_lab.tasks.synthetic`) train on sequences of `lengths`
    tokens (inclusive, drawn uniformly per row) and are tested on the held-out `test_lengths`, which must
    be longer. `group`: S5 or A5 (permutation). MQAR holds `lengths // tokens_per_pair` key-value pairs
    over a vocabulary of `vocab_size` ids.
    """

    widths: tuple[int, int] = (1, 32)
    seq_len: int | None = None
    packing: bool = False
    curriculum: str | None = None
    start_width: int = 1
    ramp_steps: int = 1000
    val_per_length: int = 4
    vocab_size: int = 256
    path: str | None = None
    val_windows: int = 16
    lengths: tuple[int, int] = (1, 16)
    test_lengths: tuple[int, int] = (17, 64)
    group: str = "S5"
    tokens_per_pair: int = 8


@dataclass
class EvalConfig:
    """Addition evaluation during training (falcon_lab.eval.callback), when `enabled`: teacher-forced accuracy
    on `widths` (inclusive; the paper's 1-48) with `n_per_length` samples per width every train.val_every
    steps and at the end, and free-running greedy accuracy with `free_per_length` per width (0: none) at
    the best step and at the end. Widths from `held_out_from` on are held out: validation accuracy is the
    mean over widths[0] .. held_out_from - 1 (the paper's 1-32), the held-out mean over held_out_from ..
    widths[1] (33-48), each drawn from its own sample stream. `seed` picks the samples; keeping it fixed
    compares every run on one set. `abacus_offset` (with `model.abacus`): the fixed offset of the digit
    positions in these evaluations, one of the offsets 0..model.abacus seen in training. `best_ties`: which of the
    evaluations with the best validation accuracy is the best step: "earliest" (the first to reach it, as the
    addition tables always chose) or "val_loss" (the lowest teacher-forced loss on the validation widths, an
    in-distribution choice among equals: once a run answers every validation sample, every later evaluation ties)."""

    enabled: bool = False
    n_per_length: int = 100
    free_per_length: int = 10
    seed: int = 0
    abacus_offset: int = 0
    widths: tuple[int, int] = (1, 48)
    held_out_from: int = 33
    best_ties: str = "earliest"


# eval.best_ties: how the best step is chosen among evaluations of equal validation accuracy.
BEST_TIES = ("earliest", "val_loss")


@dataclass
class RunConfig:
    """Everything that defines a run; its hash names the run."""

    task: str = "addition"
    mixer: str = "transformer"
    preset: str = "tiny"
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def presets() -> list[str]:
    """Names of the presets shipped in lab/presets."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The configuration as plain nested dicts and lists (YAML- and JSON-ready)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def from_dict(data: Mapping[str, Any]) -> RunConfig:
    """Build and validate a RunConfig from nested dicts; missing keys take their defaults."""
    cfg = build(RunConfig, data, "")
    validate(cfg)
    return cfg


def config_hash(cfg: RunConfig, length: int = 10) -> str:
    """Short sha256 of the configuration without its placement keys: the run id."""
    data = to_dict(cfg)
    for key in PLACEMENT_KEYS:
        section, name = key.split(".")
        data[section].pop(name)
    for key, default in LATER_KEYS.items():
        section, name = key.split(".")
        if data[section].get(name) == default:
            data[section].pop(name)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dump_yaml(cfg: RunConfig) -> str:
    """The configuration as YAML text that `load_config(config_file=...)` reads back to an equal config."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file; ConfigError if it is missing, malformed or not a mapping."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, got {type(data).__name__}")
    return data


def load_config(
    preset: str | None = None,
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
    **flags: Any,
) -> RunConfig:
    """Resolve defaults <- preset <- config file <- `key=value` overrides <- flags, then validate.

    `preset` defaults to the config file's `preset` key, else "tiny". `flags` take dotted keys with
    '.' written as '__' (e.g. `train__max_steps=5`) or top-level keys (`task=`, `mixer=`); a flag
    whose value is None is not applied.
    """
    file_data = read_yaml(config_file) if config_file is not None else {}
    name = preset or file_data.get("preset") or "tiny"
    known = presets()
    if name not in known:
        raise ConfigError(f"unknown preset {name!r}; accepted: {', '.join(known)}")
    data = merge(read_yaml(PRESETS_DIR / f"{name}.yaml"), file_data)
    data["preset"] = name
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like key=value, e.g. optim.lr=3e-3")
        key = key.strip()
        hint = hint_of(RunConfig, key)
        value = parse_text(text.strip(), hint)
        check_value(value, hint, key)
        set_dotted(data, key, value)
    for key, value in flags.items():
        if value is not None:
            set_dotted(data, key.replace("__", "."), value)
    return from_dict(data)


def validate(cfg: RunConfig) -> None:
    """Check values and shapes that types alone cannot; raise ConfigError naming what is accepted."""
    _choice("task", cfg.task, TASKS)
    _choice("train.precision", cfg.train.precision, PRECISIONS)
    _choice("train.strategy", cfg.train.strategy, STRATEGIES)
    _choice("train.accelerator", cfg.train.accelerator, ACCELERATORS)
    _choice("train.logger", cfg.train.logger, LOGGERS)
    m, o, t, d = cfg.model, cfg.optim, cfg.train, cfg.data
    for key, value in (("model.d_model", m.d_model), ("model.n_layers", m.n_layers),
                       ("model.n_heads", m.n_heads), ("train.max_steps", t.max_steps),
                       ("train.batch_size", t.batch_size), ("train.devices", t.devices),
                       ("train.num_nodes", t.num_nodes), ("train.log_every", t.log_every),
                       ("train.val_every", t.val_every), ("train.ckpt_every", t.ckpt_every),
                       ("train.accumulate", t.accumulate),
                       ("data.val_per_length", d.val_per_length), ("data.vocab_size", d.vocab_size),
                       ("data.val_windows", d.val_windows)):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    if m.d_model % m.n_heads and "head_dim" not in m.mixer_options:
        raise ConfigError(f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}; "
                          f"accepted n_heads: {', '.join(map(str, _divisors(m.d_model)))}")
    if not o.lr > 0:
        raise ConfigError(f"optim.lr must be > 0, got {o.lr}")
    if not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas must lie in [0, 1), got {list(o.betas)}")
    for key, value in (("optim.weight_decay", o.weight_decay), ("optim.warmup_steps", o.warmup_steps),
                       ("optim.grad_clip", o.grad_clip)):
        if value < 0:
            raise ConfigError(f"{key} must be >= 0, got {value}")
    if not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError(f"optim.min_lr_ratio must lie in [0, 1], got {o.min_lr_ratio}")
    if not 0 <= t.ema < 1:
        raise ConfigError(f"train.ema must lie in [0, 1) (0: off; else the weights' average decay, e.g. 0.999), "
                          f"got {t.ema}")
    world = t.devices * t.num_nodes
    if t.batch_size % world:
        raise ConfigError(f"train.batch_size={t.batch_size} (global) is not divisible by "
                          f"devices*num_nodes={world}; accepted: a multiple of {world}")
    rows = t.batch_size // world
    if rows % t.accumulate:
        raise ConfigError(f"train.accumulate={t.accumulate} does not divide the {rows} rows per rank "
                          f"(train.batch_size / devices*num_nodes); accepted: "
                          f"{', '.join(map(str, _divisors(rows)))}")
    if m.abacus is not None:
        if m.abacus < 0:
            raise ConfigError(f"model.abacus must be null (off) or >= 0 (the largest offset), got {m.abacus}")
        _model_option(cfg, "model.abacus", "model.abacus (digit positions)")
    from falcon_lab.mixers.positions import ABACUS_EMBEDS

    if m.abacus_embed not in ABACUS_EMBEDS:
        raise ConfigError(f"model.abacus_embed={m.abacus_embed!r} is not one of {list(ABACUS_EMBEDS)}")
    if m.abacus_embed != "learned" and m.abacus is None:
        raise ConfigError(f"model.abacus_embed={m.abacus_embed!r} embeds digit positions: it needs model.abacus "
                          f"(e.g. model.abacus=0)")
    if m.abacus_ahead and m.abacus is None:
        raise ConfigError("model.abacus_ahead moves the digit positions of the answer: it needs model.abacus "
                          "(e.g. model.abacus=0)")
    frac = m.abacus_shift_frac
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 <= frac <= 1.0:
        raise ConfigError(f"model.abacus_shift_frac must be a number in [0, 1] (the fraction of rows whose digit "
                          f"positions take the random offset), got {frac!r}")
    start = m.abacus_start
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ConfigError(f"model.abacus_start must be an integer >= 0 (training steps with exact digit positions "
                          f"before the offset), got {start!r}")
    if start and not m.abacus:
        raise ConfigError(f"model.abacus_start={start} delays the digit positions' random offset: it needs "
                          f"model.abacus >= 1 (the largest offset), got {m.abacus}")
    if frac != 1.0 and not m.abacus:
        raise ConfigError(f"model.abacus_shift_frac={frac} chooses which rows take the digit positions' random "
                          f"offset: it needs model.abacus >= 1 (the largest offset), got {m.abacus}")
    lo, hi = cfg.eval.widths
    _choice("eval.best_ties", cfg.eval.best_ties, BEST_TIES)
    if not 1 <= lo < cfg.eval.held_out_from <= hi:
        raise ConfigError(f"eval.widths={[lo, hi]} and eval.held_out_from={cfg.eval.held_out_from} must satisfy "
                          f"1 <= widths[0] < held_out_from <= widths[1] (validation widths first, then at "
                          f"least one held-out width), e.g. widths [1, 48] with held_out_from 33")
    offset = cfg.eval.abacus_offset
    if offset and (m.abacus is None or not 0 <= offset <= m.abacus):
        raise ConfigError(f"eval.abacus_offset={offset} must lie in 0..model.abacus (the offsets seen in "
                          f"training; model.abacus is {m.abacus})")
    if m.isolate_samples:
        _model_option(cfg, "model.isolate_samples", "model.isolate_samples", " (samples end with EOS)")
        from falcon_lab.mixers import MIXERS, masks_samples, samples_by_id

        if (cfg.mixer in MIXERS and not masks_samples(cfg.mixer) and t.cuda_graphs
                and not samples_by_id(cfg.mixer, m.mixer_options)):
            raise ConfigError(f"model.isolate_samples with {cfg.mixer!r} changes the work of a step with its samples "
                              f"(their bounds read on the host, or each sample laid on its own row); "
                              f"train.cuda_graphs replays one fixed step (accepted with isolated samples: "
                              f"train.cuda_graphs=false, an attention mixer, or kernels taking the samples by id: "
                              f"the default, not LAB_SAMPLE_IDS=0)")
    _validate_data(cfg)
    _validate_mixer(cfg)


def _validate_data(cfg: RunConfig) -> None:
    d = cfg.data
    task = task_of(cfg.task)
    lo, hi = d.widths
    if not 1 <= lo <= hi:
        raise ConfigError(f"data.widths must satisfy 1 <= lo <= hi, got {list(d.widths)}")
    if d.curriculum is not None:
        if d.curriculum not in CURRICULA:
            raise ConfigError(f"data.curriculum={d.curriculum!r} is not accepted; "
                              f"accepted: null, {', '.join(CURRICULA)}")
        key = task.curriculum_range or "data.widths"
        first, last = getattr(d, key.removeprefix("data."))
        if not first <= d.start_width <= last:
            raise ConfigError(f"data.start_width={d.start_width} must lie in {key} [{first}, {last}] "
                              f"(data.curriculum ramps its upper end from there)")
        if d.ramp_steps < 1:
            raise ConfigError(f"data.ramp_steps must be >= 1, got {d.ramp_steps}")
    if d.seq_len is not None and d.seq_len < 1:
        raise ConfigError(f"data.seq_len must be >= 1 or null, got {d.seq_len}")
    task.check(cfg)  # the task's own options
    if not task.packs and d.packing:
        packing = [t.name for t in tasks() if t.packs]
        raise ConfigError(f"data.packing applies to task {' and '.join(map(repr, packing))} only; accepted for "
                          f"{cfg.task!r}: false")
    if task.curriculum_range is None and d.curriculum is not None:
        ramped = [t.name for t in tasks() if t.curriculum_range is not None and t.name not in SEQUENCE_TASKS]
        raise ConfigError(f"data.curriculum applies to {', '.join(ramped)} and the synthetic tasks "
                          f"({', '.join(SEQUENCE_TASKS)}) only; accepted for {cfg.task!r}: null")
    e = cfg.eval
    if e.enabled and not task.evaluates:
        evaluated = [t.name for t in tasks() if t.evaluates]
        raise ConfigError(f"eval.enabled applies to the tasks {', '.join(evaluated)}; accepted for "
                          f"{cfg.task!r}: false")
    if e.n_per_length < 1:
        raise ConfigError(f"eval.n_per_length must be >= 1, got {e.n_per_length}")
    if e.free_per_length < 0:
        raise ConfigError(f"eval.free_per_length must be >= 0 (0: no free-running evaluation), "
                          f"got {e.free_per_length}")


def _model_option(cfg: RunConfig, key: str, what: str, why: str = "") -> None:
    """ConfigError unless the run's task gives the model the input ``key`` sets (``Task.model_options``)."""
    if key not in task_of(cfg.task).model_options:
        takers = [t.name for t in tasks() if key in t.model_options]
        raise ConfigError(f"{what} is for task {' or '.join(takers)}{why}, not {cfg.task!r}")


def _validate_mixer(cfg: RunConfig) -> None:
    """The mixer must be registered and accept the shape and options (one layer is built to check)."""
    try:
        from falcon_lab.mixers import MIXERS, build_mixer
    except ImportError as err:
        raise ConfigError(f"mixer {cfg.mixer!r} cannot be checked: the mixers package does not import "
                          f"({err})") from None
    if cfg.mixer not in MIXERS:
        raise ConfigError(f"unknown mixer {cfg.mixer!r}; accepted: {', '.join(sorted(MIXERS))}")
    try:
        build_mixer(cfg.mixer, cfg.model.d_model, cfg.model.n_heads, **cfg.model.mixer_options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model.mixer_options: {err}".splitlines()[0]) from None


def _choice(key: str, value: str, accepted: Sequence[str]) -> None:
    if value not in accepted:
        raise ConfigError(f"{key}={value!r} is not accepted; accepted: {', '.join(accepted)}")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
