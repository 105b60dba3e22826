"""Sequence mixers (Falcon rules and baselines) and the models built from them; imports only `kernels`.

    from falcon_lab.mixers import LMConfig, LanguageModel, MIXERS, build_mixer
    from falcon_lab.mixers import FalconAttention   # the Falcon layer alone, for any model
"""

from falcon_lab.mixers.attention import FalconAttention
from falcon_lab.mixers.model import LanguageModel, LMConfig
from falcon_lab.mixers.positions import PositionsConfig
from falcon_lab.mixers.registry import (MIXERS, build_mixer, default_options, masks_samples, resets_at_samples,
                                        samples_by_id)

__all__ = ["FalconAttention", "MIXERS", "LMConfig", "LanguageModel", "PositionsConfig", "build_mixer",
           "default_options", "masks_samples", "resets_at_samples", "samples_by_id"]
