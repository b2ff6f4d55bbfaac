"""``PretrainedModel``: the base of every head ``ember.models`` builds from a
Hugging Face checkpoint (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from ember.device import Device
from ember.models.config import HfConfig
from ember.module import Module

if TYPE_CHECKING:
    from typing import Self


class PretrainedModel(Module):
    """A model with a Hugging Face architecture name and config. Subclasses set
    ``hf_architecture`` (the name in ``config.json``'s ``architectures``) and
    ``config_class``, and build themselves in :meth:`from_config`."""

    hf_architecture: ClassVar[str] = ""
    #: The field holding the bare model in a head (``"bert"``), as transformers'
    #: ``base_model_prefix``: a head loads over a bare checkpoint and back.
    base_model_prefix: ClassVar[str] = ""
    config_class: ClassVar[type[HfConfig]] = HfConfig
    config: HfConfig

    @classmethod
    def from_config(cls, config: Any, device: Device | None = None) -> Self:
        """The model with freshly initialised (lazy) parameters."""
        raise NotImplementedError(f"ember: {cls.__name__} does not define from_config")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> Self:
        """``ember.models.from_pretrained`` that checks the checkpoint is this architecture."""
        from ember.models.hub import from_pretrained

        return from_pretrained(path, architecture=cls, **kwargs)  # type: ignore[return-value]

    def save_pretrained(self, path: str | os.PathLike, **kwargs: Any) -> None:
        """Write ``config.json`` and ``model.safetensors`` (Hugging Face's layout, names and
        weight layouts), so that ``transformers`` loads the model; see
        :func:`ember.models.save_pretrained`."""
        from ember.models.hub import save_pretrained

        save_pretrained(self, path, **kwargs)
