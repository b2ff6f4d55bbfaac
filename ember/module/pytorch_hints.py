"""ember's spelling of the PyTorch ``nn.Module`` methods a PyTorch user reaches for."""

from __future__ import annotations

from ember.errors import UsageAttributeError

MODULE_HINTS = {
    "eval": "model = model.valid() (the module on the inner device: Dropout off, BatchNorm's running "
    "statistics), and pass inputs on device.inner()",
    "train": "train on an autodiff device: model = model.to_device(device.autodiff()) (Dropout and "
    "BatchNorm act where gradients are tracked)",
    "parameters": "model.params() (every Param) or model.named_params() ((path, Param) pairs)",
    "named_parameters": "model.named_params()",
    "state_dict": "model.to_record() ({path: tensor}) or model.save_file(path)",
    "load_state_dict": "model = model.load_file(path) (ember records), model.load_pytorch(path) or "
    "ember.module.load_safetensors(model, path)",
    "zero_grad": "nothing: gradients are values returned by loss.backward(), never stored in the model",
    "cuda": "model = model.to_device(Device.cuda()) (or Device.wgpu())",
    "cpu": "model = model.to_device(Device.flex())",
    "to": "model = model.to_device(device)",
    "requires_grad_": "model = model.freeze() / model.unfreeze() (they return a new module)",
    "children": "model.modules() ((path, module) pairs)",
    "apply": "model.map(mapper) or model.map_params(fn) (they return a new module)",
    "half": "a module of float16 parameters: model.map_params(lambda p, path: Param(p.id, p.val().half(), "
    "p.require_grad))",
}


def module_attribute_error(owner: str, name: str) -> AttributeError:
    """The error of a missing attribute of a module: ember's way for PyTorch's names."""
    hint = MODULE_HINTS.get(name)
    if hint is None:
        return AttributeError(f"'{owner}' object has no attribute {name!r}")
    return UsageAttributeError(f"ember: {owner} has no {name}() (a PyTorch nn.Module method); use {hint}")
