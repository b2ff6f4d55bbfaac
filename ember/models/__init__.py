"""``ember.models``: published architectures written with ``ember.nn``, loaded from and
saved to Hugging Face's checkpoint layout.

>>> from ember.models import from_pretrained      # doctest: +SKIP
>>> model = from_pretrained("checkpoints/gpt2")   # doctest: +SKIP
"""

from ember.models.bert import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel
from ember.models.config import HfConfig
from ember.models.generation import generate
from ember.models.gpt2 import Gpt2Config, GPT2LMHeadModel
from ember.models.hub import LoadReport, from_pretrained, read_config, save_pretrained
from ember.models.llama import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from ember.models.llama_config import LlamaConfig, MistralConfig, Qwen2Config
from ember.models.pretrained import PretrainedModel
from ember.models.resnet import ResNetConfig, ResNetForImageClassification
from ember.models.vit import ViTConfig, ViTForImageClassification

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertModel",
    "GPT2LMHeadModel",
    "Gpt2Config",
    "HfConfig",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LoadReport",
    "MistralConfig",
    "MistralForCausalLM",
    "PretrainedModel",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "from_pretrained",
    "generate",
    "read_config",
    "save_pretrained",
    "ResNetConfig",
    "ResNetForImageClassification",
    "ViTConfig",
    "ViTForImageClassification",
]
