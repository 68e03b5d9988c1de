"""Branch-free, vectorizable elementary functions for Numba CPU kernels.

Why: pip's llvmlite ships without SVML, so ``math.exp``/``math.tanh``/...
inside an ``@njit`` loop become scalar libm calls and stop LLVM's loop
vectorizer.  Every function here is plain float arithmetic, integer bit
manipulation and selects, so a loop such as::

    @numba.njit
    def k(a, out):
        for i in range(a.size):
            out[i] = exp_f32(a[i])

vectorizes (8 x float32 / 4 x float64 per ymm register on AVX2).

Public functions (scalar in, scalar out; call them from jitted code):

    exp_f32, exp_f64        exp(x)
    expm1_f32, expm1_f64    exp(x) - 1, relative accuracy near 0
    log_f32, log_f64        natural log
    log1p_f32, log1p_f64    log(1 + x), relative accuracy near 0
    tanh_f32, tanh_f64      tanh, relative accuracy near 0
    erf_f32, erf_f64        error function
    sigmoid_f32, sigmoid_f64  1 / (1 + exp(-x)), computed stably
    sin_f32, cos_f32        single-precision sine / cosine (see their notes)
    sin_f64, cos_f64        plain ``math.sin`` / ``math.cos`` (libm, scalar:
                            these do NOT vectorize; no fast f64 trig here)

The ``_f32`` variants take and return ``float32`` and compute in float32
(sin/cos excepted, see below); passing a float64 to them is a typing error,
so nothing silently widens to double.  The ``_f64`` variants take and return
``float64``.

Accuracy (max error in ulps, from tests/test_fastmath.py: float32 against
float64 math over dense sweeps and every 16th float32 bit pattern; float64
against 80-bit long double / mpmath; erf_f32: every float32, see
tests/test_erf_f32_s12.py):

    function   f32    f64         function   f32    f64
    exp        0.98   0.96        tanh       2.40   1.94
    expm1      1.42   1.72        erf        0.80   1.00
    log        1.14   0.80        sigmoid    2.32   1.94
    log1p      1.16   0.78        sin, cos   0.50   (libm)

Special values: exp(+inf)=inf, exp(-inf)=0, NaN in -> NaN out everywhere,
overflow -> inf, log(0)=-inf, log(x<0)=NaN, log(inf)=inf, tanh/erf(+-inf)=+-1,
sigmoid(-inf)=0 / sigmoid(+inf)=1 exactly, signed zeros are preserved by the
odd functions and expm1/log1p.  Subnormal results are produced (gradual
underflow, not flushed) and subnormal inputs to log are handled; if the
process runs with FTZ/DAZ set, they flush to zero like everything else.

How to use them correctly:

* All functions are ``@njit(inline="always")``: Numba inlines them at IR
  level, so they are compiled with the *caller's* fastmath flags.  Callers
  may use ``fastmath={'contract'}`` (or 'nsz'/'arcp'), but must NOT use
  ``fastmath=True`` or the 'nnan'/'ninf'/'reassoc'/'afn' flags: those let
  LLVM delete the inf/NaN selects and re-associate the Cody-Waite range
  reductions, which destroys accuracy and the special values.
* Multiply-adds that matter go through :func:`fmuladd` (``llvm.fmuladd``),
  which is fused on FMA hardware regardless of the caller's flags.
* The small intrinsics :func:`f32_as_i32`, :func:`i32_as_f32`,
  :func:`f64_as_i64`, :func:`i64_as_f64` (bit casts) are public too and may be
  used by other kernels.

Methods: exp/expm1 use k = round(x/ln2) via the 1.5*2^p "magic number",
a two-constant Cody-Waite reduction, a Taylor polynomial for expm1(r) and a
2^k built from exponent bits (in two halves where the result may be
subnormal or overflow).  log/log1p extract exponent and mantissa by bit
manipulation (mantissa in [sqrt(1/2), sqrt(2))) and use a Cephes-form
polynomial refit for this module (f32) or the fdlibm s/(2+s) rational kernel
(f64); log1p adds the fdlibm correction term for the rounding of 1 + x.
tanh = expm1(2|x|) / (expm1(2|x|) + 2) with the sign of x.  erf_f32 uses two
minimax fits made for this module (odd polynomial for |x| < 0.8, 1 - 2^poly(x)
above, the power of two as 2^k times a polynomial in the fraction: its
rint trick, (q + 1.5*2^23) - 1.5*2^23, is one more reason for no 'reassoc');
erf_f64 is fdlibm's s_erf.c with all four regions evaluated and selected, no
branches.  Divisions go through
:func:`fdiv`, so no ZeroDivisionError check (a branch) is emitted even under
Numba's default error_model='python'.
"""
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64", "log_f32", "log_f64",
    "log1p_f32", "log1p_f64", "tanh_f32", "tanh_f64", "erf_f32", "erf_f64",
    "sigmoid_f32", "sigmoid_f64", "sin_f32", "cos_f32", "sin_f64", "cos_f64",
    "fmuladd", "fdiv", "f32_as_i32", "i32_as_f32", "f64_as_i64", "i64_as_f64",
]

# Flags for the decorators.  They only apply when a function is called from
# Python directly; once inlined into a kernel the kernel's flags apply (see
# the module docstring).  No 'nnan'/'ninf'/'reassoc' anywhere.
_FASTMATH = {"contract"}


def _inl(fn):
    return njit(inline="always", fastmath=_FASTMATH)(fn)


# --------------------------------------------------------------------------
# intrinsics: bit casts, int -> float conversion, fused multiply-add
# --------------------------------------------------------------------------

@intrinsic
def f32_as_i32(typingctx, x):
    """Reinterpret the bits of a float32 as int32 (no conversion)."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(x), codegen


@intrinsic
def i32_as_f32(typingctx, x):
    """Reinterpret the low 32 bits of an integer as a float32."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.int32)
        return builder.bitcast(v, ir.FloatType())
    return types.float32(x), codegen


@intrinsic
def f64_as_i64(typingctx, x):
    """Reinterpret the bits of a float64 as int64 (no conversion)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(x), codegen


@intrinsic
def i64_as_f64(typingctx, x):
    """Reinterpret an integer (as int64) as a float64."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.int64)
        return builder.bitcast(v, ir.DoubleType())
    return types.float64(x), codegen


def _small_int_to_float(fty, lty):
    # int -> float through int32: AVX2 has no vector int64 -> float convert.
    # Only for values that fit in int32 (exponents).
    def gen(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], sig.args[0], types.int32)
            return builder.sitofp(v, lty)
        return fty(x), codegen
    return gen


_i2f32 = intrinsic(_small_int_to_float(types.float32, ir.FloatType()))
_i2f64 = intrinsic(_small_int_to_float(types.float64, ir.DoubleType()))


@intrinsic
def fmuladd(typingctx, a, b, c):
    """a*b + c through llvm.fmuladd: one rounding on FMA hardware.

    All three arguments must have the same float type (no silent widening).
    """
    if not (a == b == c and a in (types.float32, types.float64)):
        return None

    def codegen(context, builder, sig, args):
        lty = context.get_value_type(sig.return_type)
        name = "llvm.fmuladd.f32" if sig.return_type == types.float32 else "llvm.fmuladd.f64"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lty, [lty] * 3), name)
        return builder.call(fn, list(args))
    return a(a, b, c), codegen


def _i32_binop(op, doc):
    # Numba widens int32 arithmetic to int64; on SIMD that means converting
    # 8 lanes to 2x4 and back.  These keep the bit tricks in 32-bit lanes
    # (wrapping two's-complement arithmetic, no poison).
    def gen(typingctx, a, b):
        if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])
        return types.int32(types.int32, types.int32), codegen
    gen.__doc__ = doc
    return intrinsic(gen)


_add32 = _i32_binop("add", "int32 a + b (wrapping)")
_sub32 = _i32_binop("sub", "int32 a - b (wrapping)")
_and32 = _i32_binop("and_", "int32 a & b")
_shl32 = _i32_binop("shl", "int32 a << b (0 <= b < 32)")
_sar32 = _i32_binop("ashr", "int32 a >> b, arithmetic (0 <= b < 32)")


@intrinsic
def fdiv(typingctx, a, b):
    """IEEE a / b without Numba's ZeroDivisionError check (x/0 -> +-inf/NaN).

    Numba's '/' raises on a zero divisor under the default error_model,
    which both changes IEEE semantics and adds a branch that blocks SIMD.
    """
    if not (a == b and a in (types.float32, types.float64)):
        return None

    def codegen(context, builder, sig, args):
        return builder.fdiv(args[0], args[1])
    return a(a, b), codegen


F32 = np.float32
F64 = np.float64

# --------------------------------------------------------------------------
# float32 constants
# --------------------------------------------------------------------------
_ZERO_F = F32(0.0)
_NZERO_F = F32(-0.0)
_HALF_F = F32(0.5)
_ONE_F = F32(1.0)
_TWO_F = F32(2.0)
_INF_F = F32(np.inf)
_NINF_F = F32(-np.inf)
_NAN_F = F32(np.nan)
_LOG2E_F = F32(1.4426950408889634)
_RND_F = F32(12582912.0)            # 1.5 * 2**23: x + RND - RND == rint(x)
_RND_BITS_F = 0x4B400000            # bit pattern of _RND_F
_NLN2HI_F = F32(-0.693359375)       # ln2 = HI + LO, HI has 9 significant bits
_NLN2LO_F = F32(2.12194440e-4)
_LN2HI_F = F32(0.693359375)
_LN2LO_F = F32(-2.12194440e-4)
_EXP_HI_F = F32(89.0)               # > ln(FLT_MAX) = 88.72 -> inf
_EXP_LO_F = F32(-104.0)             # < ln(2**-150) = -103.97 -> 0
_EXPM1_LO_F = F32(-30.0)            # expm1(x < -17.4) rounds to -1
_EXPM1_BIG_F = F32(20.0)            # above: expm1 == exp in float32
_TANH_CLAMP_F = F32(9.5)            # tanh(x >= 9.02) rounds to 1
_FLT_MIN = F32(1.1754943508222875e-38)
_TWO23_F = F32(8388608.0)
_M23_F = F32(-23.0)

# Taylor coefficients 1/k! of expm1(r) = r + r^2*(C2 + r*(C3 + ...)), |r| <= ln2/2
_E2_F, _E3_F, _E4_F, _E5_F, _E6_F, _E7_F, _E8_F = (
    F32(1 / math.factorial(k)) for k in range(2, 9))

# log(1+f) = f - f^2/2 + f^3*P(f), f in [sqrt(.5)-1, sqrt(2)-1]; P of degree 6,
# minimax fit made for this module (Lawson iteration against mpmath, relative
# to log1p(f); fit error 3.2e-8 = 0.53 * 2^-24).  Same form as Cephes logf,
# which needs degree 8 for its coefficients.
_LP0_F, _LP1_F, _LP2_F, _LP3_F, _LP4_F, _LP5_F, _LP6_F = (F32(v) for v in (
    0.08700497056632948, -0.14267599113207935, 0.14914796641165107,
    -0.16577573119416997, 0.1996306033544085, -0.25001337312460853,
    0.3333391081482607))
_NHALF_F = F32(-0.5)

# erf_f32: minimax fits made for this module (Lawson iteration against mpmath, coefficients
# rounded to float32 one at a time with the rest refitted; errors in ulps of the result).
# |x| < 0.8:  erf(x) = x + x*A(x^2), A of degree 5 (fit error 0.043 ulp)
_ERF_SPLIT_F = F32(0.8)
_EA0_F, _EA1_F, _EA2_F, _EA3_F, _EA4_F, _EA5_F = (F32(v) for v in (
    0.12837916612625122, -0.37612611055374146, 0.11283202469348907,
    -0.026823827996850014, 0.00508931465446949, -0.0006555356085300446))
# 0.8 <= |x| <= 4:  erf(x) = 1 - 2^(Q(t - S0) - 2), t = min(|x|, 4), Q ~ log2(erfc(t)) + 2 of
# degree 6 (fit error 0.042 ulp), centred at S0 (a float32 next to the split where Q(0) is a
# float32 to 3e-4 ulp): near the split, where erfc weighs most, Q and its Horner terms are small
# (little rounding), and no Cody-Waite reduction is needed: Q = k + f, 2^f by a polynomial.
# erf(x >= 3.920055) == 1.
_ERF_CLAMP_F = F32(4.0)
_ERF_S0_F = F32(0.7999235987663269)
_EQ0_F, _EQ1_F, _EQ2_F, _EQ3_F, _EQ4_F, _EQ5_F, _EQ6_F = (F32(v) for v in (
    0.04513256624341011, -3.328187942504883, -1.1766579151153564, -0.07266639918088913,
    0.017375651746988297, -0.0031219099182635546, 0.0003012348897755146))
# 2^f = 1 + f*X(f), |f| <= 1/2, X of degree 5 (relative error 2.0e-9)
_EX1_F, _EX2_F, _EX3_F, _EX4_F, _EX5_F, _EX6_F = (F32(v) for v in (
    0.6931472028552577, 0.24022647913611647, 0.055503324706749804, 0.009618437358393447,
    0.0013398874602464292, 0.00015353362118043258))

# --------------------------------------------------------------------------
# float64 constants
# --------------------------------------------------------------------------
_ZERO_D = F64(0.0)
_NZERO_D = F64(-0.0)
_HALF_D = F64(0.5)
_ONE_D = F64(1.0)
_TWO_D = F64(2.0)
_INF_D = F64(np.inf)
_NINF_D = F64(-np.inf)
_NAN_D = F64(np.nan)
_LOG2E_D = F64(1.4426950408889634)
_RND_D = F64(6755399441055744.0)    # 1.5 * 2**52
_RND_BITS_D = 0x4338000000000000
_LN2HI_D = F64(6.93147180369123816490e-01)   # fdlibm split: HI has 32 bits
_LN2LO_D = F64(1.90821492927058770002e-10)
_NLN2HI_D = F64(-6.93147180369123816490e-01)
_NLN2LO_D = F64(-1.90821492927058770002e-10)
_EXP_HI_D = F64(710.0)              # > ln(DBL_MAX) = 709.78
_EXP_LO_D = F64(-746.0)             # < ln(2**-1075) = -745.13
_EXPM1_LO_D = F64(-60.0)            # expm1(x < -37.5) rounds to -1
_EXPM1_BIG_D = F64(40.0)
_TANH_CLAMP_D = F64(20.0)           # tanh(x >= 19.06) rounds to 1
_DBL_MIN = F64(2.2250738585072014e-308)
_TWO54_D = F64(18014398509481984.0)
_M54_D = F64(-54.0)

(_E2_D, _E3_D, _E4_D, _E5_D, _E6_D, _E7_D, _E8_D, _E9_D, _E10_D, _E11_D,
 _E12_D, _E13_D) = (F64(1 / math.factorial(k)) for k in range(2, 14))

# fdlibm log kernel
_LG1_D = F64(6.666666666666735130e-01)
_LG2_D = F64(3.999999999940941908e-01)
_LG3_D = F64(2.857142874366239149e-01)
_LG4_D = F64(2.222219843214978396e-01)
_LG5_D = F64(1.818357216161805012e-01)
_LG6_D = F64(1.531383769920937332e-01)
_LG7_D = F64(1.479819860511658591e-01)

# fdlibm s_erf.c
_ERX_D = F64(8.45062911510467529297e-01)
_PP0, _PP1, _PP2, _PP3, _PP4 = (F64(v) for v in (
    1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
    -5.77027029648944159157e-03, -2.37630166566501626084e-05))
_QQ1, _QQ2, _QQ3, _QQ4, _QQ5 = (F64(v) for v in (
    3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
    1.32494738004321644526e-04, -3.96022827877536812320e-06))
_PA0, _PA1, _PA2, _PA3, _PA4, _PA5, _PA6 = (F64(v) for v in (
    -2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
    3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
    -2.16637559486879084300e-03))
_QA1, _QA2, _QA3, _QA4, _QA5, _QA6 = (F64(v) for v in (
    1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
    1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02))
_RA0, _RA1, _RA2, _RA3, _RA4, _RA5, _RA6, _RA7 = (F64(v) for v in (
    -9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
    -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
    -8.12874355063065934246e+01, -9.81432934416914548592e+00))
_SA1, _SA2, _SA3, _SA4, _SA5, _SA6, _SA7, _SA8 = (F64(v) for v in (
    1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
    6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
    6.57024977031928170135e+00, -6.04244152148580987438e-02))
_RB0, _RB1, _RB2, _RB3, _RB4, _RB5, _RB6 = (F64(v) for v in (
    -9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
    -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
    -4.83519191608651397019e+02))
_SB1, _SB2, _SB3, _SB4, _SB5, _SB6, _SB7 = (F64(v) for v in (
    3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
    3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
    -2.24409524465858183362e+01))
_ERF_R1_D = F64(0.84375)
_ERF_R2_D = F64(1.25)
_ERF_R3_D = F64(1 / 0.35)
_ERF_CLAMP_D = F64(6.0)             # erf(x >= 5.93) rounds to 1
_M0P5625_D = F64(-0.5625)
_HI32_MASK = -4294967296            # 0xFFFFFFFF00000000 as int64


# ==========================================================================
# float32
# ==========================================================================

@_inl
def _expm1_poly_f32(r):
    """expm1(r) for |r| <= ln2/2 (Taylor, degree 8; rel. error < 1e-9)."""
    p = fmuladd(_E8_F, r, _E7_F)
    p = fmuladd(p, r, _E6_F)
    p = fmuladd(p, r, _E5_F)
    p = fmuladd(p, r, _E4_F)
    p = fmuladd(p, r, _E3_F)
    p = fmuladd(p, r, _E2_F)
    return fmuladd(p, r * r, r)


@_inl
def _reduce_exp_f32(x):
    """x = k*ln2 + r.  Returns (r, t) where t's low bits hold k (|k| < 2^22)."""
    t = fmuladd(x, _LOG2E_F, _RND_F)
    k = t - _RND_F
    r = fmuladd(k, _NLN2HI_F, x)
    r = fmuladd(k, _NLN2LO_F, r)
    return r, t


@_inl
def exp_f32(x):
    """exp(x) for float32 x (result float32, subnormal results kept)."""
    x = _EXP_HI_F if x > _EXP_HI_F else x          # NaN passes through
    x = _EXP_LO_F if x < _EXP_LO_F else x
    r, t = _reduce_exp_f32(x)
    p = _expm1_poly_f32(r) + _ONE_F
    k = _sub32(f32_as_i32(t), _RND_BITS_F)        # k in [-150, 128]
    k1 = _sar32(k, 1)
    s1 = i32_as_f32(_shl32(_add32(k1, 127), 23))
    s2 = i32_as_f32(_shl32(_add32(_sub32(k, k1), 127), 23))
    return (p * s1) * s2


@_inl
def expm1_f32(x):
    """exp(x) - 1 for float32 x, relative accuracy for small |x|."""
    xc = _EXP_HI_F if x > _EXP_HI_F else x
    xc = _EXPM1_LO_F if xc < _EXPM1_LO_F else xc
    r, t = _reduce_exp_f32(xc)
    e = _expm1_poly_f32(r)
    k = _sub32(f32_as_i32(t), _RND_BITS_F)        # k in [-44, 128]
    k1 = _sar32(k, 1)
    s1 = i32_as_f32(_shl32(_add32(k1, 127), 23))
    s2 = i32_as_f32(_shl32(_add32(_sub32(k, k1), 127), 23))
    big = ((e + _ONE_F) * s1) * s2                 # x > 20: expm1 == exp
    s = s1 * s2
    mid = fmuladd(s, e, s - _ONE_F)                # 2^k*expm1(r) + (2^k - 1)
    res = big if xc > _EXPM1_BIG_F else mid
    return x if x == _ZERO_F else res              # keeps -0.0


@_inl
def _log_kernel_f32(f, kf, c):
    """log(1+f) + kf*ln2 + c, f in [sqrt(.5)-1, sqrt(2)-1] (Cephes-style)."""
    z = f * f
    p = fmuladd(_LP0_F, f, _LP1_F)
    p = fmuladd(p, f, _LP2_F)
    p = fmuladd(p, f, _LP3_F)
    p = fmuladd(p, f, _LP4_F)
    p = fmuladd(p, f, _LP5_F)
    p = fmuladd(p, f, _LP6_F)
    y = p * f * z
    y = fmuladd(kf, _LN2LO_F, y)
    y = fmuladd(z, _NHALF_F, y)
    y = y + c
    return fmuladd(kf, _LN2HI_F, f + y)


@_inl
def log_f32(x):
    """Natural log of float32 x (subnormal inputs handled)."""
    sub = x < _FLT_MIN
    xs = x * _TWO23_F if sub else x
    kb = _M23_F if sub else _ZERO_F
    ix = _add32(f32_as_i32(xs), 0x3F800000 - 0x3F3504F3)
    k = _sub32(_sar32(ix, 23), 127)
    m = i32_as_f32(_add32(_and32(ix, 0x007FFFFF), 0x3F3504F3))  # [sqrt(.5), sqrt(2))
    kf = _i2f32(k) + kb
    res = _log_kernel_f32(m - _ONE_F, kf, _NZERO_F)  # y + -0.0 folds away
    res = res if x < _INF_F else x                 # +inf, NaN
    res = _NAN_F if x < _ZERO_F else res
    return _NINF_F if x == _ZERO_F else res


@_inl
def log1p_f32(x):
    """log(1 + x) for float32 x, relative accuracy for small |x|."""
    u = x + _ONE_F
    iu = _add32(f32_as_i32(u), 0x3F800000 - 0x3F3504F3)
    k = _sub32(_sar32(iu, 23), 127)
    m = i32_as_f32(_add32(_and32(iu, 0x007FFFFF), 0x3F3504F3))
    # correction for the rounding of 1 + x: log(1+x) - log(u) ~ c
    c = (_ONE_F - (u - x)) if k >= 2 else (x - (u - _ONE_F))
    # c/u is below 2^-24 relative to the result, so a ~1% reciprocal is
    # plenty: bit-trick seed + one Newton step instead of a division.
    ru = i32_as_f32(_sub32(0x7EF311C3, f32_as_i32(u)))
    ru = ru * fmuladd(-u, ru, _TWO_F)
    k0 = k == 0
    f = x if k0 else m - _ONE_F
    c = c * ru if (k < 25) & (k != 0) else _ZERO_F  # seed invalid for u >= 2^25
    res = _log_kernel_f32(f, _i2f32(k), c)
    res = res if x < _INF_F else x                 # +inf, NaN
    res = _NAN_F if x < -_ONE_F else res
    res = _NINF_F if x == -_ONE_F else res
    return x if x == _ZERO_F else res


@_inl
def tanh_f32(x):
    """tanh of float32 x = expm1(2|x|)/(expm1(2|x|)+2) with the sign of x."""
    a = abs(x)
    a = _TANH_CLAMP_F if a > _TANH_CLAMP_F else a  # NaN passes through
    y = a + a
    r, t = _reduce_exp_f32(y)
    e = _expm1_poly_f32(r)
    s = i32_as_f32(_shl32(_add32(f32_as_i32(t), 127 - _RND_BITS_F), 23))  # k in [0, 28]
    em1 = fmuladd(s, e, s - _ONE_F)
    return math.copysign(fdiv(em1, em1 + _TWO_F), x)


@_inl
def sigmoid_f32(x):
    """1/(1+exp(-x)) for float32 x; exp(x)/(1+exp(x)) for x < 0 (no overflow)."""
    e = exp_f32(-abs(x))
    num = _ONE_F if x >= _ZERO_F else e
    return fdiv(num, _ONE_F + e)


@_inl
def erf_f32(x):
    """Error function of float32 x."""
    a = abs(x)
    z = x * x
    # |x| < 0.8: x + x*A(x^2)
    p = fmuladd(_EA5_F, z, _EA4_F)
    p = fmuladd(p, z, _EA3_F)
    p = fmuladd(p, z, _EA2_F)
    p = fmuladd(p, z, _EA1_F)
    p = fmuladd(p, z, _EA0_F)
    small = fmuladd(x, p, x)
    # |x| >= 0.8: 1 - 2^(Q(u) - 2), u = min(|x|, 4) - S0
    u = (_ERF_CLAMP_F if a > _ERF_CLAMP_F else a) - _ERF_S0_F  # NaN passes through
    # Both polynomials: the three leading steps by Horner (they set the accuracy), the degree-3 tail
    # as two independent pairs joined by u^2 (8 instead of 12 cycles of FMA latency each, for two more
    # multiplies: this chain, not the FMA count, bounds the gelu kernels).  Max error unchanged (0.80 ulp; every float32 in [0.8, 4.5) compared
    # with the all-Horner form: the same maxima per sub-range, ~0.01% of results 1 ulp apart).
    u2 = u * u
    qb = fmuladd(_EQ4_F, u, _EQ3_F)
    qc = fmuladd(_EQ6_F, u, _EQ5_F)
    qb = fmuladd(qc, u2, qb)
    q = fmuladd(qb, u, _EQ2_F)
    q = fmuladd(q, u, _EQ1_F)
    q = fmuladd(q, u, _EQ0_F)                      # log2(erfc(t)) + 2 in [-24, 0.05]
    t = q + _RND_F                                 # k = rint(q) in the low bits
    f = q - (t - _RND_F)                           # in [-1/2, 1/2], exact
    f2 = f * f
    eb = fmuladd(_EX4_F, f, _EX3_F)
    ec = fmuladd(_EX6_F, f, _EX5_F)
    eb = fmuladd(ec, f2, eb)
    e = fmuladd(eb, f, _EX2_F)
    e = fmuladd(e, f, _EX1_F)
    e = fmuladd(e, f, _ONE_F)                      # 2^f
    s = i32_as_f32(_shl32(_add32(f32_as_i32(t), 125 - _RND_BITS_F), 23))  # 2^(k-2), k-2 in [-26, -2]
    big = math.copysign(_ONE_F - e * s, x)
    return small if a < _ERF_SPLIT_F else big


# ---- sin / cos (float32) -------------------------------------------------
# Range reduction and kernels in float64 (musl __rem_pio2f / __sindf /
# __cosdf method): y = x - n*pi/2 with pi/2 split so that n*PIO2_1 is exact.
_INVPIO2_D = F64(6.36619772367581382433e-01)
_PIO2_1_D = F64(1.57079631090164184570e+00)   # first 25 bits of pi/2
_PIO2_1T_D = F64(1.58932547735281966916e-08)  # pi/2 - _PIO2_1
_NPIO2_1_D = F64(-1.57079631090164184570e+00)
_NPIO2_1T_D = F64(-1.58932547735281966916e-08)
_S1_D = F64(-0.166666666416265235595)          # __sindf.c
_S2_D = F64(0.0083333293858894631756)
_S3_D = F64(-0.000198393348360966317347)
_S4_D = F64(0.0000027183114939898219064)
_C0_D = F64(-0.499999997251031003120)          # __cosdf.c
_C1_D = F64(0.0416666233237390631894)
_C2_D = F64(-0.00138867637746099294692)
_C3_D = F64(0.0000243904487962774090654)


@_inl
def _trig_f32(x, cos_shift):
    """sin(x) (cos_shift=0) or cos(x) (cos_shift=1) for float32 x."""
    d = F64(x)
    n = fmuladd(d, _INVPIO2_D, _RND_D)            # rint(x*2/pi) in the low bits
    nf = n - _RND_D
    y = fmuladd(nf, _NPIO2_1_D, d)
    y = fmuladd(nf, _NPIO2_1T_D, y)               # |y| <= pi/4 (+eps)
    q = f64_as_i64(n) + cos_shift                  # quadrant (low 2 bits)
    z = y * y
    w = z * z
    # sin kernel (musl __sindf): y + y*z*(S1 + z*S2) + y*z*w*(S3 + z*S4)
    sr = fmuladd(z, _S4_D, _S3_D)
    sp = fmuladd(y * z, fmuladd(z, _S2_D, _S1_D), y)
    sv = fmuladd(y * z * w, sr, sp)
    # cos kernel (musl __cosdf): 1 + z*C0 + w*C1 + w*z*(C2 + z*C3)
    cr = fmuladd(z, _C3_D, _C2_D)
    cp = fmuladd(w, _C1_D, fmuladd(z, _C0_D, _ONE_D))
    cv = fmuladd(w * z, cr, cp)
    v = cv if (q & 1) != 0 else sv
    v = -v if (q & 2) != 0 else v
    return F32(v)


@_inl
def sin_f32(x):
    """sin of float32 x, computed in float64 internally (4 lanes per ymm).

    Within 1 ulp for |x| < 4e8 (covers any argument that makes sense in a
    network); for larger |x| the Cody-Waite reduction is no longer exact
    and the result, while in [-1, 1], degrades.  sin(+-inf) = NaN.
    """
    v = _trig_f32(x, 0)
    return x if x == _ZERO_F else v                # keeps -0.0


@_inl
def cos_f32(x):
    """cos of float32 x; same method and limits as :func:`sin_f32`."""
    return _trig_f32(x, 1)


# ==========================================================================
# float64
# ==========================================================================

@_inl
def _expm1_poly_f64(r):
    """expm1(r) for |r| <= ln2/2 (Taylor, degree 13; rel. error ~1e-17)."""
    p = fmuladd(_E13_D, r, _E12_D)
    p = fmuladd(p, r, _E11_D)
    p = fmuladd(p, r, _E10_D)
    p = fmuladd(p, r, _E9_D)
    p = fmuladd(p, r, _E8_D)
    p = fmuladd(p, r, _E7_D)
    p = fmuladd(p, r, _E6_D)
    p = fmuladd(p, r, _E5_D)
    p = fmuladd(p, r, _E4_D)
    p = fmuladd(p, r, _E3_D)
    p = fmuladd(p, r, _E2_D)
    return fmuladd(p, r * r, r)


@_inl
def _reduce_exp_f64(x):
    t = fmuladd(x, _LOG2E_D, _RND_D)
    k = t - _RND_D
    r = fmuladd(k, _NLN2HI_D, x)
    r = fmuladd(k, _NLN2LO_D, r)
    return r, t


@_inl
def _exp_mid_f64(x):
    """exp(x) for -1000 < x < 700 or NaN; result must be normal."""
    r, t = _reduce_exp_f64(x)
    p = _expm1_poly_f64(r) + _ONE_D
    return p * i64_as_f64((f64_as_i64(t) - _RND_BITS_D + 1023) << 52)


@_inl
def exp_f64(x):
    """exp(x) for float64 x (subnormal results kept)."""
    x = _EXP_HI_D if x > _EXP_HI_D else x          # NaN passes through
    x = _EXP_LO_D if x < _EXP_LO_D else x
    r, t = _reduce_exp_f64(x)
    p = _expm1_poly_f64(r) + _ONE_D
    k = f64_as_i64(t) - _RND_BITS_D                # k in [-1076, 1024]
    k1 = k >> 1
    k2 = k - k1
    s1 = i64_as_f64((k1 + 1023) << 52)
    s2 = i64_as_f64((k2 + 1023) << 52)
    return (p * s1) * s2


@_inl
def expm1_f64(x):
    """exp(x) - 1 for float64 x, relative accuracy for small |x|."""
    xc = _EXP_HI_D if x > _EXP_HI_D else x
    xc = _EXPM1_LO_D if xc < _EXPM1_LO_D else xc
    r, t = _reduce_exp_f64(xc)
    e = _expm1_poly_f64(r)
    k = f64_as_i64(t) - _RND_BITS_D
    k1 = k >> 1
    k2 = k - k1
    s1 = i64_as_f64((k1 + 1023) << 52)
    s2 = i64_as_f64((k2 + 1023) << 52)
    big = ((e + _ONE_D) * s1) * s2
    s = s1 * s2
    mid = fmuladd(s, e, s - _ONE_D)
    res = big if xc > _EXPM1_BIG_D else mid
    return x if x == _ZERO_D else res


@_inl
def _log_kernel_f64(f, kf, c):
    """log(1+f) + kf*ln2 + c, f in [sqrt(.5)-1, sqrt(2)-1] (fdlibm kernel)."""
    hfsq = _HALF_D * f * f
    s = fdiv(f, _TWO_D + f)
    z = s * s
    w = z * z
    t1 = w * fmuladd(w, fmuladd(w, _LG6_D, _LG4_D), _LG2_D)
    t2 = z * fmuladd(w, fmuladd(w, fmuladd(w, _LG7_D, _LG5_D), _LG3_D), _LG1_D)
    rr = t2 + t1
    return fmuladd(kf, _LN2HI_D, -((hfsq - fmuladd(s, hfsq + rr, fmuladd(kf, _LN2LO_D, c))) - f))


@_inl
def log_f64(x):
    """Natural log of float64 x (subnormal inputs handled)."""
    sub = x < _DBL_MIN
    xs = x * _TWO54_D if sub else x
    kb = _M54_D if sub else _ZERO_D
    ix = f64_as_i64(xs) + (0x3FF0000000000000 - 0x3FE6A09E667F3BCD)
    k = (ix >> 52) - 1023
    m = i64_as_f64((ix & 0x000FFFFFFFFFFFFF) + 0x3FE6A09E667F3BCD)
    kf = _i2f64(k) + kb
    res = _log_kernel_f64(m - _ONE_D, kf, _NZERO_D)
    res = res if x < _INF_D else x
    res = _NAN_D if x < _ZERO_D else res
    return _NINF_D if x == _ZERO_D else res


@_inl
def log1p_f64(x):
    """log(1 + x) for float64 x, relative accuracy for small |x|."""
    u = x + _ONE_D
    iu = f64_as_i64(u) + (0x3FF0000000000000 - 0x3FE6A09E667F3BCD)
    k = (iu >> 52) - 1023
    m = i64_as_f64((iu & 0x000FFFFFFFFFFFFF) + 0x3FE6A09E667F3BCD)
    c = (_ONE_D - (u - x)) if k >= 2 else (x - (u - _ONE_D))
    ru = i64_as_f64(0x7FDE623822FC16E6 - f64_as_i64(u))  # ~1/u, see log1p_f32
    ru = ru * fmuladd(-u, ru, _TWO_D)
    k0 = k == 0
    f = x if k0 else m - _ONE_D
    c = c * ru if (k < 54) & (k != 0) else _ZERO_D
    res = _log_kernel_f64(f, _i2f64(k), c)
    res = res if x < _INF_D else x
    res = _NAN_D if x < -_ONE_D else res
    res = _NINF_D if x == -_ONE_D else res
    return x if x == _ZERO_D else res


@_inl
def tanh_f64(x):
    """tanh of float64 x = expm1(2|x|)/(expm1(2|x|)+2) with the sign of x."""
    a = abs(x)
    a = _TANH_CLAMP_D if a > _TANH_CLAMP_D else a
    y = a + a
    r, t = _reduce_exp_f64(y)
    e = _expm1_poly_f64(r)
    s = i64_as_f64((f64_as_i64(t) - _RND_BITS_D + 1023) << 52)  # k in [0, 58]
    em1 = fmuladd(s, e, s - _ONE_D)
    return math.copysign(fdiv(em1, em1 + _TWO_D), x)


@_inl
def sigmoid_f64(x):
    """1/(1+exp(-x)) for float64 x; exp(x)/(1+exp(x)) for x < 0."""
    e = exp_f64(-abs(x))
    num = _ONE_D if x >= _ZERO_D else e
    return fdiv(num, _ONE_D + e)


@_inl
def erf_f64(x):
    """Error function of float64 x: fdlibm s_erf.c, all regions + selects."""
    a = abs(x)
    # |x| < 0.84375: x + x*P/Q (x^2)
    z = x * x
    r = fmuladd(z, fmuladd(z, fmuladd(z, fmuladd(z, _PP4, _PP3), _PP2), _PP1), _PP0)
    s = fmuladd(z, fmuladd(z, fmuladd(z, fmuladd(z, fmuladd(z, _QQ5, _QQ4), _QQ3), _QQ2), _QQ1), _ONE_D)
    r1 = fmuladd(x, fdiv(r, s), x)
    # 0.84375 <= |x| < 1.25: erx + P/Q (|x| - 1)
    sa = a - _ONE_D
    pa = fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(
        sa, _PA6, _PA5), _PA4), _PA3), _PA2), _PA1), _PA0)
    qa = fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(sa, fmuladd(
        sa, _QA6, _QA5), _QA4), _QA3), _QA2), _QA1), _ONE_D)
    r2 = _ERX_D + fdiv(pa, qa)
    # 1.25 <= |x| < 6: 1 - exp(-z^2 - 0.5625) * exp((z-x)(z+x) + R/S) / x
    ac = _ERF_CLAMP_D if a > _ERF_CLAMP_D else a   # NaN passes through
    ac = _ERF_R2_D if ac < _ERF_R2_D else ac
    w = fdiv(_ONE_D, ac * ac)
    ra = fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(
        w, _RA7, _RA6), _RA5), _RA4), _RA3), _RA2), _RA1), _RA0)
    sa_ = fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(
        w, _SA8, _SA7), _SA6), _SA5), _SA4), _SA3), _SA2), _SA1), _ONE_D)
    rb = fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(
        w, _RB6, _RB5), _RB4), _RB3), _RB2), _RB1), _RB0)
    sb = fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(w, fmuladd(
        w, _SB7, _SB6), _SB5), _SB4), _SB3), _SB2), _SB1), _ONE_D)
    lo = ac < _ERF_R3_D
    rs = fdiv(ra if lo else rb, sa_ if lo else sb)
    zt = i64_as_f64(f64_as_i64(ac) & _HI32_MASK)   # low word cleared: zt*zt exact
    e = _exp_mid_f64(-zt * zt + _M0P5625_D) * _exp_mid_f64(fmuladd(zt - ac, zt + ac, rs))
    r3 = _ONE_D - fdiv(e, ac)
    res = r2 if a < _ERF_R2_D else r3
    res = math.copysign(res, x)
    return r1 if a < _ERF_R1_D else res


@_inl
def sin_f64(x):
    """sin of float64 x: plain libm ``math.sin`` (scalar call, no SIMD)."""
    return math.sin(x)


@_inl
def cos_f64(x):
    """cos of float64 x: plain libm ``math.cos`` (scalar call, no SIMD)."""
    return math.cos(x)
