"""Score a run's last weights twice, their moving average (`train.ema`) and the trained weights themselves, on
widths 1-12 (1-8 trained, 9-12 held out), 100 teacher-forced samples a width:

    python records/addition/cpu_ema/raw_vs_average.py <run folder> [<run folder> ...]

The runs' checkpoints are not kept in the records; this reads them where the runs were trained."""

import sys

import torch

from falcon_lab.eval.addition import evaluate_addition
from falcon_lab.eval.run_weights import load_run_model

torch.set_num_threads(2)
for run in sys.argv[1:]:
    for which in ("last", "raw"):
        loaded = load_run_model(run, which)
        report = evaluate_addition(loaded.model, n_per_length=100, seed=0, val_widths=range(1, 9),
                                   ood_widths=range(9, 13))
        whole, token = report.teacher_forced, report.per_token
        print(f"{run.rstrip('/').split('/')[-1]} {'average' if which == 'last' else 'raw'} step {loaded.step}: "
              f"whole {[round(whole[w]) for w in range(1, 13)]}  per token 9-12 {[round(token[w]) for w in range(9, 13)]}"
              f"  val_loss {report.val_loss:.4f}")
