"""A training step reads nothing back from the device on the host unless it is a logged step: on a GPU each such
read waits for the device and empties the queue of launched kernels."""

from __future__ import annotations

import collections
import os
import traceback
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from falcon_lab.config import load_config
from falcon_lab.train import run_training


def test_only_the_logged_steps_read_the_device_on_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    step = {"now": 0}
    reads: collections.Counter = collections.Counter()

    def read() -> None:
        if not any(f"{os.sep}triton{os.sep}" in frame.filename for frame in traceback.extract_stack()):
            reads[step["now"]] += 1

    class Mark(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            step["now"] = trainer.global_step + 1

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in ("_local_scalar_dense", "nonzero", "masked_select"):
                read()
            return func(*args, **(kwargs or {}))

    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: read() or tolist(t))
    cfg = load_config("addition-tiny", overrides=["train.max_steps=8", "train.log_every=3", "train.val_every=1000",
                                                   "train.ckpt_every=1000", "model.n_layers=1", "eval.enabled=false"])
    with Reads():
        result = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False, callbacks=[Mark()])
    assert result.status == "finished"
    assert {s for s in range(1, 9) if reads[s]} == {3, 6, 8}, dict(reads)  # log_every 3, and the last step
    # the printed line still shows the last logged loss and tokens/s
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step 8/8")][-1]
    assert " loss " in line and " tok/s " in line, line
