"""Issue 30's targets from the two benches of 2026-12-05 (one H100): every ratio's two sides from one run.

    python records/bench/kernels-2026-12-05/targets.py   # prints targets.md's table

`all/kernels.csv`: every rule at the three shapes, fla beside them at the first only (the call's limit cut fla's
autotuning at the second); `d128/kernels.csv`: falcon-1, falcon-1a and the gated delta rule again at the two
D = 128 shapes, beside fla there (the same machine, the next call)."""

import csv
from pathlib import Path

HERE = Path(__file__).parent
SHAPES = ("8x2048x12x64", "4x4096x16x128", "1x16384x16x128")


def read(name: str) -> dict:
    with open(HERE / name / "kernels.csv") as f:
        return {(r["shape"], r["op"], r["mode"]): float(r["ms"]) for r in csv.DictReader(f) if r["ms"]}


ALL, D128 = read("all"), read("d128")


def anchored(shape: str) -> dict:
    """The run that timed fla at this shape."""
    return ALL if shape == SHAPES[0] else D128


TARGETS = [  # (target, bound, numerator (op, mode), denominator (op, mode), which run)
    ("falcon-1 λ = 0 fwd+bwd / fla `chunk_delta_rule` fwd+bwd", 1.0, ("falcon-1 λ=0", "fwd+bwd"),
     ("fla chunk_delta_rule", "fwd+bwd"), anchored),
    ("falcon-1 λ > 0 fwd / fla `chunk_gated_delta_rule` fwd", 1.0, ("falcon-1 λ>0", "fwd"),
     ("fla chunk_gated_delta_rule", "fwd"), anchored),
    ("falcon-1a fwd / fla `chunk_simple_gla` fwd", 1.0, ("falcon-1a", "fwd"), ("fla chunk_simple_gla", "fwd"),
     anchored),
    ("falcon-2 fwd+bwd / falcon-1 λ > 0 fwd+bwd", 2.5, ("falcon-2", "fwd+bwd"), ("falcon-1 λ>0", "fwd+bwd"),
     lambda s: ALL),
    ("falcon-2 (inverses) fwd+bwd / falcon-1 λ > 0 fwd+bwd", 2.5, ("falcon-2 inverses", "fwd+bwd"),
     ("falcon-1 λ>0", "fwd+bwd"), lambda s: ALL),
    ("falcon-2a fwd+bwd / falcon-1a fwd+bwd", 1.5, ("falcon-2a", "fwd+bwd"), ("falcon-1a", "fwd+bwd"), lambda s: ALL),
    ("falcon-3 (B = 4) fwd+bwd / falcon-1 λ > 0 fwd+bwd", 3.0, ("falcon-3", "fwd+bwd"), ("falcon-1 λ>0", "fwd+bwd"),
     lambda s: ALL),
    ("falcon-3a (B = 4) fwd+bwd / falcon-1a fwd+bwd", 2.0, ("falcon-3a", "fwd+bwd"), ("falcon-1a", "fwd+bwd"),
     lambda s: ALL),
]

print("| target | bound | " + " | ".join(s.replace("x", "×") for s in SHAPES) + " |")
print("|---|---|" + "---|" * len(SHAPES))
for name, bound, num, den, run in TARGETS:
    cells = []
    for shape in SHAPES:
        table = run(shape)
        a, b = table.get((shape, *num)), table.get((shape, *den))
        if a is None or b is None:
            cells.append("not measured")
            continue
        ratio = a / b
        cells.append(f"{'**' if ratio <= bound else ''}{ratio:.2f}{'**' if ratio <= bound else ' ✗'} "
                     f"({a:.3g} / {b:.3g} ms)")
    print(f"| {name} | ≤ {bound} | " + " | ".join(cells) + " |")
