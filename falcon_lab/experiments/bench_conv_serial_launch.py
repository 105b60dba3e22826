"""The serial backward of the short convolution at the same-time step's shape, by its launch: spans a program walks in
step (``SERIAL_ROWS``) and channels a thread takes (``SERIAL_VEC``), and the step with the defaults. At a thread a
channel and one span a program it took 142 µs a call in the same-time step on an H200 where reading x and dy and
writing dx once would take about 31 (`records/bench/conv-forms/`): each thread waits on 2-byte reads issued two tokens
ahead, too few bytes in flight to fill the memory's pipe. More spans a program, or several channels a thread (reads 4
or 8 bytes wide), put more in flight at more registers. The forward, at 32 tokens a program (12,288 programs of 4 KiB
of x each at that shape), also at 64 and 128 (no spilled registers for sm_90: 72, 112 and 106)."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step

EXPERIMENT = Experiment(
    record="bench/conv-serial-launch",
    question="How many spans a program and channels a thread make the serial backward of the short convolution "
             "fastest at the same-time step's shape, how many tokens a program the forward, and what does the "
             "default step take (falcon-1a.3, falcon-1.3)?",
    trains=Commands(
        commands=(("bench", "conv", "--shape", "256,256,384", "--span-tiles", "16", "--serial-span", "64",
                   "--serial-channels", "128", "--serial-rows", "1", "--serial-rows", "2", "--serial-vec", "1",
                   "--serial-vec", "2", "--serial-vec", "4", "--fwd-tokens", "32", "--fwd-tokens", "64",
                   "--fwd-tokens", "128", "--out", "{out}"),
                  bench_step("falcon-1a.3,falcon-1.3", "step-default", "--set", "train.cuda_graphs=true",
                             samples="by-id")),
        table="conv.md",
        smoke_commands=(("bench", "conv", "--smoke", "--span-tiles", "2", "--serial-span", "16", "--serial-vec",
                         "1", "--serial-vec", "2", "--out", "{out}"),)),
    budget_s=240,
    machine="one H100",
)
