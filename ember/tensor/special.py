"""Special functions (``torch.special``'s names), written once over the tensor ops.

Each function is a composite of elementwise ops, so it runs on every device and
autodiff differentiates it (the derivative of an approximation accurate to float64
is accurate to about the same). Branches are computed on inputs clamped into each
branch's domain, so an unselected branch never produces an infinity whose zero
gradient would turn into NaN. The methods and their float64 accuracy:

* ``lgamma``: Stirling's series at ``x + 10`` (``x < 10``, less the log of the shift's
  product) or at ``x``; reflection for ``x < 0.5``. ``digamma``: the asymptotic series
  after shifting by 10; reflection ``psi(1 - x) - pi / tan(pi x)`` for ``x < 0.5``.
* ``zeta(x, q)`` (Hurwitz): Euler-Maclaurin with 10 terms and up to 12 Bernoulli
  corrections, stopped per element once they stop mattering (Cephes' scheme);
  ``polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x)``.
* ``i0``, ``i1`` (and the scaled ``i0e``, ``i1e``): the power series for ``|x| < 20``
  (all terms positive), the asymptotic expansion beyond.
* ``erfcx``, ``ndtr``, ``log_ndtr``: ``erfc`` as ``1 - erf`` below 2 and a 60-term
  continued fraction above (relative accuracy in the far tails).
* ``erfinv``, ``ndtri``: Winitzki's closed form, refined by Newton steps on ``erf``
  (``|y| < 0.5``) or on the normal tail; the last step is taken from a detached
  point, so the gradient is exactly ``1 / f'(x)``.
* ``bessel_j0``, ``bessel_j1``: power series for ``|x| < 12``, Hankel's asymptotic
  expansion beyond (absolute error below about 1e-11 near 12, far less elsewhere).

>>> from ember import Device, Tensor
>>> x = Tensor.from_floats([1.0, 2.0, 4.0], device=Device.flex()).cast("float64")
>>> [round(v, 12) for v in lgamma(x).tolist()]
[0.0, 0.0, 1.791759469228]
"""

from __future__ import annotations

import math
from fractions import Fraction

from ember.errors import DTypeError, ValueRangeError
from ember.tensor.activation import sigmoid
from ember.tensor.checks import FLOAT_NP
from ember.tensor.tensor import Tensor

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_SHIFT = 10
_SERIES_LIMIT = 20.0
_SERIES_TERMS = 60
_CF_TERMS = 60
_CF_FROM = 2.0


def _float(x: Tensor, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: special.{op}: expects a Tensor, got {type(x).__name__}")
    return x if x._primitive.dtype in FLOAT_NP else x.float()


def _where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``a`` where ``cond``, else ``b``."""
    return b.mask_where(cond, a)


def _bernoulli(count: int) -> list[Fraction]:
    """``B_2, B_4, ..., B_2count`` (Akiyama-Tanigawa)."""
    n = 2 * count
    a = [Fraction(0)] * (n + 1)
    out = []
    for m in range(n + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        if m >= 2 and m % 2 == 0:
            out.append(a[0])
    return out


_B = _bernoulli(12)
#: Cephes' zeta corrections: ``(2k)! / B_2k``.
_ZETA_A = [float(math.factorial(2 * k + 2) / b) for k, b in enumerate(_B)]
#: Stirling's series: ``B_2k / (2k (2k - 1))``.
_STIRLING = [float(b / ((2 * k + 2) * (2 * k + 1))) for k, b in enumerate(_B[:7])]
#: The digamma asymptotic series: ``B_2k / 2k``.
_DIGAMMA = [float(b / (2 * k + 2)) for k, b in enumerate(_B[:7])]


def _horner_inverse(z2: Tensor, coefficients: list[float]) -> Tensor:
    """``sum_k c_k / z2^(k+1)`` for ``z2`` (evaluated from the smallest term)."""
    w = z2.recip()
    acc = w.mul_scalar(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc.add_scalar(c).mul(w)
    return acc


def _stirling(z: Tensor) -> Tensor:
    """``lgamma(z)`` for ``z >= 10``."""
    series = _horner_inverse(z.square(), _STIRLING).mul(z)  # sum c_k / z^(2k+1)
    return z.sub_scalar(0.5).mul(z.log()).sub(z).add_scalar(_LOG_SQRT_2PI).add(series)


def _sin_pi(x: Tensor) -> Tensor:
    """``sin(pi x)`` with the argument reduced first (exact zeros at the integers)."""
    r = x.sub(x.round())
    parity = x.round().remainder_scalar(2).mul_scalar(-2).add_scalar(1)  # (-1)^round(x)
    return r.mul_scalar(math.pi).sin().mul(parity)


def _lgamma_positive(x: Tensor) -> Tensor:
    """``lgamma`` for ``x >= 0.5``."""
    small = x.lower_elem(_SHIFT)
    xs = x.clamp(0.5, _SHIFT)
    product = xs
    for k in range(1, _SHIFT):
        product = product.mul(xs.add_scalar(k))
    shifted = _stirling(xs.add_scalar(_SHIFT)).sub(product.log())
    return _where(small, shifted, _stirling(x.clamp_min(_SHIFT)))


def lgamma(input: Tensor) -> Tensor:
    """``log |Gamma(x)|``; ``+inf`` at the non-positive integers (``torch.special.gammaln``).

    >>> from ember import Device, Tensor
    >>> round(lgamma(Tensor.from_floats([0.5], device=Device.flex())).item(), 4)
    0.5724
    """
    x = _float(input, "lgamma")
    left = x.lower_elem(0.5)
    right = _lgamma_positive(x.clamp_min(0.5))
    xl = x.clamp_max(0.5)
    reflected = _lgamma_positive(xl.neg().add_scalar(1))
    reflected = _sin_pi(xl).abs().recip().mul_scalar(math.pi).log().sub(reflected)
    out = _where(left, reflected, right)
    pole = x.lower_equal_elem(0).bool_and(x.equal(x.round()))
    return out.mask_fill(pole, math.inf).mask_fill(x.is_inf(), math.inf)


gammaln = lgamma


def _digamma_positive(x: Tensor) -> Tensor:
    """``digamma`` for ``x >= 0.5`` (any ``x`` > 0 works)."""
    z = x.add_scalar(_SHIFT)
    out = z.log().sub(z.recip().mul_scalar(0.5)).sub(_horner_inverse(z.square(), _DIGAMMA))
    for k in range(_SHIFT):
        out = out.sub(x.add_scalar(k).recip())
    return out


def digamma(input: Tensor) -> Tensor:
    """``d/dx log Gamma(x)`` (``torch.special.psi``): ``-inf`` at ``+0``, NaN at the
    negative integers.

    >>> from ember import Device, Tensor
    >>> round(digamma(Tensor.from_floats([1.0], device=Device.flex())).item(), 5)
    -0.57722
    """
    x = _float(input, "digamma")
    left = x.lower_elem(0.5)
    right = _digamma_positive(x.clamp_min(0.5))
    xl = x.clamp_max(0.5)
    r = xl.sub(xl.round())  # tan(pi x) = tan(pi r)
    reflected = _digamma_positive(xl.neg().add_scalar(1)).sub(r.mul_scalar(math.pi).tan().recip().mul_scalar(math.pi))
    out = _where(left, reflected, right)
    integer = x.equal(x.round())
    out = out.mask_fill(x.lower_elem(0).bool_and(integer), math.nan)
    zero = x.equal_elem(0)
    out = out.mask_fill(zero, -math.inf).mask_fill(zero.bool_and(x.recip().lower_elem(0)), math.inf)  # -0: +inf
    out = out.mask_fill(x.equal_elem(math.inf), math.inf)
    return out.mask_fill(x.equal_elem(-math.inf), math.nan)


psi = digamma


def zeta(input: Tensor, other: Tensor | float) -> Tensor:
    """The Hurwitz zeta function ``sum_k (k + q)^-x`` of ``x = input`` and ``q = other``
    (``torch.special.zeta``): ``inf`` at ``x = 1``, NaN for ``x < 1``; ``q <= 0`` gives
    ``inf`` at the integers and NaN elsewhere unless ``x`` is an integer (Cephes). The
    smallest ``q`` is read to the host (one sync) to size the shift that negative ``q``
    needs; no gradient flows to ``q`` beyond the formula's (PyTorch has none).

    >>> from ember import Device, Tensor
    >>> round(zeta(Tensor.from_floats([2.0], device=Device.flex()), 1.0).item(), 6)
    1.644934
    """
    x = _float(input, "zeta")
    q = other if isinstance(other, Tensor) else x.full_like(float(other))
    q = _float(q, "zeta")
    shape = list(x.broadcast_to(_broadcast(x, q)).dims()) if x.dims() != q.dims() else list(x.dims())
    x, q = x.expand(shape), q.expand(shape)
    xs = x.clamp_min(1.0 + 1e-12)  # the series' domain; x <= 1 is filled in below
    # q < 0 (with an integer x, as polygamma's): zeta(x, q) = sum_{k < m} (q + k)^-x + zeta(x, q + m).
    head = None
    lowest = float(q.min().item()) if x.numel() else 0.0
    if lowest < 0 and math.isfinite(lowest):
        steps = q.neg().ceil().clamp_min(0.0)
        odd = xs.remainder_scalar(2).equal_elem(1)
        head = x.zeros_like()
        for k in range(math.ceil(-lowest)):
            base = q.add_scalar(k)
            term = base.abs().mask_fill(base.equal_elem(0), 1.0).pow(xs.neg())
            term = term.mask_where(odd.bool_and(base.lower_elem(0)), term.neg())
            head = head.add(term.mask_fill(steps.lower_equal_elem(k), 0.0))
        q_shift = q.add(steps)
    else:
        q_shift = q
    qs = q_shift.clamp_min(1e-300 if x._primitive.dtype.itemsize == 8 else 1e-30)
    s = qs.pow(xs.neg())
    a = qs
    b = s
    for _ in range(_SHIFT - 1):
        a = a.add_scalar(1)
        b = a.pow(xs.neg())
        s = s.add(b)
    a = a.add_scalar(1)
    b = a.pow(xs.neg())
    s = s.add(b)
    w = a
    s = s.add(b.mul(w).div(xs.sub_scalar(1))).sub(b.mul_scalar(0.5))
    factor = x.ones_like()
    done = s.equal_elem(math.inf)
    eps = 1.1e-16 if x._primitive.dtype.itemsize == 8 else 6e-8
    k = 0
    for coefficient in _ZETA_A:
        factor = factor.mul(xs.add_scalar(k))
        b = b.div(w)
        t = factor.mul(b).div_scalar(coefficient)
        s = s.add(t.mask_fill(done, 0.0))
        done = done.bool_or(t.div(s).abs().lower_elem(eps))
        k += 1
        factor = factor.mul(xs.add_scalar(k))
        b = b.div(w)
        k += 1
    if head is not None:
        s = s.add(head)
    out = s.mask_fill(x.equal_elem(1.0), math.inf).mask_fill(x.lower_elem(1.0), math.nan)
    q_integer = q.equal(q.floor())
    bad_q = q.lower_equal_elem(0.0)
    out = out.mask_fill(bad_q.bool_and(q_integer), math.inf)
    out = out.mask_fill(q.lower_elem(0.0).bool_and(x.equal(x.floor()).bool_not()), math.nan)
    return out.mask_fill(q.equal_elem(math.inf).bool_and(x.greater_elem(1.0)), 0.0)


def _broadcast(a: Tensor, b: Tensor) -> list[int]:
    from ember.tensor.shape import broadcast_shapes

    return list(broadcast_shapes("zeta", tuple(a.dims()), tuple(b.dims())))


def polygamma(n: int, input: Tensor) -> Tensor:
    """The ``n``-th derivative of ``digamma`` (``torch.special.polygamma``; ``n >= 0``).

    >>> from ember import Device, Tensor
    >>> round(polygamma(1, Tensor.from_floats([1.0], device=Device.flex())).item(), 6)
    1.644934
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueRangeError(f"ember: special.polygamma: n must be an int >= 0, got {n!r}")
    x = _float(input, "polygamma")
    if n == 0:
        return digamma(x)
    sign = -1.0 if n % 2 == 0 else 1.0
    return zeta(x.full_like(float(n + 1)), x).mul_scalar(sign * math.factorial(n))


def multigammaln(input: Tensor, p: int) -> Tensor:
    """The multivariate log-gamma of dimension ``p``."""
    x = _float(input, "multigammaln")
    out = x.zeros_like().add_scalar(p * (p - 1) / 4 * math.log(math.pi))
    for j in range(p):
        out = out.add(lgamma(x.sub_scalar(j / 2)))
    return out


# ---------------------------------------------------------------------- Bessel I
def _bessel_i_series(x: Tensor, order: int) -> Tensor:
    """``I_order(x)`` by its power series (``|x| <= 20``)."""
    q = x.square().mul_scalar(0.25)
    term = x.mul_scalar(0.5) if order else x.ones_like()
    total = term
    for k in range(1, _SERIES_TERMS):
        term = term.mul(q).div_scalar(k * (k + order))
        total = total.add(term)
    return total


def _bessel_i_scaled_asymptotic(ax: Tensor, order: int) -> Tensor:
    """``exp(-x) I_order(x)`` for ``x >= 20`` by the asymptotic expansion."""
    mu = 4.0 * order * order
    w = ax.recip().mul_scalar(0.125)
    term = ax.ones_like()
    total = term
    for k in range(1, 40):
        term = term.mul(w).mul_scalar(-(mu - (2 * k - 1) ** 2) / k)
        total = total.add(term)
    return total.mul(ax.mul_scalar(2 * math.pi).rsqrt())


def _bessel_i(input: Tensor, order: int, scaled: bool, op: str) -> Tensor:
    x = _float(input, op)
    ax = x.abs()
    near = ax.lower_elem(_SERIES_LIMIT)
    xs = x.clamp(-_SERIES_LIMIT, _SERIES_LIMIT)
    series = _bessel_i_series(xs, order)
    far_x = ax.clamp_min(_SERIES_LIMIT)
    far = _bessel_i_scaled_asymptotic(far_x, order)
    if scaled:
        series = series.mul(xs.abs().neg().exp())
    else:
        # exp(x) in two halves: I_0(700) is finite while exp(700)^2 would not be.
        half = far_x.mul_scalar(0.5).exp()
        far = far.mul(half).mul(half)
    if order:
        far = far.mul(x.sign())
    return _where(near, series, far).mask_where(x.is_nan(), x)


def i0(input: Tensor) -> Tensor:
    """The modified Bessel function of the first kind, order 0 (``torch.special.i0``)."""
    return _bessel_i(input, 0, False, "i0")


def i0e(input: Tensor) -> Tensor:
    """``exp(-|x|) i0(x)`` (``torch.special.i0e``)."""
    return _bessel_i(input, 0, True, "i0e")


def i1(input: Tensor) -> Tensor:
    """The modified Bessel function of the first kind, order 1 (``torch.special.i1``)."""
    return _bessel_i(input, 1, False, "i1")


def i1e(input: Tensor) -> Tensor:
    """``exp(-|x|) i1(x)`` (``torch.special.i1e``)."""
    return _bessel_i(input, 1, True, "i1e")


# ---------------------------------------------------------------------- Bessel J
_J_NEAR = 12.0


def _bessel_j_series(x: Tensor, order: int) -> Tensor:
    q = x.square().mul_scalar(-0.25)
    term = x.mul_scalar(0.5) if order else x.ones_like()
    total = term
    for k in range(1, 45):
        term = term.mul(q).div_scalar(k * (k + order))
        total = total.add(term)
    return total


def _bessel_j_hankel(ax: Tensor, order: int) -> Tensor:
    """Hankel's expansion ``sqrt(2 / (pi x)) (P cos chi - Q sin chi)`` for ``x >= 12``."""
    mu = 4.0 * order * order
    w = ax.recip().mul_scalar(0.125)
    p = ax.ones_like()
    q = w.mul_scalar(mu - 1)
    term = q
    for k in range(2, 25):  # the terms grow again beyond k = 2x
        term = term.mul(w).mul_scalar((mu - (2 * k - 1) ** 2) / k)
        if k % 2 == 0:
            p = p.add(term.mul_scalar(-1.0 if k % 4 == 2 else 1.0))
        else:
            q = q.add(term.mul_scalar(-1.0 if k % 4 == 3 else 1.0))
    chi = ax.sub_scalar((order / 2 + 0.25) * math.pi)
    return p.mul(chi.cos()).sub(q.mul(chi.sin())).mul(ax.recip().mul_scalar(2 / math.pi).sqrt())


def _bessel_j(input: Tensor, order: int, op: str) -> Tensor:
    x = _float(input, op)
    ax = x.abs()
    near = ax.lower_elem(_J_NEAR)
    series = _bessel_j_series(x.clamp(-_J_NEAR, _J_NEAR), order)
    far = _bessel_j_hankel(ax.clamp_min(_J_NEAR).mask_fill(ax.is_inf(), _J_NEAR), order)
    if order:
        far = far.mul(x.sign())
    return _where(near, series, far).mask_fill(ax.is_inf().bool_or(x.is_nan()), math.nan)  # PyTorch's NaN at +-inf


def bessel_j0(input: Tensor) -> Tensor:
    """The Bessel function of the first kind, order 0 (``torch.special.bessel_j0``)."""
    return _bessel_j(input, 0, "bessel_j0")


def bessel_j1(input: Tensor) -> Tensor:
    """The Bessel function of the first kind, order 1 (``torch.special.bessel_j1``)."""
    return _bessel_j(input, 1, "bessel_j1")


# ---------------------------------------------------------------------- error function family
def _erfcx_cf(x: Tensor) -> Tensor:
    """``exp(x^2) erfc(x)`` for ``x >= 2`` by the continued fraction."""
    f = x
    for k in range(_CF_TERMS, 0, -1):
        f = x.add(f.recip().mul_scalar(k / 2))
    return f.mul_scalar(_SQRT_PI).recip()


def erfc(input: Tensor) -> Tensor:
    """``1 - erf(x)``, accurate in the upper tail (``torch.special.erfc``)."""
    x = _float(input, "erfc")
    far = x.greater_equal_elem(_CF_FROM)
    xf = x.clamp_min(_CF_FROM)
    tail = _erfcx_cf(xf).mul(xf.square().neg().exp())
    return _where(far, tail, x.clamp_max(_CF_FROM).erf().neg().add_scalar(1))


def erfcx(input: Tensor) -> Tensor:
    """The scaled complementary error function ``exp(x^2) erfc(x)`` (``torch.special.erfcx``)."""
    x = _float(input, "erfcx")
    far = x.greater_equal_elem(_CF_FROM)
    xn = x.clamp_max(_CF_FROM)
    near = xn.erf().neg().add_scalar(1).mul(xn.square().exp())
    out = _where(far, _erfcx_cf(x.clamp_min(_CF_FROM).mask_fill(x.equal_elem(math.inf), _CF_FROM)), near)
    return out.mask_fill(x.equal_elem(math.inf), 0.0)


def ndtr(input: Tensor) -> Tensor:
    """The standard normal CDF ``P(N <= x)`` (``torch.special.ndtr``), accurate in both tails."""
    x = _float(input, "ndtr")
    return erfc(x.mul_scalar(-1 / _SQRT2)).mul_scalar(0.5)


def log_ndtr(input: Tensor) -> Tensor:
    """``log(ndtr(x))`` without underflow for very negative ``x`` (``torch.special.log_ndtr``)."""
    x = _float(input, "log_ndtr")
    z = x.mul_scalar(-1 / _SQRT2)
    far = z.greater_equal_elem(_CF_FROM)
    zf = z.clamp_min(_CF_FROM).mask_fill(z.equal_elem(math.inf), _CF_FROM)
    tail = _erfcx_cf(zf).mul_scalar(0.5).log().sub(zf.square())
    upper = erfc(z.clamp_max(_CF_FROM).neg()).mul_scalar(-0.5).log1p()  # log(1 - ndtr(-x)) near the top
    mid = erfc(z.clamp_max(_CF_FROM)).mul_scalar(0.5).log()
    out = _where(far, tail, _where(x.greater_elem(0), upper, mid))
    return out.mask_fill(x.equal_elem(-math.inf), -math.inf)


def _winitzki(log_1my2: Tensor) -> Tensor:
    """Winitzki's ``|erfinv(y)|`` from ``log(1 - y^2)`` (relative error about 2e-3)."""
    a = 0.147
    t = log_1my2.mul_scalar(0.5).add_scalar(2 / (math.pi * a))
    return t.square().sub(log_1my2.div_scalar(a)).sqrt().sub(t).clamp_min(0.0).sqrt()


def _newton(x: Tensor, target: Tensor, f, slope, steps: int) -> Tensor:
    """``steps`` Newton steps for ``f(x) = target``; the last from a detached point."""
    for _ in range(steps):
        x = x.sub(f(x).sub(target).div(slope(x)))
        x = x.mask_where(x.is_nan(), x.zeros_like())
    x = x.detach()
    return x.sub(f(x).sub(target).div(slope(x)))


def _phi(x: Tensor) -> Tensor:
    return x.square().mul_scalar(-0.5).exp().mul_scalar(1 / math.sqrt(2 * math.pi))


def _ndtri_lower(p: Tensor) -> Tensor:
    """``ndtri(p)`` for ``0 < p <= 0.5`` (``p`` the lower tail)."""
    log_1my2 = p.mul(p.neg().add_scalar(1)).mul_scalar(4).log()  # y = 1 - 2p
    guess = _winitzki(log_1my2).mul_scalar(-_SQRT2)
    # Newton on log ndtr(x) = log p: nearly linear in the far tail, where ndtr is exponential.
    return _newton(guess, p.log(), log_ndtr, lambda v: _log_phi(v).sub(log_ndtr(v)).exp(), 4)


def _log_phi(x: Tensor) -> Tensor:
    return x.square().mul_scalar(-0.5).sub_scalar(0.5 * math.log(2 * math.pi))


def ndtri(input: Tensor) -> Tensor:
    """The inverse of :func:`ndtr` (``torch.special.ndtri``): ``-inf`` at 0, ``inf`` at 1,
    NaN outside ``[0, 1]``."""
    p = _float(input, "ndtri")
    upper = p.greater_elem(0.5)
    lower_p = _where(upper, p.neg().add_scalar(1), p).clamp(1e-300 if p._primitive.dtype.itemsize == 8 else 1e-38, 0.5)
    x = _ndtri_lower(lower_p)
    out = _where(upper, x.neg(), x)
    out = out.mask_fill(p.equal_elem(0.0), -math.inf).mask_fill(p.equal_elem(1.0), math.inf)
    return out.mask_fill(p.lower_elem(0.0).bool_or(p.greater_elem(1.0)).bool_or(p.is_nan()), math.nan)


def erfinv(input: Tensor) -> Tensor:
    """The inverse error function (``torch.special.erfinv``): ``+-inf`` at ``+-1``, NaN
    outside ``[-1, 1]``."""
    y = _float(input, "erfinv")
    ay = y.abs()
    small = ay.lower_elem(0.5)
    ys = y.clamp(-0.5, 0.5)
    guess = _winitzki(ys.square().neg().log1p()).mul(ys.sign())
    near = _newton(guess, ys, lambda v: v.erf(), lambda v: v.square().neg().exp().mul_scalar(2 / _SQRT_PI), 3)
    # |y| >= 0.5: erfinv(|y|) = -ndtri((1 - |y|) / 2) / sqrt 2, (1 - |y|) exact there.
    tail_p = ay.neg().add_scalar(1).mul_scalar(0.5).clamp(1e-300 if y._primitive.dtype.itemsize == 8 else 1e-38, 0.25)
    far = _ndtri_lower(tail_p).mul_scalar(-1 / _SQRT2).mul(y.sign())
    out = _where(small, near, far)
    out = out.mask_fill(y.equal_elem(1.0), math.inf).mask_fill(y.equal_elem(-1.0), -math.inf)
    return out.mask_fill(ay.greater_elem(1.0).bool_or(y.is_nan()), math.nan)


# ---------------------------------------------------------------------- the small ones
def expit(input: Tensor) -> Tensor:
    """The logistic sigmoid (``torch.special.expit``)."""
    return sigmoid(_float(input, "expit"))


def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """``log(p / (1 - p))``, the input first clamped to ``[eps, 1 - eps]`` when given."""
    return _float(input, "logit").logit(eps)


def xlogy(input: Tensor, other: Tensor | float) -> Tensor:
    """``x * log(y)``, 0 where ``x`` is 0 (``torch.special.xlogy``)."""
    return _float(input, "xlogy").xlogy(other)


def xlog1py(input: Tensor, other: Tensor | float) -> Tensor:
    """``x * log1p(y)``, 0 where ``x`` is 0 unless ``y`` is NaN (``torch.special.xlog1py``)."""
    x = _float(input, "xlog1py")
    y = _float(other, "xlog1py") if isinstance(other, Tensor) else x.full_like(float(other))
    zero = x.equal_elem(0.0).bool_and(y.lower_equal_elem(-1.0).bool_or(y.equal_elem(math.inf)))
    return x.mul(y.mask_fill(zero, 0.0).log1p())


def entr(input: Tensor) -> Tensor:
    """``-x log x`` for ``x > 0``, 0 at 0, ``-inf`` below (``torch.special.entr``)."""
    x = _float(input, "entr")
    positive = x.greater_elem(0.0)
    safe = x.mask_fill(positive.bool_not(), 1.0)
    out = safe.mul(safe.log()).neg().mask_fill(positive.bool_not(), 0.0)
    return out.mask_fill(x.lower_elem(0.0), -math.inf).mask_where(x.is_nan(), x)


def sinc(input: Tensor) -> Tensor:
    """The normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (``torch.special.sinc``)."""
    return _float(input, "sinc").sinc()


def erf(input: Tensor) -> Tensor:
    """The error function (``torch.special.erf``)."""
    return _float(input, "erf").erf()


def expm1(input: Tensor) -> Tensor:
    return _float(input, "expm1").expm1()


def exp2(input: Tensor) -> Tensor:
    return _float(input, "exp2").exp2()


def log1p(input: Tensor) -> Tensor:
    return _float(input, "log1p").log1p()


def softmax(input: Tensor, dim: int) -> Tensor:
    return _float(input, "softmax").softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:
    return _float(input, "log_softmax").log_softmax(dim)


def logsumexp(input: Tensor, dim: int, keepdim: bool = False) -> Tensor:
    out = _float(input, "logsumexp").logsumexp(dim)
    return out if keepdim else out.squeeze_dim(dim)
