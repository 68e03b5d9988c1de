"""The CUDA backend's kernels of neetorch/devices/cuda/nn.py (convolution, pooling, resampling,
pad, indexing, scans, arg reductions, sorting, einsum, triangles), against the CPU backend.

Like the GPU half of ``tests/test_cuda.py``: on a GPU when there is one, else on
:mod:`neetorch.devices.cuda.emulate` (the generated CUDA C compiled as C++ by g++, CuPy's role
played by host arrays; builds cached under ``NEE_CACHE_DIR``); ``NEE_CUDA_EMULATE=0`` skips
them.  Every case compares with the CPU backend on odd shapes, non-contiguous inputs and every
claimed dtype, and checks that no fallback was recorded for the ops it claims; the cases the OpenCL
backend runs too (same kernels, same host drivers) are written once in ``tests/gpu_op_cases.py``.
The nvcc compile of these sources is in ``tests/test_cuda.py`` (``all_sources``).
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
from neetorch.ops.registry import OPS
from neetorch.tensor import dtypes as _dt
from tests import gpu_op_cases as cases

F = nee.nn.functional
DEV = "cuda"
_N, _WHY = CUDABackend.probe()
EMULATE = _N == 0 and os.environ.get("NEE_CUDA_EMULATE", "") != "0" and emulate.available() is None
needs_gpu = pytest.mark.skipif(_N == 0 and not EMULATE, reason=f"no CUDA device: {_WHY}")


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


GPU = cases.Dev(DEV)
cu = GPU
check = GPU.check
rnd = cases.rnd


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
    cases.conv2d_matches_cpu(GPU, dn)
    isz = {"float16": "ushort", "float32": "uint", "float64": "ullong"}[dn]
    assert {f"nee_depthwise_{dn}", f"nee_im2col_{isz}"} <= set(clean.modules.kernels)


@needs_gpu
def test_conv2d_chunks_images_under_the_column_budget(clean, monkeypatch):
    cases.conv2d_chunks_images_under_the_column_budget(GPU, monkeypatch, cuda_nn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_conv_transpose2d_matches_cpu(clean, dn):
    cases.conv_transpose2d_matches_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_unfold_fold_match_cpu(clean, dn):
    cases.unfold_fold_match_cpu(GPU, dn)


# ================================================================ pooling
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_pools_match_cpu(clean, dn):
    cases.pools_match_cpu(GPU, dn)


@needs_gpu
def test_integer_claims_of_float_only_frontends(clean):
    cases.integer_claims_of_float_only_frontends(GPU)


# ================================================================ pad
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "uint8", "bool"])
def test_pad_matches_cpu(clean, dn):
    cases.pad_matches_cpu(GPU, dn)


# ================================================================ indexing
@needs_gpu
@pytest.mark.parametrize("dn", list(cuda_kernels.STORAGE))
def test_index_select_gather_embedding_match_cpu(clean, dn):
    cases.index_select_gather_embedding_match_cpu(GPU, dn)


@needs_gpu
def test_bad_indices_raise_like_the_cpu(clean):
    cases.bad_indices_raise_like_the_cpu(GPU)


# ================================================================ scans, arg reductions, triangles
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16", "int32", "int8", "uint8", "bool"])
def test_scans_argmax_tri_match_cpu(clean, dn):
    cases.scans_argmax_tri_match_cpu(GPU, dn)


# ================================================================ adaptive pools, nearest upsampling, take, repeat, max(dim)
@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_adaptive_pools_and_upsampling_match_cpu(clean, dn):
    cases.adaptive_pools_and_upsampling_match_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int64", "int16", "uint8", "bool", "float16"])
def test_take_repeat_max_dim_match_cpu(clean, dn):
    cases.take_repeat_max_dim_match_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "float64", "int64", "int8", "bool"])
def test_sort_topk_nonzero_match_cpu(clean, dn):
    """Stable sort (ascending NaN last; descending NaN first, ties in order) by ``cupy.argsort``, topk
    as the first k of that order, values gathered by the index kernel; nonzero by ``cupy.nonzero``."""
    cases.sort_topk_match_cpu(GPU, dn, ks=(1, 5, 25, 60), nonzero=True)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "int8"])
def test_einsum_matches_cpu(clean, dn):
    cases.einsum_matches_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float64", "float16"])
def test_group_norm_nansum_count_nonzero_match_cpu(clean, dn):
    cases.group_norm_nansum_count_nonzero_match_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "float64", "int32", "int8", "bool"])
def test_scatter_matches_cpu(clean, dn):
    cases.scatter_matches_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int64", "float16", "bool", "int8"])
def test_advanced_indexing_matches_cpu(clean, dn):
    cases.advanced_indexing_matches_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "int8", "bool"])
def test_index_add_copy_fill_repeat_interleave_match_cpu(clean, dn):
    cases.index_add_copy_fill_repeat_interleave_match_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "int64", "uint8"])
def test_searchsorted_matches_cpu(clean, dn):
    cases.searchsorted_matches_cpu(GPU, dn)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "int16", "bool"])
def test_roll_matches_cpu_and_torch(clean, dn):
    cases.roll_matches_cpu_and_torch(GPU, dn)


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
