"""C expressions for the elementwise op table, shared by the C-family renderers
(OpenCL C in ``devices/opencl``, CUDA C in ``devices/cuda``).

``neetorch.ops.elementwise`` defines every elementwise op once (dtype rule, numpy
reference, the CPU renderer's ``expr["py"]``).  This module is the C renderers'
counterpart of ``expr["py"]``: ``EXPR[name](dt, T, S)`` returns a C template for the
op computed in dtype ``dt`` (a :class:`DType`; ``T`` is its C type, ``S`` ``"32"`` /
``"64"`` for float helpers), with ``{0}``, ``{1}``… standing for the inputs already
cast to their compute dtypes — or ``None`` when the op is not claimed for that dtype
(the dispatcher then falls back to the CPU, visibly).  Ops missing from the table are
not claimed at all.

The templates are written in the common subset of OpenCL C and CUDA C; a
:class:`Dialect` supplies the few differences: type names (``long`` is 64-bit in
OpenCL, ``long long`` in CUDA; ``char``'s sign is the host's in CUDA), the helper
qualifier (``inline`` / ``__device__``), float32 math names (OpenCL's built-ins are
overloaded, CUDA C uses ``expf``…), float16 storage (OpenCL ``half`` under ``cl_khr_fp16``,
converted by casts; CUDA a 16-bit integer converted with ``cvt`` so that no header is needed),
and per-op overrides.  float16 is storage only in both: every load converts to float, every op
computes in float32 (:func:`kdt`), every store rounds once (round to nearest even).

Semantics follow the CPU backend (``devices/cpu/scalar.py``) exactly: NaN-propagating
``maximum``/``minimum``/``clamp``, Python/torch signs for integer ``floor_divide``
and ``remainder``, C-truncated ``fmod``, wrap-around integer ``pow``, shifts by an
out-of-range amount giving 0 / -1, integer division by ``-1`` without the x86 trap.
"""
from __future__ import annotations

import re

from ..tensor import dtypes as _dt

__all__ = [
    "CUDA",
    "EXPR",
    "OPENCL",
    "UNARY_FLOAT",
    "Dialect",
    "c_expr",
    "cast",
    "group_body",
    "kdt",
    "op_result",
]

_FLOAT_HELPERS = r"""
inline T f_sigmoid$S(T x) { return (T)1 / ((T)1 + exp(-x)); }
inline T f_softplus$S(T x) { return (x > (T)0 ? x : (T)0) + log1p(exp(-fabs(x))); }
inline T f_softplus_bt$S(T x, T beta, T th) { T bx = x * beta; return bx > th ? x : f_softplus$S(bx) / beta; }
inline T f_gelu$S(T x) { return (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440)); }  /* as f_gelu32/64 */
inline T f_gelu_tanh$S(T x) { return (T)0.5 * x * ((T)1 + tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x))); }
inline T f_selu$S(T x) { return (T)1.0507009873554804934193349852946 * (x > (T)0 ? x : (T)1.6732632423543772848170429916717 * expm1(x)); }
inline T f_elu$S(T x, T a, T s, T is) { return x > (T)0 ? s * x : s * a * expm1(x * is); }
inline T f_maximum$S(T a, T b) { return (isnan(a) || b <= a) ? a : b; }   /* NaN from either; a when equal */
inline T f_minimum$S(T a, T b) { return (isnan(a) || b >= a) ? a : b; }
inline T f_fmax$S(T a, T b) { return isnan(a) ? b : ((isnan(b) || a >= b) ? a : b); }
inline T f_fmin$S(T a, T b) { return isnan(a) ? b : ((isnan(b) || a <= b) ? a : b); }
inline T f_clamp$S(T x, T lo, T hi) { return f_minimum$S(f_maximum$S(x, lo), hi); }
inline T f_hardsigmoid$S(T x) { return f_minimum$S(f_maximum$S(x + (T)3, (T)0), (T)6) / (T)6; }
inline T f_relu$S(T x) { return x < (T)0 ? (T)0 : x; }   /* NaN propagates, relu(-inf) = 0 */
inline T f_sign$S(T x) { return (T)((x > (T)0) - (x < (T)0)); }
inline T f_logsigmoid$S(T x) { return (x < (T)0 ? x : (T)0) - log1p(exp(-fabs(x))); }
inline T f_floordiv$S(T a, T b) {
  if (b == (T)0) return a / b;
  T m = fmod(a, b); T d = (a - m) / b;
  if (m != (T)0 && ((b < (T)0) != (m < (T)0))) d -= (T)1;
  if (d != (T)0) { T fd = floor(d); if (d - fd > (T)0.5) fd += (T)1; return fd; }
  return copysign(d * (T)0, a / b);
}
inline T f_remainder$S(T a, T b) { T m = fmod(a, b); if (m != (T)0 && ((b < (T)0) != (m < (T)0))) m += b; return m; }
inline T f_xlogy$S(T x, T y) { if (isnan(y)) return y; return x == (T)0 ? x - x : x * log(y); }
"""

# float16 ops torch's CPU kernels compute in float16 arithmetic (each step rounded to float16, not float32
# "opmath"): floor_divide (c10::div_floor_floating on Half values) and xlogy (x * log(y), the log rounded); the
# CPU backend's f_floordiv_f16 / f_xlogy_f16 (devices/cpu/scalar.py), used when every operand is stored as
# float16 or an integer (op_result).  nee_rh: float -> nearest float16, as float (the dialect's conversions).
_HALF_HELPERS = r"""
inline float nee_rh(float x) { return $RH; }
inline float f_floordiv_h(float a, float b) {
  if (b == 0.0f) return a / b;
  const float m = fmod(a, b); float d = nee_rh(nee_rh(a - m) / b);
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d = nee_rh(d - 1.0f);
  if (d != 0.0f) { float fd = floor(d); if (nee_rh(d - fd) > 0.5f) fd = nee_rh(fd + 1.0f); return fd; }
  return copysign(d * 0.0f, a / b);
}
inline float f_xlogy_h(float x, float y) { if (isnan(y)) return y; return x == 0.0f ? x - x : x * nee_rh(log(y)); }
"""
_HALF_STEPS = (("f_floordiv32(", "f_floordiv_h("), ("f_xlogy32(", "f_xlogy_h("))

_INT_HELPERS = r"""
inline T f_ifloordiv_$N(T a, T b) {
  if (b == 0) return 0; if (($L)b == -1) return (T)(-(UT)a);
  T q = a / b; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) q -= 1; return q; }
inline T f_itruncdiv_$N(T a, T b) { if (b == 0) return 0; if (($L)b == -1) return (T)(-(UT)a); return a / b; }
inline T f_iremainder_$N(T a, T b) {
  if (b == 0 || ($L)b == -1) return 0; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
inline T f_ifmod_$N(T a, T b) { if (b == 0 || ($L)b == -1) return 0; return a % b; }
inline T f_ipow_$N(T a, T b) {
  if (b < 0) return (T)(a == 1 ? 1 : (a == (T)-1 ? ((b & 1) ? -1 : 1) : 0));
  UT r = 1, base = (UT)a; T e = b;
  while (e) { if (e & 1) r = (UT)(r * base); base = (UT)(base * base); e >>= 1; }
  return (T)r; }
inline T f_shl_$N(T a, T b) { return (b < 0 || ($L)b >= $B) ? (T)0 : (T)((UT)a << b); }
inline T f_shr_$N(T a, T b) { return (b < 0 || ($L)b >= $B) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b); }
inline T f_iabs_$N(T a) { return a < 0 ? (T)((UT)0 - (UT)a) : a; }
inline T f_iclamp_$N(T x, T lo, T hi) { T m = x < lo ? lo : x; return m > hi ? hi : m; }   /* lo > hi: hi */
"""

# float32 math functions whose CUDA C names take an ``f`` suffix (OpenCL C overloads them)
_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "fabs", "floor",
         "ceil", "trunc", "rint", "fmod", "pow", "atan2", "hypot", "copysign")
_MATH_RE = re.compile(r"\b(" + "|".join(sorted(_MATH, key=len, reverse=True)) + r")\(")

_CUDA_HEAD = r"""
typedef unsigned char uchar;
typedef signed char schar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef long long llong;
typedef unsigned long long ullong;
typedef unsigned short nhalf;   /* float16 storage: bits, converted with cvt (no cuda_fp16.h needed) */
#undef INFINITY   /* the same definition under NVRTC (no math.h) and nvcc */
#define INFINITY __int_as_float(0x7f800000)
static __device__ __forceinline__ float nee_h2f(nhalf h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
static __device__ __forceinline__ nhalf nee_f2h(float f) { nhalf h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
"""


_OPENCL_HEAD = r"""
/* No contraction of a*b+c into fma: every work-item computes its expression as written, so a result does not
   depend on whether the compiler put the work-item in a SIMD lane or in its scalar tail (Intel's CPU runtime
   contracts in one and not the other: a Gemm with equal columns gave unequal sums, and the softmax after it
   of ONNX's light_zfnet512 / light_inception_v1 went far from uniform). */
#pragma OPENCL FP_CONTRACT OFF
/* exp for float32 (PoCL's exp does not vectorize: 8 ms per 1M elements vs 0.5 with this), the method of
   devices/cpu/fastmath.py exp_f32: k = rint(x/ln2) by the 1.5*2^23 trick, a two-constant Cody-Waite
   reduction, Taylor polynomial for expm1(r), 2^k from exponent bits in two halves (subnormal results
   kept, overflow to inf).  Max error 0.97 ulp against float64 numpy (numpy's float32 exp: 2.4 ulp);
   tests/test_opencl_fastpaths.py checks it; nee_exp32x8: the same on float8.  Plain a*b+c, not fma():
   PoCL calls a scalar fma (40x slower). */
inline float nee_exp32(float x) {
  x = x > 89.0f ? 89.0f : x;             /* NaN passes through */
  x = x < -104.0f ? -104.0f : x;
  const float t = x * 1.44269504f + 12582912.0f;
  const float k = t - 12582912.0f;
  float r = k * -0.693359375f + x;
  r = k * 2.12194440e-4f + r;
  float p = 2.4801587642286904e-05f * r + 0.00019841270113829523f;
  p = p * r + 0.0013888889225199819f; p = p * r + 0.008333333767950535f; p = p * r + 0.0416666679084301f;
  p = p * r + 0.1666666716337204f; p = p * r + 0.5f;
  p = p * (r * r) + r + 1.0f;
  const int ki = as_int(t) - 0x4B400000;
  const int k1 = ki >> 1;
  return (p * as_float((k1 + 127) << 23)) * as_float((ki - k1 + 127) << 23);
}
"""
_EXP32 = r"""inline $F nee_exp32$V($F x) {
$CLAMP  const $F t = x * 1.44269504f + 12582912.0f;
  const $F k = t - 12582912.0f;
  $F r = k * -0.693359375f + x;
  r = k * 2.12194440e-4f + r;
  $F p = 2.4801587642286904e-05f * r + 0.00019841270113829523f;
  p = p * r + 0.0013888889225199819f; p = p * r + 0.008333333767950535f; p = p * r + 0.0416666679084301f;
  p = p * r + 0.1666666716337204f; p = p * r + 0.5f;
  p = p * (r * r) + r + 1.0f;
  const $I ki = as_$I(t) - 0x4B400000;
  const $I k1 = ki >> 1;
  return (p * as_$F((k1 + 127) << 23)) * as_$F((ki - k1 + 127) << 23);
}
"""
_OPENCL_HEAD += (_EXP32.replace("$F", "float8").replace("$I", "int8").replace("$V", "x8")
                 .replace("$CLAMP", "  x = select(x, (float8)89.0f, x > 89.0f);\n"
                                    "  x = select(x, (float8)-104.0f, x < -104.0f);\n"))



class Dialect:
    """What differs between the C dialects the renderers print."""

    def __init__(self, name, ctype, utype, long, inline, f32_suffix, head, fp64_pragma, half_load, half_store,
                 overrides=None, f32_renames=None, fp16_pragma=""):
        self.name = name
        self.ctype = ctype              # dtype name -> C type name
        self.utype = utype              # signed/unsigned int C type -> its unsigned counterpart
        self.long = long                # the 64-bit signed C type
        self.inline = inline            # qualifier of helper functions
        self.f32_suffix = f32_suffix    # float32 math names: "" (overloaded) or "f"
        self.head = head                # text every program starts with
        self.fp64_pragma = fp64_pragma
        self.fp16_pragma = fp16_pragma  # what a program storing float16 needs first ("" when nothing)
        self.half_load = half_load      # "{}" template: float16 storage -> float
        self.half_store = half_store    # "{}" template: float -> float16 storage
        self.overrides = overrides or {}  # op name -> EXPR-style function replacing the shared one
        # float32 math function -> the name of a replacement the head defines (``exp`` -> ``nee_exp32``)
        self.f32_renames = [(re.compile(r"\b" + a + r"\("), b + "(") for a, b in (f32_renames or {}).items()]
        self.int_ctypes = tuple(ctype[n] for n in ("uint8", "int8", "int16", "int32", "int64"))
        self.bits = {ctype["uint8"]: 8, ctype["int8"]: 8, ctype["int16"]: 16, ctype["int32"]: 32,
                     ctype["int64"]: 64}

    def math(self, text: str, dt) -> str:
        """``text`` with the float32 math names of this dialect when ``dt`` is float32."""
        if dt is _dt.float32:
            for rx, b in self.f32_renames:
                text = rx.sub(b, text)
            if self.f32_suffix:
                text = _MATH_RE.sub(lambda m: m.group(1) + self.f32_suffix + "(", text)
        return text

    def preamble(self, fp64: bool = True, fp16: bool = False) -> str:
        """The helper functions every generated program starts with (``fp16``: the program may load and
        store float16: the dialect's pragma for it, e.g. OpenCL's ``cl_khr_fp16``)."""
        out = [self.head] if self.head else []
        if fp64 and self.fp64_pragma:
            out.append(self.fp64_pragma)
        if fp16 and self.fp16_pragma:
            out.append(self.fp16_pragma)
        for T, S, dt in [("float", "32", _dt.float32)] + ([("double", "64", _dt.float64)] if fp64 else []):
            h = _FLOAT_HELPERS.replace("$S", S).replace("(T)", f"({T})").replace("T ", f"{T} ")
            out.append(self.math(h.replace("inline ", self.inline + " "), dt))
        if fp16:
            rh = self.half_load.format(self.half_store.format("x"))
            out.append(self.math(_HALF_HELPERS.replace("$RH", rh).replace("inline ", self.inline + " "),
                                 _dt.float32))
        for N in self.int_ctypes:
            out.append(_INT_HELPERS.replace("UT", self.utype[N]).replace("$N", N).replace("$B", str(self.bits[N]))
                       .replace("$L", self.long).replace("(T)", f"({N})").replace("T ", f"{N} ")
                       .replace("inline ", self.inline + " "))
        return "\n".join(out)


def _fl(fmt):
    """Float-only expression: ``$S`` -> 32/64, ``$T`` -> C type."""
    def f(dt, T, S):
        if dt.category != 2:
            return None
        return fmt.replace("$S", S).replace("$T", T)
    return f


def _by_cat(b=None, i=None, f=None):
    """Expression per category (bool, int, float); None = not claimed for that category."""
    def g(dt, T, S):
        e = (b, i, f)[dt.category]
        if e is None:
            return None
        return e.replace("$S", S).replace("$T", T).replace("$N", T)
    return g


UNARY_FLOAT = {
    "exp": "exp({0})", "exp2": "exp2({0})", "expm1": "expm1({0})", "log": "log({0})", "log2": "log2({0})",
    "log10": "log10({0})", "log1p": "log1p({0})", "sqrt": "sqrt({0})", "rsqrt": "(($T)1 / sqrt({0}))",
    "sin": "sin({0})", "cos": "cos({0})", "tan": "tan({0})", "asin": "asin({0})", "acos": "acos({0})",
    "atan": "atan({0})", "sinh": "sinh({0})", "cosh": "cosh({0})", "tanh": "tanh({0})", "asinh": "asinh({0})",
    "acosh": "acosh({0})", "atanh": "atanh({0})", "sigmoid": "f_sigmoid$S({0})", "erf": "erf({0})",
    "erfc": "erfc({0})", "reciprocal": "(($T)1 / {0})", "silu": "({0} * f_sigmoid$S({0}))",
    "gelu": "f_gelu$S({0})", "gelu_tanh": "f_gelu_tanh$S({0})", "mish": "({0} * tanh(f_softplus$S({0})))",
    "logsigmoid": "f_logsigmoid$S({0})", "softsign": "({0} / (($T)1 + fabs({0})))",
    "tanhshrink": "({0} - tanh({0}))", "selu": "f_selu$S({0})", "hardsigmoid": "f_hardsigmoid$S({0})",
    "hardswish": "({0} * f_minimum$S(f_maximum$S({0} + ($T)3, ($T)0), ($T)6) / ($T)6)", "relu6": "f_clamp$S({0}, ($T)0, ($T)6)",
    "lgamma": "lgamma({0})",
}

EXPR: dict = {n: _fl(e) for n, e in UNARY_FLOAT.items()}
EXPR.update({
    # unary
    "abs": _by_cat("{0}", "abs({0})", "fabs({0})"),
    "neg": _by_cat(None, "(-{0})", "(-{0})"),
    "floor": _by_cat(None, "{0}", "floor({0})"),
    "ceil": _by_cat(None, "{0}", "ceil({0})"),
    "trunc": _by_cat(None, "{0}", "trunc({0})"),
    "round": _by_cat(None, "{0}", "rint({0})"),
    "frac": _fl("({0} - trunc({0}))"),
    "sign": _by_cat("{0}", "(($T)(({0} > 0) - ({0} < 0)))", "f_sign$S({0})"),
    "relu": _by_cat(None, "({0} > 0 ? {0} : ($T)0)", "f_relu$S({0})"),
    "bitwise_not": _by_cat("(!{0})", "(~{0})", None),
    "logical_not": _by_cat("(!{0})", None, None),
    "isnan": _by_cat("0", "0", "isnan({0})"),
    "isinf": _by_cat("0", "0", "isinf({0})"),
    "isfinite": _by_cat("1", "1", "isfinite({0})"),
    "isposinf": _by_cat("0", "0", "({0} == ($T)INFINITY)"),
    "isneginf": _by_cat("0", "0", "({0} == -($T)INFINITY)"),
    "signbit": _by_cat("0", "({0} < 0)", "signbit({0})"),
    "square": _by_cat(None, "({0} * {0})", "({0} * {0})"),
    "cast": _by_cat("{0}", "{0}", "{0}"),
    # binary
    "add": _by_cat("({0} | {1})", "({0} + {1})", "({0} + {1})"),
    "sub": _by_cat(None, "({0} - {1})", "({0} - {1})"),
    "mul": _by_cat("({0} & {1})", "({0} * {1})", "({0} * {1})"),
    "true_divide": _fl("({0} / {1})"),
    "floor_divide": _by_cat(None, "f_ifloordiv_$N({0}, {1})", "f_floordiv$S({0}, {1})"),
    "trunc_divide": _by_cat(None, "f_itruncdiv_$N({0}, {1})", "trunc({0} / {1})"),
    "remainder": _by_cat(None, "f_iremainder_$N({0}, {1})", "f_remainder$S({0}, {1})"),
    "fmod": _by_cat(None, "f_ifmod_$N({0}, {1})", "fmod({0}, {1})"),
    "pow": _by_cat(None, "f_ipow_$N({0}, {1})", "pow({0}, {1})"),
    "atan2": _fl("atan2({0}, {1})"),
    "hypot": _fl("hypot({0}, {1})"),
    "copysign": _fl("copysign({0}, {1})"),
    "maximum": _by_cat("({0} | {1})", "({0} > {1} ? {0} : {1})", "f_maximum$S({0}, {1})"),
    "minimum": _by_cat("({0} & {1})", "({0} < {1} ? {0} : {1})", "f_minimum$S({0}, {1})"),
    "fmax": _by_cat("({0} | {1})", "({0} > {1} ? {0} : {1})", "f_fmax$S({0}, {1})"),
    "fmin": _by_cat("({0} & {1})", "({0} < {1} ? {0} : {1})", "f_fmin$S({0}, {1})"),
    "eq": _by_cat("({0} == {1})", "({0} == {1})", "({0} == {1})"),
    "ne": _by_cat("({0} != {1})", "({0} != {1})", "({0} != {1})"),
    "lt": _by_cat("({0} < {1})", "({0} < {1})", "({0} < {1})"),
    "le": _by_cat("({0} <= {1})", "({0} <= {1})", "({0} <= {1})"),
    "gt": _by_cat("({0} > {1})", "({0} > {1})", "({0} > {1})"),
    "ge": _by_cat("({0} >= {1})", "({0} >= {1})", "({0} >= {1})"),
    "logical_and": _by_cat("({0} && {1})", None, None),
    "logical_or": _by_cat("({0} || {1})", None, None),
    "logical_xor": _by_cat("({0} != {1})", None, None),
    "bitwise_and": _by_cat("({0} & {1})", "({0} & {1})", None),
    "bitwise_or": _by_cat("({0} | {1})", "({0} | {1})", None),
    "bitwise_xor": _by_cat("({0} ^ {1})", "({0} ^ {1})", None),
    "bitwise_left_shift": _by_cat(None, "f_shl_$N({0}, {1})", None),
    "bitwise_right_shift": _by_cat(None, "f_shr_$N({0}, {1})", None),
    "leaky_relu": _by_cat(None, "({0} > 0 ? {0} : {0} * {1})", "({0} > 0 ? {0} : {0} * {1})"),
    "xlogy": _fl("f_xlogy$S({0}, {1})"),
    # ternary and more
    "where": lambda dt, T, S: "({0} ? {1} : {2})",
    "clamp": _by_cat(None, "f_iclamp_$N({0}, {1}, {2})", "f_clamp$S({0}, {1}, {2})"),
    "softplus": _fl("f_softplus_bt$S({0}, {1}, {2})"),
    "lerp": _fl("({0} + {2} * ({1} - {0}))"),
    "addcmul": _by_cat(None, "({0} + {3} * {1} * {2})", "({0} + {3} * {1} * {2})"),
    "addcdiv": _fl("({0} + {3} * {1} / {2})"),
    "elu": _fl("f_elu$S({0}, {1}, {2}, {3})"),
})

OPENCL = Dialect(
    "opencl",
    ctype={"bool": "uchar", "uint8": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
           "float32": "float", "float64": "double", "float16": "half"},
    utype={"uchar": "uchar", "char": "uchar", "short": "ushort", "int": "uint", "long": "ulong"},
    long="long", inline="inline", f32_suffix="", head=_OPENCL_HEAD, f32_renames={"exp": "nee_exp32"},
    fp64_pragma="#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
    # float16: ``half`` storage (devices with cl_khr_fp16; OpenCLBackend claims float16 only there), converted
    # by casts: to float exactly, from float rounding to nearest even (OpenCL C's default for conversions)
    fp16_pragma="#pragma OPENCL EXTENSION cl_khr_fp16 : enable",
    half_load="(float)({})", half_store="(half)((float)({}))")

CUDA = Dialect(
    "cuda",
    ctype={"bool": "uchar", "uint8": "uchar", "int8": "schar", "int16": "short", "int32": "int", "int64": "llong",
           "float32": "float", "float64": "double", "float16": "nhalf"},
    utype={"uchar": "uchar", "schar": "uchar", "short": "ushort", "int": "uint", "llong": "ullong"},
    long="llong", inline="static __device__ __forceinline__", f32_suffix="f", head=_CUDA_HEAD, fp64_pragma="",
    half_load="nee_h2f({})", half_store="nee_f2h((float)({}))",
    # abs(long long) is llabs in CUDA C; INT_MIN wraps like torch through unsigned arithmetic
    overrides={"abs": _by_cat("{0}", "f_iabs_$N({0})", "fabs({0})")})


# ---------------------------------------------------------------- rendering helpers
def kdt(dtype):
    """The dtype a kernel computes in for storage ``dtype`` (float16 math runs in float32)."""
    return _dt.float32 if dtype is _dt.float16 else dtype


def c_expr(name: str, dt, dialect: Dialect = OPENCL) -> str | None:
    """The C template of elementwise op ``name`` computed in DType ``dt``, or None."""
    f = dialect.overrides.get(name) if name in EXPR else None
    f = f or EXPR.get(name)
    if f is None:
        return None
    t = f(dt, dialect.ctype[dt.name], "64" if dt is _dt.float64 else "32")
    return None if t is None else dialect.math(t, dt)


_NAME = re.compile(r"^[A-Za-z_]\w*$")


def cast(expr: str, frm, to, dialect: Dialect = OPENCL) -> str:
    """C text converting ``expr`` of DType ``frm`` to DType ``to`` (bool: a 0/1 uchar)."""
    if to is _dt.bool_:
        if frm is _dt.bool_ and _NAME.match(expr):
            return expr
        if frm is _dt.float16:
            expr = dialect.half_load.format(expr)
        return f"(uchar)(({expr}) != 0)"
    if frm is to:
        return expr
    if frm is _dt.float16:
        return cast(dialect.half_load.format(expr), _dt.float32, to, dialect)
    if to is _dt.float16:
        return dialect.half_store.format(cast(expr, frm, _dt.float32, dialect))
    f, t = dialect.ctype[frm.name], dialect.ctype[to.name]
    if f == t:
        return expr
    if frm.category == 2 and to.category != 2 and to.itemsize < 8:
        return f"({t})({dialect.long})({expr})"   # like numpy/x86: -1.0 -> uint8 255, not undefined
    return f"({t})({expr})"


def _compute(op, in_dt):
    from ..ops.elementwise import ew_dtypes
    comp, _ = ew_dtypes(op.ew, list(in_dt))
    first = op.ew.promote[0] if op.ew.promote else 0
    return [kdt(c) for c in comp], kdt(comp[first]), comp[first]


def _half_steps(tmpl: str, raw, in_dt) -> str:
    """``tmpl`` with the float16-arithmetic helpers (:data:`_HALF_STEPS`) when the op computes float16
    (``raw``) and no operand is stored wider (a float32 scalar, ``x // 2.5``, keeps float32 opmath), as the
    CPU backend decides (devices/cpu/elementwise.py ``_low_of``)."""
    if raw is not _dt.float16 or any(d is _dt.float32 or d is _dt.float64 for d in in_dt):
        return tmpl
    for a, b in _HALF_STEPS:
        tmpl = tmpl.replace(a, b)
    return tmpl


def claims(op, in_dt, dialect: Dialect = OPENCL) -> str | None:
    """None when ``op`` on inputs of DTypes ``in_dt`` renders in ``dialect``, else a reason."""
    _, c, _ = _compute(op, in_dt)
    if c_expr(op.name, c, dialect) is None:
        return f"no {dialect.name} C expression for {op.name} on {c.name}"
    return None


def op_result(op, names: list, in_dt: list, out_dt, dialect: Dialect = OPENCL) -> str:
    """C expression of elementwise ``op`` over C values ``names`` (DTypes ``in_dt``), stored as ``out_dt``.
    Raises NotImplementedError when the op has no C expression for its compute dtype."""
    comp, c, raw = _compute(op, in_dt)
    tmpl = c_expr(op.name, c, dialect)
    if tmpl is None:
        raise NotImplementedError(f"{dialect.name}: no C expression for {op.name} on {c.name}")
    tmpl = _half_steps(tmpl, raw, in_dt)
    args = [cast(n, d, k, dialect) for n, d, k in zip(names, in_dt, comp)]
    return cast(tmpl.format(*args), c, out_dt, dialect)


def group_body(group, dialect: Dialect = OPENCL):
    """Render a fused elementwise group (``jit.fusion.FusedElementwise``) over inputs ``v0..``:
    returns ``(body lines, result expressions, input DTypes, output DTypes, signature)``.
    Each member's value is a temporary in its compute dtype (float16 values stay float);
    raises NotImplementedError when a member has no C expression."""
    names, kd = {}, {}
    for i, v in enumerate(group.inputs):
        names[v] = f"v{i}"
        kd[v] = v.dtype
    body = []
    for k, n in enumerate(group.nodes):
        od = kdt(n.outputs[0].dtype)
        expr = op_result(n.op, [names[v] for v in n.inputs], [kd[v] for v in n.inputs], od, dialect)
        body.append(f"const {dialect.ctype[od.name]} t{k} = {expr};")
        names[n.outputs[0]] = f"t{k}"
        kd[n.outputs[0]] = od
    in_dt = [v.dtype for v in group.inputs]
    out_dt = [o.dtype for o in group.outputs]
    results = [cast(names[o], kd[o], o.dtype, dialect) for o in group.outputs]
    sig = "\n".join(body) + "|" + ",".join(d.name for d in in_dt) + "|" + ",".join(d.name for d in out_dt) \
        + "|" + ",".join(results)
    return body, results, in_dt, out_dt, sig
