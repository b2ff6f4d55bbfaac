"""Special functions numpy lacks, computed on numpy arrays."""

from __future__ import annotations

import math

import numpy as np

_ERF_EXACT = np.frompyfunc(math.erf, 1, 1)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, to float64 precision for float64 input.

    float64 goes through ``math.erf``; narrower floats use Abramowitz & Stegun 7.1.26
    (absolute error below 1.5e-7) with a Taylor series near zero for relative accuracy.
    """
    if x.dtype == np.float64:
        return _ERF_EXACT(x).astype(np.float64)
    xf = x.astype(np.float32)
    a = np.abs(xf)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    far = np.copysign(1.0 - poly * np.exp(-a * a), xf)
    x2 = xf * xf
    near = _TWO_OVER_SQRT_PI * xf * (1.0 + x2 * (-1.0 / 3 + x2 * (1.0 / 10 + x2 * (-1.0 / 42 + x2 / 216))))
    return np.where(a < 0.5, near, far).astype(x.dtype, copy=False)
