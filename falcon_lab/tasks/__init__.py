"""Data for the lab's tracks (variable-length addition, FineWeb-Edu language modelling); knows nothing of models."""

# The synthetic tasks of falcon_lab.tasks.synthetic (its TASK_NAMES), named here where reading them imports no torch:
# the lab's task registry (falcon_lab.task) declares one task for each.
SYNTHETIC_TASK_NAMES = ("mqar", "parity", "permutation")
