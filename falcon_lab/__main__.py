"""Lets `python -m falcon_lab` run the `lab` command line."""

from falcon_lab.cli import main

main()
