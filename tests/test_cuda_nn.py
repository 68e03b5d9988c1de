"""The CUDA backend's kernels of neetorch/devices/cuda/nn.py (convolution, pooling, resampling,
pad, indexing, scans, arg reductions, sorting, einsum, triangles), against the CPU backend.

Like the GPU half of ``tests/test_cuda.py``: on a GPU when there is one, else on
:mod:`neetorch.devices.cuda.emulate` (the generated CUDA C compiled as C++ by g++, CuPy's role
played by host arrays; builds cached under ``NEE_CACHE_DIR``); ``NEE_CUDA_EMULATE=0`` skips
them.  Every case compares with the CPU backend on odd shapes, non-contiguous inputs and every
claimed dtype, and checks that no fallback was recorded for the ops it claims.  The nvcc compile
of these sources is in ``tests/test_cuda.py`` (``all_sources``).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices import coverage
from neetorch.devices.cuda import CUDABackend, emulate
from neetorch.devices.cuda import kernels as cuda_kernels
from neetorch.devices.cuda import nn as cuda_nn
from neetorch.ops.registry import OPS, run
from neetorch.tensor import dtypes as _dt

F = nee.nn.functional
DEV = "cuda"
_N, _WHY = CUDABackend.probe()
EMULATE = _N == 0 and os.environ.get("NEE_CUDA_EMULATE", "") != "0" and emulate.available() is None
needs_gpu = pytest.mark.skipif(_N == 0 and not EMULATE, reason=f"no CUDA device: {_WHY}")
TOL = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-11}


@pytest.fixture(scope="module")
def bk():
    import importlib

    from neetorch.devices import get_backend, register_backend
    from neetorch.ops import registry
    devs = importlib.import_module("neetorch.devices")
    devs._discover()
    before = devs._backend_classes.get("cuda")
    if EMULATE:
        emulate.install()
    register_backend(CUDABackend, "cuda")
    try:
        b = get_backend(nee.device(DEV))
        b.modules.precompile(cuda_nn.all_sources())     # ONE module (one g++ / NVRTC build) for every kernel
        yield b
    finally:
        if EMULATE:
            emulate.uninstall()
        with devs._lock:
            devs._instances.pop(("cuda", 0), None)
            if before is None:
                devs._backend_classes.pop("cuda", None)
            else:
                devs._backend_classes["cuda"] = before
        registry._backends.clear()
        registry._claims.clear()


@pytest.fixture()
def clean(bk):
    nee.reset_fallbacks()
    yield bk
    recs = [r for r in nee.fallback_report().records.values()
            if r.device.startswith("cuda") and r.op in cuda_nn.static_claims()]
    nee.reset_fallbacks()
    assert not recs, [(r.op, r.reason) for r in recs]


def cu(t):
    return t.to(DEV)


def check(got, want, dn=None, exact=False, msg=""):
    assert got.device.type == "cuda", msg
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), (msg, got.dtype, want.dtype,
                                                                                 got.shape, want.shape)
    g, w = got.cpu().numpy(), want.numpy()
    if exact or g.dtype.kind != "f":
        np.testing.assert_array_equal(g, w, err_msg=msg)
    else:
        tol = TOL[dn or g.dtype.name]
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, equal_nan=True,
                                   err_msg=msg)


def rnd(rng, shape, dn):
    if dn == "bool":
        return nee.tensor(rng.random(shape) < 0.5)
    if dn.startswith("float"):
        return nee.tensor(rng.standard_normal(shape).astype(dn))
    lo = 0 if dn == "uint8" else -50
    return nee.tensor(rng.integers(lo, 50, shape).astype(dn))


def noncontig(t):
    """The same values as ``t`` through a transposed-then-back view and a stepped slice of a larger copy."""
    big = nee.stack([t, t], -1).reshape(*t.shape[:-1], -1)[..., ::2] if t.ndim else t   # of interleaved copies
    v = t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.ndim >= 2 else t
    return v, big


# ================================================================ claims (no device needed)
def test_static_claims_match_the_claims_functions():
    """For every op of nn.py and every dtype: the coverage signature is claimed by an instance's
    ``supports`` exactly when ``static_claims()`` lists the dtype (what DEVICE_COVERAGE.md shows)."""
    be = object.__new__(CUDABackend)
    be.kernels = cuda_kernels.build_table()
    static = CUDABackend.static_claims()
    for name, dts in cuda_nn.static_claims().items():
        assert static[name] == dts
        for dn in coverage.DTYPES:
            sig = coverage.signature(OPS[name], dn)
            by_static = all(d.name in dts for d in sig)
            assert (be.supports(name, list(sig)) is None) == by_static, (name, dn)
    assert static["conv2d"] == {"float16", "float32", "float64"} and "int32" in static["max_pool2d"]
    assert "int32" not in static["avg_pool2d"] and static["gather"] == set(cuda_kernels.STORAGE)
    assert "float32" in be.supports("gather", [_dt.float32, _dt.float32, _dt.float32])
    assert "cuBLAS" in be.supports("conv2d", [_dt.int32, _dt.int32, _dt.int32])


# ================================================================ convolution
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_conv2d_matches_cpu(clean, dn):
    rng = np.random.default_rng(1)
    x = rnd(rng, (2, 6, 11, 9), dn)
    cases = [  # (weight shape, bias?, kwargs)
        ((5, 6, 1, 1), True, {}),                                            # 1x1: no im2col
        ((7, 6, 3, 3), True, {"padding": 1}),
        ((4, 3, 3, 2), False, {"stride": 2, "padding": (1, 0), "dilation": (2, 1), "groups": 2}),
        ((6, 1, 3, 3), True, {"stride": (1, 2), "padding": 1, "groups": 6}),  # depthwise: a direct kernel
        ((12, 1, 2, 3), False, {"padding": (1, 0), "dilation": (1, 2), "groups": 6}),  # channel multiplier 2
        ((3, 6, 2, 4), True, {"padding": "same"}),                           # asymmetric padding
        ((4, 6, 1, 1), False, {"stride": 2}),                                # 1x1 strided: im2col
    ]
    for ws, has_b, kw in cases:
        w = rnd(rng, ws, dn)
        b = rnd(rng, (ws[0],), dn) if has_b else None
        want = F.conv2d(x, w, b, **kw)
        got = F.conv2d(cu(x), cu(w), cu(b) if b is not None else None, **kw)
        check(got, want, msg=f"{ws} {kw}")
    # non-contiguous input and weight, unbatched input, conv1d (the same op)
    xt = cu(x.transpose(2, 3).contiguous()).transpose(2, 3)
    w = rnd(rng, (5, 6, 3, 3), dn)
    wt = cu(w.transpose(0, 1).contiguous()).transpose(0, 1)
    check(F.conv2d(xt, wt, padding=1), F.conv2d(x, w, padding=1), msg="non-contiguous")
    check(F.conv2d(cu(x[0]), cu(w), stride=2), F.conv2d(x[0], w, stride=2), msg="unbatched")
    x1, w1 = rnd(rng, (3, 4, 17), dn), rnd(rng, (2, 4, 5), dn)
    check(F.conv1d(cu(x1), cu(w1), padding=2, dilation=2), F.conv1d(x1, w1, padding=2, dilation=2), msg="conv1d")
    isz = {"float16": "ushort", "float32": "uint", "float64": "ullong"}[dn]
    assert {f"nee_depthwise_{dn}", f"nee_im2col_{isz}"} <= set(clean.modules.kernels)


@needs_gpu
def test_conv2d_chunks_images_under_the_column_budget(clean, monkeypatch):
    rng = np.random.default_rng(2)
    x, w, b = rnd(rng, (5, 3, 8, 7), "float32"), rnd(rng, (4, 3, 3, 3), "float32"), rnd(rng, (4,), "float32")
    monkeypatch.setattr(cuda_nn, "COL_BUDGET", 3 * 9 * 6 * 5 * 4 * 2)     # two images per chunk
    check(F.conv2d(cu(x), cu(w), cu(b)), F.conv2d(x, w, b))
    # a non-contiguous output (written through a temporary)
    o = nee.empty(5, 5, 6, 4, device=DEV).transpose(1, 3)
    run(OPS["conv2d"], [cu(x), cu(w), cu(b)], {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
                                               "groups": 1}, out=[o])
    check(o.contiguous(), F.conv2d(x, w, b))


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_conv_transpose2d_matches_cpu(clean, dn):
    rng = np.random.default_rng(3)
    x = rnd(rng, (2, 4, 5, 6), dn)
    for ws, has_b, kw in [((4, 3, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}),
                          ((4, 2, 2, 3), False, {"stride": (1, 2), "dilation": (2, 1), "groups": 2}),
                          ((4, 5, 1, 1), True, {})]:
        w = rnd(rng, ws, dn)
        b = rnd(rng, (ws[1] * kw.get("groups", 1),), dn) if has_b else None
        want = F.conv_transpose2d(x, w, b, **kw)
        got = F.conv_transpose2d(cu(x).transpose(2, 3).contiguous().transpose(2, 3), cu(w),
                                 cu(b) if b is not None else None, **kw)
        check(got, want, msg=f"{ws} {kw}")


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_unfold_fold_match_cpu(clean, dn):
    rng = np.random.default_rng(13)
    x = rnd(rng, (2, 3, 7, 8), dn)
    for kw in [{"kernel_size": 3}, {"kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (2, 3)}]:
        want = F.unfold(x, **kw)
        for xc in (cu(x), cu(x.transpose(2, 3).contiguous()).transpose(2, 3)):
            got = F.unfold(xc, **kw)
            check(got, want, exact=True, msg=f"unfold {kw}")
            check(F.fold(got, (7, 8), **kw), F.fold(want, (7, 8), **kw), msg=f"fold {kw}")
        check(F.fold(cu(want)[:, :, :].transpose(0, 1).contiguous().transpose(0, 1), (7, 8), **kw),
              F.fold(want, (7, 8), **kw), msg="fold, strided input")


# ================================================================ pooling
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_pools_match_cpu(clean, dn):
    rng = np.random.default_rng(4)
    x = rnd(rng, (2, 3, 13, 10), dn)
    a = x.numpy().copy()
    a[0, 1, 2, 3] = np.nan                 # NaN wins (and its index)
    a[1, 0, :4, :4] = 1.5                  # ties: the first tap
    x = nee.tensor(a)
    xs = [cu(x), cu(x.transpose(2, 3).contiguous()).transpose(2, 3)]
    for kw in [{"kernel_size": 3}, {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
               {"kernel_size": 3, "stride": (2, 3), "padding": (1, 0), "dilation": (2, 1)},
               {"kernel_size": 2, "stride": 3, "ceil_mode": True, "dilation": 2}]:
        want = F.max_pool2d(x, return_indices=True, **kw)
        for xc in xs:
            got = F.max_pool2d(xc, return_indices=True, **kw)
            check(got[0], want[0], exact=True, msg=f"max {kw}")
            check(got[1], want[1], msg=f"max idx {kw}")
            check(F.max_pool2d(xc, **kw), want[0], exact=True, msg=f"max values {kw}")
    for kw in [{"kernel_size": 3}, {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
               {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
               {"kernel_size": (2, 4), "stride": (3, 1), "padding": (1, 2), "divisor_override": 5},
               {"kernel_size": 5, "stride": 4, "ceil_mode": True, "count_include_pad": False}]:
        want = F.avg_pool2d(x, **kw)
        for xc in xs:
            check(F.avg_pool2d(xc, **kw), want, msg=f"avg {kw}")
    x1 = rnd(rng, (3, 4, 19), dn)
    check(F.max_pool1d(cu(x1), 3, 2, 1, ceil_mode=True), F.max_pool1d(x1, 3, 2, 1, ceil_mode=True), exact=True)
    check(F.avg_pool1d(cu(x1), 4, 3, 2), F.avg_pool1d(x1, 4, 3, 2))


@needs_gpu
def test_integer_claims_of_float_only_frontends(clean):
    # the frontends only pass floats, but these claims cover every storage dtype: run the ops themselves
    rng = np.random.default_rng(5)
    x = rnd(rng, (1, 2, 7, 6), "int32")
    attrs = {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True}
    got = run(OPS["max_pool2d_with_indices"], [cu(x)], attrs)
    want = run(OPS["max_pool2d_with_indices"], [x], attrs)
    check(got[0], want[0])
    check(got[1], want[1])
    for op, ia in [("adaptive_max_pool2d", {"size": (3, 4), "mode": "max"}),
                   ("im2col", {"kernel_size": (2, 2), "dilation": (1, 1), "padding": (1, 0), "stride": (2, 1),
                               "blocks": (4, 5)})]:
        got, want = run(OPS[op], [cu(x)], ia), run(OPS[op], [x], ia)
        for g, w in zip(got, want):
            check(g, w, msg=op)


# ================================================================ pad
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "uint8", "bool"])
def test_pad_matches_cpu(clean, dn):
    rng = np.random.default_rng(6)
    x4 = rnd(rng, (2, 3, 5, 6), dn)
    x3 = rnd(rng, (2, 4, 7), dn)
    x5 = rnd(rng, (1, 2, 3, 4, 5), dn)
    modes = ["constant"] if dn == "bool" else ["constant", "reflect", "replicate", "circular"]
    for mode in modes:
        for x, p in [(x4, (1, 2, 3, 0)), (x4, (0, 5, 2, 2)), (x3, (3, 2)), (x4, (-1, 2, 1, -2)),
                     (x5, (1, 1, 2, 0, 0, 2))]:
            if mode == "reflect" and any(v >= n for v, n in zip(p, [x.shape[-1 - i // 2] for i in range(len(p))])):
                continue
            want = F.pad(x, p, mode=mode)
            v, big = noncontig(cu(x))
            for xc in (cu(x), v, big):
                check(F.pad(xc, p, mode=mode), want, exact=True, msg=f"{mode} {p} {tuple(x.shape)}")
    if dn != "bool":
        check(F.pad(cu(x4), (1, 1, 2, 2), value=3), F.pad(x4, (1, 1, 2, 2), value=3), exact=True)
    check(F.pad(cu(x3), (2, 1, 0, 0, 1, 1)), F.pad(x3, (2, 1, 0, 0, 1, 1)), exact=True)


# ================================================================ indexing
@needs_gpu
@pytest.mark.parametrize("dn", list(cuda_kernels.STORAGE))
def test_index_select_gather_embedding_match_cpu(clean, dn):
    rng = np.random.default_rng(7)
    x = rnd(rng, (4, 7, 5), dn)
    idt = nee.int32 if dn in ("int8", "float16", "bool") else nee.int64
    X = [cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)]
    for d in range(3):
        i = nee.tensor(rng.integers(0, x.shape[d], 9)).to(idt)
        want = nee.index_select(x, d, i)
        for xc in X:
            check(nee.index_select(xc, d, cu(i)), want, exact=True, msg=f"index_select dim {d}")
        gi = nee.tensor(rng.integers(0, x.shape[d], (3, 4, 5) if d != 2 else (4, 7, 2))).to(idt)
        want = nee.gather(x, d, gi)
        for xc in X:
            check(nee.gather(xc, d, cu(gi)), want, exact=True, msg=f"gather dim {d}")
            check(nee.gather(xc, d, cu(gi).transpose(0, 1).contiguous().transpose(0, 1)), want, exact=True)
    w = rnd(rng, (11, 6), dn)
    ii = nee.tensor(rng.integers(0, 11, (3, 5))).to(idt)
    want = F.embedding(ii, w)
    check(F.embedding(cu(ii), cu(w)), want, exact=True, msg="embedding")
    check(F.embedding(cu(ii), cu(w.t().contiguous()).t()), want, exact=True, msg="embedding, strided table")


@needs_gpu
def test_bad_indices_raise_like_the_cpu(clean):
    """Out-of-range indices raise the CPU's error (host checks of index_select / gather; embedding's
    in-kernel flag) and never reach memory out of bounds."""
    x = nee.arange(12.0).reshape(3, 4)
    w = nee.randn(5, 3)
    calls = {"index_select": lambda t, i: nee.index_select(t, 1, i),
             "gather": lambda t, i: nee.gather(t, 0, i.reshape(1, -1))}
    for name, fn in calls.items():
        for bad in ([1, 4, 0], [-1, 0], [7, 9]):
            i = nee.tensor(bad)
            with pytest.raises((IndexError, RuntimeError)) as cpu_err:
                fn(x, i)
            with pytest.raises(type(cpu_err.value)) as err:
                fn(cu(x), cu(i))
            assert str(err.value) == str(cpu_err.value) and name in str(err.value)
    for bad in ([0, 5, 2], [-1], [[1, 2], [3, 7]]):
        i = nee.tensor(bad)
        with pytest.raises(IndexError) as cpu_err:
            F.embedding(i, w)
        with pytest.raises(IndexError) as err:
            F.embedding(cu(i), cu(w))
        assert str(err.value) == str(cpu_err.value) and "embedding index" in str(err.value)
    # a valid call after the error still works
    check(F.embedding(cu(nee.tensor([4, 0])), cu(w)), F.embedding(nee.tensor([4, 0]), w), exact=True)


# ================================================================ scans, arg reductions, triangles
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16", "int32", "int8", "uint8", "bool"])
def test_scans_argmax_tri_match_cpu(clean, dn):
    rng = np.random.default_rng(8)
    x = rnd(rng, (3, 6, 5), dn)
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[1, 2, 3] = np.nan
        a[2, :, 1] = a[2, 0, 1]            # ties along dim 1
        x = nee.tensor(a)
    small = x if not dn.startswith("int") and dn != "uint8" else nee.tensor(
        (x.numpy() % 3).astype(dn))         # cumprod of small integers: no overflow differences
    for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        for d in (0, 1, -1):
            check(nee.cumsum(xc, d), nee.cumsum(x, d), msg=f"cumsum {d}")
            if dn != "bool":
                check(nee.argmax(xc, d), nee.argmax(x, d), msg=f"argmax {d}")
                check(nee.argmin(xc, d, keepdim=True), nee.argmin(x, d, keepdim=True), msg=f"argmin {d}")
        for diag in (-2, 0, 1, 4):
            check(nee.tril(xc, diag), nee.tril(x, diag), exact=True, msg=f"tril {diag}")
            check(nee.triu(xc, diag), nee.triu(x, diag), exact=True, msg=f"triu {diag}")
    sc = cu(small)
    for d in (0, 2):
        check(nee.cumprod(sc, d), nee.cumprod(small, d), msg=f"cumprod {d}")
    if dn != "bool":
        check(nee.argmax(cu(x)), nee.argmax(x), msg="argmax flat")
        check(nee.argmin(cu(x)[:, ::2]), nee.argmin(x[:, ::2]), msg="argmin flat, strided")
    # long rows: one block per row (a tree combine of (value, index) pairs on a GPU), ties and several NaNs
    r = rnd(rng, (3, 300), dn).numpy().copy()
    if dn.startswith("float"):
        r[0, [17, 40, 250]] = np.nan
        r[1, [5, 77, 290]] = 9.0
        r[2, [3, 200]] = -9.0
    r = nee.tensor(r)
    if dn != "bool":
        for f in (nee.argmax, nee.argmin):
            check(f(cu(r), -1), f(r, -1), msg=f"{f.__name__} rows")
            check(f(cu(r)), f(r), msg=f"{f.__name__} flat rows")
        for f in (nee.max, nee.min):
            g, w = f(cu(r), 1), f(r, 1)
            check(g[0], w[0], exact=True, msg=f"{f.__name__} rows")
            check(g[1], w[1], msg=f"{f.__name__} rows indices")
    if dn == "float32":
        check(nee.cumsum(cu(x), 1, dtype=nee.float64), nee.cumsum(x, 1, dtype=nee.float64))
        s = nee.tensor(2.5)
        check(nee.cumsum(cu(s), 0), nee.cumsum(s, 0))
        big = nee.tensor(rng.standard_normal(3000).astype(np.float32))
        check(nee.cumsum(cu(big), 0), nee.cumsum(big, 0), msg="float32 cumsum accumulates in float64")


# ================================================================ adaptive pools, nearest upsampling, take, repeat, max(dim)
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_adaptive_pools_and_upsampling_match_cpu(clean, dn):
    rng = np.random.default_rng(9)
    a = rnd(rng, (2, 3, 9, 7), dn).numpy().copy()
    a[1, 2, 4, 4] = np.nan
    x = nee.tensor(a)
    for xc in (cu(x), cu(x.transpose(2, 3).contiguous()).transpose(2, 3)):
        for size in [(4, 3), (1, 1), (9, 7), (5, 10)]:
            check(F.adaptive_avg_pool2d(xc, size), F.adaptive_avg_pool2d(x, size), msg=f"adaptive avg {size}")
            g, w = F.adaptive_max_pool2d(xc, size, return_indices=True), F.adaptive_max_pool2d(x, size, True)
            check(g[0], w[0], exact=True, msg=f"adaptive max {size}")
            check(g[1], w[1], msg=f"adaptive max idx {size}")
        for kw in [{"scale_factor": 2}, {"scale_factor": 2.5}, {"size": (5, 11)},
                   {"size": (4, 13), "mode": "nearest-exact"}, {"scale_factor": (0.5, 1.7)}]:
            check(F.interpolate(xc, **kw), F.interpolate(x, **kw), exact=True, msg=f"nearest {kw}")
        for kw in [{"scale_factor": 2}, {"size": (5, 11)}, {"size": (4, 13), "align_corners": True},
                   {"scale_factor": (0.5, 1.7)}, {"size": (1, 1)}]:
            check(F.interpolate(xc, mode="bilinear", **kw), F.interpolate(x, mode="bilinear", **kw),
                  msg=f"bilinear {kw}")
    x1 = rnd(rng, (2, 3, 10), dn)
    check(F.adaptive_avg_pool1d(cu(x1), 4), F.adaptive_avg_pool1d(x1, 4))


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int64", "int16", "uint8", "bool", "float16"])
def test_take_repeat_max_dim_match_cpu(clean, dn):
    rng = np.random.default_rng(10)
    x = rnd(rng, (3, 5, 4), dn)
    for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        i = nee.tensor(rng.integers(-60, 60, (4, 3)))
        check(nee.take(xc, cu(i)), nee.take(x, i), exact=True, msg="take")
        for reps in [(2, 1, 3), (1, 2, 1, 2), (3, 1, 1)]:
            check(xc.repeat(*reps), x.repeat(*reps), exact=True, msg=f"repeat {reps}")
        check(xc[:, 1:4].repeat(2, 2, 1), x[:, 1:4].repeat(2, 2, 1), exact=True)
        for d in (0, 1, 2):
            for f in (nee.max, nee.min):
                g, w = f(xc, d), f(x, d)
                check(g[0], w[0], exact=True, msg=f"{f.__name__} dim {d}")
                check(g[1], w[1], msg=f"{f.__name__} dim {d} indices")
        g, w = nee.max(xc, 1, keepdim=True), nee.max(x, 1, keepdim=True)
        check(g[0], w[0], exact=True)
        check(g[1], w[1])
    with pytest.raises(IndexError, match="take"):
        nee.take(cu(x), cu(nee.tensor([0, x.numel()])))


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "float64", "int64", "int8", "bool"])
def test_sort_topk_nonzero_match_cpu(clean, dn):
    """Stable sort (ascending NaN last; descending NaN first, ties in order) by ``cupy.argsort``, topk
    as the first k of that order, values gathered by the index kernel; nonzero by ``cupy.nonzero``."""
    rng = np.random.default_rng(11)
    x = rnd(rng, (5, 40), dn) if dn == "bool" else nee.tensor((rng.integers(-4, 4, (5, 40))).astype(dn))
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[0, [3, 9]] = np.nan
        a[2, 5] = np.nan
        x = nee.tensor(a)
    for xc in (cu(x), cu(x.t().contiguous()).t()):
        for d in (0, 1):
            for desc in (False, True):
                g, w = nee.sort(xc, d, desc), nee.sort(x, d, desc)
                check(g[0], w[0], exact=True, msg=f"sort {d} {desc}")
                check(g[1], w[1], msg=f"sort indices {d} {desc}")
        check(nee.nonzero(xc), nee.nonzero(x), msg="nonzero")
    # topk: distinct values (which of several equal values the CPU's partial selection keeps is its own)
    perm = np.stack([rng.permutation(60) for _ in range(4)]).astype(np.float64) - 30
    if dn == "bool":
        return
    p = nee.tensor(perm.astype(dn))
    if dn.startswith("float"):
        q = p.numpy().copy()
        q[1, 7] = np.nan
        p = nee.tensor(q)
    for pc in (cu(p), cu(p.t().contiguous()).t()):
        for k in (1, 5, 25, 60):
            for largest in (True, False):
                g, w = nee.topk(pc, k, 1, largest), nee.topk(p, k, 1, largest)
                check(g[0], w[0], exact=True, msg=f"topk {k} {largest}")
                check(g[1], w[1], msg=f"topk indices {k} {largest}")
        g, w = nee.topk(pc, 3, 0), nee.topk(p, 3, 0)
        check(g[0], w[0], exact=True)
        check(g[1], w[1])


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "int8"])
def test_einsum_matches_cpu(clean, dn):
    rng = np.random.default_rng(12)
    a, b, c = rnd(rng, (3, 4, 5), dn), rnd(rng, (5, 6), dn), rnd(rng, (4, 4), dn)
    cases = [("bij,jk->bik", (a, b)), ("bij->jb", (a,)), ("ii->i", (c,)), ("ij,ij->", (c, c.t())),
             ("...j,jk->...k", (a, b)), ("bij,bkj->bik", (a, a[:, ::2]))]
    for eq, ops in cases:
        want = nee.einsum(eq, *ops)
        got = nee.einsum(eq, *[cu(o) for o in ops])
        check(got, want, dn="float16" if dn == "float16" else None, msg=eq)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_group_norm_nansum_count_nonzero_match_cpu(clean, dn):
    rng = np.random.default_rng(14)
    x = rnd(rng, (2, 6, 5, 7), dn)
    w, b = rnd(rng, (6,), dn), rnd(rng, (6,), dn)
    for xc in (cu(x), cu(x.transpose(2, 3).contiguous()).transpose(2, 3)):
        for G in (1, 2, 6):
            check(F.group_norm(xc, G, cu(w), cu(b), eps=1e-4), F.group_norm(x, G, w, b, eps=1e-4), msg=f"G={G}")
        check(F.group_norm(xc, 3), F.group_norm(x, 3), msg="no affine")
        check(F.instance_norm(xc, weight=cu(w), bias=cu(b)), F.instance_norm(x, weight=w, bias=b), msg="instance")
    a = x.numpy().copy()
    a[0, 1, 2, :3] = np.nan
    y = nee.tensor(a)
    for dims in ((1,), (2, 3), (0, 1, 2, 3)):
        check(nee.nansum(cu(y), dims), nee.nansum(y, dims), msg=f"nansum {dims}")
        check(nee.count_nonzero(cu(y) > 0.5, dims), nee.count_nonzero(y > 0.5, dims), msg=f"count_nonzero {dims}")
    i = nee.tensor(rng.integers(-3, 3, (4, 5)).astype(np.int32))
    check(nee.nansum(cu(i), 1), nee.nansum(i, 1))
    check(nee.count_nonzero(cu(i), 0), nee.count_nonzero(i, 0))


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "float64", "int32", "int8", "bool"])
def test_scatter_matches_cpu(clean, dn):
    """scatter / scatter_add / scatter_reduce (every reduce, with and without self) with duplicate
    indices: the same values as the CPU's serial loop (float16 sums round step by step alike), also for
    an index smaller than the input, a scalar source, int32 indices and a non-contiguous input."""
    rng = np.random.default_rng(15)
    x = nee.tensor((rng.standard_normal((4, 6, 3)) * 3).astype(dn))
    src = nee.tensor((rng.standard_normal((4, 5, 3)) * 3).astype(dn))
    idx = nee.tensor(rng.integers(0, 6, (4, 5, 3)))
    if dn.startswith("float"):
        a = src.numpy().copy()
        a[1, 2, 1] = np.nan
        src = nee.tensor(a)
    cases = {"scatter": lambda t, i, s: nee.scatter(t, 1, i, s),
             "scatter_add": lambda t, i, s: nee.scatter_add(t, 1, i, s),
             "smaller index": lambda t, i, s: nee.scatter(t, 0, i[:2, :3] % 4, s[:2, :3]),
             "scalar": lambda t, i, s: nee.scatter(t, 2, i[:, :, :2] % 3, 1),
             "int32 index": lambda t, i, s: nee.scatter_add(t, 1, i.to(nee.int32), s)}
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            cases[f"{red} {inc}"] = lambda t, i, s, red=red, inc=inc: nee.scatter_reduce(t, 1, i, s, red,
                                                                                          include_self=inc)
    for name, f in cases.items():
        want = f(x, idx, src)
        for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            check(f(xc, cu(idx), cu(src)), want, exact=True, msg=name)
    with pytest.raises(RuntimeError, match="out of bounds"):
        nee.scatter(cu(x), 1, cu(idx) + 6, cu(src))


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int64", "float16", "bool", "int8"])
def test_advanced_indexing_matches_cpu(clean, dn):
    """x[key] with index tensors (negative entries, int32, broadcast together, not adjacent: numpy's
    dim order) and bool masks (one dim, several dims, with other entries), contiguous or not."""
    rng = np.random.default_rng(16)
    x = rnd(rng, (4, 5, 6, 3), dn)
    i = nee.tensor(np.array([[0, -1], [3, 2]]))
    j = nee.tensor(np.array([4, -5, 1], np.int32))
    m1 = nee.tensor(rng.random(5) < 0.5)
    m2 = nee.tensor(rng.random((4, 5)) < 0.4)
    keys = [lambda I, J, M1, M2: (I,), lambda I, J, M1, M2: (slice(None), J),
            lambda I, J, M1, M2: (I[:, :1], slice(None), J[:2]),            # not adjacent: index dims lead
            lambda I, J, M1, M2: (slice(1, 3), J[:, None], J[:1]),          # adjacent, broadcast (3, 1) x (1,)
            lambda I, J, M1, M2: (M2,), lambda I, J, M1, M2: (slice(None), M1),
            lambda I, J, M1, M2: (M2, J[:1]), lambda I, J, M1, M2: (Ellipsis, J[:2] % 3),
            lambda I, J, M1, M2: (1, M1, 2)]
    for k, key in enumerate(keys):
        want = x[key(i, j, m1, m2)]
        for xc in (cu(x), cu(x.transpose(1, 2).contiguous()).transpose(1, 2)):
            got = xc[key(cu(i), cu(j), cu(m1), cu(m2))]
            check(got, want, exact=True, msg=f"key {k}")


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "int8", "bool"])
def test_index_add_copy_fill_repeat_interleave_match_cpu(clean, dn):
    rng = np.random.default_rng(17)
    x = rnd(rng, (4, 6, 3), dn)
    i = nee.tensor(np.array([5, 0, 5, 2]))
    s = rnd(rng, (4, 4, 3), dn)
    ops = {"copy": lambda t, j, u: nee.index_copy(t, 1, j, u),
           "fill": lambda t, j, u: nee.index_fill(t, 1, j, True if dn == "bool" else 2)}
    if dn != "bool":
        ops["add"] = lambda t, j, u: nee.index_add(t, 1, j, u)
        ops["add alpha"] = lambda t, j, u: nee.index_add(t, 1, j, u, alpha=3)
        ops["add int32 index"] = lambda t, j, u: nee.index_add(t, 1, j.to(nee.int32), u)
    for name, f in ops.items():
        want = f(x, i, s)
        # (float16 with alpha: the CPU scales in float32, the CUDA kernel in float16 before its float sum; torch
        # itself follows neither order exactly, so that one case compares within float16's tolerance)
        exact = not (dn == "float16" and name == "add alpha")
        for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            check(f(xc, cu(i), cu(s)), want, exact=exact, msg=name)
    for reps, d in [(2, 1), (nee.tensor([1, 0, 3, 2]), 0), (nee.tensor([2, 1, 1]), 2)]:
        rc = cu(reps) if isinstance(reps, nee.Tensor) else reps
        check(nee.repeat_interleave(cu(x), rc, d), nee.repeat_interleave(x, reps, d), exact=True, msg=f"ri {d}")


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "uint8"])
def test_searchsorted_matches_cpu(clean, dn):
    rng = np.random.default_rng(18)
    seq = np.sort(rng.integers(0, 20, (3, 9)), axis=1).astype(dn)
    vals = rng.integers(-2, 23, (3, 7)).astype(dn)
    if dn.startswith("float"):
        seq[1, -2:] = np.nan                # NaN sorts last
        vals[0, 1] = np.nan
    S, V = nee.tensor(seq), nee.tensor(vals)
    for right in (False, True):
        for i32 in (False, True):
            check(nee.searchsorted(cu(S), cu(V), right=right, out_int32=i32),
                  nee.searchsorted(S, V, right=right, out_int32=i32), msg=f"rows {right} {i32}")
            check(nee.searchsorted(cu(S[0]), cu(V), right=right, out_int32=i32),
                  nee.searchsorted(S[0], V, right=right, out_int32=i32), msg=f"1-D {right} {i32}")
        check(nee.bucketize(cu(V), cu(S[2]), right=right), nee.bucketize(V, S[2], right=right), msg="bucketize")


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int16", "bool"])
def test_roll_matches_cpu_and_torch(clean, dn):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(19)
    x = rnd(rng, (3, 4, 5), dn)
    for shifts, dims in [(1, 0), ((2, -1), (1, 2)), ((5, 7, -8), (0, 1, 2)), (3, None)]:
        want = nee.roll(x, shifts, dims)
        for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            check(nee.roll(xc, shifts, dims), want, exact=True, msg=f"roll {shifts} {dims}")
    # a repeated dim: the shifts add up (torch.roll)
    got = nee.roll(cu(x), (1, 2), (1, 1)).cpu().numpy()
    np.testing.assert_array_equal(got, torch.roll(torch.from_numpy(x.numpy()), (1, 2), (1, 1)).numpy())


# ================================================================ kernels shared with the OpenCL backend (ckernels.py)
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int32", "bool"])
def test_cummax_diag_embed_median_masked_match_cpu(clean, dn):
    """cummax / cummin (ties move the index to the latest, NaN takes over), diag_embed, median (the lower
    median or the first NaN), masked_select / masked_scatter (chunked stream compaction): the same kernel
    sources the OpenCL backend runs (tests/test_opencl_nn.py)."""
    rng = np.random.default_rng(31)
    x = rnd(rng, (3, 7, 4), dn)
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[1, 2, 0] = a[1, 5, 0] = np.nan
        a[0, :, 1] = 2.0
        x = nee.tensor(a)
    m = nee.tensor(rng.random((7, 4)) < 0.4)
    for xc in (cu(x), cu(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        for d in (0, 1, -1):
            for f in (nee.cummax, nee.cummin):
                g, w = f(xc, d), f(x, d)
                check(g[0], w[0], exact=True, msg=f"{f.__name__} {d}")
                check(g[1], w[1], msg=f"{f.__name__} indices {d}")
            if dn != "bool":
                g, w = nee.median(xc, d), nee.median(x, d)
                check(g[0], w[0], exact=True, msg=f"median {d}")
                check(g[1], w[1], msg=f"median indices {d}")
        for off, d1, d2 in [(0, -2, -1), (2, 0, 2), (-1, 1, 0)]:
            check(nee.diag_embed(xc, off, d1, d2), nee.diag_embed(x, off, d1, d2), exact=True, msg="diag_embed")
        check(nee.masked_select(xc, cu(m)), nee.masked_select(x, m), exact=True, msg="masked_select")
        src = rnd(rng, (100,), dn)
        check(nee.masked_scatter(xc, cu(m), cu(src)), nee.masked_scatter(x, m, src), exact=True, msg="masked_scatter")
    big = nee.tensor(rng.random(9000) < 0.3)
    check(nee.masked_select(cu(big.to(x.dtype)), cu(big)), nee.masked_select(big.to(x.dtype), big), exact=True)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_batch_norm_stats_and_nll_terms_match_cpu(clean, dn):
    rng = np.random.default_rng(32)
    y = rnd(rng, (4, 3, 7), dn)
    w, b = rnd(rng, (3,), dn), rnd(rng, (3,), dn)
    rm, rv = nee.zeros(3, dtype=y.dtype), nee.ones(3, dtype=y.dtype)
    rmc, rvc = cu(rm), cu(rv)
    check(F.batch_norm(cu(y), rmc, rvc, cu(w), cu(b), training=True), F.batch_norm(y, rm, rv, w, b, training=True))
    check(rmc, rm)
    check(rvc, rv)
    x, t = rnd(rng, (6, 5), dn), nee.tensor(rng.integers(0, 5, 6))
    cw = nee.tensor(rng.random(5).astype(dn))
    for kw in [{}, {"weight": cw, "ignore_index": 2}, {"label_smoothing": 0.1}, {"reduction": "none"}]:
        kc = {k: cu(v) if isinstance(v, nee.Tensor) else v for k, v in kw.items()}
        check(F.cross_entropy(cu(x), cu(t), **kc), F.cross_entropy(x, t, **kw), msg=f"cross_entropy {kw}")
    with pytest.raises(IndexError) as cpu_err:
        F.nll_loss(x, nee.tensor([0, 1, 7, 2, 2, 9]))
    with pytest.raises(IndexError) as err:
        F.nll_loss(cu(x), cu(nee.tensor([0, 1, 7, 2, 2, 9])))
    assert str(err.value) == str(cpu_err.value)
