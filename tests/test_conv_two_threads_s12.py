"""The 1x1 convolutions' GEMM path with its bias / residual / relu run inside gemm_driver's blocks
(kernels/conv.py ``_gemm_epilogue``), at 1 and 2 threads: differential against a float64 numpy reference on
odd shapes, strides, groups and batches, float32 and float64; bit-identical with the separate pass it
replaces (NEE_CONV_GEMM_EPILOGUE=0, ``conv._GEMM_EPI``) and with the other thread count; the layouts it
declines fall back to the pass."""
import itertools

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv_direct as CD

F = nee.nn.functional


@pytest.fixture
def threads_restored():
    # the direct kernel off (float32 1x1 convs it would take go to the GEMMs under test), threads restored
    n = nee.get_num_threads()
    mode = CD.MODE[0]
    CD.MODE[0] = "0"
    yield
    CD.MODE[0] = mode
    nee.set_num_threads(n)


def _ref(x, w, b, e, relu, G, s):
    N, C = x.shape[:2]
    O = w.shape[0]
    xs = x[:, :, ::s, ::s].astype(np.float64)
    r = np.einsum("ngchw,goc->ngohw", xs.reshape(N, G, C // G, *xs.shape[2:]),
                  w.reshape(G, O // G, C // G).astype(np.float64)).reshape(N, O, *xs.shape[2:])
    if b is not None:
        r = r + b[None, :, None, None]
    if e is not None:
        r = r + e
    return np.maximum(r, 0) if relu else r


# (N, C, O, H, W, groups, stride): ResNet's 64 -> 256 on 56x56, odd sizes, grouped (ShuffleNet-like), batches
_SHAPES = [(1, 64, 256, 56, 56, 1, 1), (1, 37, 70, 23, 41, 1, 1), (2, 32, 48, 17, 19, 1, 1),
           (1, 68, 136, 14, 14, 4, 1), (1, 64, 96, 21, 20, 4, 1), (1, 64, 128, 29, 29, 1, 2),
           (3, 40, 24, 33, 31, 1, 1)]


def _run(shape, dt, hb, he, relu, seed=0):
    N, C, O, H, W, G, s = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    w = rng.standard_normal((O, C // G, 1, 1)).astype(dt)
    b = rng.standard_normal(O).astype(dt) if hb else None
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    e = rng.standard_normal((N, O, OH, OW)).astype(dt) if he else None
    out = np.full((N, O, OH, OW), np.nan, dt)
    attrs = dict(stride=(s, s), padding=(0, 0, 0, 0), dilation=(1, 1), groups=G)
    CV.conv2d_into(out, [x, w] + ([b] if hb else []), attrs, None, e, bool(relu))
    return out, (x, w, b, e, relu, G, s)


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gemm_epilogue_vs_numpy_and_pass(shape, dt, threads_restored):
    n0 = len(CV._epi_plans)
    for nt in (1, 2):
        nee.set_num_threads(nt)
        for hb, he, relu in itertools.product((0, 1), (0, 1), (0, 1)):
            CV._GEMM_EPI[0] = True
            try:
                got, args = _run(shape, dt, hb, he, relu)
                CV._GEMM_EPI[0] = False
                sep, _ = _run(shape, dt, hb, he, relu)
            finally:
                CV._GEMM_EPI[0] = True
            r = _ref(*args)
            tol = 2e-5 if dt == np.float32 else 1e-12
            assert np.abs(got - r).max() <= tol * (np.abs(r).max() + 1), (shape, dt, nt, hb, he, relu)
            if not np.array_equal(got, sep):
                # the GEMM cut into other column blocks may sum in another order only where OpenBLAS blocks K
                # differently; the epilogue itself is the pass's arithmetic
                assert np.abs(got - sep).max() <= tol * (np.abs(r).max() + 1), (shape, dt, nt, hb, he, relu)
    # the fused path ran (a plan per layout) for every one-group GEMM large enough for the driver
    N, C, O, H, W, G, s = shape
    flops = 2.0 * N * O * ((H - 1) // s + 1) * ((W - 1) // s + 1) * (C // G)
    if G == 1 and CV._driver() and flops >= CV._DRV_PAR_FLOPS:
        assert len(CV._epi_plans) > n0 or n0 > 1000


def test_gemm_epilogue_bitwise_one_vs_two_threads(threads_restored):
    # 64 -> 256 on 56x56: 4 column blocks of at most _EPI_BLOCK_BYTES on 1 and on 2 threads, the same blocks, so
    # the same bits (other shapes are cut into more blocks on 2 threads; OpenBLAS's edge kernels may then round
    # a block's last columns differently: last-bit differences, as the 2-thread GEMMs before)
    outs = {}
    for nt in (1, 2):
        nee.set_num_threads(nt)
        outs[nt], _ = _run((1, 64, 256, 56, 56, 1, 1), np.float32, 1, 1, 1, seed=3)
    assert np.array_equal(outs[1], outs[2])


def test_gemm_epilogue_special_values(threads_restored):
    # relu keeps NaN and -0.0 as torch's (x < 0 -> 0), the residual's inf propagates
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 48, 30, 30)).astype(np.float32)
    w = rng.standard_normal((64, 48, 1, 1)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    e = rng.standard_normal((1, 64, 30, 30)).astype(np.float32)
    x[0, :, 3, 4] = np.nan
    e[0, 5, 7, 8] = np.inf
    e[0, 6, 7, 8] = -np.inf
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    for nt in (1, 2):
        nee.set_num_threads(nt)
        out = np.empty((1, 64, 30, 30), np.float32)
        CV.conv2d_into(out, [x, w, b], attrs, None, e, True)
        ref = _ref(x, w, b, e, True, 1, 1).astype(np.float32)
        assert np.isnan(out[0, :, 3, 4]).all()
        assert out[0, 5, 7, 8] == np.inf and out[0, 6, 7, 8] == 0
        m = ~np.isnan(ref)
        np.testing.assert_allclose(out[m], ref[m], rtol=2e-5, atol=2e-5)


def test_gemm_epilogue_strided_residual(threads_restored):
    # a residual that is a non-contiguous view (every other column of a wider array) gives the same result as
    # its contiguous copy
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 32, 40, 40)).astype(np.float32)
    w = rng.standard_normal((64, 32, 1, 1)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    wide = rng.standard_normal((1, 64, 40, 80)).astype(np.float32)
    e = wide[:, :, :, ::2]
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    for nt in (1, 2):
        nee.set_num_threads(nt)
        out = np.empty((1, 64, 40, 40), np.float32)
        CV.conv2d_into(out, [x, w, b], attrs, None, e, True)
        out2 = np.empty_like(out)
        CV.conv2d_into(out2, [x, w, b], attrs, None, np.ascontiguousarray(e), True)
        np.testing.assert_array_equal(out, out2)
        np.testing.assert_allclose(out, _ref(x, w, b, e, True, 1, 1), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("nt", [1, 2])
def test_functional_conv_1x1_bias_relu_residual(nt, threads_restored, torch_mod):
    # through the JIT (conv_epilogue's chain: conv + folded bias + residual + relu), against torch
    torch = torch_mod
    nee.set_num_threads(nt)
    rng = np.random.default_rng(7 + nt)
    x = rng.standard_normal((1, 64, 33, 35)).astype(np.float32)
    w = rng.standard_normal((96, 64, 1, 1)).astype(np.float32) * 0.1
    b = rng.standard_normal(96).astype(np.float32)
    sh = rng.standard_normal((1, 96, 1, 1)).astype(np.float32)
    r = rng.standard_normal((1, 96, 33, 35)).astype(np.float32)
    wn, bn, shn = nee.tensor(w), nee.tensor(b), nee.tensor(sh)
    f = nee.jit(lambda x, r: F.relu(F.conv2d(x, wn, bn) + shn + r))
    got = f(nee.tensor(x), nee.tensor(r)).numpy()
    got2 = f(nee.tensor(x), nee.tensor(r)).numpy()
    tt = torch.nn.functional.relu(torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b))
                                  + torch.tensor(sh) + torch.tensor(r)).numpy()
    np.testing.assert_allclose(got, tt, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, got2)


@pytest.mark.parametrize("nt", [1, 2])
def test_gemm_epilogue_grouped_batches(nt, threads_restored):
    # _gemm_epilogue on one image's group GEMMs (a batch of G matrices; conv2d_into keeps grouped convs on
    # numpy's loop, this is the helper's per-group bias layout): against numpy
    nee.set_num_threads(nt)
    rng = np.random.default_rng(11)
    G, Cg, Og, L = 4, 34, 40, 27 * 29
    x = rng.standard_normal((1, G * Cg, 27, 29)).astype(np.float32)
    w = rng.standard_normal((G * Og, Cg, 1, 1)).astype(np.float32)
    b = rng.standard_normal(G * Og).astype(np.float32)
    e = rng.standard_normal((1, G * Og, 27, 29)).astype(np.float32)
    res = np.full((1, G * Og, 27, 29), np.nan, np.float32)
    wg, xg, og = w.reshape(G, Og, Cg), x.reshape(1, G, Cg, L), res.reshape(1, G, Og, L)
    if not CV._driver():
        pytest.skip("no gemm_driver here")
    assert CV._gemm_epilogue([(og[0, g], wg[g], xg[0, g]) for g in range(G)], res, b, e, True, G, Og)
    np.testing.assert_allclose(res, _ref(x, w, b, e, True, G, 1), rtol=2e-5, atol=2e-5)


def test_winograd_rule_direct_term_on_two_threads(threads_restored, monkeypatch):
    # the rule weighs Winograd against the direct kernel at 2 threads as at 1 (Inception's 3x3s on 14x14 go
    # direct): AVX2 hosts since session 12, AVX-512 ones since session 20 (Zen 5); NEE_CONV_WINO_DIRECT_MT forces
    # either
    CD.MODE[0] = ""
    if not CD.available():
        pytest.skip("no direct kernel on this CPU")
    args = (1, 128, 14, 14, 128, 1, 3, 3, 1, 1, 1, 1, 14, 14, np.dtype(np.float32))
    nee.set_num_threads(1)
    one = CV._winograd_m(*args)
    nee.set_num_threads(2)
    two = CV._winograd_m(*args)
    assert one == 0
    assert two == 0
    monkeypatch.setattr(CV, "_WINO_DIRECT_MT", "0")
    assert CV._winograd_m(*args) == 4
    monkeypatch.setattr(CV, "_WINO_DIRECT_MT", "1")
    assert CV._winograd_m(*args) == 0


@pytest.mark.parametrize("shape", [(128, 160, 14, 14), (32, 128, 27, 27), (96, 96, 13, 15)])
def test_3x3_one_vs_two_threads_vs_numpy(shape, threads_restored):
    # the 3x3s the rule moves off Winograd on 2 threads (AVX2): through the direct kernel, against numpy
    # (float64), 1 and 2 threads (the direct kernel sums each output in one order: the same bits on both)
    CD.MODE[0] = ""
    C, O, H, W = shape
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((O, C, 3, 3)) / (3 * C ** 0.5)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = b[None, :, None, None].astype(np.float64)
    for kh in range(3):
        for kw in range(3):
            ref = ref + np.einsum("nchw,oc->nohw", xp[:, :, kh:kh + H, kw:kw + W], w[:, :, kh, kw].astype(np.float64))
    ref = np.maximum(ref, 0)
    outs = []
    for nt in (1, 2):
        nee.set_num_threads(nt)
        out = np.empty((1, O, H, W), np.float32)
        CV.conv2d_into(out, [x, w, b], dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1), None,
                       None, True)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        outs.append(out)
    if CD.VEC == 8 or CV._winograd_m(1, C, H, W, O, 1, 3, 3, 1, 1, 1, 1, H, W, np.dtype(np.float32)) == 0:
        np.testing.assert_array_equal(outs[0], outs[1])
