"""Cold and warm compilation of the addition-paper model on a CPU: the first compiled forward and backward.

    TORCHINDUCTOR_CACHE_DIR=DIR python records/bench/compile_cold_cpu/compile_time.py MIXER {whole,regional}

whole: torch.compile of the model (as `lab train --set train.compile=true`); regional: each block compiled on
its own, embedding and head eager. An empty DIR is a cold cache; a DIR filled by another run, a warm one.
"""
import sys, time, torch
from falcon_lab.config import load_config
from falcon_lab.train.module import LabModule
mixer, mode = sys.argv[1], sys.argv[2]
cfg = load_config(preset="addition-paper", task="addition", mixer=mixer)
torch.manual_seed(0)
model = LabModule(cfg).model
ids = torch.randint(0, 10, (8, 99))
if mode == "whole":
    fwd = torch.compile(model)
else:
    cblocks = [torch.compile(b) for b in model.blocks]
    def fwd(ids):
        h = model.embed(ids)
        for b in cblocks:
            h = b(h)
        return model._logits(h)
ref = model(ids)
t = time.perf_counter(); out = fwd(ids); out.float().square().mean().backward(); t1 = time.perf_counter() - t
t = time.perf_counter(); out = fwd(ids); out.float().square().mean().backward(); t2 = time.perf_counter() - t
from torch._dynamo.utils import counters
print(mixer, mode, "first fwd+bwd", round(t1, 1), "s; second", round(t2, 2), "s; unique graphs", counters["stats"]["unique_graphs"], "max diff", (out - ref).abs().max().item())
