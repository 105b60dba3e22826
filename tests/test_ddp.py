"""DDP on CPU (gloo, 2 processes, Lightning's DDP strategy): ranks see different rows, gradients are
all-reduced to the same values, 2 ranks of b rows train exactly as 1 process of 2b rows, and a run stopped
on 2 ranks resumes on 1 process where that process alone would have been."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from falcon_lab.config import dump_yaml, load_config
from falcon_lab.train import run_training
from falcon_lab.train.callbacks import read_metrics
from tests.xdist_util import built_once

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4

PROBE = """
class Probe(Callback):
    # Records each step's input rows and the gradient the optimiser is about to apply.

    def __init__(self, out):
        self.out, self.inputs, self.grads = out, [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.inputs.append(batch[0].clone())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads.append(torch.cat([p.grad.flatten() for p in pl_module.parameters()]).clone())

    def on_train_end(self, trainer, pl_module):
        torch.save({"inputs": self.inputs, "grads": self.grads, "world": trainer.world_size},
                   f"{self.out}/probe{trainer.global_rank}.pt")
"""

DDP_RUN = """
import sys
import torch
from lightning.pytorch.callbacks import Callback
from falcon_lab.config import load_config
from falcon_lab.train import run_training

torch.set_num_threads(1)
{probe}
cfg = load_config(config_file=sys.argv[1], overrides=["train.devices=2", "train.accelerator=cpu"])
run_training(cfg, out=sys.argv[2], results=sys.argv[3], progress=False, callbacks=[Probe(sys.argv[3])])
"""

STOPPED_RUN = """
import os
import signal
import sys
import torch
from lightning.pytorch.callbacks import Callback
from falcon_lab.config import load_config
from falcon_lab.train import run_training

torch.set_num_threads(1)


class Interrupt(Callback):
    # SIGINT on rank 0 after step 2, as `timeout --signal=INT` would send it

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 2 and trainer.global_rank == 0:
            os.kill(os.getpid(), signal.SIGINT)


cfg = load_config(config_file=sys.argv[1], overrides=["train.devices=2", "train.accelerator=cpu"])
run_training(cfg, out=sys.argv[2], results=sys.argv[3], progress=False, callbacks=[Interrupt()],
             stop_on_interrupt=True)
"""

namespace: dict = {"Callback": Callback, "torch": torch}
exec(textwrap.dedent(PROBE), namespace)
Probe = namespace["Probe"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same configuration (global batch 8) trained by 2 ranks of 4 rows and by 1 process of 8."""
    cfg = load_config("tiny", overrides=[f"train.max_steps={STEPS}", "train.batch_size=8", "train.log_every=1",
                                         f"train.ckpt_every={STEPS}", f"train.val_every={STEPS}",
                                         "optim.warmup_steps=1", "data.widths=1,8"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "RANK"):
        env.pop(key, None)
    with built_once(tmp_path_factory, "ddp") as (root, build):  # once for the session's workers
        if build:
            config, script = root / "config.yaml", root / "ddp_run.py"
            config.write_text(dump_yaml(cfg))
            script.write_text(textwrap.dedent(DDP_RUN).format(probe=textwrap.dedent(PROBE)))
            (root / "ddp").mkdir()
            proc = subprocess.run([sys.executable, str(script), str(config), str(root / "ddp" / "run"),
                                   str(root / "ddp")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0, proc.stderr[-3000:]
            single = Probe(str(root))
            run_training(cfg, out=root / "single" / "run", results=root / "single", progress=False,
                         callbacks=[single])
    return {
        "root": root,
        "cfg": cfg,
        "env": env,
        "ranks": [torch.load(root / "ddp" / f"probe{r}.pt") for r in range(2)],
        "single": torch.load(root / "probe0.pt"),
        "ddp_dir": root / "ddp" / "run",
        "single_dir": root / "single" / "run",
    }


def test_each_rank_sees_its_own_half_of_the_global_batch(runs: dict) -> None:
    rank0, rank1 = runs["ranks"]
    assert rank0["world"] == rank1["world"] == 2 and runs["single"]["world"] == 1
    assert len(rank0["inputs"]) == len(runs["single"]["inputs"]) == STEPS
    for step in range(STEPS):
        a, b = rank0["inputs"][step], rank1["inputs"][step]
        assert a.shape[0] == b.shape[0] == 4
        assert not torch.equal(a, b)
        assert torch.equal(torch.cat([a, b]), runs["single"]["inputs"][step])


def test_gradients_agree_across_ranks_and_with_one_process(runs: dict) -> None:
    rank0, rank1 = runs["ranks"]
    for step in range(STEPS):
        assert torch.equal(rank0["grads"][step], rank1["grads"][step])
        torch.testing.assert_close(rank0["grads"][step], runs["single"]["grads"][step], rtol=1e-5, atol=1e-6)


def test_two_ranks_of_b_rows_train_as_one_process_of_2b(runs: dict) -> None:
    ddp, single = read_metrics(runs["ddp_dir"] / "metrics.csv"), read_metrics(runs["single_dir"] / "metrics.csv")
    assert [r["step"] for r in ddp] == [r["step"] for r in single] == list(range(1, STEPS + 1))
    for a, b in zip(ddp, single):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
        assert a["tokens"] == b["tokens"]
    assert abs(ddp[-1]["val_loss"] - single[-1]["val_loss"]) <= 1e-5
    final = torch.load(runs["ddp_dir"] / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    expected = torch.load(runs["single_dir"] / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert final.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(final[name], value, rtol=0, atol=1e-5, msg=name)


def test_a_run_stopped_on_two_ranks_resumes_on_one_process_where_one_process_would_be(runs: dict) -> None:
    from falcon_lab.runs import Registry

    root, cfg = runs["root"], runs["cfg"]
    script, out = root / "stopped_run.py", root / "stopped" / "run"
    script.write_text(textwrap.dedent(STOPPED_RUN))
    proc = subprocess.run([sys.executable, str(script), str(root / "config.yaml"), str(out), str(root / "stopped")],
                          cwd=ROOT, env=runs["env"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = Registry(root / "stopped" / "lab.db").rows()
    assert (row["status"], row["steps"]) == ("stopped", 2)
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2
    result = run_training(cfg, out=out, results=root / "stopped", progress=False)  # one process now
    assert (result.status, result.steps) == ("finished", STEPS)
    resumed, single = read_metrics(out / "metrics.csv"), read_metrics(runs["single_dir"] / "metrics.csv")
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    for a, b in zip(resumed, single):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
    final = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    expected = torch.load(runs["single_dir"] / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    for name, value in expected.items():
        torch.testing.assert_close(final[name], value, rtol=0, atol=1e-5, msg=name)


def test_lab_train_on_two_cpu_processes(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "RANK"):
        env.pop(key, None)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "train", "--devices", "2", "--max-steps", "2",
                           "--set", "train.batch_size=4", "--set", "train.log_every=1", "--out", str(out),
                           "--results", str(tmp_path), "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("finished (2 steps)") == 1  # rank 1 trains but says nothing
    assert [r["step"] for r in read_metrics(out / "metrics.csv")] == [1, 2]
    assert '"world_size": 2' in (out / "provenance.json").read_text()
    assert "resumes" not in (out / "provenance.json").read_text()
