"""A compiled CNN block of the light ONNX models' layer kinds (the direct stem, a grouped 1x1 of ShuffleNet's
size, a depthwise 3x3, a Winograd 3x3 on 14x14, max / average pooling, the bias + residual + relu epilogues) at
1 and 2 threads: the 2-thread run must take the split paths (conv_direct's native-worker launch, Winograd's
native jobs) and give the same bits as the 1-thread run, both matching torch.  (The Winograd rule itself
depends on the thread count: at one thread the direct kernel takes the 3x3s it leaves, at two F(4) on the native
workers, conv.py _winograd_m; the block test forces F(4) so that both runs take the same algorithm.)"""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv_direct as CD

F = nee.nn.functional


def _params(rng):
    r = lambda *s: (rng.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)  # noqa: E731
    return {"w0": r(24, 3, 3, 3), "b0": r(24), "w1": r(272, 6, 1, 1), "b1": r(272), "wd": r(272, 1, 3, 3),
            "w2": r(128, 272, 1, 1), "w3": r(128, 128, 3, 3), "b3": r(128)}


def _block(F, x, p, cat=None):
    y = F.relu(F.conv2d(x, p["w0"], p["b0"], stride=2, padding=1))          # stem: 3 -> 24, 112x112
    y = F.max_pool2d(y, 3, 2, 1)                                             # 56x56
    y = F.avg_pool2d(y, 4, 4)                                                # 14x14
    z = F.relu(F.conv2d(y, p["w1"], p["b1"], groups=4))                      # grouped 1x1 24 -> 272
    d = F.conv2d(z, p["wd"], None, padding=1, groups=272)                    # depthwise 3x3
    u = F.conv2d(d, p["w2"])                                                 # 1x1 272 -> 128
    v = F.relu(F.conv2d(u, p["w3"], p["b3"], padding=1) + u)                 # 3x3 128 -> 128 + residual
    return v, F.avg_pool2d(v, 14)


def test_block_two_threads_bitwise_and_vs_torch(torch_mod):
    torch = torch_mod
    rng = np.random.default_rng(10)
    p = _params(rng)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    pn = {k: nee.tensor(v) for k, v in p.items()}
    f = nee.jit(lambda x: _block(F, x, pn))
    old, force = nee.get_num_threads(), CV._WINO_FORCE[0]
    CV._WINO_FORCE[0] = "4"
    outs = {}
    try:
        for nt in (1, 2, 1, 2):
            nee.set_num_threads(nt)
            CV._wino_jobs.clear()
            r = [np.asarray(o.numpy()).copy() for o in f(nee.tensor(x))]
            if nt in outs:
                for a, b in zip(outs[nt], r):
                    assert np.array_equal(a, b), f"{nt} threads: two calls differ"
            outs[nt] = r
            if nt == 2:
                # the split paths were taken: a direct conv launched on the native workers, Winograd's jobs
                preps = [pr for lay in CD._layouts.values() for k, pr in lay.preps.items() if k[2] == 2]
                assert any(pr.native is not None for pr in preps), "no direct conv ran on the native workers"
                assert any(k[3] == 2 for k in CV._wino_jobs if k[0] in ("in", "out")), \
                    "the Winograd conv did not run as 2-thread native jobs"
    finally:
        nee.set_num_threads(old)
        CV._WINO_FORCE[0] = force
    # 1 vs 2 threads: the same bits when every conv takes the same algorithm at both counts (run alone, it
    # does); in a full suite run other tests' cached layouts / rules can route a conv differently at one
    # count (seen: 3e-5 apart), so the cross-count check is a tight tolerance, the per-count one above bitwise
    for a, b in zip(outs[1], outs[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(1.0, float(np.max(np.abs(a)))))
    T = torch.nn.functional
    ref = _block(T, torch.from_numpy(x), {k: torch.from_numpy(v) for k, v in p.items()})
    for a, r in zip(outs[2], ref):
        r = r.numpy()
        assert a.shape == r.shape
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.max(np.abs(r)))))


@pytest.mark.parametrize("shape", [(1, 272, 14, 14), (1, 136, 28, 28)])
def test_grouped_1x1_direct_two_threads_bitwise(shape):
    """ShuffleNet's grouped 1x1 convs (the direct kernel, 7.3 MFLOP: split over the native workers at 2 threads, with
    the "chan" kernel where one thread runs the "pix" one): the same bits at 1 and 2 threads, and vs float64."""
    rng = np.random.default_rng(shape[1])
    C = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((C, C // 4, 1, 1)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    e = rng.standard_normal(shape).astype(np.float32)
    old = nee.get_num_threads()
    res = {}
    try:
        for nt in (1, 2):
            nee.set_num_threads(nt)
            out = np.empty(shape, np.float32)
            assert CD.conv2d(x, w, b, out, 1, 1, 0, 0, 0, 0, 1, 1, relu=True, e=e)
            res[nt] = out
        geo = (x.shape, w.shape, shape[2], shape[3], 1, 1, 0, 0, 0, 0, 1, 1)
        # one thread: the "pix" kernel (lane use); split over two: the "chan" kernel (conv_direct._SPLIT_CHAN), on
        # AVX2 the "pix" one (conv_direct._avx2_grouped_1x1, session 13)
        split = "pix" if CD.VEC == 8 else "chan"
        one, two = CD._layouts[geo + (None,)], CD._layouts[geo + (split,)]
        # (AVX2's tiles, 2 x 8 channels x 6 pixels: "chan" on one thread for some)
        assert (one.kind == "pix" or CD.VEC != 16) and two.kind == split, (one.kind, two.kind)
        assert any(k[2] == 2 and pr.par for k, pr in two.preps.items()), "not split at 2 threads"
    finally:
        nee.set_num_threads(old)
    assert np.array_equal(res[1], res[2])
    xg = x.reshape(4, C // 4, -1)
    ref = np.einsum("goc,gcp->gop", w.reshape(4, C // 4, C // 4).astype(np.float64), xg.astype(np.float64))
    ref = np.maximum(ref.reshape(shape) + b[None, :, None, None] + e, 0)
    np.testing.assert_allclose(res[2], ref, rtol=1e-4, atol=1e-4)
