"""OpenCL C expressions for the elementwise op table, and the helpers they call.

``neetorch.ops.elementwise`` defines every elementwise op once (dtype rule, numpy
reference, the CPU renderer's ``expr["py"]``).  This module is the OpenCL renderer's
counterpart of ``expr["py"]``: ``EXPR[name](dt, T, S)`` returns a C template for the
op computed in dtype ``dt`` (a :class:`DType`; ``T`` is its C type, ``S`` ``"32"`` /
``"64"`` for float helpers), with ``{0}``, ``{1}``… standing for the inputs already
cast to their compute dtypes — or ``None`` when the op is not claimed for that dtype
(the dispatcher then falls back to the CPU, visibly).  Ops missing from the table are
not claimed at all.

Semantics follow the CPU backend (``devices/cpu/scalar.py``) exactly: NaN-propagating
``maximum``/``minimum``/``clamp``, Python/torch signs for integer ``floor_divide``
and ``remainder``, C-truncated ``fmod``, wrap-around integer ``pow``, shifts by an
out-of-range amount giving 0 / -1, integer division by ``-1`` without the x86 trap.
"""
from __future__ import annotations

CTYPE = {"bool": "uchar", "uint8": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
         "float32": "float", "float64": "double", "float16": "half"}
UTYPE = {"uchar": "uchar", "char": "uchar", "short": "ushort", "int": "uint", "long": "ulong"}
BITS = {"uchar": 8, "char": 8, "short": 16, "int": 32, "long": 64}
INT_CTYPES = ("uchar", "char", "short", "int", "long")

_FLOAT_HELPERS = r"""
inline T f_sigmoid$S(T x) { return (T)1 / ((T)1 + exp(-x)); }
inline T f_softplus$S(T x) { return (x > (T)0 ? x : (T)0) + log1p(exp(-fabs(x))); }
inline T f_softplus_bt$S(T x, T beta, T th) { T bx = x * beta; return bx > th ? x : f_softplus$S(bx) / beta; }
inline T f_gelu$S(T x) { return (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440)); }
inline T f_gelu_tanh$S(T x) { return (T)0.5 * x * ((T)1 + tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x))); }
inline T f_selu$S(T x) { return (T)1.0507009873554804934193349852946 * (x > (T)0 ? x : (T)1.6732632423543772848170429916717 * expm1(x)); }
inline T f_elu$S(T x, T a, T s, T is) { return x > (T)0 ? s * x : s * a * expm1(x * is); }
inline T f_maximum$S(T a, T b) { return (a > b || isnan(a)) ? a : ((isnan(b) || b > a) ? b : a); }
inline T f_minimum$S(T a, T b) { return (a < b || isnan(a)) ? a : ((isnan(b) || b < a) ? b : a); }
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

_INT_HELPERS = r"""
inline T f_ifloordiv_$N(T a, T b) {
  if (b == 0) return 0; if ((long)b == -1) return (T)(-(UT)a);
  T q = a / b; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) q -= 1; return q; }
inline T f_itruncdiv_$N(T a, T b) { if (b == 0) return 0; if ((long)b == -1) return (T)(-(UT)a); return a / b; }
inline T f_iremainder_$N(T a, T b) {
  if (b == 0 || (long)b == -1) return 0; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
inline T f_ifmod_$N(T a, T b) { if (b == 0 || (long)b == -1) return 0; return a % b; }
inline T f_ipow_$N(T a, T b) {
  if (b < 0) return (T)(a == 1 ? 1 : (a == (T)-1 ? ((b & 1) ? -1 : 1) : 0));
  UT r = 1, base = (UT)a; T e = b;
  while (e) { if (e & 1) r = (UT)(r * base); base = (UT)(base * base); e >>= 1; }
  return (T)r; }
inline T f_shl_$N(T a, T b) { return (b < 0 || (long)b >= $B) ? (T)0 : (T)((UT)a << b); }
inline T f_shr_$N(T a, T b) { return (b < 0 || (long)b >= $B) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b); }
"""


def preamble(fp64: bool) -> str:
    """The helper functions every generated program starts with."""
    out = []
    if fp64:
        out.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    for T, S in [("float", "32")] + ([("double", "64")] if fp64 else []):
        out.append(_FLOAT_HELPERS.replace("$S", S).replace("(T)", f"({T})").replace("T ", f"{T} "))
    for N in INT_CTYPES:
        out.append(_INT_HELPERS.replace("UT", UTYPE[N]).replace("$N", N).replace("$B", str(BITS[N]))
                   .replace("(T)", f"({N})").replace("T ", f"{N} "))
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
    "hardswish": "({0} * f_hardsigmoid$S({0}))", "relu6": "f_clamp$S({0}, ($T)0, ($T)6)",
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
    "clamp": _by_cat(None, "({0} < {1} ? {1} : ({0} > {2} ? {2} : {0}))", "f_clamp$S({0}, {1}, {2})"),
    "softplus": _fl("f_softplus_bt$S({0}, {1}, {2})"),
    "lerp": _fl("({0} + {2} * ({1} - {0}))"),
    "addcmul": _by_cat(None, "({0} + {3} * {1} * {2})", "({0} + {3} * {1} * {2})"),
    "addcdiv": _fl("({0} + {3} * {1} / {2})"),
    "elu": _fl("f_elu$S({0}, {1}, {2}, {3})"),
})
