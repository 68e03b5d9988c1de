"""Scalar helper functions that the CPU renderer's expressions call.

Every name an op's ``expr["py"]`` uses lives here.  float32 variants keep every
constant float32 so Numba keeps the arithmetic (and the vector width) in float32.
Transcendentals come from ``fastmath`` (vectorizable approximations: pip's llvmlite
has no SVML, so ``math.exp`` in a loop would be a scalar libm call).
"""
import math

import numpy as np
from numba import njit

_inl = dict(inline="always", error_model="numpy")


def _libm(fn32, fn64):
    return njit(**_inl)(fn32), njit(**_inl)(fn64)


class _Libm:
    """libm-backed fallbacks for any function ``fastmath`` does not provide."""
    exp_f32, exp_f64 = _libm(lambda x: np.exp(x), lambda x: np.exp(x))
    expm1_f32, expm1_f64 = _libm(lambda x: np.expm1(x), lambda x: np.expm1(x))
    log_f32, log_f64 = _libm(lambda x: np.log(x), lambda x: np.log(x))
    log1p_f32, log1p_f64 = _libm(lambda x: np.log1p(x), lambda x: np.log1p(x))
    tanh_f32, tanh_f64 = _libm(lambda x: np.tanh(x), lambda x: np.tanh(x))
    erf_f32, erf_f64 = _libm(lambda x: np.float32(math.erf(x)), lambda x: math.erf(x))
    sigmoid_f32, sigmoid_f64 = _libm(lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
                                     lambda x: 1.0 / (1.0 + np.exp(-x)))
    sin_f32, sin_f64 = _libm(lambda x: np.sin(x), lambda x: np.sin(x))
    cos_f32, cos_f64 = _libm(lambda x: np.cos(x), lambda x: np.cos(x))


try:
    from . import fastmath as _fastmath
except ImportError:  # pragma: no cover - fastmath is part of the package
    _fastmath = None


class _fm:
    pass


for _name in ("exp", "expm1", "log", "log1p", "tanh", "erf", "sigmoid", "sin", "cos"):
    for _sfx in ("_f32", "_f64"):
        setattr(_fm, _name + _sfx, getattr(_fastmath, _name + _sfx, None) or getattr(_Libm, _name + _sfx))

f_one32 = np.float32(1.0)
f_one64 = np.float64(1.0)
f_zero32 = np.float32(0.0)
f_zero64 = np.float64(0.0)
f_six32 = np.float32(6.0)
f_six64 = np.float64(6.0)
_half32 = np.float32(0.5)
_half64 = np.float64(0.5)
_sqrt1_2_32 = np.float32(1 / math.sqrt(2))
_sqrt1_2_64 = np.float64(1 / math.sqrt(2))
_k32 = np.float32(math.sqrt(2 / math.pi))
_k64 = np.float64(math.sqrt(2 / math.pi))
_c32 = np.float32(0.044715)
_c64 = np.float64(0.044715)
_ln2_32 = np.float32(math.log(2))
_ln2_64 = np.float64(math.log(2))
_ln10_32 = np.float32(math.log(10))
_ln10_64 = np.float64(math.log(10))
_selu_a = 1.6732632423543772848170429916717
_selu_s = 1.0507009873554804934193349852946
_sa32, _ss32 = np.float32(_selu_a), np.float32(_selu_s)
_sa64, _ss64 = np.float64(_selu_a), np.float64(_selu_s)
_three32, _three64 = np.float32(3.0), np.float64(3.0)

f_exp32, f_exp64 = _fm.exp_f32, _fm.exp_f64
f_expm1_32, f_expm1_64 = _fm.expm1_f32, _fm.expm1_f64
f_log32, f_log64 = _fm.log_f32, _fm.log_f64
f_log1p32, f_log1p64 = _fm.log1p_f32, _fm.log1p_f64
f_tanh32, f_tanh64 = _fm.tanh_f32, _fm.tanh_f64
f_erf32, f_erf64 = _fm.erf_f32, _fm.erf_f64
f_sigmoid32, f_sigmoid64 = _fm.sigmoid_f32, _fm.sigmoid_f64
_sin32_fast, f_sin64 = _fm.sin_f32, _fm.sin_f64
_cos32_fast, f_cos64 = _fm.cos_f32, _fm.cos_f64
_TRIG_FAST_MAX = np.float32(1e5)  # fastmath's range reduction is exact well below this


@njit(**_inl)
def f_sin32(x):
    # huge arguments need a full-precision reduction: libm in float64 is correctly reduced
    if abs(x) < _TRIG_FAST_MAX:
        return _sin32_fast(x)
    return np.float32(math.sin(np.float64(x)))


@njit(**_inl)
def f_cos32(x):
    if abs(x) < _TRIG_FAST_MAX:
        return _cos32_fast(x)
    return np.float32(math.cos(np.float64(x)))
# the expression table uses f_expm1{s} -> f_expm132; keep both spellings
f_expm132, f_expm164 = f_expm1_32, f_expm1_64


@njit(**_inl)
def f_exp232(x):
    # x * ln2 in float32 would cost ~|x| ulps of relative error; the float64 product is exact enough
    return np.float32(f_exp64(np.float64(x) * _ln2_64))


@njit(**_inl)
def f_exp264(x):
    return np.exp2(x)


@njit(**_inl)
def f_log232(x):
    return np.log2(x)


@njit(**_inl)
def f_log264(x):
    return np.log2(x)


@njit(**_inl)
def f_log1032(x):
    return np.log10(x)


@njit(**_inl)
def f_log1064(x):
    return np.log10(x)


@njit(**_inl)
def f_rsqrt32(x):
    return f_one32 / np.sqrt(x)


@njit(**_inl)
def f_rsqrt64(x):
    return f_one64 / np.sqrt(x)


@njit(**_inl)
def f_erfc32(x):
    return np.float32(math.erfc(x))


@njit(**_inl)
def f_erfc64(x):
    return math.erfc(x)


@njit(**_inl)
def f_gelu32(x):
    # x * Phi(x) as (x / 2) * (1 + erf(x / sqrt 2)) in every dtype and on every device: finite wherever x is
    # (3e38), -0.0 where a negative x's value underflows.  (torch's vectorised float32 kernels differ by CPU
    # capability: AVX-512 halves last and overflows past 1.7e38, AVX2 and default give +0.0 where it underflows;
    # the halving is exact otherwise, so only those extremes depend on the order.)
    return _half32 * x * (f_one32 + f_erf32(x * _sqrt1_2_32))


@njit(**_inl)
def f_gelu64(x):
    # (the order of f_gelu32: gelu(1.7e308) stays finite)
    return _half64 * x * (f_one64 + f_erf64(x * _sqrt1_2_64))


@njit(**_inl)
def f_gelu_tanh32(x):
    return _half32 * x * (f_one32 + f_tanh32(_k32 * (x + _c32 * x * x * x)))


@njit(**_inl)
def f_gelu_tanh64(x):
    return _half64 * x * (f_one64 + f_tanh64(_k64 * (x + _c64 * x * x * x)))


@njit(**_inl)
def f_softplus32(x):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))
    return max(x, f_zero32) + f_log1p32(f_exp32(-abs(x)))


@njit(**_inl)
def f_softplus64(x):
    return max(x, f_zero64) + f_log1p64(f_exp64(-abs(x)))


@njit(**_inl)
def f_softplus_bt32(x, beta, threshold):
    bx = x * beta
    return x if bx > threshold else f_softplus32(bx) / beta


@njit(**_inl)
def f_softplus_bt64(x, beta, threshold):
    bx = x * beta
    return x if bx > threshold else f_softplus64(bx) / beta


@njit(**_inl)
def f_elu32(x, alpha, scale, input_scale):
    return scale * x if x > f_zero32 else scale * alpha * f_expm1_32(x * input_scale)


@njit(**_inl)
def f_elu64(x, alpha, scale, input_scale):
    return scale * x if x > f_zero64 else scale * alpha * f_expm1_64(x * input_scale)


@njit(**_inl)
def f_selu32(x):
    return _ss32 * (x if x > f_zero32 else _sa32 * f_expm1_32(x))


@njit(**_inl)
def f_selu64(x):
    return _ss64 * (x if x > f_zero64 else _sa64 * f_expm1_64(x))


@njit(**_inl)
def f_hardsigmoid32(x):
    return min(max(x + _three32, f_zero32), f_six32) / f_six32


@njit(**_inl)
def f_hardsigmoid64(x):
    return min(max(x + _three64, f_zero64), f_six64) / f_six64


# torch's order: x * (x + 3 clamped) / 6 (hardswish(3e38) overflows to inf there, as in torch)
@njit(**_inl)
def f_hardswish32(x):
    return x * min(max(x + _three32, f_zero32), f_six32) / f_six32


@njit(**_inl)
def f_hardswish64(x):
    return x * min(max(x + _three64, f_zero64), f_six64) / f_six64


@njit(**_inl)
def f_lgamma32(x):
    return np.float32(math.lgamma(x))


@njit(**_inl)
def f_lgamma64(x):
    return math.lgamma(x)


@njit(**_inl)
def f_sign32(x):
    return np.float32((x > 0) - (x < 0))


@njit(**_inl)
def f_sign64(x):
    return np.float64((x > 0) - (x < 0))


@njit(**_inl)
def f_relu(x):
    # NaN propagates (torch.relu(nan) = nan)
    return x if not x < 0 else x * 0


@njit(**_inl)
def f_relu32(x):
    # typed zero: x * 0 would turn -inf into nan (torch.relu(-inf) = 0); NaN propagates
    return x if not x < f_zero32 else f_zero32


@njit(**_inl)
def f_relu64(x):
    return x if not x < f_zero64 else f_zero64


# NaN from either side, else the larger (smaller); a when equal (-0.0 vs 0.0 included).  One compare with
# b first (it is false when b is NaN, so b's NaN is returned), one unordered check on a, one select: clamp's
# kernel (two of these) ran at 1.7x a copy's time with the four compares and two selects written before
@njit(**_inl)
def f_maximum(a, b):
    return a if (a != a or b <= a) else b


@njit(**_inl)
def f_minimum(a, b):
    return a if (a != a or b >= a) else b


@njit(**_inl)
def f_fmax(a, b):
    return b if a != a else (a if (b != b or a >= b) else b)


@njit(**_inl)
def f_fmin(a, b):
    return b if a != a else (a if (b != b or a <= b) else b)


@njit(**_inl)
def f_clamp(x, lo, hi):
    return f_minimum(f_maximum(x, lo), hi)


f_clamp32 = f_clamp64 = f_clamp


@njit(**_inl)
def f_floordiv(a, b):
    # torch: floor(a / b), computed as Python does for floats
    if b == 0:
        return a / b
    m = np.fmod(a, b)
    d = (a - m) / b
    if m != 0 and ((b < 0) != (m < 0)):
        d -= 1
    if d != 0:
        fd = np.floor(d)
        if d - fd > 0.5:
            fd += 1
        return fd
    return np.copysign(d * 0, a / b)


@njit(**_inl)
def f_ifloordiv(a, b):
    # divisor zero is refused by the frontend before any kernel runs
    if b == -1:  # INT_MIN // -1 wraps to INT_MIN like torch (Numba's // would give 0)
        return -a
    q = a // b if b != 0 else a * 0
    return q


@njit(**_inl)
def f_itruncdiv(a, b):
    if b == 0:
        return a * 0
    if b == -1:
        return -a
    q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q += 1
    return q


@njit(**_inl)
def f_remainder(a, b):
    m = np.fmod(a, b)
    if m != 0 and ((b < 0) != (m < 0)):
        m += b
    return m


@njit(**_inl)
def f_iremainder(a, b):
    return a % b if b != 0 else a * 0


@njit(**_inl)
def f_fmod(a, b):
    return np.fmod(a, b)


@njit(**_inl)
def f_ifmod(a, b):
    if b == 0:
        return a * 0
    r = a % b
    if r != 0 and ((r < 0) != (a < 0)):
        r -= b
    return r


@njit(**_inl)
def f_pow(a, b):
    return a ** b


_inf64 = np.float64(np.inf)
_nan64 = -np.float64(np.nan)        # (sign set: the x86 default NaN libm's powf returns for (-2) ** 0.5)


@njit(**_inl)
def f_pow32(a, b):
    # float32 a ** b as exp(b * log|a|) in float64 (fastmath's log_f64 / exp_f64: vectorizable, where powf is
    # a scalar libm call per element, ~7 ns here): <= ~2e-14 relative before the one rounding to float32 (the
    # exponent's error, |b log|a|| <= ~104 for float32 results, times 2e-16), so the result is the correctly
    # rounded power but within ~1e-6 ulp of a rounding boundary (glibc's powf: <= 0.82 ulp).  C99's special cases: x ** 0 = 1 and 1 ** y = 1 (NaN included), (-1) ** +-inf = 1, a finite
    # negative base to a non-integer power NaN, odd integer powers keep the base's sign (-0.0 and -inf too);
    # zeros, infinities and NaN otherwise follow from log / exp (log 0 = -inf, log inf = inf).
    x = np.float64(a)
    y = np.float64(b)
    r = f_exp64(y * f_log64(abs(x)))
    h = y * 0.5
    yint = np.floor(y) == y
    odd = yint and np.floor(h) != h
    r = -r if (odd and np.copysign(1.0, x) < 0) else r
    r = _nan64 if (x < 0 and x > -_inf64 and not yint and y == y) else r
    r = 1.0 if (y == 0 or x == 1 or (x == -1 and abs(y) == _inf64)) else r
    return np.float32(r)


@njit(**_inl)
def f_ipow(a, b):
    # exponentiation by squaring with wrap-around, like torch's integer pow
    if b < 0:
        return a * 0 + (1 if (a == 1) else (-1 if a == -1 and (b % 2) else (1 if a == -1 else 0)))
    r = a * 0 + 1
    base = a
    e = b
    while e:
        if e & 1:
            r = r * base
        base = base * base
        e >>= 1
    return r


@njit(**_inl)
def f_shl(a, b):
    return a << b if 0 <= b < 64 else a * 0


@njit(**_inl)
def f_shr(a, b):
    return a >> b if 0 <= b < 64 else (a * 0 - 1 if a < 0 else a * 0)


@njit(**_inl)
def f_xlogy(x, y):
    if y != y:
        return y
    return x - x if x == 0 else x * np.log(y)  # +0.0 for x = -0.0, like torch


# ---- float16 / bfloat16 rounding inside fused kernels (jit/fusion.py groups low-float ops: every member's
# result is rounded to its storage dtype and widened again, so a fused chain gives eager's bits).  The LLVM
# renderer emits its own code for these two (llvm_render: fptrunc/fpext through ``half``, the bfloat16 bit
# rounding); these bodies serve the Numba renderer and are checked against numpy / ml_dtypes in
# tests/test_lowfloat.py.
from .fastmath import _add32, _and32, _sar32, f32_as_i32, i32_as_f32  # noqa: E402
from .fastmath import fmuladd  # noqa: E402,F401  (ops' expressions: lerp's explicit fused multiply-add)

_f16_min_normal = np.float32(2.0 ** -14)
_f16_overflow = np.float32(65536.0)
_half_f32 = np.float32(0.5)
_inf32 = np.float32(np.inf)


@njit(**_inl)
def f_round_bf16(x):
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), as float32.  NaN: the quiet NaN
    with ``x``'s sign (ml_dtypes' float32 -> bfloat16)."""
    b = f32_as_i32(x)
    r = _and32(_add32(b, _add32(_and32(_sar32(b, 16), 1), 32767)), -65536)
    q = _add32(_and32(b, -2147483648), 2143289344)     # sign | 0x7fc00000
    return i32_as_f32(r) if x == x else i32_as_f32(q)


@njit(**_inl)
def f_round_f16(x):
    """float32 ``x`` rounded to the nearest float16 (ties to even; subnormals, overflow to inf), as float32.
    NaN: quieted, payload truncated to float16's 10 bits (the F16C conversion's result)."""
    a = abs(x)
    if a < _f16_min_normal:    # float16 subnormals: multiples of 2**-24 (0.5's float32 ulp)
        return np.copysign((a + _half_f32) - _half_f32, x)
    b = f32_as_i32(x)
    if x != x:
        return i32_as_f32(_and32(_add32(_and32(b, -4194305), 4194304), -8192))   # quiet bit set, low bits cut
    y = i32_as_f32(_and32(_add32(b, _add32(_and32(_sar32(b, 13), 1), 4095)), -8192))
    if abs(y) >= _f16_overflow:
        return np.copysign(_inf32, x)
    return y


# ---- ops torch's CPU kernels compute in float16/bfloat16 arithmetic (every step rounded to the storage
# dtype, not float32 "opmath"): floor_divide (c10::div_floor_floating on Half/BFloat16 values) and xlogy
# (x * log(y) with the log rounded).  devices/cpu/elementwise.py (_LOW_STEPS) substitutes them for
# f_floordiv / f_xlogy when every operand is stored as a low float (or an integer cast to one); a float32
# opmath scalar (x // 2.5) keeps the float32 helper, as torch's scalar path does.  (float32 steps: an int
# literal would make them float64, as Numba types ``d - 1``.)
_one32 = np.float32(1.0)


@njit(**_inl)
def f_floordiv_f16(a, b):
    if b == 0:
        return a / b
    m = np.fmod(a, b)
    d = f_round_f16(f_round_f16(a - m) / b)
    if m != 0 and ((b < 0) != (m < 0)):
        d = f_round_f16(d - _one32)
    if d != 0:
        fd = np.floor(d)
        if f_round_f16(d - fd) > 0.5:
            fd = f_round_f16(fd + _one32)
        return fd
    return np.copysign(d * 0, a / b)


@njit(**_inl)
def f_floordiv_bf16(a, b):
    if b == 0:
        return a / b
    m = np.fmod(a, b)
    d = f_round_bf16(f_round_bf16(a - m) / b)
    if m != 0 and ((b < 0) != (m < 0)):
        d = f_round_bf16(d - _one32)
    if d != 0:
        fd = np.floor(d)
        if f_round_bf16(d - fd) > 0.5:
            fd = f_round_bf16(fd + _one32)
        return fd
    return np.copysign(d * 0, a / b)


@njit(**_inl)
def f_xlogy_f16(x, y):
    if y != y:
        return y
    return x - x if x == 0 else x * f_round_f16(np.log(y))


@njit(**_inl)
def f_xlogy_bf16(x, y):
    if y != y:
        return y
    return x - x if x == 0 else x * f_round_bf16(np.log(y))
