"""Data for the lab's tracks (variable-length addition, FineWeb-Edu language modelling); knows nothing of models."""
