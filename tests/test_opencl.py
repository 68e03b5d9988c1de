"""The OpenCL backend (neetorch/devices/opencl), differential against numpy / the CPU backend.

Skipped when pyopencl or an OpenCL platform (e.g. PoCL: ``pip install pyopencl
pocl-binary-distribution``) is missing.  Cold PoCL builds cost ~0.2-0.7 s per kernel, so
the elementwise sweep builds each dtype's kernels as ONE program first (``precompile``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import neetorch as nee

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'neetorch[opencl]')")

from neetorch.devices import FallbackError, get_backend, register_backend  # noqa: E402
from neetorch.devices.opencl import OpenCLBackend  # noqa: E402
from neetorch.ops.elementwise import apply  # noqa: E402
from neetorch.ops.registry import OPS, Meta  # noqa: E402

_n, _why = OpenCLBackend.probe()
if _n == 0:
    pytest.skip(f"no OpenCL device: {_why}", allow_module_level=True)

register_backend(OpenCLBackend, "opencl")
DEV = "opencl"
BK = get_backend(nee.device(DEV))
FP64 = "float64" in BK.dtypes
FP16 = "cl_khr_fp16" in BK.cl_device.extensions.split()   # (Intel's CPU runtime; not PoCL): float16 must run


def cl_(a, dtype=None):
    t = nee.tensor(np.asarray(a)) if dtype is None else nee.tensor(np.asarray(a), dtype=dtype)
    return t.to(DEV)


def host(t):
    assert t.device.type == "opencl", t.device
    return t.cpu().numpy()


# ---------------------------------------------------------------- discovery and storage
def test_devices_lists_opencl():
    infos = {d.type: d for d in nee.devices()}
    assert "opencl" in infos and infos["opencl"].available and infos["opencl"].count >= 1
    assert "opencl" in str(BK.device) and BK.type == "opencl"


@pytest.mark.parametrize("name", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"])
def test_roundtrip_dtypes(name):
    if name == "float64" and not FP64 or name == "float16" and not FP16:
        pytest.skip(f"device has no {name}")
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 5)) * 50).astype(name)
    t = nee.tensor(a).to(DEV)
    assert t.device == nee.device("opencl:0") and t.dtype.name == name and tuple(t.shape) == (3, 5)
    assert t.stride() == (5, 1) and t.is_contiguous()
    back = t.cpu()
    assert back.device.type == "cpu"
    np.testing.assert_array_equal(back.numpy(), a)
    np.testing.assert_array_equal(t.numpy(force=True), a)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_numpy_needs_force_and_scalars():
    t = cl_(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(TypeError, match="opencl"):
        t.numpy()
    assert t[1, 2].item() == 5.0 and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert "device='opencl:0'" in repr(t)
    z = nee.zeros(4, 5, device=DEV)
    o = nee.ones(3, dtype=nee.int64, device=DEV)
    f = nee.full((2, 2), 7.5, device=DEV)
    np.testing.assert_array_equal(host(z), np.zeros((4, 5), np.float32))
    np.testing.assert_array_equal(host(o), np.ones(3, np.int64))
    np.testing.assert_array_equal(host(f), np.full((2, 2), 7.5, np.float32))
    e = nee.empty(0, 3, device=DEV)
    assert host(e).shape == (0, 3)


def test_unsupported_storage_is_a_clear_error():
    if FP16:
        pytest.skip("device stores float16")
    with pytest.raises(TypeError, match="float16"):
        nee.ones(3, dtype=nee.float16).to(DEV)


def test_float16_claimed_exactly_with_cl_khr_fp16(monkeypatch):
    """float16 storage and kernels come with the device's cl_khr_fp16 (the pragma in every program);
    the same device presented without the extension stores no float16 and claims nothing on it."""
    import neetorch.devices.opencl as ocl
    from neetorch.tensor import dtypes as _dt
    assert ("float16" in BK.dtypes) == FP16
    assert ("cl_khr_fp16 : enable" in BK.programs.preamble) == FP16

    class NoFP16:                   # the device, minus the extension
        def __init__(self, d):
            self._d = d
            self.extensions = " ".join(e for e in d.extensions.split() if e != "cl_khr_fp16")

        def __getattr__(self, k):
            return getattr(self._d, k)
    dev, ctx = ocl._usable_devices()[0][0]
    monkeypatch.setattr(ocl, "_usable_devices", lambda: ([(NoFP16(dev), ctx)], []))
    b = OpenCLBackend(0)
    assert "float16" not in b.dtypes and "float32" in b.dtypes
    assert "cl_khr_fp16" not in b.programs.preamble
    h = _dt.float16
    for op, dts in [("add", [h, h, h]), ("sum", [h, h]), ("matmul", [h, h, h]), ("softmax", [h, h]),
                    ("conv2d", [h, h, h, h]), ("sort", [h, h, _dt.int64])]:
        assert "cl_khr_fp16" in b.supports(op, dts), op
    with pytest.raises(TypeError, match="cl_khr_fp16"):
        b.empty((3,), h)


def test_views_share_storage_and_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = cl_(a)
    np.testing.assert_array_equal(host(t.t()), a.T)
    np.testing.assert_array_equal(host(t[1:, ::2]), a[1:, ::2])
    np.testing.assert_array_equal(host(t[:, 3]), a[:, 3])
    np.testing.assert_array_equal(host(t[0].expand(3, 6)), np.broadcast_to(a[0], (3, 6)))
    np.testing.assert_array_equal(host(t.t().contiguous()), a.T)
    v = t[1:3, 1:4]
    assert v._data.storage is t._data.storage and v.storage_offset() == 7
    c = t.t().clone()
    assert c.is_contiguous()
    np.testing.assert_array_equal(host(c), a.T)
    v.zero_()                                     # strided in-place fill through the view
    ref = a.copy()
    ref[1:3, 1:4] = 0
    np.testing.assert_array_equal(host(t), ref)
    t[:, 0].copy_(cl_(np.array([9, 8, 7, 6], np.float32)))
    ref[:, 0] = [9, 8, 7, 6]
    np.testing.assert_array_equal(host(t), ref)
    # dtype casts through copy_ / to(dtype)
    np.testing.assert_array_equal(host(t.to(nee.int32)), ref.astype(np.int32))
    np.testing.assert_array_equal(host(cl_([-1.5, 0.0, 2.0]).bool()), [True, False, True])
    np.testing.assert_array_equal(host(cl_([-1.0, 3.7, 300.0]).to(nee.uint8)),
                                  np.array([-1.0, 3.7, 300.0]).astype(np.int64).astype(np.uint8))


def test_memory_stats():
    import gc
    gc.collect()
    s0 = BK.memory_stats()["allocated_bytes"]
    t = nee.empty(1000, 1000, device=DEV)
    s1 = BK.memory_stats()
    assert s1["allocated_bytes"] - s0 == 4_000_000 and s1["peak_bytes"] >= s1["allocated_bytes"]
    del t
    gc.collect()
    assert BK.memory_stats()["allocated_bytes"] == s0


# ---------------------------------------------------------------- the elementwise sweep
def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x, beta, th):
    return np.where(x * beta > th, x, np.log1p(np.exp(x * beta)) / beta)


def _shl(a, b):
    r = (a.astype(np.int64) << np.clip(b, 0, 63).astype(np.int64))
    return np.where((b < 0) | (b >= 64), 0, r).astype(a.dtype)


def _shr(a, b):
    r = (a.astype(np.int64) >> np.clip(b, 0, 63).astype(np.int64))
    return np.where((b < 0) | (b >= 64), np.where(a < 0, -1, 0), r).astype(a.dtype)


REF = {
    "erf": _erf, "erfc": lambda x: 1 - _erf(x),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "logsigmoid": lambda x: -np.log1p(np.exp(-x)),
    "selu": lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
    "hardsigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1),
    "lgamma": np.vectorize(math.lgamma, otypes=[np.float64]),
    "isposinf": np.isposinf, "isneginf": np.isneginf, "cast": lambda x: x,
    "trunc_divide": lambda a, b: np.trunc(a / b) if a.dtype.kind == "f" else np.fix(a / b).astype(a.dtype),
    "bitwise_left_shift": _shl, "bitwise_right_shift": _shr,
    "leaky_relu": lambda a, s: np.where(a > 0, a, a * s),
    "xlogy": lambda x, y: np.where(x == 0, 0.0, x * np.log(y)),
    "clamp": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
    "softplus": _softplus,
    "lerp": lambda a, b, w: a + w * (b - a),
    "addcmul": lambda a, b, c, v: a + v * b * c,
    "addcdiv": lambda a, b, c, v: a + v * b / c,
    "elu": lambda x, a, s, i: np.where(x > 0, s * x, s * a * np.expm1(x * i)),
    "where": np.where,
    "sign": lambda x: x if x.dtype == np.bool_ else np.sign(x),
    "hardswish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "pow": lambda a, b: np.power(a, b),
}
_NEEDS_NONZERO_B = {"true_divide", "floor_divide", "trunc_divide", "remainder", "fmod", "addcdiv"}
_SHAPE = (6, 7)


def _args(name, dt, rng):
    """numpy arguments (and Python scalars) for op ``name`` on dtype ``dt``."""
    op = OPS[name]
    nin = op.ew.nin
    kind = np.dtype(dt).kind

    def arr(lo=-3, hi=3, nonzero=False):
        if kind == "b":
            return rng.random(_SHAPE) < 0.5
        if kind in "iu":
            a = rng.integers(lo * 15, hi * 15 + 1, _SHAPE).astype(dt)
            if nonzero:
                a[a == 0] = 3
            return a
        a = rng.uniform(lo, hi, _SHAPE).astype(dt)
        if nonzero:
            a[np.abs(a) < 0.25] = 0.5
        return a
    if name == "where":
        return [rng.random(_SHAPE) < 0.5, arr(), arr()]
    if name in ("bitwise_left_shift", "bitwise_right_shift"):
        return [arr(), rng.integers(0, 70, _SHAPE).astype(dt)]
    if name == "pow":
        return [arr(), (rng.integers(0, 6, _SHAPE) if kind in "iu" else rng.uniform(-2, 2, _SHAPE)).astype(dt)]
    if name == "clamp":
        return [arr(), -1 if kind in "iu" else -1.5, 10 if kind in "iu" else 1.25]
    if name == "softplus":
        return [arr(), 1.5, 2.0]
    if name == "elu":
        return [arr(), 0.7, 1.2, 0.9]
    if name in ("addcmul", "addcdiv"):
        return [arr(), arr(), arr(nonzero=True), 2 if kind in "iu" else 0.5]
    if name == "leaky_relu":
        return [arr(), 0.01]
    if name == "xlogy":
        return [arr(), arr(0, 3)]
    if nin == 1:
        return [arr()]
    return [arr(), arr(nonzero=name in _NEEDS_NONZERO_B)] + [arr() for _ in range(nin - 2)]


def _claimed(dt):
    """(op name, args, input dtypes, output dtype) for every elementwise op the backend claims on ``dt``.

    Dtypes come from the op's own rules (``allow`` / ``infer``) without running anything on the CPU."""
    from neetorch.tensor.dtypes import result_type
    rng = np.random.default_rng(1)
    out = []
    for name, op in sorted(OPS.items()):
        if op.kind != "elementwise" or name not in BK.kernels:
            continue
        args = _args(name, dt, rng)
        spec = op.ew
        idx = spec.promote if spec.promote is not None else range(len(args))
        promoted = result_type(*[nee.tensor(args[i]) if isinstance(args[i], np.ndarray) else args[i] for i in idx])
        if spec.allow is not None and spec.allow(promoted):
            continue
        cdt = spec.rule([promoted] * len(idx))[0][0]
        in_dts = [nee.tensor(a[:1, :1]).dtype if isinstance(a, np.ndarray) else cdt for a in args]
        odt = op.infer([Meta((1,), d) for d in in_dts], {})[0].dtype
        if BK.supports(name, in_dts + [odt]) is None:
            out.append((name, args, in_dts, odt))
    return out


SWEEP_DTYPES = ["float32", "int32", "int64", "bool"] + (["float64"] if FP64 else []) + (["float16"] if FP16 else [])
_INT_FLOAT_OPS = {"exp", "sqrt", "true_divide", "sigmoid", "atan2"}   # int inputs computed in float: a few suffice


@pytest.mark.parametrize("dt", SWEEP_DTYPES)
def test_elementwise_sweep(dt):
    cases = _claimed(dt)
    if np.dtype(dt).kind in "iub":
        cases = [c for c in cases if c[3].category != 2 or c[0] in _INT_FLOAT_OPS]
    assert len(cases) >= (60 if dt.startswith("float") else 15), [c[0] for c in cases]
    BK.precompile([(name, ins, out) for name, _, ins, out in cases])
    rtol, atol = {"float64": (1e-11, 1e-12), "float16": (1e-3, 1e-3)}.get(dt, (1e-5, 1e-5))
    bad = []
    for name, args, _, odt in cases:
        ref_fn = REF.get(name) or OPS[name].reference
        idx = OPS[name].ew.promote or range(len(args))
        rargs = [a.astype(odt.np) if (isinstance(a, np.ndarray) and i in idx and odt.category == 2
                                      and a.dtype.kind != "f") else a for i, a in enumerate(args)]
        if dt == "float16":
            # torch's float16: computed in float32, the result rounded to float16 once
            rargs = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float16 else a
                     for a in rargs]
        with np.errstate(all="ignore"):
            ref = np.asarray(ref_fn(*rargs))
            if dt == "float16" and odt.name == "float16":
                ref = ref.astype(np.float32).astype(np.float16)
        got = host(apply(OPS[name], *[cl_(a) if isinstance(a, np.ndarray) else a for a in args]))
        ref = ref.astype(got.dtype) if got.dtype.kind != "f" else ref
        assert got.dtype == odt.np, (name, got.dtype, odt)
        if got.dtype.kind == "f":
            loose = (10 * rtol, 10 * atol) if name in ("lgamma", "pow", "erfc", "tan") else (rtol, atol)
            ok = np.allclose(got, ref, rtol=loose[0], atol=loose[1], equal_nan=True)
        else:
            ok = np.array_equal(got, ref)
        if not ok:
            bad.append((name, args[0].ravel()[:3], got.ravel()[:4], ref.ravel()[:4]))
    assert not bad, bad


def test_torch_semantics_edge_cases():
    # integer division/remainder signs, division by -1 at the type minimum, shifts out of range,
    # NaN propagation in maximum/minimum/clamp/relu, negative integer powers (what the CPU backend gives)
    mn = np.iinfo(np.int32).min
    x = cl_(np.array([-7, 7, -8, 9, mn, 5], np.int32))
    y = cl_(np.array([3, -3, -3, 2, -1, -1], np.int32))
    np.testing.assert_array_equal(host(x // y), [-3, -3, 2, 4, mn, -5])
    np.testing.assert_array_equal(host(x % y), [2, -2, -2, 1, 0, 0])
    np.testing.assert_array_equal(host(nee.fmod(x, y)), [-1, 1, -2, 1, 0, 0])
    np.testing.assert_array_equal(host(nee.div(x, y, rounding_mode="trunc")), [-2, -2, 2, 4, mn, -5])
    e = cl_(np.array([-1, -2, 3, 0, 2, -3], np.int32))
    np.testing.assert_array_equal(host(cl_(np.array([-1, -1, -2, 5, 1, 1], np.int32)) ** e), [-1, 1, -8, 1, 1, 1])
    s = np.array([-3, 0, 31, 32, 63, 64], np.int64)
    v = np.array([-5, 5, -5, 5, -5, 5], np.int64)
    np.testing.assert_array_equal(host(nee.bitwise_left_shift(cl_(v), cl_(s))), _shl(v, s))
    np.testing.assert_array_equal(host(nee.bitwise_right_shift(cl_(v), cl_(s))), _shr(v, s))
    np.testing.assert_array_equal(host(nee.bitwise_right_shift(cl_(v), cl_(s))), [-1, 5, -1, 0, -1, 0])
    p = np.array([np.nan, 1.0, -np.inf, 2.0, np.nan], np.float32)
    q = np.array([1.0, np.nan, 0.0, 3.0, np.nan], np.float32)
    for f, r in ((nee.maximum, np.maximum), (nee.minimum, np.minimum), (nee.fmax, np.fmax), (nee.fmin, np.fmin)):
        np.testing.assert_array_equal(host(f(cl_(p), cl_(q))), r(p, q))
    np.testing.assert_array_equal(host(nee.clamp(cl_(p), -1.0, 1.5)), [np.nan, 1.0, -1.0, 1.5, np.nan])
    np.testing.assert_array_equal(host(nee.relu(cl_(p))), [np.nan, 1.0, 0.0, 2.0, np.nan])
    fl = np.array([-7.5, 7.5, -0.0, 3.0, 1e30], np.float32)
    fd = np.array([2.0, -2.0, 3.0, -0.0, 3.0], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(host(cl_(fl) // cl_(fd)), np.floor_divide(fl, fd))
        np.testing.assert_array_equal(host(cl_(fl) % cl_(fd)), np.remainder(fl, fd))
    np.testing.assert_array_equal(host(cl_(np.array([0.5, 1.5, 2.5, -2.5])).round()), [0.0, 2.0, 2.0, -2.0])
    with pytest.raises(ZeroDivisionError):
        x // cl_(np.array([1, 0, 1, 1, 1, 1], np.int32))       # the value check runs on device tensors too


def test_broadcasting_and_noncontiguous():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    b = rng.standard_normal((5, 1)).astype(np.float32)
    c = rng.standard_normal((6, 5)).astype(np.float32)
    A, B, C = cl_(a), cl_(b), cl_(c)
    np.testing.assert_allclose(host(A * B + 1.5), a * b + 1.5, rtol=1e-6)
    np.testing.assert_allclose(host(A - C.t()), a - c.T, rtol=1e-6)
    np.testing.assert_allclose(host(A[:, ::2, 1::3] * 2), a[:, ::2, 1::3] * 2, rtol=1e-6)
    np.testing.assert_allclose(host(A.flip(0) + A), a[::-1] + a, rtol=1e-6)
    np.testing.assert_allclose(host(B.expand(5, 6) * A[1]), np.broadcast_to(b, (5, 6)) * a[1], rtol=1e-6)
    np.testing.assert_allclose(host(A.permute(2, 0, 1).exp()), np.exp(a.transpose(2, 0, 1)), rtol=1e-5)
    # 0-d tensors, scalars and promotion
    i = cl_(np.arange(6, dtype=np.int32).reshape(2, 3))
    r = i * 2.5
    assert r.dtype == nee.float32
    np.testing.assert_allclose(host(r), np.arange(6).reshape(2, 3) * 2.5)
    r = i + nee.full((), 3, dtype=nee.int64, device=DEV)
    assert r.dtype == nee.int32
    np.testing.assert_array_equal(host(r), np.arange(6).reshape(2, 3) + 3)
    np.testing.assert_array_equal(host(i > 2), np.arange(6).reshape(2, 3) > 2)
    # more than 4 non-mergeable dims
    g = rng.standard_normal((2, 3, 2, 3, 2, 3)).astype(np.float32)
    G = cl_(g)
    np.testing.assert_allclose(host(G.permute(5, 3, 1, 0, 2, 4) + 1), g.transpose(5, 3, 1, 0, 2, 4) + 1)


def test_zero_dim_transfer_keeps_shape():
    assert tuple(nee.tensor(3.5).to(DEV).shape) == ()
    assert tuple(nee.tensor(2.0, device=DEV).shape) == ()


def test_inplace():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = cl_(a)
    t.mul_(2).add_(1)
    np.testing.assert_array_equal(host(t), a * 2 + 1)
    v = t[:, ::2]
    v.add_(100)
    ref = a * 2 + 1
    ref[:, ::2] += 100
    np.testing.assert_array_equal(host(t), ref)
    s = cl_(np.arange(16, dtype=np.float32).reshape(4, 4))
    s.add_(s.t())                                          # aliasing: reads the values from before
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(host(s), m + m.T)
    t += 1
    np.testing.assert_array_equal(host(t), ref + 1)


# ---------------------------------------------------------------- non-elementwise kernels
def test_reductions_softmax_matmul():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7, 300)).astype(np.float32)
    x = cl_(a)
    np.testing.assert_allclose(host(x.sum(-1)), a.sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(x.sum()), a.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(host(x.sum((0, 2), keepdim=True)), a.sum((0, 2), keepdims=True), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(host(x.mean(1)), a.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(host(x.amax(-1)), a.max(-1))
    np.testing.assert_array_equal(host(x.transpose(0, 2).amin(0)), a.transpose(2, 1, 0).min(0))
    big = rng.standard_normal(1 << 18).astype(np.float32)
    np.testing.assert_allclose(host(cl_(big).sum()), big.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(host(cl_(big).mean()), big.astype(np.float64).mean(), rtol=1e-4, atol=1e-7)
    ints = rng.integers(-100, 100, (4, 50)).astype(np.int32)
    s = cl_(ints).sum(1)
    assert s.dtype == nee.int64
    np.testing.assert_array_equal(host(s), ints.sum(1))
    assert bool((x > 3).any()) == bool((a > 3).any()) and bool((x > -10).all())
    nan = cl_(np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 0.5]], np.float32))
    np.testing.assert_array_equal(host(nan.amax(1)), [np.nan, 2.0])

    def sm(v, d):
        e = np.exp(v - v.max(d, keepdims=True))
        return e / e.sum(d, keepdims=True)
    np.testing.assert_allclose(host(nee.softmax(x, -1)), sm(a, -1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(host(nee.softmax(x, 0)), sm(a, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(host(nee.log_softmax(x.transpose(1, 2), 1)), np.log(sm(a.transpose(0, 2, 1), 1)),
                               rtol=1e-4, atol=1e-5)
    m1 = rng.standard_normal((3, 33, 17)).astype(np.float32)
    m2 = rng.standard_normal((17, 9)).astype(np.float32)
    np.testing.assert_allclose(host(cl_(m1) @ cl_(m2)), m1 @ m2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(cl_(m2).t() @ cl_(m1[1]).t()), m2.T @ m1[1].T, rtol=1e-4, atol=1e-5)
    mi = rng.integers(-9, 9, (4, 6)).astype(np.int64)
    np.testing.assert_array_equal(host(cl_(mi) @ cl_(mi.T)), mi @ mi.T)
    assert len(nee.fallback_report()) == 0 or all(r.device != "opencl:0" or r.op not in
                                                  ("sum", "mean", "amax", "amin", "softmax", "matmul")
                                                  for r in nee.fallback_report().records.values())


@pytest.mark.skipif(not FP16, reason="the OpenCL device has no cl_khr_fp16")
def test_float16_reductions_softmax_matmul_match_cpu_and_torch():
    """float16 (``half`` storage) through the reduction, softmax and matmul kernels (scalar and float8-tile
    paths, strided operands), all on the device (strict mode): each result computed in float and rounded
    once, like torch's CPU kernels: equal to torch's and the CPU backend's within one float16 rounding."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(31)
    a = (rng.standard_normal((5, 7, 300)) * 2).astype(np.float16)
    m1 = rng.standard_normal((3, 33, 17)).astype(np.float16)
    m2 = rng.standard_normal((17, 16)).astype(np.float16)
    m3 = rng.standard_normal((17, 9)).astype(np.float16)
    small = rng.uniform(0.8, 1.2, (6, 40)).astype(np.float16)
    nan = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 0.5]], np.float16)
    F = torch.nn.functional
    cases = [   # (name, neetorch fn, torch fn, inputs)
        ("sum -1", lambda x: x.sum(-1), lambda x: x.sum(-1), [a]),
        ("sum all", lambda x: x.sum(), lambda x: x.sum(), [a]),
        ("sum (0, 2) keepdim", lambda x: x.sum((0, 2), keepdim=True), lambda x: x.sum((0, 2), keepdim=True), [a]),
        ("mean 1", lambda x: x.mean(1), lambda x: x.mean(1), [a]),
        ("mean all", lambda x: x.mean(), lambda x: x.mean(), [a]),
        ("prod", lambda x: x.prod(-1), lambda x: x.prod(-1), [small]),
        ("amax", lambda x: x.amax(-1), lambda x: x.amax(-1), [a]),
        ("amin transposed", lambda x: x.transpose(0, 2).amin(0), lambda x: x.transpose(0, 2).amin(0), [a]),
        ("amax nan", lambda x: x.amax(1), lambda x: x.amax(1), [nan]),
        ("softmax -1", lambda x: nee.softmax(x, -1), lambda x: torch.softmax(x, -1), [a]),
        ("softmax 0", lambda x: nee.softmax(x, 0), lambda x: torch.softmax(x, 0), [a]),
        ("log_softmax -1", lambda x: nee.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1), [a]),
        ("log_softmax 1 strided", lambda x: nee.log_softmax(x.transpose(1, 2), 1),
         lambda x: torch.log_softmax(x.transpose(1, 2), 1), [a]),
        ("matmul scalar", lambda x, y: x @ y, lambda x, y: x @ y, [m1, m3]),
        ("matmul tiles", lambda x, y: x @ y, lambda x, y: x @ y, [m1, m2]),
        ("matmul transposed", lambda x, y: y.t() @ x[1].t(), lambda x, y: y.t() @ x[1].t(), [m1, m3]),
        ("linear", lambda x, y: nee.nn.functional.linear(x, y.t()), lambda x, y: F.linear(x, y.t()), [m1, m2]),
    ]
    nee.reset_fallbacks()
    nee.set_strict(True)
    try:
        for name, f, tf, ins in cases:
            got = f(*[cl_(v) for v in ins])
            assert got.device.type == "opencl" and got.dtype == nee.float16, name
            g = host(got).astype(np.float64)
            for ref, what in ((f(*[nee.tensor(v) for v in ins]).numpy(), "cpu"),
                              (tf(*[torch.from_numpy(v) for v in ins]).numpy(), "torch")):
                np.testing.assert_allclose(g, ref.astype(np.float64), rtol=2e-3, atol=2e-3, equal_nan=True,
                                           err_msg=f"{name} vs {what}")
    finally:
        nee.set_strict(False)
    assert not nee.fallback_report().records


@pytest.mark.skipif(not FP16, reason="the OpenCL device has no cl_khr_fp16")
def test_float16_elementwise_bit_exact_with_torch():
    """float16 elementwise results are torch's bit for bit: computed in float, rounded once (casts and
    overflow to inf included), except floor_divide and xlogy, whose torch kernels round every step to
    float16 (the C table's f_floordiv_h / f_xlogy_h, as the CPU backend); a float32 scalar keeps float32
    steps (x // 2.5)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(33)
    a = rng.uniform(-50, 50, 3000).astype(np.float16)
    b = rng.uniform(-7, 7, 3000).astype(np.float16)
    b[b == 0] = 1
    p = np.abs(b)
    big = np.array([65504, 65519, 65520, 7e4, -1e5, 1e-8, 6e-8, 3e-5, np.nan, np.inf], np.float32)
    cases = [
        ("floor_divide", lambda x, y: x // y, lambda x, y: torch.floor_divide(x, y), [a, b]),
        ("floor_divide scalar", lambda x, y: x // 2.5, lambda x, y: torch.floor_divide(x, 2.5), [a, b]),
        ("remainder", lambda x, y: x % y, lambda x, y: torch.remainder(x, y), [a, b]),
        ("xlogy", nee.xlogy, torch.xlogy, [a, p]),
        ("true_divide", lambda x, y: x / y, lambda x, y: x / y, [a, b]),
        ("exp", lambda x, y: (x / 10).exp(), lambda x, y: (x / 10).exp(), [a, b]),
        ("mul add", lambda x, y: x * y + 1.5, lambda x, y: x * y + 1.5, [a, b]),
        ("sigmoid", lambda x, y: x.sigmoid(), lambda x, y: x.sigmoid(), [a, b]),
        ("cast from float32", lambda x, y: x.half(), lambda x, y: x.half(), [big, big]),
        ("cast to int32", lambda x, y: x.int(), lambda x, y: x.int(), [a, b]),
    ]
    for name, f, tf, ins in cases:
        got = host(f(*[cl_(v) for v in ins]))
        want = tf(*[torch.from_numpy(v) for v in ins]).numpy()
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.skipif(not FP16, reason="the OpenCL device has no cl_khr_fp16")
def test_float16_jit_on_opencl_matches_cpu():
    """A jitted float16 function on OpenCL (elementwise steps, a fused group reading half, softmax,
    matmul, a reduction) equals the same function on the CPU, and eager on OpenCL; nothing falls back."""
    def f(x, y):
        z = (x * y + 1.0).relu()
        w = (z.float().exp() * 0.5).half() - y
        return w, nee.softmax(z, -1) @ y.t(), z.sum(-1)

    rng = np.random.default_rng(32)
    a = rng.standard_normal((33, 17)).astype(np.float16)
    b = rng.standard_normal((33, 17)).astype(np.float16)
    want = nee.jit(f)(nee.tensor(a), nee.tensor(b))
    eager = f(cl_(a), cl_(b))
    g = nee.jit(f)
    nee.reset_fallbacks()
    got = g(cl_(a), cl_(b))
    assert not nee.fallback_report().records
    for x, e, w in zip(got, eager, want):
        assert x.device.type == "opencl" and x.dtype == w.dtype == nee.float16
        np.testing.assert_array_equal(host(x), host(e))
        np.testing.assert_allclose(host(x).astype(np.float64), w.numpy().astype(np.float64), rtol=2e-3, atol=2e-3)
    text = g.explain(cl_(a), cl_(b))
    assert "__kernel void fused_" in text and "__global const half* x0" in text


# ---------------------------------------------------------------- jit
def test_jit_fuses_on_opencl():
    def f(x, y):
        z = (x * y + 1.0).relu()
        return z.exp() - y, (z > 1.5)

    g = nee.jit(f)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.standard_normal((17,)).astype(np.float32)
    r1, r2 = g(cl_(a), cl_(b))
    z = np.maximum(a * b + 1.0, 0)
    e1, e2 = nee.tensor(np.exp(z) - b), nee.tensor(z > 1.5)
    assert r1.device.type == "opencl"
    np.testing.assert_allclose(host(r1), e1.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(host(r2), e2.numpy())
    text = g.explain(cl_(a), cl_(b))
    assert "__kernel void fused_" in text
    # a second call reuses the executable; non-contiguous inputs too
    r1, _ = g(cl_(a.T.copy()).t(), cl_(b))
    np.testing.assert_allclose(host(r1), e1.numpy(), rtol=1e-5, atol=1e-6)

    def h(x):
        return nee.softmax(x * 2.0 - 1.0, -1).sum(-1)
    hj = nee.jit(h)
    np.testing.assert_allclose(host(hj(cl_(a))), np.ones(33, np.float32), rtol=1e-5)
    np.testing.assert_allclose(host(h(cl_(a))), np.ones(33, np.float32), rtol=1e-5)


def test_jit_group_with_an_unrenderable_member_runs_member_by_member(monkeypatch):
    from neetorch.devices.opencl import exprs
    from neetorch.ops import registry

    def forget_claims():   # the dispatcher caches claims per (backend, op, dtypes)
        registry._claims.clear()
    monkeypatch.delitem(exprs.EXPR, "sigmoid")
    forget_claims()
    nee.reset_fallbacks()
    try:
        g = nee.jit(lambda x: (x * 2.0).sigmoid() + 1.0)
        a = np.linspace(-3, 3, 40, dtype=np.float32).reshape(4, 10)
        r = g(cl_(a))
        np.testing.assert_allclose(host(r), 1 / (1 + np.exp(-2 * a)) + 1, rtol=1e-5)
        assert any(rec.op == "sigmoid" for rec in nee.fallback_report().records.values())
    finally:
        monkeypatch.undo()
        forget_claims()
        nee.reset_fallbacks()


# ---------------------------------------------------------------- fallback
def test_fallback_visible_and_strict():
    # the linalg decompositions have no OpenCL kernels (yet): det runs on the CPU, visibly, and its result
    # comes back to the device
    nee.reset_fallbacks()
    a = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 9.0], [1.0, 2.0, 0.0]], np.float32)
    d = nee.linalg.det(cl_(a))
    assert d.device.type == "opencl"
    np.testing.assert_allclose(host(d), np.linalg.det(a), rtol=1e-5)
    rep = nee.fallback_report()
    assert any(r.op == "linalg_det" and r.device == "opencl:0" for r in rep.records.values()), str(rep)
    assert "linalg_det" in str(rep)
    nee.set_strict(True)
    try:
        with pytest.raises(FallbackError, match="linalg_det"):
            nee.linalg.det(cl_(a))
        (cl_(a) + 1).sum()                          # claimed ops still run in strict mode
        nee.sort(cl_(a), dim=1)                     # so do sort, einsum and unique (opencl/nn.py)
        nee.einsum("ij->ji", cl_(a))
        nee.unique(cl_(a), dim=1)
    finally:
        nee.set_strict(False)
        nee.reset_fallbacks()
