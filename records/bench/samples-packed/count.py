"""How much the isolated samples of the same-time table's batches grow when laid one to a row, padded to the
longest (``falcon_lab.mixers.layers.SampleRows``, what the recurrent mixers' samples took before they reached the kernels as
packed sequences), against the packed sequences themselves (``cu_seqlens``): tokens, and the chunks of 64 the
kernels' chunk-parallel passes run (chunks of a padded row: ``SampleRows.chunk``); and the tokens of the rows
falcon-3 still takes, padded within four groups of like lengths (``falcon_lab.kernels.falcon.api._length_groups``). CPU only;
no model is run.

    python records/bench/samples-packed/count.py > records/bench/samples-packed/output.txt
"""

from __future__ import annotations

from falcon_lab.kernels.falcon.api import _length_groups
from falcon_lab.config import from_dict, read_yaml
from falcon_lab.train.data import train_batch
from falcon_lab.train.module import EOS
from falcon_lab.mixers.layers import SampleRows, sample_bounds
from falcon_lab.mixers.positions import sample_index

CONFIG = "records/addition/same-time/runs/d4541b1f88/config.yaml"  # the table's Gated DeltaNet run, seed 0
C = 64


def main() -> None:
    cfg = from_dict(read_yaml(CONFIG))
    print(f"{CONFIG}: batch {cfg.train.batch_size} x {cfg.data.seq_len}, widths {cfg.data.widths}, curriculum "
          f"{cfg.data.curriculum} over {cfg.data.ramp_steps} steps")
    print("step | samples | longest | tokens | padded tokens (x) | padded in 4 length groups (x) | chunks packed | "
          "chunks padded (x, chunk)")
    for step in (200, 800, 1500, 1999):
        ids, _ = train_batch(cfg, step, 0, 1)
        samples = sample_index(ids, EOS)
        rows = SampleRows(samples)
        bounds = sample_bounds(samples)
        lengths = bounds[1:] - bounds[:-1]
        packed = int(((lengths + C - 1) // C).sum())
        size = rows.chunk(C)
        padded = rows.count * ((rows.longest + size - 1) // size)
        tokens, grown = ids.numel(), rows.count * rows.longest
        cut = [int(b) for b in bounds]
        grouped = sum(len(g) * max(cut[n + 1] - cut[n] for n in g) for g in _length_groups(cut))
        print(f"{step} | {rows.count} | {rows.longest} | {tokens} | {grown} ({grown / tokens:.2f}) | {grouped} "
              f"({grouped / tokens:.2f}) | {packed} | {padded} ({padded / packed:.2f}, {size})")


if __name__ == "__main__":
    main()
