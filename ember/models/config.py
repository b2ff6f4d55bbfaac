"""``HfConfig``: a model's configuration, read from and written to Hugging Face's
``config.json``.

Fields carry Hugging Face's names for the architecture (``n_embd`` for GPT-2,
``hidden_size`` for LLaMA), so that a reader of either file recognises them. The
file's other keys (token ids, generation defaults, tokenizer hints) are kept in
``extra`` and written back unchanged.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Any, ClassVar

from ember.errors import ConfigError
from ember.module import Config

if TYPE_CHECKING:
    from typing import Self

#: Keys ember writes itself, never kept in ``extra``.
_OWN_KEYS = ("model_type", "architectures", "dtype", "torch_dtype", "transformers_version")


class HfConfig(Config):
    """Base of the architectures' configs (see the module docstring)."""

    model_type: ClassVar[str] = ""
    extra: dict = {}

    @classmethod
    def from_hf(cls, data: dict[str, Any]) -> Self:
        """The config of a ``config.json`` mapping (unknown keys go to ``extra``)."""
        if not isinstance(data, dict):
            raise ConfigError(f"ember: {cls.__name__}.from_hf needs the config.json object, got {type(data).__name__}")
        if cls.model_type and data.get("model_type", cls.model_type) != cls.model_type:
            raise ConfigError(
                f"ember: {cls.__name__} reads model_type {cls.model_type!r}, the config.json says "
                f"{data.get('model_type')!r}"
            )
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values: dict[str, Any] = {}
        for name in names & set(data):
            value = data[name]
            hint = hints.get(name)
            if hint is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            values[name] = value
        extra = {k: v for k, v in data.items() if k not in names and k not in _OWN_KEYS}
        values.update(cls.adapt_hf(data))
        try:
            return cls(extra=extra, **values)
        except TypeError as error:
            raise ConfigError(f"ember: {cls.__name__}: cannot build from config.json: {error}") from None

    @classmethod
    def adapt_hf(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Fields computed from other keys of ``config.json`` (override: defaults that
        depend on other fields, renamed keys of older files)."""
        return {}

    def to_hf(self) -> dict[str, Any]:
        """The ``config.json`` mapping (without ``architectures`` and ``dtype``, which the
        saver adds)."""
        out = dict(self.extra)
        for field in dataclasses.fields(self):
            if field.name != "extra":
                value = getattr(self, field.name)
                out[field.name] = value.to_hf() if isinstance(value, HfConfig) else _plain(value)
        out["model_type"] = self.model_type
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
