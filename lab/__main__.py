"""Lets `python -m lab` run the `lab` command line."""

from lab.cli import main

main()
