"""The foreign-weights adapter: a module's WeightMap (renames, fused splits, layouts,
ignored keys) on load and, backwards, on export; load_safetensors beside load_pytorch."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.errors import RecordError
from ember.module import Module, Rename, Split, WeightMap, load_safetensors
from ember.module.foreign import export_arrays
from ember.module.safetensors_file import write_safetensors
from ember.nn import LayerNorm, LayerNormConfig, Linear, LinearConfig


class Attention(Module):
    query: Linear
    key: Linear
    value: Linear
    output: Linear


class Block(Module):
    ln: LayerNorm
    attn: Attention
    fc: Linear

    @classmethod
    def new(cls, d: int = 4) -> Block:
        device = Device.flex()

        def lin(a: int, b: int) -> Linear:
            return LinearConfig(a, b).init(device)

        return cls(
            ln=LayerNormConfig(d).init(device),
            attn=Attention(lin(d, d), lin(d, d), lin(d, d), lin(d, d)),
            fc=lin(d, 2 * d),
        )

    def weight_map(self) -> WeightMap:
        return WeightMap(
            renames=(Rename("attn.c_proj", "attn.output"), Rename("mlp.c_fc", "fc")),
            splits=(Split("attn.c_attn", ("attn.query", "attn.key", "attn.value"), axis=-1),),
            as_stored=(r"^(attn\.(query|key|value|output)|fc)\.weight$",),
            ignore=(r"\.masked_bias$",),
        )


def theirs(rng, d: int = 4) -> dict[str, np.ndarray]:
    """A checkpoint in GPT-2's Conv1D layout: fused [in, 3*out] attention, [in, out] weights."""

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "ln.weight": f(d),
        "ln.bias": f(d),
        "attn.c_attn.weight": f(d, 3 * d),
        "attn.c_attn.bias": f(3 * d),
        "attn.c_proj.weight": f(d, d),
        "attn.c_proj.bias": f(d),
        "attn.masked_bias": f(1),
        "mlp.c_fc.weight": f(d, 2 * d),
        "mlp.c_fc.bias": f(2 * d),
    }


def test_a_declared_map_loads_and_exports_the_same_checkpoint(tmp_path, rng):
    arrays = theirs(rng)
    write_safetensors(tmp_path / "w.safetensors", arrays, {"format": "pt"})
    model = load_safetensors(Block.new(), tmp_path / "w.safetensors")
    fused = arrays["attn.c_attn.weight"]
    np.testing.assert_array_equal(model.attn.query.weight.val().to_numpy(), fused[:, :4])  # no transpose: as stored
    np.testing.assert_array_equal(model.attn.value.bias.val().to_numpy(), arrays["attn.c_attn.bias"][8:])
    np.testing.assert_array_equal(model.ln.gamma.val().to_numpy(), arrays["ln.weight"])  # the layer's own names
    out = export_arrays(model)
    assert sorted(out) == sorted(k for k in arrays if k != "attn.masked_bias")
    for key, value in out.items():
        np.testing.assert_array_equal(value, arrays[key], err_msg=key)


def test_without_the_as_stored_declaration_a_square_weight_would_load_transposed(tmp_path, rng):
    class Plain(Block):
        def weight_map(self) -> WeightMap:
            return WeightMap(
                renames=(Rename("attn.c_proj", "attn.output"), Rename("mlp.c_fc", "fc")),
                splits=(Split("attn.c_attn", ("attn.query", "attn.key", "attn.value"), axis=-1),),
                ignore=(r"\.masked_bias$",),
            )

    arrays = theirs(rng)
    write_safetensors(tmp_path / "w.safetensors", arrays, {"format": "pt"})
    # fc is [4, 8] in the file and [4, 8] in the module: PyTorch's [out, in] assumed, so the
    # transposed [8, 4] does not fit, and the message names the cause.
    with pytest.raises(RecordError, match=r"'fc\.weight' has shape \[8, 4\].*Conv1D.*as_stored"):
        load_safetensors(Plain.new(), tmp_path / "w.safetensors")


def test_remap_skip_strict_and_adapt_none(tmp_path, rng):
    arrays = {f"net.{k}": v for k, v in theirs(rng).items()}
    write_safetensors(tmp_path / "w.safetensors", arrays, {"format": "pt"})
    (tmp_path / "model.safetensors").write_bytes((tmp_path / "w.safetensors").read_bytes())
    model = load_safetensors(Block.new(), tmp_path, remap=[(r"^net\.", "")])  # a directory works too
    assert model.fc.weight.lazy_shape() == [4, 8]
    with pytest.raises(RecordError, match=r"(?s)not in the file.*remap=\[\(r\"\^net\\\.\", ''\)\]"):
        load_safetensors(Block.new(), tmp_path / "w.safetensors")
    partial = load_safetensors(Block.new(), tmp_path / "w.safetensors", remap=[(r"^net\.ln\.", "ln.")], strict=False)
    np.testing.assert_array_equal(partial.ln.gamma.val().to_numpy(), arrays["net.ln.weight"])
    with pytest.raises(RecordError, match="adapt must be 'pytorch' or None"):
        load_safetensors(Block.new(), tmp_path / "w.safetensors", adapt="onnx")
    ours = export_arrays(model, adapt=None)
    write_safetensors(tmp_path / "ours.safetensors", ours, {})
    again = load_safetensors(Block.new(), tmp_path / "ours.safetensors", adapt=None)
    np.testing.assert_array_equal(again.attn.key.weight.val().to_numpy(), model.attn.key.weight.val().to_numpy())


def test_a_fused_tensor_of_the_wrong_size_is_named(tmp_path, rng):
    arrays = theirs(rng)
    arrays["attn.c_attn.bias"] = arrays["attn.c_attn.bias"][:10]
    write_safetensors(tmp_path / "w.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"attn\.c_attn\.bias.*3 parts"):
        load_safetensors(Block.new(), tmp_path / "w.safetensors")


def test_sharded_index_faults_are_named(tmp_path, rng):
    arrays = theirs(rng)
    write_safetensors(tmp_path / "a.safetensors", arrays, {"format": "pt"})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"ln.weight": "a.safetensors"}}')
    with pytest.raises(RecordError, match="does not match its shards"):
        load_safetensors(Block.new(), tmp_path)
    index.write_text('{"weight_map": {"ln.weight": "../a.safetensors"}}')
    with pytest.raises(RecordError, match="not a file name in its folder"):
        load_safetensors(Block.new(), tmp_path)
    index.write_text("[1]")
    with pytest.raises(RecordError, match="no weight_map"):
        load_safetensors(Block.new(), tmp_path)
