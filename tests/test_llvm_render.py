"""The LLVM IR renderer (devices/cpu/llvm_render.py) against the Numba kernels built from the same
pieces, bit for bit: integer and float ``//`` / ``%`` / ``**`` (Python's floor rules, Numba's
zero-divisor and overflow results), helpers with ``if`` / ``while`` statements (f_ifloordiv, f_ipow,
f_floordiv, f_sin32...), and the non-temporal (streaming) store variant of the unit-stride loop.
A jitted gcd / lcm (hundreds of fused statements) builds LLVM kernels only, counted by the
renderers' own statistics."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import codegen, elementwise, llvm_render

pytestmark = pytest.mark.skipif(elementwise.RENDERER != "llvm", reason="NEE_CPU_RENDERER=numba")

_CTOR = {"int8": "np.int8", "int16": "np.int16", "int32": "np.int32", "int64": "np.int64", "uint8": "np.uint8",
         "float32": "np.float32", "float64": "np.float64"}


def _both(name, in_dt, out_dt, ops):
    """(LLVM kernel, Numba kernel) of ``ops`` (``tK = expr`` statements, one output each)."""
    res = [s.split(" = ")[0] for s in ops]
    src = elementwise.render_group(name, in_dt, out_dt, ops, res)
    k_llvm, _ = llvm_render.load("test_" + name, name, in_dt, out_dt, ops, res, src)
    return k_llvm, codegen.load_kernel("test_" + name, src), res


def _run(k, out_dt, ins):
    outs = [np.zeros(ins[0].shape, d) for d in out_dt]
    with np.errstate(all="ignore"):
        elementwise.run_strided(k, outs, ins)
    return outs


def _pairs(edges, rng, n, dt):
    a, b = np.meshgrid(np.array(edges, dt), np.array(edges, dt))
    info = np.iinfo(dt) if np.dtype(dt).kind in "iu" else None
    if info is not None:
        ra = rng.integers(info.min, info.max, n, endpoint=True).astype(dt)
        rb = rng.integers(info.min, info.max, n, endpoint=True).astype(dt)
        rb[::3] = rng.integers(-9, 10, len(rb[::3])).astype(dt)    # small divisors / exponents
    else:
        ra = (rng.standard_normal(n) * 50).astype(dt)
        rb = (rng.standard_normal(n) * 4).astype(dt)
    return np.concatenate([a.ravel(), ra]), np.concatenate([b.ravel(), rb])


def _int_edges(dt):
    info = np.iinfo(dt)
    return sorted(v for v in {0, 1, -1, 2, -2, 3, 7, -7, 64, info.min, info.min + 1, info.max, info.max - 1}
                  if info.min <= v <= info.max)


def test_integer_div_mod_pow_equal_numba():
    # int64 (INT64_MIN // -1, the widest wrap-around): ints widen to int64, x // 0 = x % 0 = 0,
    # INT64_MIN // -1 = 0; ** by squaring with negative exponents 0 / +-1 / INT_MIN (base 0); an exponent
    # of INT64_MIN raises OverflowError in Numba (``| 1`` keeps it out); float ** int inverts through
    # float64 (1 / 0 raises in Numba: the base and exponent keep the power away from 0 here).  Other
    # dtypes: test_integer_div_mod_pow_follow_python (one Numba kernel costs ~1 s per statement here)
    ops = ["f_ifloordiv(v0, v1)", "f_iremainder(v0, v1)", "f_ifmod(v0, v1)", "f_itruncdiv(v0, v1)", "f_ipow(v0, v1)",
           "v0 // v1", "v0 % v1 + v1 // -5", "v0 ** (v1 | np.int64(1)) + v0 ** 3"]
    ops = [f"t{k} = np.int64({e})" for k, e in enumerate(ops)] + [
        "t8 = np.float64((np.float64(v0 % 1000) + 0.5) ** (v1 % 50 - 25))"]
    out = ["int64"] * 8 + ["float64"]
    k_llvm, k_numba, res = _both("intops", ["int64", "int64"], out, ops)
    a, b = _pairs(_int_edges("int64"), np.random.default_rng(11), 2000, "int64")
    got, want = _run(k_llvm, out, [a, b]), _run(k_numba, out, [a, b])
    for name, g, w in zip(res, got, want):
        assert g.tobytes() == w.tobytes(), (name, [(x, y, gg, ww) for x, y, gg, ww in zip(a, b, g, w) if gg != ww][:5])


def _wrap(x, dt):
    bits = np.iinfo(dt).bits
    x %= 1 << bits
    return x - (1 << bits) if np.iinfo(dt).min < 0 and x >= 1 << (bits - 1) else x


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8"])
def test_integer_div_mod_pow_follow_python(dt):
    # Python's floor rules (remainder with the divisor's sign), in int64 wrapped to the dtype; no Numba
    # compile here (the Numba equivalence is the test above)
    c = _CTOR[dt]
    ops = [f"t0 = {c}(v0 // v1)", f"t1 = {c}(v0 % v1)", f"t2 = {c}(f_ifloordiv(v0, v1))", f"t3 = {c}(f_itruncdiv(v0, v1))",
           f"t4 = {c}(f_ifmod(v0, v1))", f"t5 = {c}(f_ipow(v0, v1 % 70))"]
    k, _ = llvm_render.load("test_intpy", "intpy_" + dt, [dt, dt], [dt] * 6, ops, [f"t{i}" for i in range(6)], "")
    a, b = _pairs(_int_edges(dt), np.random.default_rng(15), 1500, dt)
    got = _run(k, [dt] * 6, [a, b])
    lo = -(1 << 63)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        trunc = 0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
        want = [0 if y == 0 or (x == lo and y == -1) else x // y, 0 if y == 0 else x % y,
                -x if y == -1 else (0 if y == 0 else x // y), -x if y == -1 else trunc,
                0 if y == 0 else x - trunc * y, pow(x, y % 70, 1 << 64)]
        assert [int(g[i]) for g in got] == [_wrap(w, dt) for w in want], (x, y)


_F_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, -7.25, 1e-45, 1e30, -1e30, np.inf, -np.inf, np.nan,
            5e-324, 1e300]


def _float_pairs(dt, n, seed):
    edges = [x for x in _F_EDGES if dt == "float64" or not (np.isfinite(x) and (abs(x) > 3.4e38 or x == 5e-324))]
    return _pairs(edges, np.random.default_rng(seed), n, dt)


def test_float_div_mod_pow_and_if_helpers_equal_numba():
    # float32: Python's float // and % (fmod-based, quotient snapped, signed zeros, inf / nan),
    # f_floordiv / f_remainder / f_xlogy (``if`` statements), float ** int by squaring (a negative
    # literal exponent: 1 / r in float64), f_sin32 (an ``if`` with a float64 libm path for huge arguments)
    ops = ["f_floordiv(v0, v1)", "f_remainder(v0, v1)", "v0 // v1", "v0 % v1",
           "(abs(v0) + np.float32(0.5)) ** -3 + f_sin32(v0) + f_cos32(v1)", "f_xlogy(v0, v1)"]
    ops = [f"t{k} = np.float32({e})" for k, e in enumerate(ops)]
    out = ["float32"] * len(ops)
    k_llvm, k_numba, res = _both("fops", ["float32", "float32"], out, ops)
    a, b = _float_pairs("float32", 2000, 12)
    got, want = _run(k_llvm, out, [a, b]), _run(k_numba, out, [a, b])
    for name, g, w in zip(res, got, want):
        if name == "t5":
            # x * log(y) of two NaNs: the NaN kept depends on the operand order the backend picks
            both = np.isnan(g) & np.isnan(w)
            g, w = g[~both], w[~both]
        assert g.tobytes() == w.tobytes(), (name, [(x, y, gg, ww) for x, y, gg, ww in zip(a, b, g, w)
                                                   if gg.tobytes() != ww.tobytes()][:5])


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_div_mod_follow_numpy(dt):
    # Python's float // and % are numpy's floor_divide / remainder, signed zeros and inf / nan included;
    # float ** int by squaring; a zero base with a negative exponent is 1 / 0 (numpy's inf, signed)
    # where Numba raises ZeroDivisionError.  LLVM kernels only
    c = _CTOR[dt]
    ops = [f"t0 = {c}(v0 // v1)", f"t1 = {c}(v0 % v1)", f"t2 = {c}(f_floordiv(v0, v1))", f"t3 = {c}(f_remainder(v0, v1))",
           f"t4 = {c}(np.fmod(v0, v1))"]
    k, _ = llvm_render.load("test_fnp", "fnp_" + dt, [dt, dt], [dt] * 5, ops, [f"t{i}" for i in range(5)], "")
    a, b = _float_pairs(dt, 2000, 16)
    got = _run(k, [dt] * 5, [a, b])
    with np.errstate(all="ignore"):
        for i, (g, ref) in enumerate(zip(got, (np.floor_divide, np.remainder, np.floor_divide, np.remainder, np.fmod))):
            want = ref(a, b)
            np.testing.assert_array_equal(g, want, err_msg=ref.__name__)
            if i in (0, 1, 4):    # f_floordiv / f_remainder: torch's signs of zero (fmod's), not numpy's
                z = want == 0
                np.testing.assert_array_equal(np.signbit(g[z]), np.signbit(want[z]), err_msg=ref.__name__)
    k0, _ = llvm_render.load("test_zpow", "zpow_" + dt, [dt, "int32"], [dt], [f"t0 = {c}(v0 ** v1)"], ["t0"], "")
    (p,) = _run(k0, [dt], [np.array([0.0, -0.0, 0.0, -0.0, 0.0, 2.0, 2.0], dt), np.array([-3, -3, -2, -2, 0, 10, -2], np.int32)])
    np.testing.assert_array_equal(p, np.array([np.inf, -np.inf, np.inf, np.inf, 1.0, 1024.0, 0.25], dt))
    assert np.signbit(p[1]) and not np.signbit(p[3])


def test_jitted_gcd_lcm_build_llvm_kernels_only():
    # Euclid as 24 fused where/remainder steps (int16): one LLVM kernel per fused group, no Numba kernel
    rng = np.random.default_rng(13)
    a = rng.integers(-181, 182, 500).astype(np.int16)
    b = rng.integers(-181, 182, 500).astype(np.int16)
    a[:6], b[:6] = [0, 0, 5, -6, 12, -181], [0, 7, 0, -9, -18, 181]
    f = nee.jit(lambda x, y: (nee.gcd(x, y), nee.lcm(x, y)))
    s0, l0 = dict(codegen.stats), dict(llvm_render.stats)
    g, l = f(nee.tensor(a), nee.tensor(b))
    llvm_built = (llvm_render.stats["compiled"] - l0["compiled"]) + (llvm_render.stats["disk_hits"] - l0["disk_hits"])
    assert codegen.stats["kernels_loaded"] - s0["kernels_loaded"] == llvm_built > 0     # every kernel is LLVM
    assert llvm_render.stats["unsupported"] == l0["unsupported"]
    np.testing.assert_array_equal(g.numpy(), np.gcd(a, b))
    np.testing.assert_array_equal(l.numpy(), np.lcm(a, b))       # |a*b| < 2**15: no overflow here
    ge, le = f.eager(nee.tensor(a), nee.tensor(b))
    np.testing.assert_array_equal(l.numpy(), le.numpy())


@pytest.mark.parametrize("dt", ["float32", "float64", "int32"])
def test_streaming_store_variant_is_exact_at_any_alignment(dt):
    # the non-temporal variant: head loop to a 64-byte boundary, whole cache lines streamed, tail;
    # rows whose outputs are not equally aligned take the ordinary loop
    c = _CTOR[dt]
    ops = [f"t0 = {c}(v0 * v1 + v0)", f"t1 = {c}(v0 - v1)"]
    pieces = ([dt, dt], [dt, dt], ops, ["t0", "t1"])
    assert llvm_render.nt_eligible(pieces[1]) and not llvm_render.nt_eligible(["float32", "bool"])
    text = llvm_render.render_ir("nt", *pieces, variant=(1,), nt=True)
    assert "!nontemporal" in text and "fence seq_cst" in text
    from neetorch.devices.cpu import llvm_call
    addr = llvm_render.compile_ir(llvm_render.kernel_key("test_nt", pieces, ("nt", (1,))), lambda: text)
    k = llvm_call.make(addr, 5)
    rng = np.random.default_rng(14)
    n = 700
    x = (rng.standard_normal(n + 40) * 100).astype(dt)
    y = np.array([3], dt)
    for off0, off1, length in ((0, 0, n), (1, 1, n - 3), (3, 5, n - 9), (0, 0, 5), (2, 2, 17)):
        o0 = np.zeros(n + 40, dt)
        o1 = np.zeros(n + 40, dt)
        m = np.array([1, 1, 1, length, 0, 0, 0, 1, off0, 0, 0, 0, 1, off1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], np.int64)
        k(o0, o1, x, y, m)
        with np.errstate(all="ignore"):
            w0 = (x[:length] * y[0] + x[:length]).astype(dt)
            w1 = (x[:length] - y[0]).astype(dt)
        np.testing.assert_array_equal(o0[off0:off0 + length], w0)
        np.testing.assert_array_equal(o1[off1:off1 + length], w1)
        assert not o0[:off0].any() and not o0[off0 + length:].any()      # nothing written outside
        assert not o1[:off1].any() and not o1[off1 + length:].any()


@pytest.fixture
def stream_everything(monkeypatch):
    """Every launch streams (threshold 1 byte) while the test runs."""
    monkeypatch.setattr(llvm_render, "_nt_limit", [1])


def test_launches_pick_the_streaming_variant_by_size(stream_everything, monkeypatch):
    pieces = (["float32", "float32"], ["float32"], [], ["v0 * v1"])
    k, _ = llvm_render.load("test_ntpick", "ntpick", *pieces, "")
    x = np.random.default_rng(17).standard_normal((37, 301)).astype(np.float32)
    o = np.zeros_like(x)
    elementwise.run_strided(k, o, [x, x[:1]])
    np.testing.assert_array_equal(o, x * x[:1])
    assert ("nt", ()) in k._by_variant        # x[:1] is unit-stride along the rows
    monkeypatch.setattr(llvm_render, "_nt_limit", [64 << 20])      # 43 KB: below it, the plain loop
    k2, _ = llvm_render.load("test_ntpick", "ntpick", *pieces, "")
    elementwise.run_strided(k2, o, [x, x[:1]])
    assert list(k2._by_variant) == [()]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_streaming_row_kernels_are_exact(dt, monkeypatch):
    # layer_norm / rms_norm / log_softmax write their rows with non-temporal stores when streaming:
    # the same bits as the plain store loop, rows at any alignment
    from neetorch.devices.cpu.kernels.nn import norm_launch, softmax_launch
    rng = np.random.default_rng(18)
    x = (rng.standard_normal((33, 211)) * 3).astype(dt)[:, 3:200]       # rows start unaligned
    n = x.shape[1]
    w, b = rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt)
    got = {}
    for lim in (0, 1):
        monkeypatch.setattr(llvm_render, "_nt_limit", [lim])
        o1, o2, o3 = (np.zeros((33, n + 5), dt)[:, 1:n + 1] for _ in range(3))
        norm_launch(x, o1, w, b, 33, 1, 1, n, True, 1e-5, False)
        norm_launch(x, o2, w, None, 33, 1, 1, n, True, 1e-5, True)
        softmax_launch(x, o3, 1, True)
        got[lim] = (o1.copy(), o2.copy(), o3.copy())
        assert not o1.base[:, 0].any() and not o1.base[:, n + 1:].any()     # nothing written outside
    for a, c in zip(got[0], got[1]):
        assert a.tobytes() == c.tobytes()
    from neetorch.devices.cpu.kernels.nn import ir_rows
    text = llvm_render.row_ir_text("layer_norm", dt, False)
    assert "!nontemporal" in text and ir_rows("layer_norm", dt, False) is not None
