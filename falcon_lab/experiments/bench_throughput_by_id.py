"""What a run of the same-time table costs on one GPU with its isolated samples taken by id, process start to exit:
every row of the table alone, compiled, one seed (`lab bench throughput --samples by-id`), the rows whose kernels take
samples by id (and the transformer, which masks them) replaying their step from CUDA graphs (falcon-2 and falcon-3
since their kernels took samples by id, after the first row's run); falcon-2a (packed sequences still) compiled
alone. Each run's scores beside the table's three recorded seeds
(`--against`, run from the repository's root) tell a faster run from a changed one."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

GRAPHED = "transformer,falcon-1a.3,falcon-1.3,falcon-3a.3,retnet,deltanet"
GRAPHED_MORE = "mamba2,gated-deltanet,falcon-1a.1,falcon-1a.2"
SLOW = "falcon-2,falcon-3"  # their runs' target is 120 s
PACKED = "falcon-2a"


def _runs(rows: str, folder: str, *more: str, timeout: int = 200) -> tuple[str, ...]:
    return ("bench", "throughput", "--preset", "same-time", "--mixers", rows, "--samples", "by-id",
            "--against", "records/addition/same-time/table.csv", "--set", "train.compile=true", *more,
            "--timeout", str(timeout), "--out", "{out}/" + folder)


EXPERIMENT = Experiment(
    record="bench/throughput-by-id-2026-12-07",
    question="How long does each run of the same-time table take alone on one GPU, start to exit, with isolated "
             "samples by id and the step from CUDA graphs, and are its scores those the table recorded?",
    trains=Commands(
        commands=(_runs(GRAPHED, "graphed", "--set", "train.cuda_graphs=true"),
                  _runs(GRAPHED_MORE, "graphed-more", "--set", "train.cuda_graphs=true"),
                  _runs(SLOW, "graphed-slow", "--set", "train.cuda_graphs=true", timeout=400),
                  _runs(PACKED, "packed", timeout=400)),
        table="graphed/throughput.md",
        smoke_commands=(("bench", "throughput", "--preset", "addition-tiny", "--mixers", "falcon-1a.3",
                         "--samples", "by-id", *smoke_sets(), "--set", "train.max_steps=4", "--out",
                         "{out}/graphed"),)),
    budget_s=1800,
    machine="one H100",
)
