"""Sequence mixers (Falcon rules and baselines) and the models built from them; imports only `kernels`.

    from mixers import LMConfig, LanguageModel, MIXERS, build_mixer
"""

from mixers.model import LanguageModel, LMConfig
from mixers.registry import MIXERS, build_mixer, default_options, masks_samples, resets_at_samples

__all__ = ["MIXERS", "LMConfig", "LanguageModel", "build_mixer", "default_options", "masks_samples",
           "resets_at_samples"]
