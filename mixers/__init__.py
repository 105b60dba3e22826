"""Sequence mixers (Falcon rules and baselines) and the models built from them; imports only `kernels`.

    from mixers import LMConfig, LanguageModel, MIXERS, build_mixer
    from mixers import FalconAttention   # the Falcon layer alone, for any model
"""

from mixers.attention import FalconAttention
from mixers.model import LanguageModel, LMConfig
from mixers.positions import PositionsConfig
from mixers.registry import MIXERS, build_mixer, default_options, masks_samples, resets_at_samples

__all__ = ["FalconAttention", "MIXERS", "LMConfig", "LanguageModel", "PositionsConfig", "build_mixer",
           "default_options", "masks_samples", "resets_at_samples"]
