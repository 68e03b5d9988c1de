"""Session 16 (issue 4, SqueezeNet / Inception v2 against onnxruntime): the direct conv's "chan" kernel prefetching its
input (kernels/conv_direct.py ``_XPF_FLOATS``: one channel block over an input larger than L2, SqueezeNet's squeezes).

The prefetch is a hint (no arithmetic changes, never faults): results must match torch (float64 reference) and be
bitwise equal to the same kernel without it, on the shapes that take it (bare 1x1 and padded 3x3 inputs over
``_XPF_MIN_BYTES``, batches, relu, a second bias, a residual, 1 and 2 threads); shapes that do not take it (two or
more channel blocks, inputs in cache, depthwise) keep the kernel without it.
"""
import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv_direct as D

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX2+FMA / AVX-512F")

RNG = np.random.default_rng(16)


def _data(xs, ws):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    return x, w, b


def _want(x, w, b, s, p, groups=1):
    t = torch.from_numpy
    return F.conv2d(t(x.astype(np.float64)), t(w.astype(np.float64)), t(b.astype(np.float64)), s, p, 1,
                    groups).numpy()


def _layout(xs, ws, s, p, OH, OW):
    return D._layouts[(xs, ws, OH, OW, s, s, p, p, p, p, 1, 1, D.FORCE[0])]


@pytest.fixture(params=[1, 2])
def nthreads(request, monkeypatch):
    old = threads.get_num_threads()
    threads.set_num_threads(request.param)
    monkeypatch.setattr(D, "_PAR_FLOPS", 0)         # split even the small ones over the threads
    D._layouts.clear()
    yield request.param
    threads.set_num_threads(old)
    D._layouts.clear()


@pytest.fixture
def chan(monkeypatch):
    monkeypatch.setattr(D, "FORCE", ["chan"])
    D._layouts.clear()
    yield
    D._layouts.clear()


# (x shape, w shape, stride, pad): one channel block (O <= the kernel's channel width) over inputs of 512 KB and more
TAKES = [
    ((1, 64, 48, 48), (16, 64, 1, 1), 1, 0),        # bare 1x1 (the kernel reads x in place), 590 KB
    ((2, 40, 60, 57), (7, 40, 1, 1), 1, 0),         # channel tail, odd plane, batch of 2
    ((1, 40, 60, 58), (12, 40, 3, 3), 1, 1),        # padded 3x3 (the padded copy xq), pixel tail
    ((1, 24, 90, 91), (5, 24, 3, 3), 2, 1),         # strided (read unsplit through the pixel table)
]


@pytest.mark.parametrize("case", range(len(TAKES)))
def test_prefetch_taken_matches_torch_and_bits(nthreads, chan, monkeypatch, case):
    xs, ws, s, p = TAKES[case]
    x, w, b = _data(xs, ws)
    want = _want(x, w, b, s, p)
    N, O, OH, OW = want.shape
    b2 = RNG.standard_normal(O).astype(np.float32)
    e = RNG.standard_normal(want.shape).astype(np.float32)
    for relu, use_b2, use_e in ((False, False, False), (True, True, False), (True, False, True)):
        ref = want + (b2[:, None, None] if use_b2 else 0) + (e if use_e else 0)
        if relu:
            ref = np.maximum(ref, 0)
        outs = []
        for on in (True, False):
            monkeypatch.setattr(D, "XPF", [on])
            got = np.full(want.shape, np.nan, np.float32)
            assert D.conv2d(x, w, b, got, s, s, p, p, p, p, 1, 1, relu, b2 if use_b2 else None,
                            e if use_e else None)
            lay = _layout(xs, ws, s, p, OH, OW)
            assert lay.kind == "chan" and lay.nob == 1
            assert lay.xpf == D._XPF_FLOATS and 4 * lay.xlen >= D._XPF_MIN_BYTES
            prep = lay.preps[(relu, use_e, threads.NUM_THREADS, D._PAR_FLOPS, D._NATIVE_PAR_FLOPS, on)]
            assert prep.f is D.kernel("chan", lay.A, lay.B, relu, use_e, D._XPF_FLOATS if on else 0)
            assert not np.isnan(got).any()
            err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
            assert err < 2e-6, (xs, ws, relu, use_b2, use_e, on, err)
            outs.append(got)
        # a hint only: the same bits with and without it
        assert np.array_equal(outs[0], outs[1]), (xs, ws, relu, use_b2, use_e)


# not taken: two or more channel blocks, an input that fits in L2, depthwise ("dw"), the "pix" kernel
NOT_TAKEN = [
    ((1, 64, 48, 48), (70, 64, 1, 1), 1, 0, "chan"),    # O = 70: several blocks on either width
    ((1, 16, 30, 30), (16, 16, 3, 3), 1, 1, "chan"),    # 65 KB in
    ((1, 64, 48, 48), (64, 1, 3, 3), 1, 1, None),       # depthwise, 590 KB in
    ((1, 64, 48, 48), (6, 64, 3, 3), 1, 1, "pix"),
]


@pytest.mark.parametrize("case", range(len(NOT_TAKEN)))
def test_prefetch_not_taken(monkeypatch, case):
    xs, ws, s, p, force = NOT_TAKEN[case]
    monkeypatch.setattr(D, "FORCE", [force])
    D._layouts.clear()
    try:
        x, w, b = _data(xs, ws)
        G = xs[1] // ws[1]
        want = _want(x, w, b, s, p, G)
        got = np.full(want.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, s, s, p, p, p, p, 1, 1)
        lay = next(reversed(D._layouts.values()))
        assert lay.xpf == 0, (xs, ws, lay.kind, lay.nob)
        err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
        assert err < 2e-6, (xs, ws, err)
    finally:
        D._layouts.clear()


def test_prefetch_kernel_keys_distinct():
    # the kernel with the prefetch is its own function (cache key and name), the one without it unchanged
    a = D.kernel("chan", D.CHAN_SHAPES[0][0], D.CHAN_SHAPES[0][1], True, False, 0)
    b = D.kernel("chan", D.CHAN_SHAPES[0][0], D.CHAN_SHAPES[0][1], True, False, D._XPF_FLOATS)
    assert a is not b
    assert a is D.kernel("chan", D.CHAN_SHAPES[0][0], D.CHAN_SHAPES[0][1], True, False)
    # the "pix" / "dw" kernels take no prefetch (the argument is ignored)
    assert D.kernel("dw", 1, 4, False, False, 16) is D.kernel("dw", 1, 4, False, False)
    on, off = (D._render_c(2, 6, False, False, False, n) for n in (16, 0))
    assert on.count("call void @llvm.prefetch.p0i8(i8* %xpf,") == 1 and "%xpf" not in off
    assert "getelementptr float, float* %xp5, i64 16" in on
