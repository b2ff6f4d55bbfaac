"""``ember.nn.lora``: low-rank adapters (LoRA, Hu et al. 2021) on ``Linear`` layers, as
Hugging Face PEFT users know them.

>>> from ember import Device, Module
>>> from ember.nn import Linear, LinearConfig
>>> from ember.nn import lora
>>> class Block(Module):
...     q_proj: Linear
...     v_proj: Linear
>>> device = Device.flex().autodiff()
>>> model = Block(LinearConfig(8, 8).init(device), LinearConfig(8, 8).init(device))
>>> model = lora.LoraConfig(r=2, alpha=4.0, targets=["q_proj"]).init(model)
>>> [path for path, p in model.named_params() if p.require_grad]  # only the adapters train
['q_proj.lora_a', 'q_proj.lora_b']
>>> type(lora.merge(model).q_proj).__name__  # folded back: the original structure
'Linear'
"""

from ember.nn.lora.adapters import adapter_group, adapter_params, lora_layers, merge
from ember.nn.lora.config import LoraConfig
from ember.nn.lora.linear import LoraLinear
from ember.nn.lora.peft import load_peft, save_peft
from ember.nn.lora.saving import load_adapters, save_adapters

__all__ = [
    "LoraConfig",
    "LoraLinear",
    "adapter_group",
    "adapter_params",
    "load_adapters",
    "load_peft",
    "lora_layers",
    "merge",
    "save_adapters",
    "save_peft",
]
