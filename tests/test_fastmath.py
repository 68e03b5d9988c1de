"""Accuracy, special values and vectorization of neetorch/devices/cpu/fastmath.py.

The module is loaded by file path so this test runs even while the rest of
the package does not import.  Truth: numpy float64 for the float32 functions,
numpy longdouble (80-bit x87) for the float64 ones, mpmath for erf_f64.
"""
import importlib.util
import math
import pathlib
import re

import numba
import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "neetorch" / "devices" / "cpu" / "fastmath.py"
_spec = importlib.util.spec_from_file_location("_neetorch_fastmath_under_test", _PATH)
fm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fm)

F32_FUNCS = ["exp", "expm1", "log", "log1p", "tanh", "erf", "sigmoid", "sin", "cos"]
F64_FUNCS = ["exp", "expm1", "log", "log1p", "tanh", "erf", "sigmoid"]
MAX_ULP = 4.0

_KERNELS = {}


def kernel(name):
    """A serial njit loop out[i] = fn(a[i]), compiled once per function."""
    if name not in _KERNELS:
        fn = getattr(fm, name)

        @numba.njit
        def loop(a, out):
            for i in range(a.size):
                out[i] = fn(a[i])
        _KERNELS[name] = loop
    return _KERNELS[name]


def run(name, x):
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    kernel(name)(x, out)
    return out


# ---------------------------------------------------------------- references

def _sigmoid_ref(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _erf_ref64(x):
    from scipy.special import erf
    return erf(x)


_REF = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
    "tanh": np.tanh, "sigmoid": _sigmoid_ref, "sin": np.sin, "cos": np.cos,
}


def reference(base, x):
    """Truth for x: float64 math for float32 x, longdouble for float64 x."""
    wide = np.float64 if x.dtype == np.float32 else np.longdouble
    xw = x.astype(wide)
    with np.errstate(all="ignore"):
        if base == "erf":
            if x.dtype == np.float32:
                return _erf_ref64(xw)
            return _erf_ref_mp(x)
        return _REF[base](xw)


def _erf_ref_mp(x):
    import mpmath
    mpmath.mp.prec = 80
    out = np.empty(x.shape, np.longdouble)
    for i, v in enumerate(x.tolist()):
        if math.isnan(v):
            out[i] = np.nan
        elif math.isinf(v):
            out[i] = math.copysign(1.0, v)
        else:
            r = mpmath.erf(mpmath.mpf(v))
            # two-part conversion keeps ~106 bits
            hi = float(r)
            out[i] = np.longdouble(hi) + np.longdouble(float(r - hi))
    return out


def ulp_error(got, ref, dtype):
    """|got - ref| in ulps of dtype at ref's binade (subnormal ulp floor).

    Exact matches (incl. infinities and NaN == NaN) count as 0; a mismatch
    in inf/NaN-ness counts as inf.
    """
    fi = np.finfo(dtype)
    ref = np.asarray(ref)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        _, e = np.frexp(np.abs(ref))
        e = np.maximum(e, fi.minexp + 1)
        ulp = np.ldexp(np.ones_like(ref), e - 1 - fi.nmant)
        err = np.abs(got.astype(ref.dtype) - ref) / ulp
    same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    err = np.where(same, 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    return err


# -------------------------------------------------------------------- inputs

RNG = np.random.default_rng(1234)


def _bits32(lo, hi, n):
    return RNG.integers(lo, hi, n, dtype=np.int64).astype(np.uint32).view(np.float32)


def _bits64(lo, hi, n):
    return RNG.integers(lo, hi, n, dtype=np.int64).view(np.float64)


def _pos_all(dt, n):
    """Positive finite values, uniform over the bit patterns (all binades)."""
    if dt == np.float32:
        return _bits32(1, 0x7F800000, n)
    return _bits64(1, 0x7FF0000000000000, n)


def _pos_below(dt, v, n):
    """Positive values in (0, v], uniform over bit patterns."""
    if dt == np.float32:
        return _bits32(1, int(np.float32(v).view(np.uint32)) + 1, n)
    return _bits64(1, int(np.float64(v).view(np.int64)) + 1, n)


def _sym(a):
    return np.concatenate([a, -a])


def inputs(base, dt):
    n = 400_000 if dt == np.float32 else 150_000
    lin = lambda a, b: np.linspace(a, b, n, dtype=np.float64).astype(dt)
    f32 = dt == np.float32
    if base == "exp":
        parts = [lin(-104, 89) if f32 else lin(-746, 710), _sym(_pos_below(dt, 120 if f32 else 800, n))]
    elif base == "expm1":
        parts = [lin(-30, 89) if f32 else lin(-60, 710), _sym(_pos_below(dt, 120 if f32 else 800, n)),
                 lin(-1, 1)]
    elif base == "log":
        parts = [_pos_all(dt, n), lin(0.5, 2.0), lin(0.999, 1.001)]
    elif base == "log1p":
        parts = [_pos_all(dt, n), -_pos_below(dt, np.nextafter(dt(1), dt(0)), n), lin(-0.999, 1.0),
                 lin(-1.0, -0.9)[1:]]
    elif base == "tanh":
        parts = [_sym(_pos_below(dt, 25, n)), lin(-10, 10) if f32 else lin(-20, 20)]
    elif base == "erf":
        parts = [_sym(_pos_below(dt, 7, n)), lin(-5, 5) if f32 else lin(-7, 7)]
        if not f32:
            parts = [p[::10] for p in parts]   # mpmath reference is slow
    elif base == "sigmoid":
        parts = [lin(-110, 110) if f32 else lin(-750, 750), _sym(_pos_all(dt, n))]
    elif base in ("sin", "cos"):
        parts = [lin(-100, 100), _sym(_pos_below(dt, 4.0e8, n)), lin(-1e6, 1e6)]
    return np.concatenate(parts).astype(dt)


# --------------------------------------------------------------------- tests

MEASURED = {}


@pytest.mark.parametrize("base", F32_FUNCS)
def test_f32_ulp(base):
    x = inputs(base, np.float32)
    got = run(base + "_f32", x)
    assert got.dtype == np.float32
    err = ulp_error(got, reference(base, x), np.float32)
    worst = int(np.argmax(err))
    MEASURED[base + "_f32"] = float(err[worst])
    assert err[worst] <= MAX_ULP, (base, x[worst], got[worst], err[worst])


@pytest.mark.parametrize("base", F64_FUNCS)
def test_f64_ulp(base):
    x = inputs(base, np.float64)
    got = run(base + "_f64", x)
    assert got.dtype == np.float64
    err = ulp_error(got, reference(base, x), np.float64)
    worst = int(np.argmax(err))
    MEASURED[base + "_f64"] = float(err[worst])
    assert err[worst] <= MAX_ULP, (base, x[worst], got[worst], err[worst])


def test_erf_f64_dense_vs_scipy():
    # scipy's erf is itself ~1 ulp, so allow one extra
    x = np.concatenate([np.linspace(-7, 7, 1_000_001), _sym(_pos_below(np.float64, 7, 500_000))])
    err = ulp_error(run("erf_f64", x), _erf_ref64(x).astype(np.longdouble), np.float64)
    assert err.max() <= MAX_ULP + 1


@pytest.mark.parametrize("base", ["expm1", "log1p", "tanh", "erf", "sin"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_tiny_relative(base, dt):
    if base == "sin" and dt == np.float64:
        pytest.skip("sin_f64 is libm")
    fi = np.finfo(dt)
    x = _sym(np.geomspace(fi.smallest_subnormal, 1e-2, 20001).astype(dt))
    got = run(f"{base}_{'f32' if dt == np.float32 else 'f64'}", x)
    err = ulp_error(got, reference(base, x), dt)
    assert err.max() <= MAX_ULP
    assert np.all(np.signbit(got) == np.signbit(x))


def _special(name, dt, vals):
    return run(name, np.array(vals, dtype=dt))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_special_values(dt):
    sfx = "_f32" if dt == np.float32 else "_f64"
    inf, nan = np.inf, np.nan
    fi = np.finfo(dt)

    r = _special("exp" + sfx, dt, [inf, -inf, nan, 0.0, -0.0, 1000.0, -1000.0, 89.0 if dt == np.float32 else 710.0])
    assert r[0] == inf and r[1] == 0 and np.isnan(r[2]) and r[3] == 1 and r[4] == 1
    assert r[5] == inf and r[6] == 0 and r[7] == inf
    # largest finite and smallest subnormal results
    big = np.log(fi.max.astype(np.float64)) if dt == np.float32 else np.log(np.longdouble(fi.max))
    r = _special("exp" + sfx, dt, [np.nextafter(dt(big), dt(0))])
    assert np.isfinite(r[0]) and r[0] > fi.max / 2

    r = _special("expm1" + sfx, dt, [inf, -inf, nan, 0.0, -0.0, 1000.0, -1000.0])
    assert r[0] == inf and r[1] == -1 and np.isnan(r[2]) and r[3] == 0 and r[5] == inf and r[6] == -1
    assert not np.signbit(r[3]) and np.signbit(r[4])

    r = _special("log" + sfx, dt, [0.0, -0.0, -1.0, -inf, inf, nan, 1.0, fi.smallest_subnormal, fi.max])
    assert r[0] == -inf and r[1] == -inf and np.isnan(r[2]) and np.isnan(r[3]) and r[4] == inf
    assert np.isnan(r[5]) and r[6] == 0
    assert abs(r[7] - np.log(np.float64(fi.smallest_subnormal))) < 1e-6 * abs(r[7])
    assert np.isfinite(r[8])

    r = _special("log1p" + sfx, dt, [-1.0, -2.0, -inf, inf, nan, 0.0, -0.0, fi.max])
    assert r[0] == -inf and np.isnan(r[1]) and np.isnan(r[2]) and r[3] == inf and np.isnan(r[4])
    assert r[5] == 0 and not np.signbit(r[5]) and np.signbit(r[6]) and np.isfinite(r[7])

    r = _special("tanh" + sfx, dt, [inf, -inf, nan, 0.0, -0.0, 50.0, -50.0, fi.max, -fi.max])
    assert r[0] == 1 and r[1] == -1 and np.isnan(r[2]) and r[3] == 0 and np.signbit(r[4])
    assert r[5] == 1 and r[6] == -1 and r[7] == 1 and r[8] == -1

    r = _special("erf" + sfx, dt, [inf, -inf, nan, 0.0, -0.0, 10.0, -10.0, fi.max])
    assert r[0] == 1 and r[1] == -1 and np.isnan(r[2]) and r[3] == 0 and np.signbit(r[4])
    assert r[5] == 1 and r[6] == -1 and r[7] == 1

    r = _special("sigmoid" + sfx, dt, [inf, -inf, nan, 0.0, 200.0, -2000.0, fi.max, -fi.max])
    assert r[0] == 1 and r[1] == 0 and np.isnan(r[2]) and r[3] == 0.5
    assert r[4] == 1 and r[5] == 0 and r[6] == 1 and r[7] == 0

    if dt == np.float32:
        r = _special("sin_f32", dt, [inf, -inf, nan, 0.0, -0.0])
        assert np.isnan(r[0]) and np.isnan(r[1]) and np.isnan(r[2]) and r[3] == 0 and np.signbit(r[4])
        r = _special("cos_f32", dt, [inf, nan, 0.0, -0.0])
        assert np.isnan(r[0]) and np.isnan(r[1]) and r[2] == 1 and r[3] == 1


def test_sigmoid_saturation_exact():
    # float32: exactly 1 once 1 + exp(-x) rounds to 1; exactly 0 past underflow
    x = np.array([17.0, 30.0, 88.0, 104.0, -104.0, -200.0], np.float32)
    r = run("sigmoid_f32", x)
    assert r[1] == 1 and r[2] == 1 and r[3] == 1 and r[4] == 0 and r[5] == 0
    assert 0 < r[0] <= 1
    # subnormal results are produced, not flushed
    assert 0 < run("sigmoid_f32", np.array([-95.0], np.float32))[0] < np.finfo(np.float32).tiny
    assert 0 < run("sigmoid_f64", np.array([-720.0]))[0] < np.finfo(np.float64).tiny


def test_scalar_call_types():
    # callable from Python too; f32 functions return float32 inside jitted code
    @numba.njit
    def k32(x):
        return fm.exp_f32(x), fm.log_f32(x), fm.tanh_f32(x), fm.erf_f32(x), fm.sigmoid_f32(x), \
            fm.expm1_f32(x), fm.log1p_f32(x), fm.sin_f32(x), fm.cos_f32(x)
    k32(np.float32(0.5))
    ret = k32.overloads[k32.signatures[0]].signature.return_type
    assert all(t == numba.float32 for t in ret.types), ret
    assert abs(fm.exp_f64(1.0) - math.e) < 1e-15


_PACKED = {
    np.float32: re.compile(r"\bv(fmadd|fnmadd|fmsub|mul|add|sub|div)\w*ps\s[^\n]*%[yz]mm"),
    np.float64: re.compile(r"\bv(fmadd|fnmadd|fmsub|mul|add|sub|div)\w*pd\s[^\n]*%[yz]mm"),
}


@pytest.mark.parametrize("name", [f + "_f32" for f in F32_FUNCS] + [f + "_f64" for f in F64_FUNCS])
def test_vectorizes(name):
    dt = np.float32 if name.endswith("_f32") else np.float64
    k = kernel(name)
    x = np.linspace(0.1, 2, 64).astype(dt)
    k(x, np.empty_like(x))
    sig = [s for s in k.signatures if s[0].dtype == numba.from_dtype(dt)][0]
    asm = k.inspect_asm(sig)
    # sin/cos_f32 compute in float64 internally, so their packed math is pd
    pat = _PACKED[np.float64 if name in ("sin_f32", "cos_f32") else dt]
    assert len(pat.findall(asm)) >= 8, f"{name}: no packed SIMD math found"
    calls = [l for l in asm.splitlines() if re.search(r"\bcall", l)]
    assert not [l for l in calls if re.search(r"exp|log|tanh|erf|sin|cos|fma", l)], calls
    if dt == np.float32 and name not in ("sin_f32", "cos_f32"):
        llvm = k.inspect_llvm(sig)
        assert "fpext" not in llvm, f"{name}: float32 code widens to double"


def test_report_measured(capsys):
    # prints the maxima collected by the ulp tests above (run with -s to see)
    if MEASURED:
        with capsys.disabled():
            print("\nmax ulp error:", ", ".join(f"{k}={v:.2f}" for k, v in sorted(MEASURED.items())))


@numba.njit
def _sigmoid_libm(x):
    e = math.exp(-abs(x))
    return 1.0 / (1.0 + e) if x >= 0 else e / (1.0 + e)


_LIBM = {
    "exp": numba.njit(lambda x: math.exp(x)), "expm1": numba.njit(lambda x: math.expm1(x)),
    "log": numba.njit(lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)),
    "log1p": numba.njit(lambda x: math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)),
    "tanh": numba.njit(lambda x: math.tanh(x)), "erf": numba.njit(lambda x: math.erf(x)),
    "sigmoid": _sigmoid_libm,
    "sin": numba.njit(lambda x: math.sin(x) if abs(x) <= 4.0e8 else math.nan),
    "cos": numba.njit(lambda x: math.cos(x) if abs(x) <= 4.0e8 else math.nan),
}


def _exhaustive_kernel(fn, ref):
    """max ulp error of fn over every float32 bit pattern, in parallel blocks.

    Truth is the float64 libm function (glibc: < 1 float64 ulp).
    """
    @numba.njit(parallel=True)
    def sweep(nblocks, blk, stride, errs, where):
        for b in numba.prange(nblocks):
            worst = 0.0
            at = np.uint32(0)
            for j in range(0, blk, stride):
                u = np.uint32(b * blk + j + (b * 7) % stride)
                x = f32_from_bits(u)
                t = ref(np.float64(x))
                if math.isnan(t) and abs(x) > 4.0e8:
                    continue                     # outside sin/cos domain
                a = fn(x)
                rt = np.float32(t)
                if a == rt or (math.isnan(a) and math.isnan(rt)):
                    continue
                m, e = math.frexp(abs(t))
                e = max(e, -125)
                err = abs(np.float64(a) - t) / math.ldexp(1.0, e - 24)
                if not (err <= worst):           # NaN / inf mismatch counts too
                    worst = err if not math.isnan(err) else math.inf
                    at = u
            errs[b] = worst
            where[b] = at
    return sweep


from numba.extending import intrinsic as _intrinsic  # noqa: E402


@_intrinsic
def f32_from_bits(typingctx, u):
    from llvmlite import ir

    def cg(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return numba.float32(numba.uint32), cg


@pytest.mark.skipif(not __import__("os").environ.get("NEE_FASTMATH_EXHAUSTIVE"),
                    reason="set NEE_FASTMATH_EXHAUSTIVE=1 to sweep all 2^32 float32 inputs "
                           "(~5 min per function on 2 cores; =N checks every N-th bit pattern)")
@pytest.mark.parametrize("base", F32_FUNCS)
def test_f32_exhaustive(base):
    blk = 1 << 20
    nblocks = (1 << 32) // blk
    errs = np.zeros(nblocks)
    where = np.zeros(nblocks, np.uint32)
    stride = max(1, int(__import__("os").environ["NEE_FASTMATH_EXHAUSTIVE"]))
    _exhaustive_kernel(getattr(fm, base + "_f32"), _LIBM[base])(nblocks, blk, stride, errs, where)
    i = int(np.argmax(errs))
    x = where[i:i + 1].view(np.float32)[0]
    print(f"\n{base}_f32 sweep of 2^32/{stride} bit patterns: max ulp {errs[i]:.3f} at x={x!r}")
    assert errs[i] <= MAX_ULP, (errs[i], x)
