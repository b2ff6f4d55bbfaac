"""The architectures ``from_pretrained`` builds, by the name ``config.json`` gives them."""

from __future__ import annotations

from ember.models.bert import BertForMaskedLM, BertForSequenceClassification, BertModel
from ember.models.gpt2 import GPT2LMHeadModel
from ember.models.llama import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from ember.models.pretrained import PretrainedModel
from ember.models.resnet import ResNetForImageClassification
from ember.models.vit import ViTForImageClassification

ARCHITECTURES: dict[str, type[PretrainedModel]] = {
    cls.hf_architecture: cls
    for cls in (
        GPT2LMHeadModel,
        BertForMaskedLM,
        BertForSequenceClassification,
        BertModel,
        LlamaForCausalLM,
        MistralForCausalLM,
        Qwen2ForCausalLM,
        ViTForImageClassification,
        ResNetForImageClassification,
    )
}
