"""The cells of the alignment ablation: timing {RAW, RBW} × write pairing {shifted, same-time}, and which cell
a mixer's defaults or a job's configuration train. Read by the campaign (alignment) and its tables
(alignment_table) alike."""

from __future__ import annotations

from dataclasses import dataclass

from falcon_lab.kernels import ALIGNMENTS, TIMINGS
from falcon_lab.reproduce.jobs import Job
from falcon_lab.mixers import default_options

# The mixer options that make a cell.
OPTION_KEYS = ("timing", "alignment")


@dataclass(frozen=True)
class Cell:
    """One cell of the 2×2 design: a timing (raw, rbw) and a write pairing (shifted, same_time)."""

    timing: str
    alignment: str

    @property
    def name(self) -> str:
        """The cell's key in files: raw/shifted, rbw/same_time, ..."""
        return f"{self.timing}/{self.alignment}"

    @property
    def label(self) -> str:
        """The cell as tables print it: RAW · shifted, RBW · same-time, ..."""
        return f"{self.timing.upper()} · {self.alignment.replace('_', '-')}"


# Falcon's cell first, as the brief of the design lists them.
CELLS = tuple(Cell(t, a) for t in TIMINGS for a in ALIGNMENTS)


def default_cell(mixer: str) -> Cell:
    """The cell of the mixer's own paper: its registry defaults (Falcon: RAW/shifted)."""
    options = default_options(mixer)
    return Cell(options["timing"], options["alignment"])


def cell_of(job: Job) -> Cell:
    """The cell a job's configuration trains: its mixer options over the mixer's defaults."""
    options = {**default_options(job.cfg.mixer), **job.cfg.model.mixer_options}
    return Cell(options["timing"], options["alignment"])
