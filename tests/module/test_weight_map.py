"""``WeightMap``: the declared differences from a foreign checkpoint, both ways."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Module, Tensor
from ember.errors import RecordError
from ember.module import Param, Rename, RunningState, WeightMap
from ember.module.foreign import export_arrays, load_foreign
from ember.nn import Linear


class Rotated(Module):
    """A projection and a table the module computes (as a rotary encoding's)."""

    proj: Linear
    table: RunningState

    def weight_map(self) -> WeightMap:
        return WeightMap(renames=(Rename("q_proj", "proj"),), ignore=(r"\.inv_freq$",), computed=(r"^table$",))


def rotated() -> Rotated:
    return Rotated(
        proj=Linear(weight=Param.from_tensor(Tensor.zeros([2, 3]))),
        table=RunningState(Tensor.from_data(np.arange(4, dtype=np.float32))),
    )


def test_computed_states_are_neither_expected_nor_written():
    weight = np.arange(6, dtype=np.float32).reshape(3, 2)  # PyTorch's [out, in]
    theirs = {"q_proj.weight": weight, "rotary_emb.inv_freq": np.ones(2, np.float32)}
    loaded, missing, unexpected = load_foreign(rotated(), theirs, source="test", op="test")
    assert missing == [] and unexpected == []
    np.testing.assert_array_equal(loaded.proj.weight.val().to_numpy(), weight.T)
    np.testing.assert_array_equal(loaded.table.value().to_numpy(), np.arange(4))  # kept as computed
    out = export_arrays(loaded)
    assert sorted(out) == ["q_proj.weight"]
    np.testing.assert_array_equal(out["q_proj.weight"], weight)
    assert sorted(export_arrays(loaded, adapt=None)) == ["proj.weight", "table"]  # ember's own layout keeps it


def test_a_missing_parameter_is_still_named():
    with pytest.raises(RecordError, match=r"proj\.weight"):
        load_foreign(rotated(), {}, source="test", op="test")
