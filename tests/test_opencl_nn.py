"""The OpenCL backend's kernels of neetorch/devices/opencl/nn.py (convolution, pooling, resampling,
data movement, indexing, scatter, scans, arg reductions, row norms), against the CPU backend.

The kernels are the CUDA backend's sources printed in the OpenCL dialect (neetorch/devices/ckernels.py),
so running them here on PoCL also runs the CUDA kernels' logic for real.  The cases both backends run
are written once in ``tests/gpu_op_cases.py`` (odd shapes, non-contiguous inputs, every claimed dtype,
NaN, ties; ``tests/test_cuda_nn.py`` runs them too) and run here in strict mode: a fallback to the CPU for any op is an error, so every op below really ran on OpenCL.
Skipped when pyopencl or an OpenCL device is missing.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee

cl_ = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'neetorch[opencl]')")

from neetorch.devices import coverage, get_backend
from neetorch.devices.opencl import OpenCLBackend
from neetorch.devices.opencl import nn as cl_nn
from neetorch.ops.registry import OPS
from neetorch.tensor import dtypes as _dt
from tests import gpu_op_cases as cases

_n, _why = OpenCLBackend.probe()
if _n == 0:
    pytest.skip(f"no OpenCL device: {_why}", allow_module_level=True)

F = nee.nn.functional
DEV = "opencl"


@pytest.fixture(scope="module")
def bk():
    # (no register_backend here: the entry point registers it, and re-registering would replace the instance
    # that tests/test_opencl.py holds when both files run in one process)
    b = get_backend(nee.device(DEV))
    if "float64" not in b.dtypes:
        pytest.skip("the OpenCL device has no cl_khr_fp64 (these tests compare float64 too)")
    b.programs.precompile(cl_nn.all_sources())     # ONE program for every kernel of opencl/nn.py
    return b


@pytest.fixture()
def clean(bk):
    """Strict mode: any fallback (of any op, on any device) raises."""
    nee.reset_fallbacks()
    nee.set_strict(True)
    try:
        yield bk
    finally:
        nee.set_strict(False)
    recs = list(nee.fallback_report().records.values())
    nee.reset_fallbacks()
    assert not recs, [(r.op, r.reason) for r in recs]


# float16 (``half``) runs where the device has cl_khr_fp16 (Intel's CPU runtime); elsewhere those cases skip
FP16 = "cl_khr_fp16" in get_backend(nee.device(DEV)).cl_device.extensions.split()
H = pytest.param("float16", marks=pytest.mark.skipif(not FP16, reason="the OpenCL device has no cl_khr_fp16"))

GPU = cases.Dev(DEV)
cl = GPU
check = GPU.check
rnd = cases.rnd


# ================================================================ convolution
@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_conv2d_matches_cpu(clean, dn):
    cases.conv2d_matches_cpu(GPU, dn)
    isz = {"float16": "ushort", "float32": "uint", "float64": "ullong"}[dn]
    assert {f"neecl_depthwise_{dn}", f"neecl_im2col_{isz}"} <= set(clean.programs.kernels)


def test_conv2d_chunks_images_under_the_column_budget(clean, monkeypatch):
    cases.conv2d_chunks_images_under_the_column_budget(GPU, monkeypatch, cl_nn)


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_conv_transpose2d_matches_cpu(clean, dn):
    cases.conv_transpose2d_matches_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_unfold_fold_match_cpu(clean, dn):
    cases.unfold_fold_match_cpu(GPU, dn)


# ================================================================ pooling
@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_pools_match_cpu(clean, dn):
    cases.pools_match_cpu(GPU, dn)


def test_integer_claims_of_float_only_frontends(clean):
    cases.integer_claims_of_float_only_frontends(GPU)


# ================================================================ pad
@pytest.mark.parametrize("dn", ["float32", "int64", "uint8", "bool", H])
def test_pad_matches_cpu(clean, dn):
    cases.pad_matches_cpu(GPU, dn)


# ================================================================ indexing
@pytest.mark.parametrize("dn", ["float32", "float64", "int16", "bool", H])   # take3 kernels: one per item size
def test_index_select_gather_embedding_match_cpu(clean, dn):
    cases.index_select_gather_embedding_match_cpu(GPU, dn)


def test_bad_indices_raise_like_the_cpu(clean):
    cases.bad_indices_raise_like_the_cpu(GPU)


# ================================================================ scans, arg reductions, triangles
@pytest.mark.parametrize("dn", ["float32", "float64", "int8", "bool", H])
def test_scans_argmax_tri_match_cpu(clean, dn):
    cases.scans_argmax_tri_match_cpu(GPU, dn)


# ================================================================ adaptive pools, nearest upsampling, take, repeat, max(dim)
@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_adaptive_pools_and_upsampling_match_cpu(clean, dn):
    cases.adaptive_pools_and_upsampling_match_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "int64", "uint8", H])
def test_take_repeat_max_dim_match_cpu(clean, dn):
    cases.take_repeat_max_dim_match_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_group_norm_nansum_count_nonzero_match_cpu(clean, dn):
    cases.group_norm_nansum_count_nonzero_match_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "float64", "int32", "bool", H])
def test_scatter_matches_cpu(clean, dn):
    cases.scatter_matches_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "int64", "bool", "int8", H])
def test_advanced_indexing_matches_cpu(clean, dn):
    cases.advanced_indexing_matches_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "int64", "int8", "bool", H])
def test_index_add_copy_fill_repeat_interleave_match_cpu(clean, dn):
    cases.index_add_copy_fill_repeat_interleave_match_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "int64", "uint8", H])
def test_searchsorted_matches_cpu(clean, dn):
    cases.searchsorted_matches_cpu(GPU, dn)


@pytest.mark.parametrize("dn", ["float32", "int16", "bool", H])
def test_roll_matches_cpu_and_torch(clean, dn):
    cases.roll_matches_cpu_and_torch(GPU, dn)


# ================================================================ beyond the CUDA test's cases
@pytest.mark.parametrize("dn", ["float32", "int64", "bool", H])
def test_sort_topk_match_cpu(clean, dn):
    """Stable merge sort per column (ascending NaN last; descending NaN first, ties in order); topk as
    the first k of that order."""
    cases.sort_topk_match_cpu(GPU, dn, long_sort=True)


@pytest.mark.parametrize("dn", ["float64", "int16", "uint8", H])
def test_cummax_cummin_diag_embed_cat_flip_match_cpu(clean, dn):
    rng = np.random.default_rng(21)
    x = rnd(rng, (3, 7, 4), dn)
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[1, 2, 0] = a[1, 5, 0] = np.nan      # the index follows each later NaN
        a[0, :, 1] = 2.0                      # ties: the index moves to the latest
        x = nee.tensor(a)
    for xc in (cl(x), cl(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        for d in (0, 1, -1):
            for f in (nee.cummax, nee.cummin):
                g, w = f(xc, d), f(x, d)
                check(g[0], w[0], exact=True, msg=f"{f.__name__} {d}")
                check(g[1], w[1], msg=f"{f.__name__} indices {d}")
        for off, d1, d2 in [(0, -2, -1), (2, 0, 2), (-1, 1, 0), (3, -1, -3)]:
            check(nee.diag_embed(xc, off, d1, d2), nee.diag_embed(x, off, d1, d2), exact=True,
                  msg=f"diag_embed {off} {d1} {d2}")
        for dims in ((0,), (1, 2), (-1, 0, 1)):
            check(nee.flip(xc, dims), nee.flip(x, dims), exact=True, msg=f"flip {dims}")
        y = rnd(rng, (3, 2, 4), dn)
        for ys in (cl(y), cl(y.transpose(0, 1).contiguous()).transpose(0, 1)):
            check(nee.cat([xc, ys, xc[:, :1]], 1), nee.cat([x, y, x[:, :1]], 1), exact=True, msg="cat")
    s = nee.tensor(np.array(3, dtype=dn))
    g, w = nee.cummax(cl(s), 0), nee.cummax(s, 0)
    check(g[0], w[0], exact=True)
    check(g[1], w[1])
    check(nee.cat([cl(x), cl(x.to(nee.int64))], 0), nee.cat([x, x.to(nee.int64)], 0), exact=True,
          msg="cat with a cast")


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_layer_norm_rms_norm_match_cpu(clean, dn):
    """One work-group per row (a local-memory tree), float64 statistics like the CPU kernel."""
    rng = np.random.default_rng(22)
    for shape, n in [((3, 5, 37), 37), ((2, 300), 300), ((4, 1), 1), ((2, 3, 4, 6), 24)]:
        x = rnd(rng, shape, dn)
        w, b = rnd(rng, (n,), dn), rnd(rng, (n,), dn)
        ns = shape[-1:] if n == shape[-1] else shape[-2:]
        for xc in (cl(x), cl(x.transpose(0, 1).contiguous()).transpose(0, 1)):
            check(F.layer_norm(xc, ns, cl(w).reshape(ns), cl(b).reshape(ns), eps=1e-3),
                  F.layer_norm(x, ns, w.reshape(ns), b.reshape(ns), eps=1e-3), msg=f"layer_norm {shape}")
            check(F.layer_norm(xc, ns), F.layer_norm(x, ns), msg=f"layer_norm no affine {shape}")
            check(F.rms_norm(xc, ns, cl(w).reshape(ns)), F.rms_norm(x, ns, w.reshape(ns)), msg=f"rms_norm {shape}")
            check(F.rms_norm(xc, ns, eps=1e-2), F.rms_norm(x, ns, eps=1e-2), msg=f"rms_norm no weight {shape}")


def test_edge_cases(clean):
    """Empty tensors, negative and out-of-range indices (the CPU's errors, no out-of-bounds access),
    NaN-only rows, float16 refused cleanly where the device has no cl_khr_fp16."""
    rng = np.random.default_rng(23)
    e = nee.zeros(0, 5)
    for f in (lambda t: nee.cumsum(t, 1), lambda t: nee.sort(t, 1)[0], lambda t: nee.tril(t),
              lambda t: nee.flip(t, (0,)), lambda t: nee.roll(t, 1, 1), lambda t: nee.cat([t, t], 0),
              lambda t: nee.argmax(t, 1), lambda t: nee.index_select(t, 1, nee.tensor([0, 4]).to(t.device)),
              lambda t: F.pad(t, (1, 1))):
        check(f(cl(e)), f(e), exact=True)
    x = nee.tensor(rng.standard_normal((3, 6)).astype(np.float32))
    with pytest.raises(IndexError) as cpu_err:
        nee.index_select(x, 1, nee.tensor([-1, 2]))
    with pytest.raises(IndexError) as err:
        nee.index_select(cl(x), 1, cl(nee.tensor([-1, 2])))
    assert str(err.value) == str(cpu_err.value)
    check(nee.take(cl(x), cl(nee.tensor([-1, -18, 5]))), nee.take(x, nee.tensor([-1, -18, 5])), exact=True)
    n = nee.tensor(np.full((2, 70), np.nan, np.float32))
    for f in (nee.argmax, nee.argmin):
        check(f(cl(n), 1), f(n, 1))
    check(F.max_pool2d(cl(n.reshape(1, 2, 7, 10)), 3), F.max_pool2d(n.reshape(1, 2, 7, 10), 3), exact=True)
    nee.set_strict(False)
    h = nee.zeros(2, 3, 4, 4, dtype=nee.float16)
    if FP16:
        check(F.max_pool2d(cl(h), 2), F.max_pool2d(h, 2), exact=True)
    else:
        with pytest.raises(TypeError, match="float16"):
            h.to(DEV)


def test_claims_and_coverage(bk):
    """The ops of opencl/nn.py are claimed for the dtypes the coverage table asks about; integer
    convolutions are not (visible fallbacks, with a reason); float16 exactly where float32 is, on a device
    with cl_khr_fp16, and nowhere on one without."""
    for name in cl_nn.table():
        claimed = [dn for dn in coverage.DTYPES if bk.supports(name, list(coverage.signature(OPS[name], dn))) is None]
        assert "float32" in claimed or name in ("tril", "triu") and "int32" in claimed, name
        assert ("float16" in claimed) == (FP16 and "float32" in claimed), name
    if not FP16:
        assert "cl_khr_fp16" in bk.supports("conv2d", [_dt.float16] * 4)
    assert "floating" in bk.supports("conv2d", [_dt.int32, _dt.int32, _dt.int32, _dt.int32])
    assert "int32/int64" in bk.supports("gather", [_dt.float32, _dt.float32, _dt.float32])
    assert bk.supports("max_pool2d", [_dt.int16, _dt.int16]) is None


@pytest.mark.parametrize("dn", ["float32", "int64", "bool", H])
def test_nonzero_masked_index_put_match_cpu(clean, dn):
    """Stream compaction (per-chunk counts, their scan, ordered writes) for nonzero / masked_select /
    masked_scatter, over more than one chunk; index_put (assign and accumulate, duplicate positions,
    masks, broadcast values, a non-contiguous target)."""
    rng = np.random.default_rng(24)
    x = rnd(rng, (5, 7, 3), dn)
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[0, 0, :] = 0.0
        a[2, 3, 1] = np.nan                   # NaN is nonzero
        x = nee.tensor(a)
    m = nee.tensor(rng.random((7, 3)) < 0.4)
    big = nee.tensor((rng.random(9000) < 0.3).astype(dn) if dn != "bool" else rng.random(9000) < 0.3)
    for xc in (cl(x), cl(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        check(nee.nonzero(xc), nee.nonzero(x), msg="nonzero")
        check(nee.masked_select(xc, cl(m)), nee.masked_select(x, m), exact=True, msg="masked_select broadcast")
        src = rnd(rng, (200,), dn)
        check(nee.masked_scatter(xc, cl(m), cl(src)), nee.masked_scatter(x, m, src), exact=True, msg="masked_scatter")
    check(nee.nonzero(cl(big)), nee.nonzero(big), msg="nonzero, 3 chunks")
    check(nee.masked_select(cl(big), cl(big != 0)), nee.masked_select(big, big != 0), exact=True)
    check(nee.nonzero(cl(nee.zeros(4, 0))), nee.nonzero(nee.zeros(4, 0)))
    i = nee.tensor(np.array([0, 4, 0, -1]))
    j = nee.tensor(np.array([2, 6, 2, 0], np.int32))
    for name, k in [("ints", (i, j)), ("mask", (slice(None), m)), ("not adjacent", (i[:2], slice(1, 4), j[:2] % 3))]:
        tensors_only = all(isinstance(t, nee.Tensor) for t in k)
        for acc in (False, True):
            if acc and (dn == "bool" or not tensors_only):
                continue
            v = rnd(rng, tuple(x[k].shape)[-1:], dn)          # broadcast over the leading dims
            want = x.clone()
            got = cl(x.transpose(0, 2).contiguous()).transpose(0, 2)   # a non-contiguous target, written in place
            kk = tuple(cl(t) if isinstance(t, nee.Tensor) else t for t in k)
            if acc:
                want.index_put_(k, v, True)
                got.index_put_(kk, cl(v), True)
            else:
                want[k] = v
                got[kk] = cl(v)
            check(got, want, exact=True, msg=f"index_put {name} {acc}")


@pytest.mark.parametrize("dn", ["float32", "float64", "int16", H])
def test_median_batch_norm_stats_match_cpu(clean, dn):
    """median: the stable sort then the lower median, or the first NaN of the row; batch_norm's
    per-channel statistics: one work-group per channel, float64 like the CPU kernel."""
    rng = np.random.default_rng(25)
    x = rnd(rng, (4, 9, 6), dn) if dn != "int16" else nee.tensor(rng.integers(-3, 3, (4, 9, 6)).astype(dn))
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[1, [2, 7], 3] = np.nan
        a[0, :, 0] = 1.5                     # ties
        x = nee.tensor(a)
    for xc in (cl(x), cl(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        check(nee.median(xc), nee.median(x), msg="median flat")
        for d in (0, 1, 2):
            g, w = nee.median(xc, d, keepdim=d == 1), nee.median(x, d, keepdim=d == 1)
            check(g[0], w[0], exact=True, msg=f"median {d}")
            check(g[1], w[1], msg=f"median indices {d}")
    if not dn.startswith("float"):
        return
    for shape in [(5, 3), (4, 3, 7), (2, 6, 5, 9)]:
        y = rnd(rng, shape, dn)
        w, b = rnd(rng, shape[1:2], dn), rnd(rng, shape[1:2], dn)
        for yc in (cl(y), cl(y.transpose(0, 1).contiguous()).transpose(0, 1)):
            rm, rv = nee.zeros(shape[1], dtype=y.dtype), nee.ones(shape[1], dtype=y.dtype)
            rmc, rvc = cl(rm), cl(rv)
            want = F.batch_norm(y, rm, rv, w, b, training=True)
            got = F.batch_norm(yc, rmc, rvc, cl(w), cl(b), training=True)
            check(got, want, msg=f"batch_norm {shape}")
            check(rmc, rm, msg="running mean")
            check(rvc, rv, msg="running var")


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_nll_loss_terms_match_cpu(clean, dn):
    """cross_entropy / nll_loss (weights, ignore_index, label smoothing, (N, C, d) inputs) and the
    float64 sums built on the same op: per-element terms in parallel, totals by one thread in order."""
    rng = np.random.default_rng(26)
    x = rnd(rng, (6, 5), dn)
    t = nee.tensor(rng.integers(0, 5, 6))
    t3 = nee.tensor(rng.integers(0, 5, (3, 4)))
    x3 = rnd(rng, (3, 5, 4), dn)
    w = nee.tensor(rng.random(5).astype(dn))
    for kw in [{}, {"weight": w}, {"ignore_index": 2}, {"label_smoothing": 0.1}, {"reduction": "sum"},
               {"reduction": "none", "weight": w, "label_smoothing": 0.2}]:
        kc = {k: cl(v) if isinstance(v, nee.Tensor) else v for k, v in kw.items()}
        check(F.cross_entropy(cl(x), cl(t), **kc), F.cross_entropy(x, t, **kw), msg=f"cross_entropy {kw}")
        check(F.cross_entropy(cl(x3), cl(t3), **kc), F.cross_entropy(x3, t3, **kw), msg=f"cross_entropy 3d {kw}")
        if "label_smoothing" not in kw:
            check(F.nll_loss(cl(x), cl(t), **kc), F.nll_loss(x, t, **kw), msg=f"nll_loss {kw}")
    with pytest.raises(IndexError) as cpu_err:
        F.nll_loss(x, nee.tensor([0, 1, 7, 2, 2, 9]))
    with pytest.raises(IndexError) as err:
        F.nll_loss(cl(x), cl(nee.tensor([0, 1, 7, 2, 2, 9])))
    assert str(err.value) == str(cpu_err.value)


@pytest.mark.parametrize("dn", ["float32", "float64", "int64", "int32", H])
def test_einsum_matches_cpu(clean, dn):
    """Diagonals (repeated labels), sums, batched matmuls, outer products, three operands, ellipses."""
    cases.einsum_matches_cpu(GPU, dn, more=True)


@pytest.mark.parametrize("dn", ["float32", "float64", H])
def test_embedding_max_norm_matches_cpu(clean, dn):
    """F.embedding(max_norm=...) renormalizes the looked-up rows in place (every norm type), duplicates
    once; an out-of-range index raises the CPU's error."""
    rng = np.random.default_rng(27)
    w = nee.tensor((rng.standard_normal((9, 5)) * 2).astype(dn))
    i = nee.tensor(np.array([[1, 4, 4], [8, 0, 1]]))
    for p in (2.0, 1.0, 3.0, float("inf"), 0.0):
        wc, wd = w.clone(), cl(w)
        want = F.embedding(i, wc, max_norm=1.5, norm_type=p)
        got = F.embedding(cl(i), wd, max_norm=1.5, norm_type=p)
        check(got, want, msg=f"embedding max_norm p={p}")
        check(wd, wc, msg=f"renormalized table p={p}")
    with pytest.raises(IndexError) as cpu_err:
        F.embedding(nee.tensor([3, 9]), w.clone(), max_norm=1.0)
    with pytest.raises(IndexError) as err:
        F.embedding(cl(nee.tensor([3, 9])), cl(w), max_norm=1.0)
    assert str(err.value) == str(cpu_err.value)


@pytest.mark.parametrize("dn", ["float32", "int64", "bool", H])
def test_unique_matches_cpu(clean, dn):
    """unique (sorted): the stable sort, group starts, stream compaction; inverse indices and counts,
    NaNs each their own value like the CPU, more than one compaction chunk; unique along a dim."""
    rng = np.random.default_rng(28)
    for shape in [(4, 7), (9000,), (1,)]:
        x = nee.tensor(rng.integers(0, 6, shape).astype(dn)) if dn != "bool" else rnd(rng, shape, dn)
        if dn == "float32" and shape == (4, 7):
            a = x.numpy().copy()
            a[1, [2, 5]] = np.nan
            x = nee.tensor(a)
        want = nee.unique(x, return_inverse=True, return_counts=True)
        got = nee.unique(cl(x), return_inverse=True, return_counts=True)
        nan = np.isnan(x.numpy()) if dn == "float32" else np.zeros(shape, bool)
        for g, w, what in zip(got, want, ("values", "inverse", "counts")):
            if what == "inverse" and nan.any():
                # which NaN takes which of the NaN slots follows each device's sort order among equal keys (the
                # CPU's is torch's unstable one, the device's stable): the same slots, the rest exact
                gi, wi = g.cpu().numpy(), w.numpy()
                np.testing.assert_array_equal(gi[~nan], wi[~nan], err_msg=f"unique inverse {shape}")
                assert sorted(gi[nan]) == sorted(wi[nan]), (gi[nan], wi[nan])
                continue
            check(g, w, exact=True, msg=f"unique {what} {shape}")
    # along a dim (rows compared lexicographically; no NaN: numpy's order of NaN rows is its own)
    x = nee.tensor(rng.integers(0, 2, (5, 3, 4)).astype(dn)) if dn != "bool" else rnd(rng, (5, 3, 4), dn)
    x = nee.cat([x, x[:2]], 0)                   # duplicate slices along every dim
    x = nee.cat([x, x[:, :1]], 1)
    x = nee.cat([x, x[:, :, 1:2]], 2)
    for d in (0, 1, 2):
        want = nee.unique(x, return_inverse=True, return_counts=True, dim=d)
        for xc in (cl(x), cl(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            got = nee.unique(xc, return_inverse=True, return_counts=True, dim=d)
            for g, w, what in zip(got, want, ("values", "inverse", "counts")):
                check(g, w, exact=True, msg=f"unique dim {d} {what}")
