"""Import of PyTorch ``state_dict`` files (``.pt``/``.pth``) without PyTorch.

The file is read by :mod:`ember.module.torch_pickle`, which executes nothing from it,
and goes through the same adapter as safetensors checkpoints
(:mod:`ember.module.foreign`): the user's regex remap rules, then the module's weight
map, its layers' PyTorch names (``Module.pytorch_names``: the norm layers' ``weight``/
``bias`` are ember's ``gamma``/``beta``) and layouts (``Module.adapt_pytorch``:
``Linear`` transposes its ``[out, in]`` weight).

>>> model = Mlp.new(device).load_pytorch("mlp.pt", key_remap=[(r"^net\\.", "")])  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ember.module.foreign import DEFAULT_SKIP, adapt_arrays, load_foreign, remap_keys, suggest_remap
from ember.module.module import Module
from ember.module.torch_pickle import read_pytorch

__all__ = ["DEFAULT_SKIP", "adapt_arrays", "load_pytorch", "read_pytorch", "remap_keys", "suggest_remap"]


def load_pytorch(
    module: Module,
    path: str | os.PathLike,
    *,
    key_remap: Sequence[tuple[str, str]] = (),
    top_level_key: str | None = None,
    strict: bool = True,
    transpose_linear: bool = True,
    skip: Sequence[str] = (),
    adapt_names: bool = True,
) -> Module:
    """A copy of ``module`` with the weights of a PyTorch state dict file.

    ``key_remap`` renames keys (regex rules, applied in order); keys matching a
    ``skip`` pattern (after remapping) are dropped, in addition to
    :data:`DEFAULT_SKIP` (BatchNorm's counter) and the module's ``weight_map().ignore``.
    Then the module's weight map and each layer adapt the entries: PyTorch's names for
    its fields (``adapt_names``: the norm layers' ``weight``/``bias`` become
    ``gamma``/``beta``) and its layout (``transpose_linear``: ``Linear`` weights are
    transposed from PyTorch's ``[out, in]``, except those the weight map declares
    ``as_stored``). ``strict=True`` requires the file and the module to have the same
    keys; ``strict=False`` loads the keys both have.
    """
    return load_foreign(
        module,
        read_pytorch(path, top_level_key),
        source=str(path),
        op="load_pytorch",
        remap=key_remap,
        skip=skip,
        names=adapt_names,
        layouts=transpose_linear,
        strict=strict,
    )[0]
