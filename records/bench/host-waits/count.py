"""How often one training step over packed samples makes the host wait for the device, by source line.

On a GPU the host waits wherever it reads a device tensor: ``.item()``/``int()`` of one (``_local_scalar_dense``),
``.tolist()``, ``nonzero``, boolean-mask indexing, and the host copy of ``cu_seqlens`` (``falcon_lab.kernels.common.packed``).
Each wait drains the queue of launched kernels, so the next ones start only once the host has launched them again.
This counts them on a CPU, in one forward and backward pass of a same-time row (``lab reproduce addition --preset
same-time``'s configuration at d_model 64, two heads, the given depth) over one packed row of 256 positions of
step 1600's batch, every mixer on its kernels under Triton's interpreter (whose own reads of its launches' tensors
are not counted); ``--backend chunk`` takes the chunked forms over the samples laid one to a row.

    TRITON_INTERPRET=1 python records/bench/host-waits/count.py --layers 6 retnet falcon-3 ...
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import traceback
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import falcon_lab.kernels  # noqa: E402
from falcon_lab.reproduce.addition import parse_rows, plan  # noqa: E402
from falcon_lab.train.module import LabModule  # noqa: E402
from falcon_lab.tasks.addition.batches import make_batch  # noqa: E402

ROOT = str(Path(kernels.__file__).resolve().parents[1]) + os.sep
WAITS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "unique_consecutive"}
counts: collections.Counter = collections.Counter()


def interpreter() -> bool:
    return any(f"{os.sep}triton{os.sep}" in f.filename for f in traceback.extract_stack())


def site() -> str:
    for f in reversed(traceback.extract_stack()[:-3]):
        if f.filename.startswith(ROOT) and "host-waits" not in f.filename and not f.filename.endswith("packed.py"):
            return f"{f.filename[len(ROOT):]}:{f.lineno} {f.line.strip()[:80]}"
    return "(autograd)"


class Waits(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        hit = name in WAITS
        if name in ("index", "index_put", "index_put_"):  # a boolean mask's indices are found on the host
            hit = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or []) if i is not None)
        if hit and not interpreter():
            counts[(name, site())] += 1
        return func(*args, **(kwargs or {}))


def patch() -> None:
    tolist = torch.Tensor.tolist

    def counted(t):
        if not interpreter():
            counts[("tolist", site())] += 1
        return tolist(t)

    torch.Tensor.tolist = counted
    try:
        import falcon_lab.kernels.common.packed as packed  # since a2c89c7
    except ImportError:
        return
    to_host = packed.to_host

    def copied(t):
        counts[("host copy of cu_seqlens", site())] += 1
        return to_host(t)

    packed.to_host = copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="+")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--backend", default="triton")
    args = parser.parse_args()
    patch()
    for row in parse_rows(",".join(args.rows)):
        (job,) = plan("same-time", [row], seeds=1)
        options = dict(job.cfg.model.mixer_options)
        if job.cfg.mixer != "transformer":  # attention has no backend to choose
            options["backend"] = args.backend
        cfg = dataclasses.replace(job.cfg, model=dataclasses.replace(
            job.cfg.model, d_model=64, n_layers=args.layers, n_heads=2, mixer_options=options))
        module = LabModule(cfg)
        module.train()
        batch = make_batch(0, 1600, 1, (1, 32), 256, True)
        counts.clear()
        with Waits():
            module.model(batch.input_ids).float().sum().backward()
        print(f"{row.name} ({args.layers} layers, backend {args.backend}): {sum(counts.values())} host waits")
        for (name, where), n in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"  {n:4d}  {name:24s} {where}")


if __name__ == "__main__":
    main()
