"""The CUDA C helpers every generated kernel source starts with.

They give numpy's semantics where C's differ (Python-style integer and float
division, out-of-range float-to-int casts, shifts past the width, NaN-propagating
maximum/minimum) and convert half-precision bits with no CUDA header.
"""

#: float16 conversions through PTX ``cvt`` (device code only).
HALF_PTX = r"""
__device__ __forceinline__ float ld_f16(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short st_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
"""

#: Everything else: portable C++ given CUDA's bit-cast intrinsics (the host test of
#: these semantics compiles it with shims for them).
COMMON = r"""
#define EMBER_INF_F __int_as_float(0x7f800000)
#define EMBER_INF_D __longlong_as_double(0x7ff0000000000000ll)
typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ float ld_bf16(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short st_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float rn_f16(float f) { return ld_f16(st_f16(f)); }
__device__ __forceinline__ float rn_bf16(float f) { return ld_bf16(st_bf16(f)); }

/* float -> int as numpy on x86: NaN and out-of-range values give the lowest int. */
__device__ __forceinline__ long long f2i64(double x) {
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (long long)x : (long long)0x8000000000000000ull;
}
__device__ __forceinline__ int f2i32(double x) {
  return (x >= -2147483648.0 && x < 2147483648.0) ? (int)x : (int)0x80000000u;
}

/* numpy's float divmod: the remainder takes the divisor's sign, the quotient is floored. */
template <typename T> __device__ __forceinline__ T py_fmod(T x, T y) {
  T mod = fmod(x, y);
  if (y == (T)0) return mod;
  if (mod != (T)0) { if ((y < (T)0) != (mod < (T)0)) mod += y; }
  else mod = copysign((T)0, y);
  return mod;
}
template <typename T> __device__ __forceinline__ T py_floordiv(T x, T y) {
  if (y == (T)0) return x / y;
  T mod = fmod(x, y);
  T div = (x - mod) / y;
  if (mod != (T)0 && ((y < (T)0) != (mod < (T)0))) div -= (T)1;
  T fl;
  if (div != (T)0) { fl = floor(div); if (div - fl > (T)0.5) fl += (T)1; }
  else fl = copysign((T)0, x / y);
  return fl;
}
/* Python's integer floor division and remainder; numpy gives 0 for a zero divisor. */
template <typename T, typename U> __device__ __forceinline__ T py_idiv(T x, T y) {
  if (y == 0) return 0;
  if (y == (T)-1) return (T)((U)0 - (U)x);
  T q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) q -= 1;
  return q;
}
template <typename T> __device__ __forceinline__ T py_imod(T x, T y) {
  if (y == 0 || y == (T)-1) return 0;
  T r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
template <typename T> __device__ __forceinline__ T py_udiv(T x, T y) { return y == 0 ? (T)0 : (T)(x / y); }
template <typename T> __device__ __forceinline__ T py_umod(T x, T y) { return y == 0 ? (T)0 : (T)(x % y); }
/* Shifts: amounts outside [0, width) give 0 (or the sign, for a signed right shift). */
template <typename T, typename U> __device__ __forceinline__ T py_shl(T x, T y, int width) {
  return ((U)(long long)y < (U)width) ? (T)((U)x << (int)y) : (T)0;
}
template <typename T, typename U> __device__ __forceinline__ T py_shr(T x, T y, int width) {
  if ((U)(long long)y < (U)width) return (T)(x >> (int)y);
  return x < 0 ? (T)-1 : (T)0;
}
__device__ __forceinline__ unsigned char py_shl_u8(unsigned char x, unsigned char y) {
  return y < 8 ? (unsigned char)(x << y) : (unsigned char)0;
}
__device__ __forceinline__ unsigned char py_shr_u8(unsigned char x, unsigned char y) {
  return y < 8 ? (unsigned char)(x >> y) : (unsigned char)0;
}
/* NaN-propagating maximum and minimum (numpy's maximum/minimum). */
template <typename T> __device__ __forceinline__ T nan_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T nan_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T int_max(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T int_min(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T fsign(T x) {
  return x > (T)0 ? (T)1 : (x < (T)0 ? (T)-1 : (T)0);
}
/* The op table's kernel functions (ember.backend.kernel.op_table.KernelFn): exp with
   subnormal results flushed to 0, and the normal tail Q(z) of A&S 7.1.26 for z >= 0. */
__device__ __forceinline__ float ember_exp_flushedf(float x) {
  return x < -87.33654f ? 0.0f : (x > 88.72283f ? __int_as_float(0x7f800000) : expf(x));
}
__device__ __forceinline__ double ember_exp_flushed(double x) { return x < -708.3964185322641 ? 0.0 : exp(x); }
template <typename T, typename E> __device__ __forceinline__ T ember_normal_tail_t(T z, E e) {
  T t = (T)1 / (z * (T)0.23164188826636045 + (T)1);
  T poly = (((((T)0.5307027145 * t + (T)-0.7265760135) * t + (T)0.7107068705) * t + (T)-0.142248368) * t + (T)0.127414796) * t;
  return poly * e(z * z * (T)-0.5);
}
__device__ __forceinline__ float ember_normal_tailf(float z) { return ember_normal_tail_t(z, ember_exp_flushedf); }
__device__ __forceinline__ double ember_normal_tail(double z) { return ember_normal_tail_t(z, ember_exp_flushed); }
"""

PRELUDE = HALF_PTX + COMMON
