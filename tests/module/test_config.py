"""Config: fields, validation, with_<field>, JSON save/load."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ember.errors import ConfigError
from ember.module import Config
from ember.nn import KaimingUniform, LinearConfig, XavierNormal


class BlockConfig(Config):
    d_model: int
    n_heads: int
    dropout: float = 0.1
    activation: str = "gelu"
    norm_first: bool = False
    sizes: tuple[int, ...] = (1, 2)
    inner: LinearConfig | None = None

    def validate(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads {self.n_heads}")


def test_required_positional_defaults_keyword():
    cfg = BlockConfig(64, 8)
    assert (cfg.d_model, cfg.n_heads, cfg.dropout) == (64, 8, 0.1)
    with pytest.raises(TypeError):
        BlockConfig(64, 8, 0.2)  # defaults are keyword-only
    assert BlockConfig(64, 8, dropout=0.2).dropout == 0.2


def test_with_field_returns_new_config():
    cfg = BlockConfig(64, 8)
    changed = cfg.with_dropout(0.3).with_norm_first(True)
    assert changed.dropout == 0.3 and changed.norm_first and cfg.dropout == 0.1
    with pytest.raises(AttributeError):
        cfg.with_nope(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dropout = 0.5


def test_validation_at_construction():
    with pytest.raises(ConfigError, match="divisible"):
        BlockConfig(64, 7)
    with pytest.raises(ConfigError, match="d_model must be int"):
        BlockConfig("64", 8)
    with pytest.raises(ConfigError, match="dropout must be float"):
        BlockConfig(64, 8, dropout="high")
    with pytest.raises(ConfigError, match="sizes"):
        BlockConfig(64, 8, sizes=(1, "x"))
    with pytest.raises(ConfigError, match="d_input and d_output must be > 0"):
        LinearConfig(0, 3)


def test_json_round_trip_with_nested_configs(tmp_path):
    cfg = BlockConfig(64, 8, sizes=(3, 4), inner=LinearConfig(3, 4, initializer=XavierNormal(gain=2.0)))
    path = tmp_path / "block.json"
    cfg.save(path)
    loaded = BlockConfig.load(path)
    assert loaded == cfg
    assert isinstance(loaded.inner.initializer, XavierNormal) and loaded.sizes == (3, 4)
    default = LinearConfig(2, 3)
    assert LinearConfig.from_json(default.to_json()).initializer == KaimingUniform(gain=1 / math.sqrt(3))


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        BlockConfig.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        BlockConfig.load(tmp_path / "bad.json")
    (tmp_path / "unknown.json").write_text('{"d_model": 4, "n_heads": 2, "color": "red"}')
    with pytest.raises(ConfigError, match="unknown fields"):
        BlockConfig.load(tmp_path / "unknown.json")
