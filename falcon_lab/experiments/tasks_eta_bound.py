"""ctxη's bound for falcon-1.3: the ridge bound (the default) against the energy bound, on three tasks."""

from falcon_lab.experiments.declare import Experiment, Row, RunGrid


def bounds(*names: str) -> tuple[Row, ...]:
    return tuple(Row(f"falcon-1.3 eta_bound={b}", "falcon-1.3", (f"model.mixer_options.eta_bound={b}",))
                 for b in names)


EXPERIMENT = Experiment(
    record="tasks/eta_bound",
    question="Does bounding η(‖x‖² + λ) (ridge) instead of η‖x‖² (energy) keep falcon-1.3 stable, and at what "
             "cost to what it learns?",
    trains=(
        RunGrid(task="mqar", preset="mqar-tiny", seeds=3, max_steps=1800, overrides=("model.d_model=128",),
                rows=bounds("ridge", "energy"), folder="mqar"),
        RunGrid(task="parity", preset="parity-tiny", seeds=3, overrides=("model.mixer_options.eta_max=2.0",),
                rows=bounds("ridge"), folder="parity"),
        RunGrid(task="addition", preset="addition-cpu", seeds=3,
                overrides=("model.abacus=4", "model.isolate_samples=true"), rows=bounds("ridge", "energy"),
                folder="addition"),
    ),
    budget_s=6 * 3600,
    machine="a 2-core CPU",
    not_remade="the comparison across tasks (study.py at f616c0b3 under records/tasks/eta_bound/)",
)
