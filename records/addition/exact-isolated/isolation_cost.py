"""CPU ratio: a mixer's forward+backward over isolated packed samples (16 rows of 256 positions, d_model 256, 4
heads), restarting itself (its own path since commit abbbb03) against the samples laid one to a row around the whole
mixer (`samples_apart`, the path of the runs here), best of three, one thread.

    python records/addition/exact-isolated/isolation_cost.py
"""
import time
import torch
from falcon_lab.mixers import build_mixer
from falcon_lab.mixers.positions import samples_apart, sample_index
from falcon_lab.tasks.addition.batches import make_batch
from falcon_lab.tasks.addition import EOS
torch.set_num_threads(1)
torch.manual_seed(0)
for width in (2, 16):
    batch = make_batch(0, 3, 16, (1, width), 256, pack=True)
    samples = sample_index(batch.input_ids, EOS)
    x = torch.randn(*batch.input_ids.shape, 256)
    for name in ("retnet", "mamba2", "deltanet", "gated-deltanet"):
        m = build_mixer(name, 256, 4)
        times = []
        for f in (lambda h: m(h, samples=samples), lambda h: samples_apart(m, h, samples)):
            best = 1e9
            for _ in range(3):
                xi = x.clone().requires_grad_(True)
                t0 = time.perf_counter(); f(xi).square().sum().backward(); best = min(best, time.perf_counter() - t0)
            times.append(best)
        print(f"widths 1-{width:2d} {name:15s} restarting {times[0]*1e3:7.1f} ms  rows apart {times[1]*1e3:7.1f} ms  ratio {times[1]/times[0]:.2f}")
