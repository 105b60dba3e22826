"""Optuna sweeps over `lab train` runs.

`space` (the YAML schema of a search space), `spec` (a sweep and each trial's configuration),
`objective` (one trial), `storage` (journal file or database, the budget lock, dead workers),
`study` (samplers, pruner, creating or resuming a study), `worker` (one worker process), `runner`
(`lab sweep run`), `report` (`lab sweep report`). The heavy modules (runner, worker, objective,
report) are imported where used.
"""

from falcon_lab.sweep.space import Param, Space, SpaceError, load_space
from falcon_lab.sweep.spec import OBJECTIVES, SweepSpec

__all__ = ["OBJECTIVES", "Param", "Space", "SpaceError", "SweepSpec", "load_space"]
