"""The kernel layer's iteration-space simplification (ember.backend.kernel.space), which
the LLVM loops and the CUDA C printer share: the simplified loops must visit, for
every access, the same element positions in the same order as the full space."""

from __future__ import annotations

import itertools

import numpy as np

from ember.backend.kernel.space import full_view, simplify
from ember.backend.kernel.views import View


def _positions(sizes, strides, offset):
    return [offset + sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, sizes))]


def _check(space, dim, views):
    geo = simplify(space, dim, views)
    for access, view in enumerate(views):
        full = full_view(view, space, dim)
        expected = _positions(space, full.strides, full.offset)
        assert _positions(geo.sizes, geo.strides[access], geo.offsets[access]) == expected
    if dim is not None:
        assert geo.red is not None and geo.sizes[geo.red] == space[dim]
    return geo


def test_dense_elementwise_is_one_flat_loop():
    space = (2, 3, 4)
    geo = _check(space, None, [View.contiguous(space), View.contiguous(space, offset=5)])
    assert geo.sizes == [24] and geo.red is None
    assert geo.mode(0) == "f" and geo.mode(1) == "f"


def test_transposed_and_broadcast_accesses_keep_their_dims():
    space = (3, 4)
    transposed = View.contiguous((4, 3)).permute((1, 0))
    row = View.contiguous((4,)).expand(space)
    scalar = View.contiguous(())
    geo = _check(space, None, [View.contiguous(space), transposed, row, scalar])
    assert geo.sizes == [3, 4]
    assert [geo.mode(a) for a in range(4)] == ["f", "g", "g", "z"]


def test_reduced_dim_stays_apart_and_size_one_dims_go():
    space = (2, 1, 5, 3, 4)
    out = View.contiguous((2, 1, 5, 1, 4))  # an epilogue's store over the reduced space
    geo = _check(space, 3, [View.contiguous(space), out])
    assert geo.sizes == [10, 3, 4] and geo.red == 1


def test_random_views_visit_the_same_positions(rng):
    for _ in range(50):
        rank = int(rng.integers(1, 5))
        space = tuple(int(n) for n in rng.integers(1, 4, size=rank))
        dim = None if rng.random() < 0.5 else int(rng.integers(0, rank))
        views = []
        for _ in range(3):
            base = View.contiguous(space)
            axes = tuple(int(a) for a in rng.permutation(rank))
            inverse = tuple(int(a) for a in np.argsort(axes))
            view = View.contiguous(tuple(space[a] for a in axes)).permute(inverse)
            views.append(view if rng.random() < 0.7 else base.flip((int(rng.integers(0, rank)),)))
        _check(space, dim, views)
