"""``normalize`` and the similarities and distances built on vector norms, as in
``torch.nn.functional``."""

from __future__ import annotations

from ember.errors import DTypeError
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
