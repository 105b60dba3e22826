"""Reproduce the paper's tables end to end: plan the runs, train those not finished (several at once on
several GPUs), and write each table beside the paper's numbers with the command that remakes it."""
