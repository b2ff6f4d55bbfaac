"""flex's Adam kernel (``Backend.adam_step_many``): numpy passes over flat arrays.

Small tensors are stepped together as one flat array. The results are views into
that array, so the next step finds its parameters and moments already flat: when
the arrays passed in are exactly the views a previous step returned, their base
is used as it is instead of concatenating them again.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ember.backend.flex.quiet import quietly

#: Elements per cache-sized block of the large-tensor path.
BLOCK = 32768


@quietly
def adam(p, g, m1, m2, vm_old, lr, beta_1, beta_2, epsilon, weight_decay, decoupled, amsgrad, time):
    """Adam on flat arrays: :func:`adam_block` on the whole arrays (its results
    allocated by numpy), or, for arrays longer than two blocks, on cache-sized blocks
    written into preallocated results (each block then stays in cache through all the
    operations instead of streaming the arrays from memory a dozen times)."""
    n, dtype = p.size, p.dtype
    l2 = weight_decay if weight_decay and not decoupled else 0.0
    scalars = (
        1.0 - beta_1,
        1.0 - beta_2,
        beta_1,
        beta_2,
        math.sqrt(1.0 - beta_2**time),
        epsilon,
        lr / (1.0 - beta_1**time),
        l2,
        1.0 - lr * weight_decay if weight_decay and decoupled else None,
    )
    if n <= 2 * BLOCK:
        return adam_block(p, g, m1, m2, vm_old, amsgrad, scalars)
    out, m, v = np.empty(n, dtype), np.empty(n, dtype), np.empty(n, dtype)
    v_max = np.empty(n, dtype) if amsgrad else None
    a, b = np.empty(BLOCK, dtype), np.empty(BLOCK, dtype)
    gd = np.empty(BLOCK, dtype) if l2 else None
    for start in range(0, n, BLOCK):
        s = slice(start, start + BLOCK)
        if n - start < BLOCK:  # the last, shorter block
            k = n - start
            a, b, gd = a[:k], b[:k], None if gd is None else gd[:k]
        adam_block(
            p[s],
            g[s],
            None if m1 is None else m1[s],
            None if m2 is None else m2[s],
            None if vm_old is None else vm_old[s],
            amsgrad,
            scalars,
            out[s],
            m[s],
            v[s],
            None if v_max is None else v_max[s],
            a,
            b,
            gd,
        )
    return out, m, v, v_max


def adam_block(p, g, m1, m2, vm_old, amsgrad, scalars, out=None, m=None, v=None, v_max=None, a=None, b=None, gd=None):
    """One Adam update, returning ``(param, m, v, v_max)``: the operations of the
    composite (``ember.backend.composites.optim.adam_step``), in its order, so both give the same
    bits. Results go into ``out, m, v, v_max`` and temporaries into ``a, b`` (and ``gd``
    with an L2 penalty) when given; numpy allocates them otherwise."""
    one_b1, one_b2, beta_1, beta_2, sqrt_c2, epsilon, step_size, l2, keep = scalars
    if l2:  # g + p * weight_decay
        gd = np.multiply(p, l2, gd)
        g = np.add(g, gd, gd)
    if m1 is None:
        m = np.multiply(g, one_b1, m)
        v = np.multiply(g, g, v)
        np.multiply(v, one_b2, v)
    else:
        m = np.multiply(m1, beta_1, m)
        a = np.multiply(g, one_b1, a)
        np.add(m, a, m)
        v = np.multiply(m2, beta_2, v)
        np.multiply(g, g, a)
        np.multiply(a, one_b2, a)
        np.add(v, a, v)
    source = v
    if amsgrad:
        if vm_old is None:
            if v_max is None:
                v_max = v.copy()
            else:
                np.copyto(v_max, v)
        else:
            v_max = np.maximum(vm_old, v, out=v_max)
        source = v_max
    a = np.sqrt(source, a)
    np.divide(a, sqrt_c2, a)
    np.add(a, epsilon, a)
    b = np.divide(m, a, b)
    np.multiply(b, step_size, b)
    if keep is not None:  # decoupled decay: p * (1 - lr * weight_decay)
        out = np.multiply(p, keep, out)
        np.subtract(out, b, out)
    else:
        out = np.subtract(p, b, out)
    return out, m, v, v_max


#: How many flat results (parameters, moments) are remembered for reuse: those of
#: the last two steps, so two optimizers stepping in turn (a GAN) both find theirs.
_REMEMBERED = 8


class FlexAdam:
    """``adam_step_many`` on numpy arrays, remembering the flat arrays it returned
    views of (a device cache: at most :data:`_REMEMBERED` of them, each at most
    ``2 * BLOCK`` elements)."""

    def __init__(self) -> None:
        self._views: dict[int, tuple[np.ndarray, ...]] = {}

    def step_many(
        self,
        params: list[np.ndarray],
        grads: list[np.ndarray],
        moments_1: list[np.ndarray] | None,
        moments_2: list[np.ndarray] | None,
        max_moments_2: list[np.ndarray] | None,
        *,
        lr: float,
        beta_1: float,
        beta_2: float,
        epsilon: float,
        weight_decay: float,
        decoupled: bool,
        amsgrad: bool,
        time: int,
    ) -> Any:
        dtype = params[0].dtype
        if dtype.itemsize < 4 or dtype.kind != "f":
            return NotImplemented  # half precision: the composite computes in float32
        for p in params:
            if p.dtype != dtype:
                return NotImplemented
        options = (lr, beta_1, beta_2, epsilon, weight_decay, decoupled, amsgrad, time)
        sizes = [p.size for p in params]
        total = sum(sizes)
        if len(params) > 1 and total > 2 * BLOCK:
            # Large tensors: concatenating would cost extra passes; step each one.
            outs, ms, vs = [], [], []
            vms: list[np.ndarray] | None = [] if amsgrad else None
            for i, p in enumerate(params):
                shape = p.shape
                out, m, v, v_max = adam(
                    p.reshape(-1),
                    grads[i].reshape(-1),
                    None if moments_1 is None else moments_1[i].reshape(-1),
                    None if moments_2 is None else moments_2[i].reshape(-1),
                    None if max_moments_2 is None else max_moments_2[i].reshape(-1),
                    *options,
                )
                outs.append(out.reshape(shape))
                ms.append(m.reshape(shape))
                vs.append(v.reshape(shape))
                if vms is not None:
                    vms.append(v_max.reshape(shape))
            return outs, ms, vs, vms
        if len(params) == 1:
            shape = params[0].shape

            def flat_one(arrays: list[np.ndarray] | None) -> np.ndarray | None:
                return None if arrays is None else arrays[0].reshape(-1)

            results = adam(
                flat_one(params),
                flat_one(grads),
                flat_one(moments_1),
                flat_one(moments_2),
                flat_one(max_moments_2),
                *options,
            )
            return tuple(None if x is None else [x.reshape(shape)] for x in results)
        # Small tensors: one update over all of them flat; the results are views into it.
        flat = self._flat
        results = adam(
            flat(params, total),
            np.concatenate(grads, axis=None),
            None if moments_1 is None else flat(moments_1, total),
            None if moments_2 is None else flat(moments_2, total),
            None if max_moments_2 is None else flat(max_moments_2, total),
            *options,
        )
        spans = []
        start = 0
        for p, size in zip(params, sizes):
            shape = p.shape
            spans.append((start, start + size, None if len(shape) == 1 else shape))  # 1-D: the slice is it
            start += size
        split = self._split
        return tuple(None if x is None else split(x, spans) for x in results)

    def _flat(self, arrays: list[np.ndarray], total: int) -> np.ndarray:
        """``arrays`` as one flat array: the array they are views of when they are
        the views :meth:`_split` made of it, in order (no copy), else their
        concatenation."""
        base = arrays[0].base
        if base is not None and base.size == total:
            views = self._views.get(id(base))
            if views is not None and len(views) == len(arrays) and all(map(operator.is_, views, arrays)):
                return base
        return np.concatenate(arrays, axis=None)

    def _split(self, flat: np.ndarray, spans: list[tuple[int, int, tuple[int, ...] | None]]) -> list[np.ndarray]:
        """Views of ``flat`` shaped like the parameters, remembered for :meth:`_flat`
        (the entry keeps ``flat`` alive, so its id is not reused while it is kept)."""
        views = tuple([flat[a:b] if shape is None else flat[a:b].reshape(shape) for a, b, shape in spans])
        remembered = self._views
        if len(remembered) >= _REMEMBERED:
            # Threads training on one device share this instance: another one may evict
            # the same entry, or change the dict, between these steps (no lock: a miss
            # in _flat only costs a concatenation, it checks the views by identity).
            try:  # noqa: SIM105 (contextlib.suppress costs a context manager per step)
                del remembered[next(iter(remembered))]
            except (KeyError, RuntimeError, StopIteration):
                pass
        remembered[id(flat)] = views
        return list(views)
