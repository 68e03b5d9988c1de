"""Op cases shared by the GPU backends' tests (``tests/test_cuda_nn.py``, ``tests/test_opencl_nn.py``):
the CUDA and the OpenCL backends run the same kernels (``neetorch/devices/ckernels.py``) through the same
host-side drivers (``neetorch/devices/gpu_drivers.py``), so each case below is written once and run by
both test files on their device (:class:`Dev`), each with the dtypes that backend claims.

Every case compares with the CPU backend on odd shapes, non-contiguous inputs, NaN and ties.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.ops.registry import OPS, run

F = nee.nn.functional
TOL = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-11}


class Dev:
    """A device under test: ``dev(t)`` moves a CPU tensor there, :meth:`check` compares with the CPU."""

    def __init__(self, name):
        self.name = name

    def __call__(self, t):
        return t.to(self.name)

    def check(self, got, want, dn=None, exact=False, msg=""):
        assert got.device.type == self.name, msg
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), (msg, got.dtype, want.dtype,
                                                                                     got.shape, want.shape)
        g, w = got.cpu().numpy(), want.numpy()
        if exact or g.dtype.kind != "f":
            np.testing.assert_array_equal(g, w, err_msg=msg)
        else:
            tol = TOL[dn or g.dtype.name]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                       equal_nan=True, err_msg=msg)


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


def conv2d_matches_cpu(dev, dn):
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
        got = F.conv2d(dev(x), dev(w), dev(b) if b is not None else None, **kw)
        dev.check(got, want, msg=f"{ws} {kw}")
    # non-contiguous input and weight, unbatched input, conv1d (the same op)
    xt = dev(x.transpose(2, 3).contiguous()).transpose(2, 3)
    w = rnd(rng, (5, 6, 3, 3), dn)
    wt = dev(w.transpose(0, 1).contiguous()).transpose(0, 1)
    dev.check(F.conv2d(xt, wt, padding=1), F.conv2d(x, w, padding=1), msg="non-contiguous")
    dev.check(F.conv2d(dev(x[0]), dev(w), stride=2), F.conv2d(x[0], w, stride=2), msg="unbatched")
    x1, w1 = rnd(rng, (3, 4, 17), dn), rnd(rng, (2, 4, 5), dn)
    dev.check(F.conv1d(dev(x1), dev(w1), padding=2, dilation=2), F.conv1d(x1, w1, padding=2, dilation=2), msg="conv1d")


def conv2d_chunks_images_under_the_column_budget(dev, monkeypatch, nn_module):
    rng = np.random.default_rng(2)
    x, w, b = rnd(rng, (5, 3, 8, 7), "float32"), rnd(rng, (4, 3, 3, 3), "float32"), rnd(rng, (4,), "float32")
    monkeypatch.setattr(nn_module, "COL_BUDGET", 3 * 9 * 6 * 5 * 4 * 2)     # two images per chunk
    dev.check(F.conv2d(dev(x), dev(w), dev(b)), F.conv2d(x, w, b))
    # a non-contiguous output (written through a temporary)
    o = nee.empty(5, 5, 6, 4, device=dev.name).transpose(1, 3)
    run(OPS["conv2d"], [dev(x), dev(w), dev(b)], {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
                                               "groups": 1}, out=[o])
    dev.check(o.contiguous(), F.conv2d(x, w, b))


def conv_transpose2d_matches_cpu(dev, dn):
    rng = np.random.default_rng(3)
    x = rnd(rng, (2, 4, 5, 6), dn)
    for ws, has_b, kw in [((4, 3, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}),
                          ((4, 2, 2, 3), False, {"stride": (1, 2), "dilation": (2, 1), "groups": 2}),
                          ((4, 5, 1, 1), True, {})]:
        w = rnd(rng, ws, dn)
        b = rnd(rng, (ws[1] * kw.get("groups", 1),), dn) if has_b else None
        want = F.conv_transpose2d(x, w, b, **kw)
        got = F.conv_transpose2d(dev(x).transpose(2, 3).contiguous().transpose(2, 3), dev(w),
                                 dev(b) if b is not None else None, **kw)
        dev.check(got, want, msg=f"{ws} {kw}")


def unfold_fold_match_cpu(dev, dn):
    rng = np.random.default_rng(13)
    x = rnd(rng, (2, 3, 7, 8), dn)
    for kw in [{"kernel_size": 3}, {"kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (2, 3)}]:
        want = F.unfold(x, **kw)
        for xc in (dev(x), dev(x.transpose(2, 3).contiguous()).transpose(2, 3)):
            got = F.unfold(xc, **kw)
            dev.check(got, want, exact=True, msg=f"unfold {kw}")
            dev.check(F.fold(got, (7, 8), **kw), F.fold(want, (7, 8), **kw), msg=f"fold {kw}")
        dev.check(F.fold(dev(want)[:, :, :].transpose(0, 1).contiguous().transpose(0, 1), (7, 8), **kw),
              F.fold(want, (7, 8), **kw), msg="fold, strided input")


def pools_match_cpu(dev, dn):
    rng = np.random.default_rng(4)
    x = rnd(rng, (2, 3, 13, 10), dn)
    a = x.numpy().copy()
    a[0, 1, 2, 3] = np.nan                 # NaN wins (and its index)
    a[1, 0, :4, :4] = 1.5                  # ties: the first tap
    x = nee.tensor(a)
    xs = [dev(x), dev(x.transpose(2, 3).contiguous()).transpose(2, 3)]
    for kw in [{"kernel_size": 3}, {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
               {"kernel_size": 3, "stride": (2, 3), "padding": (1, 0), "dilation": (2, 1)},
               {"kernel_size": 2, "stride": 3, "ceil_mode": True, "dilation": 2}]:
        want = F.max_pool2d(x, return_indices=True, **kw)
        for xc in xs:
            got = F.max_pool2d(xc, return_indices=True, **kw)
            dev.check(got[0], want[0], exact=True, msg=f"max {kw}")
            dev.check(got[1], want[1], msg=f"max idx {kw}")
            dev.check(F.max_pool2d(xc, **kw), want[0], exact=True, msg=f"max values {kw}")
    for kw in [{"kernel_size": 3}, {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
               {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
               {"kernel_size": (2, 4), "stride": (3, 1), "padding": (1, 2), "divisor_override": 5},
               {"kernel_size": 5, "stride": 4, "ceil_mode": True, "count_include_pad": False}]:
        want = F.avg_pool2d(x, **kw)
        for xc in xs:
            dev.check(F.avg_pool2d(xc, **kw), want, msg=f"avg {kw}")
    x1 = rnd(rng, (3, 4, 19), dn)
    dev.check(F.max_pool1d(dev(x1), 3, 2, 1, ceil_mode=True), F.max_pool1d(x1, 3, 2, 1, ceil_mode=True), exact=True)
    dev.check(F.avg_pool1d(dev(x1), 4, 3, 2), F.avg_pool1d(x1, 4, 3, 2))


def integer_claims_of_float_only_frontends(dev):
    # the frontends only pass floats, but these claims cover every storage dtype: run the ops themselves
    rng = np.random.default_rng(5)
    x = rnd(rng, (1, 2, 7, 6), "int32")
    attrs = {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True}
    got = run(OPS["max_pool2d_with_indices"], [dev(x)], attrs)
    want = run(OPS["max_pool2d_with_indices"], [x], attrs)
    dev.check(got[0], want[0])
    dev.check(got[1], want[1])
    for op, ia in [("adaptive_max_pool2d", {"size": (3, 4), "mode": "max"}),
                   ("im2col", {"kernel_size": (2, 2), "dilation": (1, 1), "padding": (1, 0), "stride": (2, 1),
                               "blocks": (4, 5)})]:
        got, want = run(OPS[op], [dev(x)], ia), run(OPS[op], [x], ia)
        for g, w in zip(got, want):
            dev.check(g, w, msg=op)


def pad_matches_cpu(dev, dn):
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
            v, big = noncontig(dev(x))
            for xc in (dev(x), v, big):
                dev.check(F.pad(xc, p, mode=mode), want, exact=True, msg=f"{mode} {p} {tuple(x.shape)}")
    if dn != "bool":
        dev.check(F.pad(dev(x4), (1, 1, 2, 2), value=3), F.pad(x4, (1, 1, 2, 2), value=3), exact=True)
    dev.check(F.pad(dev(x3), (2, 1, 0, 0, 1, 1)), F.pad(x3, (2, 1, 0, 0, 1, 1)), exact=True)


def index_select_gather_embedding_match_cpu(dev, dn):
    rng = np.random.default_rng(7)
    x = rnd(rng, (4, 7, 5), dn)
    idt = nee.int32 if dn in ("int8", "float16", "bool") else nee.int64
    X = [dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)]
    for d in range(3):
        i = nee.tensor(rng.integers(0, x.shape[d], 9)).to(idt)
        want = nee.index_select(x, d, i)
        for xc in X:
            dev.check(nee.index_select(xc, d, dev(i)), want, exact=True, msg=f"index_select dim {d}")
        gi = nee.tensor(rng.integers(0, x.shape[d], (3, 4, 5) if d != 2 else (4, 7, 2))).to(idt)
        want = nee.gather(x, d, gi)
        for xc in X:
            dev.check(nee.gather(xc, d, dev(gi)), want, exact=True, msg=f"gather dim {d}")
            dev.check(nee.gather(xc, d, dev(gi).transpose(0, 1).contiguous().transpose(0, 1)), want, exact=True)
    w = rnd(rng, (11, 6), dn)
    ii = nee.tensor(rng.integers(0, 11, (3, 5))).to(idt)
    want = F.embedding(ii, w)
    dev.check(F.embedding(dev(ii), dev(w)), want, exact=True, msg="embedding")
    dev.check(F.embedding(dev(ii), dev(w.t().contiguous()).t()), want, exact=True, msg="embedding, strided table")


def bad_indices_raise_like_the_cpu(dev):
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
                fn(dev(x), dev(i))
            assert str(err.value) == str(cpu_err.value) and name in str(err.value)
    for bad in ([0, 5, 2], [-1], [[1, 2], [3, 7]]):
        i = nee.tensor(bad)
        with pytest.raises(IndexError) as cpu_err:
            F.embedding(i, w)
        with pytest.raises(IndexError) as err:
            F.embedding(dev(i), dev(w))
        assert str(err.value) == str(cpu_err.value) and "embedding index" in str(err.value)
    # a valid call after the error still works
    dev.check(F.embedding(dev(nee.tensor([4, 0])), dev(w)), F.embedding(nee.tensor([4, 0]), w), exact=True)


def scans_argmax_tri_match_cpu(dev, dn):
    rng = np.random.default_rng(8)
    x = rnd(rng, (3, 6, 5), dn)
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[1, 2, 3] = np.nan
        a[2, :, 1] = a[2, 0, 1]            # ties along dim 1
        x = nee.tensor(a)
    small = x if not dn.startswith("int") and dn != "uint8" else nee.tensor(
        (x.numpy() % 3).astype(dn))         # cumprod of small integers: no overflow differences
    for xc in (dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        for d in (0, 1, -1):
            dev.check(nee.cumsum(xc, d), nee.cumsum(x, d), msg=f"cumsum {d}")
            if dn != "bool":
                dev.check(nee.argmax(xc, d), nee.argmax(x, d), msg=f"argmax {d}")
                dev.check(nee.argmin(xc, d, keepdim=True), nee.argmin(x, d, keepdim=True), msg=f"argmin {d}")
        for diag in (-2, 0, 1, 4):
            dev.check(nee.tril(xc, diag), nee.tril(x, diag), exact=True, msg=f"tril {diag}")
            dev.check(nee.triu(xc, diag), nee.triu(x, diag), exact=True, msg=f"triu {diag}")
    sc = dev(small)
    for d in (0, 2):
        dev.check(nee.cumprod(sc, d), nee.cumprod(small, d), msg=f"cumprod {d}")
    if dn != "bool":
        dev.check(nee.argmax(dev(x)), nee.argmax(x), msg="argmax flat")
        dev.check(nee.argmin(dev(x)[:, ::2]), nee.argmin(x[:, ::2]), msg="argmin flat, strided")
    # long rows: one block per row (a tree combine of (value, index) pairs on a GPU), ties and several NaNs
    r = rnd(rng, (3, 300), dn).numpy().copy()
    if dn.startswith("float"):
        r[0, [17, 40, 250]] = np.nan
        r[1, [5, 77, 290]] = 9.0
        r[2, [3, 200]] = -9.0
    r = nee.tensor(r)
    if dn != "bool":
        for f in (nee.argmax, nee.argmin):
            dev.check(f(dev(r), -1), f(r, -1), msg=f"{f.__name__} rows")
            dev.check(f(dev(r)), f(r), msg=f"{f.__name__} flat rows")
        for f in (nee.max, nee.min):
            g, w = f(dev(r), 1), f(r, 1)
            dev.check(g[0], w[0], exact=True, msg=f"{f.__name__} rows")
            dev.check(g[1], w[1], msg=f"{f.__name__} rows indices")
    if dn == "float32":
        dev.check(nee.cumsum(dev(x), 1, dtype=nee.float64), nee.cumsum(x, 1, dtype=nee.float64))
        s = nee.tensor(2.5)
        dev.check(nee.cumsum(dev(s), 0), nee.cumsum(s, 0))
        big = nee.tensor(rng.standard_normal(3000).astype(np.float32))
        dev.check(nee.cumsum(dev(big), 0), nee.cumsum(big, 0), msg="float32 cumsum accumulates in float64")


def adaptive_pools_and_upsampling_match_cpu(dev, dn):
    rng = np.random.default_rng(9)
    a = rnd(rng, (2, 3, 9, 7), dn).numpy().copy()
    a[1, 2, 4, 4] = np.nan
    x = nee.tensor(a)
    for xc in (dev(x), dev(x.transpose(2, 3).contiguous()).transpose(2, 3)):
        for size in [(4, 3), (1, 1), (9, 7), (5, 10)]:
            dev.check(F.adaptive_avg_pool2d(xc, size), F.adaptive_avg_pool2d(x, size), msg=f"adaptive avg {size}")
            g, w = F.adaptive_max_pool2d(xc, size, return_indices=True), F.adaptive_max_pool2d(x, size, True)
            dev.check(g[0], w[0], exact=True, msg=f"adaptive max {size}")
            dev.check(g[1], w[1], msg=f"adaptive max idx {size}")
        for kw in [{"scale_factor": 2}, {"scale_factor": 2.5}, {"size": (5, 11)},
                   {"size": (4, 13), "mode": "nearest-exact"}, {"scale_factor": (0.5, 1.7)}]:
            dev.check(F.interpolate(xc, **kw), F.interpolate(x, **kw), exact=True, msg=f"nearest {kw}")
        for kw in [{"scale_factor": 2}, {"size": (5, 11)}, {"size": (4, 13), "align_corners": True},
                   {"scale_factor": (0.5, 1.7)}, {"size": (1, 1)}]:
            dev.check(F.interpolate(xc, mode="bilinear", **kw), F.interpolate(x, mode="bilinear", **kw),
                  msg=f"bilinear {kw}")
    x1 = rnd(rng, (2, 3, 10), dn)
    dev.check(F.adaptive_avg_pool1d(dev(x1), 4), F.adaptive_avg_pool1d(x1, 4))


def take_repeat_max_dim_match_cpu(dev, dn):
    rng = np.random.default_rng(10)
    x = rnd(rng, (3, 5, 4), dn)
    for xc in (dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)):
        i = nee.tensor(rng.integers(-60, 60, (4, 3)))
        dev.check(nee.take(xc, dev(i)), nee.take(x, i), exact=True, msg="take")
        for reps in [(2, 1, 3), (1, 2, 1, 2), (3, 1, 1)]:
            dev.check(xc.repeat(*reps), x.repeat(*reps), exact=True, msg=f"repeat {reps}")
        dev.check(xc[:, 1:4].repeat(2, 2, 1), x[:, 1:4].repeat(2, 2, 1), exact=True)
        for d in (0, 1, 2):
            for f in (nee.max, nee.min):
                g, w = f(xc, d), f(x, d)
                dev.check(g[0], w[0], exact=True, msg=f"{f.__name__} dim {d}")
                dev.check(g[1], w[1], msg=f"{f.__name__} dim {d} indices")
        g, w = nee.max(xc, 1, keepdim=True), nee.max(x, 1, keepdim=True)
        dev.check(g[0], w[0], exact=True)
        dev.check(g[1], w[1])
    with pytest.raises(IndexError, match="take"):
        nee.take(dev(x), dev(nee.tensor([0, x.numel()])))


def group_norm_nansum_count_nonzero_match_cpu(dev, dn):
    rng = np.random.default_rng(14)
    x = rnd(rng, (2, 6, 5, 7), dn)
    w, b = rnd(rng, (6,), dn), rnd(rng, (6,), dn)
    for xc in (dev(x), dev(x.transpose(2, 3).contiguous()).transpose(2, 3)):
        for G in (1, 2, 6):
            dev.check(F.group_norm(xc, G, dev(w), dev(b), eps=1e-4), F.group_norm(x, G, w, b, eps=1e-4), msg=f"G={G}")
        dev.check(F.group_norm(xc, 3), F.group_norm(x, 3), msg="no affine")
        dev.check(F.instance_norm(xc, weight=dev(w), bias=dev(b)), F.instance_norm(x, weight=w, bias=b), msg="instance")
    a = x.numpy().copy()
    a[0, 1, 2, :3] = np.nan
    y = nee.tensor(a)
    for dims in ((1,), (2, 3), (0, 1, 2, 3)):
        dev.check(nee.nansum(dev(y), dims), nee.nansum(y, dims), msg=f"nansum {dims}")
        dev.check(nee.count_nonzero(dev(y) > 0.5, dims), nee.count_nonzero(y > 0.5, dims), msg=f"count_nonzero {dims}")
    i = nee.tensor(rng.integers(-3, 3, (4, 5)).astype(np.int32))
    dev.check(nee.nansum(dev(i), 1), nee.nansum(i, 1))
    dev.check(nee.count_nonzero(dev(i), 0), nee.count_nonzero(i, 0))


def scatter_matches_cpu(dev, dn):
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
        if red == "mean" and dn == "bool":
            continue   # torch refuses a bool mean (tests/test_torch_parity_s12.py); so does every device
        for inc in (True, False):
            cases[f"{red} {inc}"] = lambda t, i, s, red=red, inc=inc: nee.scatter_reduce(t, 1, i, s, red,
                                                                                          include_self=inc)
    for name, f in cases.items():
        want = f(x, idx, src)
        for xc in (dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            dev.check(f(xc, dev(idx), dev(src)), want, exact=True, msg=name)
    with pytest.raises(RuntimeError, match="out of bounds"):
        nee.scatter(dev(x), 1, dev(idx) + 6, dev(src))


def advanced_indexing_matches_cpu(dev, dn):
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
        for xc in (dev(x), dev(x.transpose(1, 2).contiguous()).transpose(1, 2)):
            got = xc[key(dev(i), dev(j), dev(m1), dev(m2))]
            dev.check(got, want, exact=True, msg=f"key {k}")


def index_add_copy_fill_repeat_interleave_match_cpu(dev, dn):
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
        for xc in (dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            dev.check(f(xc, dev(i), dev(s)), want, exact=exact, msg=name)
    for reps, d in [(2, 1), (nee.tensor([1, 0, 3, 2]), 0), (nee.tensor([2, 1, 1]), 2)]:
        rc = dev(reps) if isinstance(reps, nee.Tensor) else reps
        dev.check(nee.repeat_interleave(dev(x), rc, d), nee.repeat_interleave(x, reps, d), exact=True, msg=f"ri {d}")


def searchsorted_matches_cpu(dev, dn):
    rng = np.random.default_rng(18)
    seq = np.sort(rng.integers(0, 20, (3, 9)), axis=1).astype(dn)
    vals = rng.integers(-2, 23, (3, 7)).astype(dn)
    if dn.startswith("float"):
        seq[1, -2:] = np.nan                # NaN sorts last
        vals[0, 1] = np.nan
    S, V = nee.tensor(seq), nee.tensor(vals)
    for right in (False, True):
        for i32 in (False, True):
            dev.check(nee.searchsorted(dev(S), dev(V), right=right, out_int32=i32),
                  nee.searchsorted(S, V, right=right, out_int32=i32), msg=f"rows {right} {i32}")
            dev.check(nee.searchsorted(dev(S[0]), dev(V), right=right, out_int32=i32),
                  nee.searchsorted(S[0], V, right=right, out_int32=i32), msg=f"1-D {right} {i32}")
        dev.check(nee.bucketize(dev(V), dev(S[2]), right=right), nee.bucketize(V, S[2], right=right), msg="bucketize")


def roll_matches_cpu_and_torch(dev, dn):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(19)
    x = rnd(rng, (3, 4, 5), dn)
    for shifts, dims in [(1, 0), ((2, -1), (1, 2)), ((5, 7, -8), (0, 1, 2)), (3, None)]:
        want = nee.roll(x, shifts, dims)
        for xc in (dev(x), dev(x.transpose(0, 2).contiguous()).transpose(0, 2)):
            dev.check(nee.roll(xc, shifts, dims), want, exact=True, msg=f"roll {shifts} {dims}")
    # a repeated dim: the shifts add up (torch.roll)
    got = nee.roll(dev(x), (1, 2), (1, 1)).cpu().numpy()
    np.testing.assert_array_equal(got, torch.roll(torch.from_numpy(x.numpy()), (1, 2), (1, 1)).numpy())



def sort_topk_match_cpu(dev, dn, ks=(1, 5, 60), long_sort=False, nonzero=False):
    """Stable sort (ascending NaN last; descending NaN first, ties in order), topk as the first k of that
    order (``ks``); ``long_sort``: one long column too (many merge passes), ``nonzero``: nonzero of each input."""
    rng = np.random.default_rng(11)
    x = rnd(rng, (5, 40), dn) if dn == "bool" else nee.tensor((rng.integers(-4, 4, (5, 40))).astype(dn))
    if dn.startswith("float"):
        a = x.numpy().copy()
        a[0, [3, 9]] = np.nan
        a[2, 5] = np.nan
        x = nee.tensor(a)
    for xc in (dev(x), dev(x.t().contiguous()).t()):
        for d in (0, 1):
            for desc in (False, True):
                # (the devices' sorts are stable; the CPU's default stable=False puts ties in torch's CPU order)
                g, w = nee.sort(xc, dim=d, descending=desc, stable=True), nee.sort(x, dim=d, descending=desc, stable=True)
                dev.check(g[0], w[0], exact=True, msg=f"sort {d} {desc}")
                dev.check(g[1], w[1], msg=f"sort indices {d} {desc}")
                dev.check(nee.sort(xc, d, desc)[0], w[0], exact=True, msg=f"sort stable=False values {d} {desc}")
        if nonzero:
            dev.check(nee.nonzero(xc), nee.nonzero(x), msg="nonzero")
    if long_sort:
        long = rnd(rng, (1000,), dn)                      # many merge passes, one column
        for desc in (False, True):
            g, w = nee.sort(dev(long), dim=0, descending=desc, stable=True), nee.sort(long, dim=0, descending=desc, stable=True)
            dev.check(g[0], w[0], exact=True, msg="long sort")
            if dn != "bool":
                dev.check(g[1], w[1], msg="long sort indices")
    # topk: distinct values (which of several equal values the CPU's partial selection keeps is its own)
    perm = np.stack([rng.permutation(60) for _ in range(4)]).astype(np.float64) - 30
    if dn == "bool":
        return
    p = nee.tensor(perm.astype(dn))
    if dn.startswith("float"):
        q = p.numpy().copy()
        q[1, 7] = np.nan
        p = nee.tensor(q)
    for pc in (dev(p), dev(p.t().contiguous()).t()):
        for k in ks:
            for largest in (True, False):
                g, w = nee.topk(pc, k, 1, largest), nee.topk(p, k, 1, largest)
                dev.check(g[0], w[0], exact=True, msg=f"topk {k} {largest}")
                dev.check(g[1], w[1], msg=f"topk indices {k} {largest}")
        g, w = nee.topk(pc, 3, 0), nee.topk(p, 3, 0)
        dev.check(g[0], w[0], exact=True)
        # (along dim 0 the columns hold equal values: which of them each device keeps is its own order; the
        # CPU's is torch's) the indices point at the values, each once
        gi = g[1].cpu().numpy()
        np.testing.assert_array_equal(np.take_along_axis(p.numpy(), gi, 0), g[0].cpu().numpy())
        assert all(len(set(gi[:, j])) == gi.shape[0] for j in range(gi.shape[1]))


def einsum_matches_cpu(dev, dn, more=False):
    """Batched matmuls, sums, diagonals (repeated labels), ellipses; ``more``: also implicit outputs, outer
    products, three operands."""
    rng = np.random.default_rng(12)
    a, b, c = rnd(rng, (3, 4, 5), dn), rnd(rng, (5, 6), dn), rnd(rng, (4, 4), dn)
    cases = [("bij,jk->bik", (a, b)), ("bij->jb", (a,)), ("ii->i", (c,)), ("ij,ij->", (c, c.t())),
             ("...j,jk->...k", (a, b)), ("bij,bkj->bik", (a, a[:, ::2]))]
    if more:
        d = rnd(rng, (6, 2), dn)
        cases += [("ii", (c,)), ("ij,kl->ijkl", (c, b)), ("bij,jk,kl->bil", (a, b, d)),
                  ("bii->b", (rnd(rng, (2, 3, 3), dn),)), ("ij->", (b,)), ("bij,bjk->b", (a, a.transpose(1, 2)))]
    for eq, ops in cases:
        want = nee.einsum(eq, *ops)
        got = nee.einsum(eq, *[dev(o) for o in ops])
        dev.check(got, want, dn="float16" if dn == "float16" else None, msg=eq)
