"""Figures from the tables in `results/` (`lab plot`): PNG files drawn with matplotlib's Agg canvas."""
