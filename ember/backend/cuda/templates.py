"""CUDA C templates for the kernels that are not elementwise expressions or single-dim
reductions: ``arange``, Philox draws, arg-reductions, scans, sorting, gather/scatter,
row selection, ``argwhere`` and integer matmul.

Each function returns ``(name, source)`` for a kernel specialised by dtype (and
sometimes a flag); shapes and strides are parameters. Indexing kernels see their
operands as ``[outer, dim, inner]`` (``rows`` along ``dim`` of a contiguous
tensor), which every caller arranges first.
"""

from __future__ import annotations

from ember.backend import philox
from ember.backend.cuda.dtypes import SHORT, compute_type, dtype_of, load_code, storage_type, store_code
from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, CumulativeOp

_LOOP = (
    "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
    "i += (long long)gridDim.x * blockDim.x)"
)


def _f(bits: int) -> str:
    return f"__uint_as_float(0x{bits:08x}u)"


def _horner(x: str, coeffs: tuple[int, ...]) -> str:
    p = _f(coeffs[-1])
    for c in coeffs[-2::-1]:
        p = f"(({p}) * {x} + {_f(c)})"
    return p


def arange(dtype: DType) -> tuple[str, str]:
    name = f"arange_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    value = store_code(dtype, f"({t})(start + i * step)")
    return name, (
        f'extern "C" __global__ void {name}({s}* __restrict__ out, long long n, long long start, '
        f"long long step) {{\n  {_LOOP} out[i] = {value};\n}}\n"
    )


PHILOX = r"""
__device__ __forceinline__ void philox10(unsigned c[4], unsigned k0, unsigned k1) {
  for (int r = 0; r < 10; ++r) {
    unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0];
    unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c[2];
    unsigned n0 = (unsigned)(p1 >> 32) ^ c[1] ^ k0;
    unsigned n1 = (unsigned)p1;
    unsigned n2 = (unsigned)(p0 >> 32) ^ c[3] ^ k1;
    unsigned n3 = (unsigned)p0;
    c[0] = n0; c[1] = n1; c[2] = n2; c[3] = n3;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
}
"""


def _box_muller() -> str:
    log_poly = _horner("t", philox.LOG_COEFFS)
    sin_poly = _horner("z", philox.SIN_COEFFS)
    cos_poly = _horner("z", philox.COS_COEFFS)
    return f"""
__device__ __forceinline__ void box_muller(unsigned a, unsigned b, float* zc, float* zs) {{
  float u1 = (float)(((a >> 9) << 1) | 1u) * 5.9604644775390625e-08f;
  unsigned bits = __float_as_uint(u1);
  unsigned big = (bits & 0x7fffffu) > 0x{philox.SQRT2_BITS & 0x7FFFFF:x}u ? 1u : 0u;
  int e = (int)(bits >> 23) + (int)big - 127;
  unsigned m = ((bits & 0x7fffffu) | 0x3f800000u) - (big << 23);
  float t = __uint_as_float(m) - 1.0f;
  float p = {log_poly} * t;
  p = p + (float)e * {_f(philox.LN2)};
  float x = p * -2.0f;
  float y = __uint_as_float(0x{philox.RSQRT_MAGIC:x}u - (__float_as_uint(x) >> 1));
  float h = x * 0.5f;
  for (int j = 0; j < 3; ++j) {{ float q = h * y; q = q * y; q = 1.5f - q; y = y * q; }}
  float r = x * y;
  unsigned tt = b >> 8;
  unsigned quadrant = tt >> 22;
  unsigned rr = tt & 0x3fffffu;
  bool flip = rr > 0x200000u;
  if (flip) rr = 0x400000u - rr;
  float theta = (float)rr * {_f(philox.ANGLE_STEP)};
  float z = theta * theta;
  float s = {sin_poly} * theta;
  float c = {cos_poly};
  bool swap = flip != ((quadrant & 1u) != 0u);
  float cv = swap ? s : c, sv = swap ? c : s;
  if (quadrant - 1u < 2u) cv = -cv;
  if (quadrant >= 2u) sv = -sv;
  *zc = cv * r; *zs = sv * r;
}}
"""


def random(dtype: DType) -> tuple[str, str]:
    """Philox4x32-10 draws (see :mod:`ember.backend.philox`); ``kind`` 0 uniform, 1
    normal, 2 bernoulli; float64 takes two words per value."""
    name = f"philox_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    if dtype is DType.FLOAT64:
        body = """
  const unsigned long long ctr = counter + (unsigned long long)g;
  unsigned c[4] = {(unsigned)ctr, (unsigned)(ctr >> 32), 0u, 0u};
  philox10(c, k0, k1);
  double u[2];
  for (int j = 0; j < 2; ++j)
    u[j] = ((double)(c[2 * j] >> 5) * 67108864.0 + (double)(c[2 * j + 1] >> 6)) * 1.1102230246251565e-16;
  double v[2];
  if (kind == 0) {
    for (int j = 0; j < 2; ++j) { double w = u[j] * (p1 - p0) + p0; v[j] = p1 > p0 ? fmin(w, p2) : w; }
  } else if (kind == 1) {
    double r = sqrt(-2.0 * log1p(-u[0]));
    double angle = 6.283185307179586 * u[1];
    v[0] = r * cos(angle) * p1 + p0; v[1] = r * sin(angle) * p1 + p0;
  } else {
    for (int j = 0; j < 2; ++j) v[j] = u[j] < p0 ? 1.0 : 0.0;
  }
  for (int j = 0; j < 2; ++j) { long long i = g * 2 + j; if (i < n) out[i] = v[j]; }
"""
        per = 2
    else:
        store = (
            store_code(dtype, "(" + t + ")v[j]")
            if dtype_of(dtype).is_float
            else store_code(dtype, f"({t})v[j]" if dtype is DType.BOOL else f"({t})f2i64((double)v[j])")
        )
        body = f"""
  const unsigned long long ctr = counter + (unsigned long long)g;
  unsigned c[4] = {{(unsigned)ctr, (unsigned)(ctr >> 32), 0u, 0u}};
  philox10(c, k0, k1);
  const float f0 = (float)p0, f1 = (float)p1, f2 = (float)p2;
  float v[4];
  if (kind == 0) {{
    for (int j = 0; j < 4; ++j) {{ float u = (float)(c[j] >> 8) * 5.9604644775390625e-08f; v[j] = fminf(u * f1 + f0, f2); }}
  }} else if (kind == 1) {{
    box_muller(c[0], c[1], &v[0], &v[1]); box_muller(c[2], c[3], &v[2], &v[3]);
    for (int j = 0; j < 4; ++j) v[j] = v[j] * f1 + f0;
  }} else {{
    for (int j = 0; j < 4; ++j) {{ float u = (float)(c[j] >> 8) * 5.9604644775390625e-08f; v[j] = u < f0 ? 1.0f : 0.0f; }}
  }}
  for (int j = 0; j < 4; ++j) {{ long long i = g * 4 + j; if (i < n) out[i] = {store}; }}
"""
        per = 4
    head = PHILOX + ("" if dtype is DType.FLOAT64 else _box_muller())
    return name, head + (
        f'extern "C" __global__ void {name}({s}* __restrict__ out, long long n, unsigned long long counter, '
        f"unsigned k0, unsigned k1, int kind, double p0, double p1, double p2) {{\n"
        f"  const long long blocks = (n + {per - 1}) / {per};\n"
        f"  for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < blocks; "
        f"g += (long long)gridDim.x * blockDim.x) {{{body}  }}\n}}\n"
    )


def _better(op: ArgReduceOp, dtype: DType, x: str, best: str) -> str:
    """Whether ``x`` replaces ``best`` (the first extreme wins; NaN wins for floats)."""
    cmp = ">" if op == ArgReduceOp.ARGMAX else "<"
    if dtype.is_float:
        return f"({x} {cmp} {best} || ({x} != {x} && {best} == {best}))"
    return f"({x} {cmp} {best})"


def arg_reduce(op: ArgReduceOp, dtype: DType) -> tuple[str, str]:
    """argmax/argmin over ``[outer, dim, inner]`` (contiguous); one thread per output."""
    name = f"{op}_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    return (
        name,
        f"""
extern "C" __global__ void {name}(const {s}* __restrict__ x, long long* __restrict__ out, long long outer,
                                  long long len, long long inner) {{
  const long long n = outer * inner;
  {_LOOP} {{
    const long long o = i / inner, k = i % inner;
    const {s}* row = x + o * len * inner + k;
    {t} best = {load_code(dtype, "row[0]")};
    long long at = 0;
    for (long long j = 1; j < len; ++j) {{
      const {t} v = {load_code(dtype, "row[j * inner]")};
      if {_better(op, dtype, "v", "best")} {{ best = v; at = j; }}
    }}
    out[i] = at;
  }}
}}
""",
    )


def cumulative(op: CumulativeOp, dtype: DType) -> tuple[str, str]:
    """An inclusive scan over ``[outer, dim, inner]`` (contiguous), sequential per line,
    in the dtype (half floats in float32), as numpy's ``accumulate``."""
    name = f"{op}_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    fam_float = dtype.is_float
    if op == CumulativeOp.CUMSUM:
        comb = (
            "acc + v" if fam_float or dtype is DType.BOOL else f"({t})((unsigned long long)acc + (unsigned long long)v)"
        )
    elif op == CumulativeOp.CUMPROD:
        comb = (
            "acc * v" if fam_float or dtype is DType.BOOL else f"({t})((unsigned long long)acc * (unsigned long long)v)"
        )
    elif op == CumulativeOp.CUMMAX:
        comb = f"nan_max<{t}>(acc, v)" if fam_float else "(v > acc ? v : acc)"
    elif op == CumulativeOp.CUMMIN:
        comb = f"nan_min<{t}>(acc, v)" if fam_float else "(v < acc ? v : acc)"
    else:  # logaddexp, as numpy's
        comb = (
            f"(acc == v ? acc + {'0.6931471805599453' if t == 'double' else '0.6931472f'} : "
            f"nan_max<{t}>(acc, v) + {'log1p' if t == 'double' else 'log1pf'}("
            f"{'exp' if t == 'double' else 'expf'}(-fabs(acc - v))))"
        )
    acc_t = "long long" if dtype is DType.BOOL and op == CumulativeOp.CUMSUM else t
    return (
        name,
        f"""
extern "C" __global__ void {name}(const {s}* __restrict__ x, {s}* __restrict__ out, long long outer, long long len,
                                  long long inner) {{
  const long long n = outer * inner;
  {_LOOP} {{
    const long long o = i / inner, k = i % inner;
    const long long base = o * len * inner + k;
    {acc_t} acc = ({acc_t}){load_code(dtype, "x[base]")};
    out[base] = {store_code(dtype, "acc")};
    for (long long j = 1; j < len; ++j) {{
      const {acc_t} v = ({acc_t}){load_code(dtype, "x[base + j * inner]")};
      acc = {comb};
      out[base + j * inner] = {store_code(dtype, "acc")};
    }}
  }}
}}
""",
    )


def argsort(dtype: DType) -> tuple[str, str]:
    """Stable argsort of the last dim of ``[rows, len]`` (contiguous) by ranks: element
    ``j`` goes to the number of elements that sort before it (NaN is largest)."""
    name = f"argsort_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    less = "(a < b || (b != b && a == a))" if dtype.is_float else "(a < b)"
    return (
        name,
        f"""
__device__ __forceinline__ bool less_{SHORT[dtype]}({t} a, {t} b) {{ return {less}; }}
extern "C" __global__ void {name}(const {s}* __restrict__ x, long long* __restrict__ out, long long rows, long long len,
                                  int descending) {{
  const long long n = rows * len;
  {_LOOP} {{
    const long long r = i / len, j = i % len;
    const {s}* row = x + r * len;
    const {t} v = {load_code(dtype, "row[j]")};
    long long rank = 0;
    for (long long q = 0; q < len; ++q) {{
      const {t} w = {load_code(dtype, "row[q]")};
      const bool before = descending ? less_{SHORT[dtype]}(v, w) : less_{SHORT[dtype]}(w, v);
      const bool tie = !less_{SHORT[dtype]}(v, w) && !less_{SHORT[dtype]}(w, v);
      rank += (before || (tie && q < j)) ? 1 : 0;
    }}
    out[r * len + rank] = j;
  }}
}}
""",
    )


def gather(dtype: DType) -> tuple[str, str]:
    """``out[o, i, k] = x[o, idx[o, i, k], k]``: ``x`` is ``[outer, len, inner]`` with
    strides ``(xs0, xs1, xs2)``; ``idx`` and ``out`` are contiguous ``[outer, m, inner]``."""
    name = f"gather_{SHORT[dtype]}"
    s = storage_type(dtype)
    return (
        name,
        f"""
extern "C" __global__ void {name}(const {s}* __restrict__ x, const long long* __restrict__ idx, {s}* __restrict__ out,
                                  long long outer, long long m, long long inner, long long xs0, long long xs1,
                                  long long xs2, long long xoff) {{
  const long long n = outer * m * inner;
  {_LOOP} {{
    const long long k = i % inner, o = i / (m * inner);
    out[i] = x[xoff + o * xs0 + idx[i] * xs1 + k * xs2];
  }}
}}
""",
    )


_ATOMIC = {DType.FLOAT64: "double", DType.FLOAT32: "float", DType.INT32: "int", DType.INT64: "unsigned long long"}


def scatter_add(dtype: DType) -> tuple[str, str]:
    """``out[o, idx[o, i, k], k] += v[o, i, k]`` with atomics; ``out`` contiguous
    ``[outer, len, inner]``, ``idx``/``v`` contiguous ``[outer, m, inner]``. float32,
    float64, int32 and int64 (others are widened by the caller)."""
    name = f"scatter_add_{SHORT[dtype]}"
    s = storage_type(dtype)
    a = _ATOMIC[dtype]
    return (
        name,
        f"""
extern "C" __global__ void {name}({s}* __restrict__ out, const long long* __restrict__ idx,
                                  const {s}* __restrict__ v, long long outer, long long m, long long len,
                                  long long inner) {{
  const long long n = outer * m * inner;
  {_LOOP} {{
    const long long k = i % inner, o = i / (m * inner);
    atomicAdd(({a}*)(out + (o * len + idx[i]) * inner + k), ({a})v[i]);
  }}
}}
""",
    )


def select(dtype: DType) -> tuple[str, str]:
    """``out[o, i, k] = x[o, idx[i], k]`` for rank-1 ``idx``; ``x`` strided as in :func:`gather`."""
    name = f"select_{SHORT[dtype]}"
    s = storage_type(dtype)
    return (
        name,
        f"""
extern "C" __global__ void {name}(const {s}* __restrict__ x, const long long* __restrict__ idx, {s}* __restrict__ out,
                                  long long outer, long long m, long long inner, long long xs0, long long xs1,
                                  long long xs2, long long xoff) {{
  const long long n = outer * m * inner;
  {_LOOP} {{
    const long long k = i % inner, j = (i / inner) % m, o = i / (m * inner);
    out[i] = x[xoff + o * xs0 + idx[j] * xs1 + k * xs2];
  }}
}}
""",
    )


def select_add(dtype: DType) -> tuple[str, str]:
    """``out[o, idx[i], k] += v[o, i, k]`` with atomics (dtypes as :func:`scatter_add`)."""
    name = f"select_add_{SHORT[dtype]}"
    s = storage_type(dtype)
    a = _ATOMIC[dtype]
    return (
        name,
        f"""
extern "C" __global__ void {name}({s}* __restrict__ out, const long long* __restrict__ idx,
                                  const {s}* __restrict__ v, long long outer, long long m, long long len,
                                  long long inner) {{
  const long long n = outer * m * inner;
  {_LOOP} {{
    const long long k = i % inner, j = (i / inner) % m, o = i / (m * inner);
    atomicAdd(({a}*)(out + (o * len + idx[j]) * inner + k), ({a})v[i]);
  }}
}}
""",
    )


def argwhere(rank: int) -> tuple[str, str]:
    """The coordinates of true elements: ``pos`` holds each element's inclusive count of
    true elements (a cumsum of the mask), ``shape`` the dims of the contiguous mask."""
    name = f"argwhere_r{rank}"
    dims = ", ".join(f"long long d{j}" for j in range(rank))
    coords = "\n".join(f"      out[row * {rank} + {j}] = r % d{j}; r /= d{j};" for j in range(rank - 1, -1, -1))
    return (
        name,
        f"""
extern "C" __global__ void {name}(const unsigned char* __restrict__ mask, const long long* __restrict__ pos,
                                  long long* __restrict__ out, long long n{", " if rank else ""}{dims}) {{
  {_LOOP} {{
    if (mask[i]) {{
      const long long row = pos[i] - 1;
      long long r = i;
{coords}
    }}
  }}
}}
""",
    )


def matmul_int(dtype: DType) -> tuple[str, str]:
    """``c[b] = a[b] @ b[b]`` for integer and bool dtypes (cuBLAS has no integer GEMM
    for them), wrapping as numpy does; operands contiguous ``[batch, m, k]``/``[batch, k, n]``
    with batch strides (0 broadcasts)."""
    name = f"matmul_{SHORT[dtype]}"
    s, t = storage_type(dtype), compute_type(dtype)
    acc = "long long" if dtype is not DType.BOOL else "bool"
    step = (
        "acc = acc || (av && bv);"
        if dtype is DType.BOOL
        else "acc = (long long)((unsigned long long)acc + (unsigned long long)av * (unsigned long long)bv);"
    )
    return (
        name,
        f"""
extern "C" __global__ void {name}(const {s}* __restrict__ a, const {s}* __restrict__ b, {s}* __restrict__ c,
                                  long long batch, long long m, long long k, long long nn, long long sa, long long sb) {{
  const long long n = batch * m * nn;
  {_LOOP} {{
    const long long col = i % nn, row = (i / nn) % m, z = i / (m * nn);
    {acc} acc = 0;
    for (long long q = 0; q < k; ++q) {{
      const {acc} av = ({acc}){load_code(dtype, "a[z * sa + row * k + q]")};
      const {acc} bv = ({acc}){load_code(dtype, "b[z * sb + q * nn + col]")};
      {step}
    }}
    c[i] = {store_code(dtype, f"({t})acc")};
  }}
}}
""",
    )


__all__ = [
    "arange",
    "arg_reduce",
    "argsort",
    "argwhere",
    "cumulative",
    "gather",
    "matmul_int",
    "random",
    "scatter_add",
    "select",
    "select_add",
]
