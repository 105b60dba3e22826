"""Hyper-parameter search spaces (YAML files beside this one) and the driver that runs them through `lab`."""
