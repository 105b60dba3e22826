"""falcon-lab's training, run registry and command-line interface (`lab`)."""

__version__ = "0.1.0"
