"""Training pieces: schedule, optimiser groups, loss masking, data by step and rank, the Trainer
factory, and `lab train` for every registered mixer."""

import math
import re
import signal
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import load_config
from falcon_lab.runs import RunDir
from falcon_lab.train import LabModule, make_trainer, run_training
from falcon_lab.train.callbacks import (
    COLUMNS,
    LinePrinter,
    MetricsLogger,
    StepCheckpoint,
    StepProgressBar,
    read_metrics,
)
from falcon_lab.train.checkpoint_io import AtomicCheckpointIO
from falcon_lab.train.data import TrainBatches, loader_worker_init, seq_len, train_batch, vocab_size
from falcon_lab.train.module import token_loss_sum
from falcon_lab.train.optim import lr_factor, make_optimizer
from falcon_lab.train.trainer import CurrentStreamDDP, make_strategy, resolve_precision, resolve_strategy
from falcon_lab.tasks.addition import IGNORE_INDEX, VOCAB_SIZE

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def tiny(*overrides: str, **flags):
    return load_config("tiny", overrides=list(overrides), **flags)


def test_lr_schedule_warms_up_linearly_then_decays_by_cosine_to_the_floor() -> None:
    warmup, total, floor = 10, 110, 0.1
    factors = [lr_factor(s, warmup, total, floor) for s in range(130)]
    assert factors[:warmup] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    assert factors[warmup] == pytest.approx(1.0)
    assert factors[60] == pytest.approx(floor + (1 - floor) * 0.5)  # half way through the decay
    assert factors[total] == pytest.approx(floor) and factors[129] == pytest.approx(floor)
    decay = factors[warmup:total + 1]
    assert all(a >= b for a, b in zip(decay, decay[1:]))
    assert lr_factor(0, 0, 100, 0.0) == pytest.approx(1.0)
    assert lr_factor(50, 0, 100, 0.0) == pytest.approx(0.5)


def test_adamw_groups_keep_vectors_out_of_weight_decay_and_follow_the_schedule() -> None:
    module = LabModule(tiny("optim.weight_decay=0.1", "optim.lr=2e-3", "optim.warmup_steps=4"))
    optimizer, schedule = make_optimizer(module.model, module.cfg.optim, module.cfg.train.max_steps)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert all(g["betas"] == (0.9, 0.95) for g in optimizer.param_groups)
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    exempt = {id(p) for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    named = dict(module.model.named_parameters())
    assert decayed | exempt == {id(p) for p in named.values()} and not decayed & exempt
    assert any("norm" in n for n, p in named.items() if id(p) in exempt)
    for name, p in named.items():
        assert (id(p) in exempt) == (p.dim() < 2), name
    for step in range(6):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-3 * lr_factor(step, 4, 100, 0.1))
        optimizer.step()
        schedule.step()


def test_loss_counts_only_labelled_positions() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.full((2, 5), IGNORE_INDEX)
    labels[0, 3:] = torch.tensor([1, 2])
    labels[1, 4] = 6
    total, count = token_loss_sum(logits, labels)
    keep = labels != IGNORE_INDEX
    expected = torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum")
    assert count.item() == 3
    assert total.item() == pytest.approx(expected.item(), rel=1e-6)


def test_the_loader_process_outlives_a_sigint_to_the_process_group() -> None:
    """Ctrl-C in a terminal signals every process of the group: the trainer stops after its step and saves, so
    its loader process must ignore the signal and go on serving batches (a loader that died with it would leave
    the trainer's last fetch waiting)."""
    import os

    from torch.utils.data import DataLoader

    batches = TrainBatches(tiny(), rank=0, world_size=1)
    loader = DataLoader(batches, batch_size=None, num_workers=1, prefetch_factor=2,
                        persistent_workers=True, worker_init_fn=loader_worker_init)
    stream = iter(loader)
    first = next(stream)
    os.kill(stream._workers[0].pid, signal.SIGINT)
    time.sleep(0.5)
    assert stream._workers[0].is_alive()
    for _ in range(4):  # past the batches the worker had queued before the signal
        batch = next(stream)
    assert batch[0].shape == first[0].shape
    del stream, loader


@pytest.mark.parametrize("task", ["addition", "random"])
def test_batches_are_pure_in_step_and_split_across_ranks(task: str) -> None:
    cfg = tiny("data.packing=true", "data.seq_len=40", task=task) if task == "addition" else tiny(task=task)
    ids, labels = train_batch(cfg, 3, 0, 1)
    assert ids.shape == (cfg.train.batch_size, seq_len(cfg)) and labels.shape == ids.shape
    assert int(ids.max()) < vocab_size(cfg)
    assert torch.equal(train_batch(cfg, 3, 0, 1)[0], ids)
    assert not torch.equal(train_batch(cfg, 4, 0, 1)[0], ids)
    halves = [train_batch(cfg, 3, r, 2) for r in range(2)]
    assert not torch.equal(halves[0][0], halves[1][0])
    assert torch.equal(torch.cat([h[0] for h in halves]), ids)
    assert torch.equal(torch.cat([h[1] for h in halves]), labels)
    stream = iter(TrainBatches(cfg, 0, 1, start_step=3))
    assert torch.equal(next(stream)[0], ids) and torch.equal(next(stream)[0], train_batch(cfg, 4, 0, 1)[0])


def test_addition_labels_cover_the_target_suffix_only() -> None:
    cfg = tiny()
    ids, labels = train_batch(cfg, 0, 0, 1)
    assert vocab_size(cfg) == VOCAB_SIZE
    labelled = labels != IGNORE_INDEX
    # Each row's labels are one contiguous suffix: n + 1 reversed sum digits and the EOS.
    for row, mask in zip(ids, labelled):
        where = mask.nonzero().flatten()
        assert len(where) >= 3 and torch.equal(where, torch.arange(int(where[0]), int(where[-1]) + 1))


def test_precision_strategy_and_trainer_pieces(tmp_path: Path) -> None:
    cfg = tiny()
    assert resolve_precision(cfg, "cpu") == "32-true"
    assert resolve_precision(cfg, "gpu") == "bf16-mixed"
    assert resolve_precision(tiny("train.precision=16-mixed"), "gpu") == "16-mixed"
    assert resolve_strategy(cfg) == "auto"
    assert resolve_strategy(tiny("train.devices=2")) == "ddp"
    assert resolve_strategy(tiny("train.num_nodes=2")) == "ddp"
    trainer = make_trainer(cfg, RunDir(tmp_path), progress=True)
    kinds = {type(c) for c in trainer.callbacks}
    assert {MetricsLogger, StepCheckpoint, StepProgressBar} <= kinds
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    assert trainer.max_steps == cfg.train.max_steps and trainer.precision == "32-true"
    assert LinePrinter in {type(c) for c in make_trainer(cfg, RunDir(tmp_path), progress=False).callbacks}


def test_ddp_wraps_the_model_on_the_current_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's own DDP strategy wraps under a fresh CUDA stream (every backward then warns that the
    # AccumulateGrad nodes DDP keeps are on another stream); ours must not open one
    import falcon_lab.train.trainer as trainer_module

    assert isinstance(make_strategy(tiny("train.devices=2")), CurrentStreamDDP)
    assert make_strategy(tiny()) == "auto"
    unused = make_strategy(tiny("train.devices=2", "train.strategy=ddp_find_unused_parameters_true"))
    assert isinstance(unused, CurrentStreamDDP) and unused._ddp_kwargs == {"find_unused_parameters": True}
    assert isinstance(make_trainer(tiny("train.devices=2"), RunDir(tmp_path), progress=False).strategy,
                      CurrentStreamDDP)

    def no_stream(*args: object, **kwargs: object) -> None:
        raise AssertionError("a CUDA stream was opened to wrap the model")

    wrapped: list[tuple[object, object]] = []
    monkeypatch.setattr(torch.cuda, "Stream", no_stream)
    monkeypatch.setattr(torch.cuda, "stream", no_stream)
    monkeypatch.setattr(trainer_module, "DistributedDataParallel",
                        lambda module, device_ids, **kw: wrapped.append((module, device_ids)) or "ddp-model")
    strategy = CurrentStreamDDP()
    monkeypatch.setattr(strategy, "determine_ddp_device_ids", lambda: [0])
    model = torch.nn.Linear(2, 2)
    assert strategy._setup_model(model) == "ddp-model" and wrapped == [(model, [0])]


def test_a_short_run_writes_metrics_with_the_schedule_and_throughput(tmp_path: Path) -> None:
    cfg = tiny("train.max_steps=6", "train.log_every=1", "train.val_every=3", "train.ckpt_every=3",
               "optim.warmup_steps=2")
    result = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=True)
    assert result.status == "finished" and result.steps == 6
    rows = read_metrics(tmp_path / "run" / "metrics.csv")
    assert (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0] == ",".join(COLUMNS)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows:
        assert r["lr"] == pytest.approx(cfg.optim.lr * lr_factor(r["step"] - 1, 2, 6, cfg.optim.min_lr_ratio))
        assert r["tokens_per_s"] > 0 and math.isfinite(r["loss"]) and r["grad_norm"] > 0
        assert r["tokens"] == r["step"] * cfg.train.batch_size * seq_len(cfg)
        assert "peak_gib" not in r  # a CUDA device's figure alone
    assert {"val_loss", "val_acc"} <= set(rows[2]) and {"val_loss", "val_acc"} <= set(rows[5])
    assert "val_loss" not in rows[0]
    assert rows[-1]["loss"] < rows[0]["loss"]


def graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3"])
def test_a_compiled_run_trains_the_same_model_and_keeps_eager_checkpoint_keys(mixer: str, tmp_path: Path) -> None:
    settings = ("train.max_steps=3", "train.log_every=1", "train.val_every=3", "train.ckpt_every=3",
                "data.widths=1,3", "train.batch_size=4", f"mixer={mixer}")
    eager = run_training(tiny(*settings), out=tmp_path / "eager", results=tmp_path, progress=False)
    graphs_before = graphs_compiled()
    compiled = run_training(tiny(*settings, "train.compile=true"), out=tmp_path / "compiled", results=tmp_path,
                            progress=False)
    assert compiled.status == "finished" and compiled.steps == 3
    # the same model (train.compile changes no number but float rounding), trained in another folder
    a, b = (read_metrics(tmp_path / d / "metrics.csv") for d in ("eager", "compiled"))
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=1e-4)
    assert graphs_compiled() > graphs_before  # the compiled run did compile
    keys = torch.load(tmp_path / "compiled" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert keys.keys() == torch.load(tmp_path / "eager" / "checkpoints" / "last.ckpt",
                                     weights_only=False)["state_dict"].keys()
    assert not any("_orig_mod" in k for k in keys)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def mixer_names() -> list[str]:
    from falcon_lab.mixers import MIXERS

    return sorted(MIXERS)


@pytest.mark.parametrize("mixer", mixer_names())
def test_lab_train_runs_every_registered_mixer(mixer: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # Narrow widths and few rows: some mixers run interpreted Triton kernels on a CPU.
    code, text = invoke("train", "--task", "addition", "--mixer", mixer, "--preset", "tiny", "--max-steps", "2",
                        "--out", str(out), "--results", str(tmp_path), "--no-progress",
                        "--set", "data.widths=1,3", "--set", "train.batch_size=4", "--set", "data.val_per_length=1")
    assert code == 0, text
    assert "finished (2 steps)" in text
    rows = read_metrics(out / "metrics.csv")
    assert rows[-1]["step"] == 2 and math.isfinite(rows[-1]["loss"])
    assert (out / "checkpoints" / "last.ckpt").exists()


def test_lab_train_random_tokens(tmp_path: Path) -> None:
    code, text = invoke("train", "--task", "random", "--mixer", "transformer", "--max-steps", "2",
                        "--out", str(tmp_path / "run"), "--results", str(tmp_path), "--no-progress",
                        "--set", "data.seq_len=16")
    assert code == 0, text
    assert "finished (2 steps)" in text


@pytest.mark.parametrize(("args", "expected"), [
    (("--set", "optim.lrr=3"), "unknown key 'optim.lrr'; accepted keys in optim: lr,"),
    (("--mixer", "nope"), "unknown mixer 'nope'; accepted: "),
    (("--preset", "huge"), "unknown preset 'huge'; accepted: "),
    (("--task", "chess"), "accepted: addition, random"),
    (("--set", "model.n_heads=3"), "not divisible by model.n_heads=3"),
    (("--set", "optim.lr=fast"), "optim.lr expects float"),
])
def test_lab_train_rejects_mistakes_in_one_line_with_exit_2(args: tuple[str, ...], expected: str,
                                                            tmp_path: Path) -> None:
    code, text = invoke("train", *args, "--results", str(tmp_path))
    assert code == 2
    assert text.count("\n") == 1 and "Traceback" not in text
    assert text.startswith("lab train: ") and expected in text
    assert not (tmp_path / "runs").exists()


def test_lab_train_skips_a_finished_run_and_says_so(tmp_path: Path) -> None:
    args = ("train", "--max-steps", "2", "--results", str(tmp_path), "--no-progress")
    code, first = invoke(*args)
    assert code == 0 and "finished (2 steps)" in first
    run_id = first.split("run ", 1)[1].split()[0]
    assert (tmp_path / "runs" / run_id / "checkpoints" / "last.ckpt").exists()
    code, second = invoke(*args)
    assert code == 0
    folder = tmp_path / "runs" / run_id
    assert second.strip() == f"run {run_id} is already finished (2 steps); skipped. Folder: {folder}"


@pytest.mark.parametrize(("overrides", "problem"), [
    (("train.cuda_graphs=true", "train.accelerator=cpu"), "train.cuda_graphs needs a CUDA GPU"),
    (("train.cuda_graphs=true", "train.devices=2"), "captures one process's steps; this run spans 2 devices"),
    (("train.cuda_graphs=true", "train.accumulate=2"), r"cannot accumulate gradients \(train.accumulate=2\)"),
    (("train.cuda_graphs=true", "train.precision=16-mixed"), "not set up for fp16 loss scaling"),
])
def test_cuda_graphs_where_they_cannot_hold_are_refused_before_anything_is_written(
        overrides: tuple[str, ...], problem: str, tmp_path: Path) -> None:
    from falcon_lab.config import ConfigError

    with pytest.raises(ConfigError, match=problem):
        run_training(tiny(*overrides), out=tmp_path / "run", results=tmp_path, progress=False)
    assert not (tmp_path / "run").exists() and not (tmp_path / "lab.db").exists()


def test_cuda_graphs_replace_the_training_forward_of_the_run_shape_only(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The plumbing, on a CPU: capture (falcon_lab.train.graphs) stands in for a recorder; the graphed callable
    # must serve every training forward of the run's batch shape, and validation must stay eager.
    from falcon_lab.train import graphs
    from falcon_lab.train.data import LabData

    calls: dict[str, list] = {"capture": [], "graphed": []}

    def fake_capture(model, shape, precision, device):
        calls["capture"].append((shape, precision))

        def graphed(ids):
            calls["graphed"].append(tuple(ids.shape))
            return model(ids)
        return graphed

    monkeypatch.setattr(graphs, "capture", fake_capture)
    cfg = tiny("train.cuda_graphs=true", "train.max_steps=3", "train.val_every=3", "train.ckpt_every=3",
               "data.widths=1,3", "train.batch_size=4")
    module = LabModule(cfg)
    trainer = make_trainer(cfg, RunDir(tmp_path), progress=False)
    trainer.fit(module, datamodule=LabData(cfg))
    shape = (4, seq_len(cfg))
    assert calls["capture"] == [(shape, "32-true")]
    assert calls["graphed"] == [shape] * 3  # the three training steps; validation went eager


def test_with_compile_the_compiled_forward_is_what_is_captured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    from falcon_lab.train import graphs
    from falcon_lab.train.data import LabData

    captured = []

    def fake_capture(model, shape, precision, device):
        captured.append(model)
        return model
    monkeypatch.setattr(graphs, "capture", fake_capture)
    cfg = tiny("train.cuda_graphs=true", "train.compile=true", "train.max_steps=2", "train.val_every=2",
               "train.ckpt_every=2", "data.widths=1,3", "train.batch_size=4")
    module = LabModule(cfg)
    trainer = make_trainer(cfg, RunDir(tmp_path), progress=False)
    trainer.fit(module, datamodule=LabData(cfg))
    assert trainer.global_step == 2
    assert len(captured) == 1 and isinstance(captured[0], torch._dynamo.eval_frame.OptimizedModule)
    assert captured[0]._orig_mod is module.model  # the run's own model, compiled, not a copy
    assert "cuda graphs: compiled training forward and backward captured for batches of (4, " in capsys.readouterr().out


def test_a_model_that_cannot_be_captured_trains_eagerly_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    from falcon_lab.train import graphs
    from falcon_lab.train.data import LabData

    def failing(model, shape, precision, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "capture", failing)
    cfg = tiny("train.cuda_graphs=true", "train.max_steps=2", "train.val_every=2", "train.ckpt_every=2",
               "data.widths=1,3", "train.batch_size=4")
    trainer = make_trainer(cfg, RunDir(tmp_path), progress=False)
    trainer.fit(LabModule(cfg), datamodule=LabData(cfg))
    assert trainer.global_step == 2
    assert ("cuda graphs: not captured (RuntimeError: operation not permitted when stream is capturing); "
            "training eagerly") in capsys.readouterr().out
    # with train.compile the run goes on compiled
    cfg = tiny("train.cuda_graphs=true", "train.compile=true", "train.max_steps=2", "train.val_every=2",
               "train.ckpt_every=2", "data.widths=1,3", "train.batch_size=4")
    trainer = make_trainer(cfg, RunDir(tmp_path / "compiled"), progress=False)
    module = LabModule(cfg)
    trainer.fit(module, datamodule=LabData(cfg))
    assert trainer.global_step == 2 and module.__dict__.get("_compiled_model") is not None
    assert "; training compiled, without them" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("mixer", "compiled"), [("transformer", False), ("falcon-1a.3", False), ("falcon-1.3", False),
                                                 ("transformer", True), ("falcon-1a.3", True)])
def test_a_run_on_cuda_graphs_follows_the_eager_loss_curve(mixer: str, compiled: bool, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    settings = ("train.max_steps=6", "train.log_every=1", "train.val_every=6", "train.ckpt_every=6",
                "data.widths=1,8", "train.batch_size=16", f"mixer={mixer}")
    run_training(tiny(*settings), out=tmp_path / "eager", results=tmp_path, progress=False)
    run_training(tiny(*settings, "train.cuda_graphs=true", f"train.compile={str(compiled).lower()}"),
                 out=tmp_path / "graphed", results=tmp_path, progress=False)
    kind = "compiled " if compiled else ""
    assert f"cuda graphs: {kind}training forward and backward captured" in capsys.readouterr().out
    a, b = (read_metrics(tmp_path / d / "metrics.csv") for d in ("eager", "graphed"))
    # bf16-mixed on both sides; the graphed forward runs the same kernels in the same order (compiled:
    # the fused kernels of torch.compile, the same arithmetic up to rounding)
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=2e-2)
    # every logged row says how much memory the process's tensors have held, never less than at the row before
    peaks = [r.get("peak_gib") for r in a if "loss" in r]
    assert peaks and None not in peaks and 0 < peaks[0] and peaks == sorted(peaks)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_in_turn_in_one_process_each_capture_cuda_graphs_beside_loader_processes(tmp_path: Path) -> None:
    """A campaign's single slot trains its runs one after another in one process, and on a GPU each run's loader
    forks worker processes. The second run's workers, forked while the first run's CUDA graphs awaited collection,
    died freeing them (CUDA cannot run in a forked child: "initialization error"); the run now collects them first."""
    for seed in (0, 1):
        cfg = tiny("train.max_steps=4", "train.log_every=1", "train.val_every=4", "train.ckpt_every=4",
                   "data.widths=1,8", "train.batch_size=16", "mixer=falcon-1a.3", "train.cuda_graphs=true",
                   f"train.seed={seed}")
        result = run_training(cfg, out=tmp_path / f"s{seed}", results=tmp_path, progress=False)
        assert result.status == "finished", (seed, result)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mixer", ["falcon-1.3", "falcon-1a.3", "deltanet"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_graphed_step_gives_the_eager_gradient_across_chunks(mixer: str, compiled: bool) -> None:
    """The loss-curve test above trains widths 1-8, whose samples fit one chunk of the rule; this one packs widths
    up to 32 into rows of 128 positions with the rule in chunks of 16, so most of what a sample carries crosses a
    chunk boundary, and compares the whole gradient of one step, replayed from a CUDA graph, with the eager one."""
    from dataclasses import replace

    from falcon_lab.train.graphs import capture
    from falcon_lab.mixers import LanguageModel, LMConfig
    from falcon_lab.tasks.addition.batches import make_batch

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=VOCAB_SIZE, d_model=64, n_layers=2, n_heads=2, mixer=mixer,
                                   mixer_options={"chunk_size": 16})).to(device).train()
    batch = make_batch(0, 0, 8, (20, 32), 128, pack=True)
    ids, labels = batch.input_ids.to(device), batch.labels.to(device)

    def gradient(forward, autocast: bool) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
            logits = forward(ids)
        total, count = token_loss_sum(logits, labels)
        (total / count).backward()
        return torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])

    eager = gradient(model, True)
    for m in model.modules():  # the reference: every rule token by token, in PyTorch
        if hasattr(getattr(m, "opts", None), "backend"):
            m.opts = replace(m.opts, backend="recurrent")
    reference = gradient(model, True)
    for m in model.modules():
        if hasattr(getattr(m, "opts", None), "backend"):
            m.opts = replace(m.opts, backend="auto" if mixer.startswith("falcon") else "chunk")
    graphed = capture(torch.compile(model) if compiled else model, tuple(ids.shape), "bf16-mixed", device)
    gradient(graphed, False)  # the first replay
    replayed = gradient(graphed, False)
    scale = reference.norm()
    assert (eager - reference).norm() / scale < 3e-2
    assert (replayed - reference).norm() / scale < 3e-2


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3"])
def test_deterministic_runs_repeat_their_loss_curve_bit_for_bit(mixer: str, tmp_path: Path) -> None:
    """`train.deterministic=true`: the same config and seed, trained twice in two folders, give the same loss,
    gradient norm and validation numbers at every logged step, exactly (not to a tolerance)."""
    settings = ("train.max_steps=6", "train.log_every=1", "train.val_every=3", "train.ckpt_every=6",
                "data.widths=1,3", "train.batch_size=4", f"mixer={mixer}", "train.deterministic=true")
    for folder in ("first", "second"):
        assert run_training(tiny(*settings), out=tmp_path / folder, results=tmp_path / folder,
                            progress=False).status == "finished"
    a, b = (read_metrics(tmp_path / d / "metrics.csv") for d in ("first", "second"))
    keys = ("step", "loss", "grad_norm", "val_loss")
    assert any(r.get("val_loss") is not None for r in a)
    assert len(a) == 6 and [[r.get(k) for k in keys] for r in b] == [[r.get(k) for k in keys] for r in a]
