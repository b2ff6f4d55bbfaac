"""``normalize`` and the similarities and distances built on vector norms, as in
``torch.nn.functional`` (and ``torch.cdist``)."""

from __future__ import annotations

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.shape import broadcast_shapes
from ember.tensor.tensor import Tensor


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim`` (``torch.nn.functional.normalize``)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: normalize: the input must be a Tensor, got {type(x).__name__}")
    x = x.float()
    return x.div(x.norm(p, dim).clamp_min(eps))


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim`` (which is
    removed), each norm clamped to at least ``eps`` (``torch.nn.functional.cosine_similarity``)."""
    a, b = x1.float(), x2.float()
    shape = broadcast_shapes("cosine_similarity", tuple(a.dims()), tuple(b.dims()))  # both ways, as PyTorch
    a, b = a.expand(list(shape)), b.expand(list(shape))
    a = a.div(a.norm(2.0, dim).clamp_min(eps))
    b = b.div(b.norm(2.0, dim).clamp_min(eps))
    return a.mul(b).sum_dim(dim).squeeze_dim(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last dim (``torch.nn.functional.pairwise_distance``)."""
    diff = x1.float().sub(x2.float()).add_scalar(eps)
    out = diff.norm(p, -1)
    return out if keepdim else out.squeeze_dim(-1)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The ``p``-norm distance between each row of ``x1`` ``[..., P, M]`` and each row of
    ``x2`` ``[..., R, M]``: ``[..., P, R]`` (``torch.cdist``; ``p`` >= 0, ``inf`` allowed).
    For ``p = 2`` with more than 25 rows on a side (or ``compute_mode=
    "use_mm_for_euclid_dist"``) it uses ``|a|^2 + |b|^2 - 2 a.b`` (one matmul), as PyTorch.

    >>> from ember import Device, Tensor
    >>> a = Tensor.from_floats([[0.0, 0.0], [3.0, 4.0]], device=Device.flex())
    >>> cdist(a, a).tolist()
    [[0.0, 5.0], [5.0, 0.0]]
    """
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise DTypeError("ember: cdist: x1 and x2 must be Tensors")
    if x1.rank < 2 or x2.rank < 2 or x1.dims()[-1] != x2.dims()[-1]:
        raise ShapeError(f"ember: cdist: needs x1 [..., P, M] and x2 [..., R, M], got {x1.dims()} and {x2.dims()}")
    if p < 0:
        raise ValueRangeError(f"ember: cdist: p must be >= 0, got {p}")
    a, b = x1.float(), x2.float()
    rows_a, rows_b = a.dims()[-2], b.dims()[-2]
    mm = compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == "use_mm_for_euclid_dist_if_necessary" and (rows_a > 25 or rows_b > 25)
    )
    if p == 2.0 and mm:
        sq_a = a.square().sum_dim(-1)  # [..., P, 1]
        sq_b = b.square().sum_dim(-1).swap_dims(-1, -2)  # [..., 1, R]
        d2 = sq_a.add(sq_b).sub(a.matmul(b.swap_dims(-1, -2)).mul_scalar(2)).clamp_min(0.0)
        zero = d2.equal_elem(0.0)  # a zero distance has a zero gradient (PyTorch's), not sqrt's infinite slope
        return d2.mask_fill(zero, 1.0).sqrt().mask_fill(zero, 0.0)
    diff = a.unsqueeze_dim(-2).sub(b.unsqueeze_dim(-3))  # [..., P, R, M]
    return diff.norm(p, -1).squeeze_dim(-1)
