"""Where a training step's time goes, outside Lightning: `lab bench step`.

For each mixer, the model and optimiser of a run config are built as `lab train` builds them and trained on
the run's own batches from the middle of the run on (a curriculum's widths there), with bf16 autocast on a GPU:

- `loop_ms`: a bare loop (batch copied to the device, forward, backward, clip, fused AdamW) with no
  synchronisation inside, over batches made before it as `lab train`'s loader workers make them ahead of the
  step: the step time a training loop with no overhead of its own would reach;
- `data_ms`, `fwd_ms`, `bwd_ms`, `opt_ms`: the stages timed one by one, each closed by a synchronisation
  (their sum exceeds `loop_ms` by the overlap it forbids); `data_ms` makes the batch on the host and copies it,
  the work one loader worker does per step (`lab train` runs up to four);
- `kernels`: device kernels launched per step, and `gpu_ms` their summed device time (torch.profiler):
  `gpu_ms` far below `loop_ms` means the step waits on the host (Python and launches), not on the GPU;
- `tflop`: the step's model FLOPs (6·N·tokens and the mixer's own, falcon_lab/bench/flops.py); `mfu` their
  rate over `loop_ms` as a fraction of the GPU's dense bf16 peak, `gpu_mfu` over `gpu_ms` (what the kernels
  alone reach: the gap between the two is the host's);
- `warmup_s`: the untimed first steps, compilation included (`--set train.compile=true` runs the forward
  through torch.compile as `lab train` does; `--set train.cuda_graphs=true` replays the forward and
  backward from CUDA graphs, falcon_lab/train/graphs.py, the capture counted here; both together capture the
  compiled forward);
- `by_id`: whether the row's isolated samples reached its kernels by their ids (`--samples by-id`,
  `LAB_SAMPLE_IDS=1`: the rows as they are, no host read) rather than as packed sequences.

Set beside `lab bench train` (the same config through Lightning), the difference is the trainer's share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from falcon_lab.runs import atomic_write_text, device_name, now

COLUMNS = ("mixer", "compile", "cuda_graphs", "by_id", "params", "tokens", "loop_ms", "tokens_per_s", "tflop", "mfu",
           "gpu_mfu", "data_ms", "fwd_ms", "bwd_ms", "opt_ms", "kernels", "gpu_ms", "warmup_s", "top_kernels")


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(cfg: Any, steps: int = 20, warmup: int = 5, trace: Path | None = None) -> dict[str, Any]:
    """Time `steps` training steps of the run config `cfg` (after `warmup` untimed ones); with `trace`, the
    profiled step's Chrome trace is written there (gzipped)."""
    import torch

    from falcon_lab.bench.flops import step_flops

    from falcon_lab.train.data import train_batch
    from falcon_lab.train.module import LabModule, token_loss_sum
    from falcon_lab.train.optim import make_optimizer

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.train.seed)
    model = LabModule(cfg).model.to(device)
    optimizer, _ = make_optimizer(model, cfg.optim, cfg.train.max_steps)
    params = [p for p in model.parameters() if p.requires_grad]
    run_model = torch.compile(model) if cfg.train.compile else model
    if cfg.train.cuda_graphs:  # with compile: the compiled forward, captured (as lab train does)
        from falcon_lab.train.data import seq_len
        from falcon_lab.train.graphs import capture

        run_model = capture(run_model, (cfg.train.batch_size, seq_len(cfg)), "bf16-mixed", device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    middle = cfg.train.max_steps // 2  # the run's batches from its middle on: a curriculum's mid-run widths
    made: dict[int, tuple[Any, Any]] = {}  # batches made ahead of the timed loop, as loader workers make them

    def batch(step: int) -> tuple[Any, Any]:
        ids, labels = made[step] if step in made else train_batch(cfg, middle + step, 0, 1)
        return ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)

    def forward(ids: Any, labels: Any) -> Any:
        with autocast:
            loss_sum, count = token_loss_sum(run_model(ids), labels)
        return loss_sum / count.clamp_min(1)

    def update() -> None:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        torch.nn.utils.clip_grads_with_norm_(params, cfg.optim.grad_clip or 1e9, norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def step(i: int) -> None:
        forward(*batch(i)).backward()
        update()

    start = time.perf_counter()
    for i in range(warmup):
        step(i)
    _sync(device)
    warmup_s = time.perf_counter() - start
    made.update({i: train_batch(cfg, middle + i, 0, 1) for i in range(warmup, warmup + steps + 1)})
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    _sync(device)
    loop_ms = (time.perf_counter() - start) / steps * 1e3
    made.clear()

    stages = {"data_ms": 0.0, "fwd_ms": 0.0, "bwd_ms": 0.0, "opt_ms": 0.0}
    for i in range(warmup, warmup + steps):
        marks = [time.perf_counter()]
        ids, labels = batch(i)
        _sync(device)
        marks.append(time.perf_counter())
        loss = forward(ids, labels)
        _sync(device)
        marks.append(time.perf_counter())
        loss.backward()
        _sync(device)
        marks.append(time.perf_counter())
        update()
        _sync(device)
        marks.append(time.perf_counter())
        for key, a, b in zip(stages, marks, marks[1:]):
            stages[key] += (b - a) / steps * 1e3

    kernels, gpu_ms, top = _profile(step, device, warmup + steps, trace)
    tokens = cfg.train.batch_size * batch(0)[0].shape[1]
    flops = step_flops(model, cfg, train_batch(cfg, middle + warmup, 0, 1)[0])
    name = device_name() if device.type == "cuda" else None
    return {"compile": cfg.train.compile, "cuda_graphs": cfg.train.cuda_graphs,
            "params": sum(p.numel() for p in params), "tokens": tokens, "loop_ms": loop_ms, "warmup_s": warmup_s,
            "tokens_per_s": tokens / loop_ms * 1e3, "tflop": flops.total / 1e12,
            "mfu": flops.mfu(loop_ms / 1e3, name), "gpu_mfu": flops.mfu(gpu_ms / 1e3, name) if gpu_ms else None,
            **stages, "kernels": kernels, "gpu_ms": gpu_ms, "top_kernels": top}


def _profile(step: Callable[[int], None], device: Any, at: int,
             trace: Path | None = None) -> tuple[int | None, float | None, str]:
    """Device kernels of one step, their summed device time, and the three costliest (GPU only); with `trace`,
    the step's Chrome trace (host and device, `chrome://tracing` or Perfetto) gzipped to that path."""
    import torch

    if device.type != "cuda":
        return None, None, ""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    if trace is not None:
        activities.append(torch.profiler.ProfilerActivity.CPU)
    with torch.profiler.profile(activities=activities) as prof:
        step(at)
        _sync(device)
    if trace is not None:
        _write_trace(prof, trace)
    events = [e for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.device_time_total for e in events if hasattr(e, "device_time_total"))
    by_name: dict[str, float] = {}
    for e in events:
        by_name[e.name] = by_name.get(e.name, 0.0) + getattr(e, "device_time_total", 0.0)
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:3]
    return len(events), total_us / 1e3, "; ".join(f"{name[:48]} {us / 1e3:.2f}" for name, us in top)


def _write_trace(prof: Any, path: Path) -> None:
    """The profiler's Chrome trace, gzipped (a step's trace is tens of MB as JSON, a few gzipped)."""
    import gzip
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(path, "wb") as dst:
            dst.write(src.read())


def run(mixers: Sequence[str], *, preset: str, task: str, steps: int, out: Path, overrides: Sequence[str] = (),
        echo: Callable[[str], None] = print, traces: bool = False,
        sample_ids: bool | None = None) -> list[dict[str, Any]]:
    """Measure each mixer; write `step.md` and `step.csv` into `out` after each one. `sample_ids`: isolated samples
    by their ids (True) or as packed sequences (False) for every row; None: as the environment says."""
    from falcon_lab.mixers.layers import sample_ids_set

    with sample_ids_set(sample_ids):
        return _run(mixers, preset=preset, task=task, steps=steps, out=out, overrides=overrides, echo=echo,
                    traces=traces)


def _run(mixers: Sequence[str], *, preset: str, task: str, steps: int, out: Path, overrides: Sequence[str],
         echo: Callable[[str], None], traces: bool) -> list[dict[str, Any]]:
    import torch

    from falcon_lab.bench.train import _write_csv
    from falcon_lab.config import load_config
    from falcon_lab.mixers import samples_by_id
    from falcon_lab.reproduce.names import train_preset

    rows: list[dict[str, Any]] = []
    # every configuration first: a bad setting is refused (ConfigError) before anything is timed or written.
    # A campaign's preset (e.g. `same-time`) stands for its file and the settings it gives each row, as in lab train
    cfgs = []
    for mixer in mixers:
        base, settings = train_preset(preset, mixer)
        cfgs.append(load_config(base, overrides=[f"task={task}", f"mixer={mixer}", *settings, *overrides]))
    for mixer, cfg in zip(mixers, cfgs):
        # each row compiled as its own process would compile it: Dynamo's caches kept across rows reach its
        # recompile limit (8 frames of one function) by the ninth row, whose frames then run eagerly
        torch._dynamo.reset()
        try:
            trace = out / f"trace-{mixer}.json.gz" if traces else None
            by_id = bool(cfg.model.isolate_samples and samples_by_id(cfg.mixer, cfg.model.mixer_options))
            row = {"mixer": mixer, "by_id": by_id, **measure(cfg, steps=steps, trace=trace)}
        except Exception as err:  # one mixer's failure is a row, the others still run
            row = {"mixer": mixer, "top_kernels": f"failed: {type(err).__name__}: {err}"[:200]}
        rows.append(row)
        echo("  ".join(f"{k} {_fmt(row.get(k))}" for k in COLUMNS if row.get(k) is not None))
        out.mkdir(parents=True, exist_ok=True)
        _write_csv(out / "step.csv", rows, COLUMNS)
        atomic_write_text(out / "step.md", markdown(rows, preset, task, steps))
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def markdown(rows: list[dict[str, Any]], preset: str, task: str, steps: int) -> str:
    from falcon_lab.kernels import variants

    lines = [f"# Training-step anatomy (preset `{preset}`, task {task}, {steps} timed steps, no Lightning)", "",
             f"- device: {device_name()}", f"- date: {now()}", "- columns: falcon_lab/bench/step.py",
             "- kernels: " + ", ".join(f"{k}={v}" for k, v in variants.current().items()), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r.get(k)) for k in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"
