"""Ablations: one change at a time against a mixer's own default (`lab ablate`)."""
