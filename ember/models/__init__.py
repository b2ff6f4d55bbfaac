"""``ember.models``: published architectures written with ``ember.nn``, loaded from and
saved to Hugging Face's checkpoint layout.

>>> from ember.models import from_pretrained      # doctest: +SKIP
>>> model = from_pretrained("checkpoints/gpt2")   # doctest: +SKIP
"""

from ember.models.config import HfConfig
from ember.models.gpt2 import Gpt2Config, GPT2LMHeadModel
from ember.models.hub import LoadReport, from_pretrained, read_config, save_pretrained
from ember.models.pretrained import PretrainedModel
from ember.models.resnet import ResNetConfig, ResNetForImageClassification
from ember.models.vit import ViTConfig, ViTForImageClassification

__all__ = [
    "GPT2LMHeadModel",
    "Gpt2Config",
    "HfConfig",
    "LoadReport",
    "PretrainedModel",
    "from_pretrained",
    "read_config",
    "save_pretrained",
    "ResNetConfig",
    "ResNetForImageClassification",
    "ViTConfig",
    "ViTForImageClassification",
]
