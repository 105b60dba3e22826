"""Figures from the tables the commands write (`lab plot`): PNG files drawn with matplotlib's Agg canvas."""
