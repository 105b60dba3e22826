"""Evaluation of trained models on the project's tasks."""
