"""Sequence mixers (Falcon rules and baselines) and the models built from them; imports only `kernels`."""
