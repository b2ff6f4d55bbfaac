"""``ember.special``: special functions with ``torch.special``'s names.

Each is written once over the tensor ops (``ember/tensor/special.py``: the methods
and their accuracy), so it runs on every device and has gradients under autodiff.

>>> import ember.special as S
>>> from ember import Device, Tensor
>>> round(S.digamma(Tensor.from_floats([1.0], device=Device.flex())).item(), 4)
-0.5772
"""

from ember.tensor.special import (
    bessel_j0,
    bessel_j1,
    digamma,
    entr,
    erf,
    erfc,
    erfcx,
    erfinv,
    exp2,
    expit,
    expm1,
    gammaln,
    i0,
    i0e,
    i1,
    i1e,
    lgamma,
    log1p,
    log_ndtr,
    log_softmax,
    logit,
    logsumexp,
    multigammaln,
    ndtr,
    ndtri,
    polygamma,
    psi,
    sinc,
    softmax,
    xlog1py,
    xlogy,
    zeta,
)

__all__ = [
    "bessel_j0",
    "bessel_j1",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammaln",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "lgamma",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "sinc",
    "softmax",
    "xlog1py",
    "xlogy",
    "zeta",
]
