"""Each rule's Triton kernel beside fla, SDPA and the PyTorch chunk form, forward and backward, at three shapes."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="bench/kernels-2026-12-05",
    question="How fast is each rule's Triton kernel beside fla's kernels and SDPA, and how near its floors?",
    trains=Commands(
        commands=(("bench", "kernels", "--rep", "50", "--out", "{out}"),
                  ("bench", "kernels", "--rep", "50", "--shape", "4,4096,16,128", "--shape", "1,16384,16,128",
                   "--rule", "falcon-1", "--rule", "falcon-1a", "--out", "{out}/d128")),
        table="kernels.md"),
    budget_s=1200,
    machine="one H100",
    not_remade="targets.md (targets.py at f616c0b3 under records/bench/kernels-2026-12-05/) and the GPU test "
               "`pytest tests/test_triton_regression.py -k solve_forms`",
)
