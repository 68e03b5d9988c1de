"""The direct float32 conv2d kernels (kernels/conv_direct.py) against torch (float64 reference).

Both micro-kernel families are forced on every case ("pix": output channels x vectors of wide pixels;
"chan": blocks of 16 output channels x pixels, output transposed back to NCHW), with each of their
register-tile shapes somewhere: odd channel counts (tile tails in both directions), strides 1/2/mixed,
asymmetric pads, dilation, 1x1/3x3/5x5/7x7 and non-square kernels, batches, bias or not, groups with a
second bias and relu in the stores, one and two threads, the chunked (channel, tap) loop, non-contiguous inputs through the op, the weight cache, the
dispatch rule and the fallbacks.
"""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import winograd
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX-512F or AVX2+FMA")

RNG = np.random.default_rng(5)

# (x shape, w shape, stride, (top, bottom, left, right) pads, dilation)
CASES = [
    ((1, 5, 9, 11), (7, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 17, 11, 13), (37, 17, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),      # batch, stride 2, odd channels
    ((1, 3, 23, 21), (20, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),        # 7x7 stem-like
    ((1, 6, 12, 10), (50, 6, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),        # 5x5, O not a multiple of 16
    ((1, 9, 14, 14), (33, 9, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),        # dilation 2
    ((1, 4, 13, 16), (6, 4, 4, 2), (1, 1), (1, 2, 0, 1), (1, 1)),         # asymmetric pads, even kernel
    ((1, 8, 15, 17), (70, 8, 3, 2), (2, 1), (0, 2, 1, 0), (1, 2)),        # mixed strides / dilations
    ((2, 16, 7, 7), (24, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # 1x1 (the "chan" kernel reads x)
    ((1, 12, 9, 9), (16, 12, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),        # strided 1x1
    ((1, 7, 6, 5), (9, 7, 1, 1), (1, 1), (1, 0, 0, 1), (1, 1)),           # padded 1x1
    ((1, 3, 2, 3), (5, 3, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),           # one output pixel per row
]


def _data(xs, ws, bias=True, rng=RNG):
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    return x, w, b


def _want(x, w, b, s, pads, d, groups=1):
    pt, pb, pl, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    t = torch.from_numpy
    return F.conv2d(t(xp), t(w.astype(np.float64)), None if b is None else t(b.astype(np.float64)), s, 0, d,
                    groups).numpy()


def _close(got, want, what):
    assert not np.isnan(got).any(), what
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err < 2e-6, (what, err)


@pytest.fixture(params=[1, 2])
def nthreads(request, monkeypatch):
    old = threads.get_num_threads()
    threads.set_num_threads(request.param)
    monkeypatch.setattr(D, "_PAR_FLOPS", 0)         # split even these small convs over the threads
    yield request.param
    threads.set_num_threads(old)


@pytest.fixture
def force(monkeypatch):
    def set_(kind, shapes=None):
        monkeypatch.setattr(D, "FORCE", [kind])
        if shapes is not None:
            monkeypatch.setattr(D, "PIX_SHAPES" if kind == "pix" else "CHAN_SHAPES", shapes)
        D._layouts.clear()
    yield set_
    D._layouts.clear()


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 4),)), ("pix", ((12, 2),)), ("chan", ((4, 6),)),
                                         ("chan", ((2, 8),)), ("chan", ((3, 7),)), ("chan", ((2, 7),))])
def test_direct_matches_torch(nthreads, force, kind, shapes):
    force(kind, shapes)
    _check_cases(kind, shapes, CASES)


def _last_layout():
    return D._layouts[next(reversed(D._layouts))]


def _check_cases(kind, shapes, cases, rng=RNG):
    """Each of ``cases`` (bias on two in three) through D.conv2d against torch, on the forced tile (its channel
    width: A rows ("pix") or A blocks of D.VEC channels ("chan"))."""
    for i, (xs, ws, s, pads, d) in enumerate(cases):
        x, w, b = _data(xs, ws, bias=i % 3 != 1, rng=rng)
        want = _want(x, w, b, s, pads, d)
        got = np.full(want.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, *s, *pads, *d)
        lay = _last_layout()
        cw = shapes[0][0] * (D.VEC if kind == "chan" else 1)
        assert (lay.kind, lay.A, lay.B, lay.CW) == (kind,) + shapes[0] + (cw,)
        _close(got, want, (kind, shapes, xs, ws, s, pads, d))


def _check_groups(kind, shapes, cases, res=False, rng=RNG):
    """Each of the grouped / depthwise ``cases`` through D.conv2d against torch: bias on every other one, a second
    per-channel bias (a folded BatchNorm's shift), relu on two in three, ``res``: a residual on every other one;
    depthwise ones on the "dw" kernel."""
    for i, (xs, ws, s, pads, d) in enumerate(cases):
        x, w, b = _data(xs, ws, bias=i % 2 == 0, rng=rng)
        b2 = rng.standard_normal(ws[0]).astype(np.float32)
        relu = i % 3 != 2
        want = _want(x, w, b, s, pads, d, xs[1] // ws[1]) + b2[:, None, None]
        e = rng.standard_normal(want.shape).astype(np.float32) if res and i % 2 else None
        if e is not None:
            want = want + e
        if relu:
            want = np.maximum(want, 0)
        got = np.full(want.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, *s, *pads, *d, relu, b2, e)
        if ws[1] == 1:
            assert _last_layout().kind == "dw"
        _close(got, want, (kind, shapes, xs, ws, relu, e is not None))


# groups (w: (O, C/G, KH, KW)): one launch over all of them, each group's channel blocks on their own
GROUP_CASES = [
    ((1, 12, 9, 11), (20, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),        # 4 groups of 5 outputs (block tails)
    ((2, 16, 7, 7), (24, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),         # 2 groups, 1x1, batch ("chan": x itself)
    ((1, 24, 13, 13), (36, 8, 3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),       # 3 groups, stride 2, asymmetric pads
    ((1, 10, 12, 12), (40, 2, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),       # 5 groups of 2 inputs, dilation 2
    ((1, 68, 6, 6), (68, 17, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # 4 groups of 17
    # depthwise ("dw": the input channel-last, a pixel's 16 channels one vector)
    ((1, 37, 9, 8), (37, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),         # channel-block tail
    ((2, 20, 11, 11), (20, 1, 5, 5), (2, 2), (2, 1, 2, 0), (1, 1)),       # 5x5, stride 2, asymmetric pads, batch
    ((1, 16, 10, 10), (16, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),       # dilation 2
]


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 4),)), ("pix", ((12, 2),)), ("chan", ((2, 8),)),
                                         ("chan", ((3, 7),))])
def test_direct_groups_relu_shift(nthreads, force, kind, shapes):
    # groups, with the second per-channel bias (a folded BatchNorm's shift) and relu in the final stores
    force(kind, shapes)
    _check_groups(kind, shapes, GROUP_CASES)


@pytest.mark.parametrize("kind,shapes", [("pix", ((6, 4),)), ("chan", ((2, 8),)), ("chan", ((3, 7),)),
                                         ("chan", ((2, 7),))])
def test_direct_residual_in_stores(nthreads, force, kind, shapes, monkeypatch):
    # a residual (the JIT epilogue's add of a tensor of the output's shape) added in the "chan" / "dw" kernels'
    # final stores before relu (masked rows: pixel tails); after the "pix" kernel in a pass
    force(kind, shapes)
    made = []
    orig = D.kernel
    monkeypatch.setattr(D, "kernel", lambda *a: made.append(a) or orig(*a))
    for i, (xs, ws, s, pads, d) in enumerate(CASES[:4] + GROUP_CASES):
        x, w, b = _data(xs, ws, bias=i % 2 == 0)
        relu = i % 3 != 2
        want = _want(x, w, b, s, pads, d, xs[1] // ws[1])
        e = RNG.standard_normal(want.shape).astype(np.float32)
        want = want + e
        if relu:
            want = np.maximum(want, 0)
        got = np.full(want.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, *s, *pads, *d, relu, None, e)
        _close(got, want, (kind, shapes, xs, ws, relu))
    # the kernels asked for: the forced kind with the residual in its stores ("pix": without, relu in the pass)
    assert {a[0] for a in made} == {kind, "dw"}
    assert all(a[4] for a in made if a[0] != "pix") and all(not a[3] for a in made if a[0] == "pix")
    with pytest.raises(ValueError, match="residual"):
        x, w, b = _data(*CASES[0][:2])
        out = np.empty((1, 7, 9, 11), np.float32)
        D.conv2d(x, w, b, out, 1, 1, 1, 1, 1, 1, 1, 1, False, None, out)


def test_direct_chunks(force, monkeypatch):
    # the "chan" kernel's (channel, tap) loop in chunks (partial sums stored and reloaded): 7 pairs a chunk
    force("chan", ((2, 8),))
    monkeypatch.setattr(D, "_CHUNK_BYTES", 7 * 4 * 32)
    for xs, ws, s, pads, d in CASES[:3]:
        x, w, b = _data(xs, ws)
        want = _want(x, w, b, s, pads, d)
        got = np.empty(want.shape, np.float32)
        assert D.conv2d(x, w, b, got, *s, *pads, *d)
        _close(got, want, (xs, ws))


@pytest.fixture
def spy(monkeypatch):
    calls = []
    orig = D.conv2d

    def wrapped(x, w, b, res, *geo):
        calls.append((x.shape, w.shape, geo))
        return orig(x, w, b, res, *geo)
    monkeypatch.setattr(D, "conv2d", wrapped)
    return calls


def test_conv2d_op_direct_layouts(spy, monkeypatch):
    # through the op with NEE_CONV_DIRECT=1: non-contiguous inputs, padding='same', float16 (widened)
    monkeypatch.setattr(D, "MODE", ["1"])
    base = RNG.standard_normal((2, 10, 22, 18)).astype(np.float32)
    w = (RNG.standard_normal((12, 10, 3, 3)) / 10).astype(np.float32)
    b = RNG.standard_normal(12).astype(np.float32)
    for x in (base.transpose(0, 1, 3, 2), base[:, ::2, 1:, ::2], base[::-1, :, ::-1]):
        assert not x.flags.c_contiguous
        for s in (1, 2):
            wx = np.ascontiguousarray(w[:, :x.shape[1]])
            got = C.conv2d(nee.from_numpy(x), nee.from_numpy(wx), nee.from_numpy(b), s, 1).numpy()
            _close(got, _want(x, wx, b, (s, s), (1, 1, 1, 1), (1, 1)), (x.strides, s))
    n = len(spy)
    assert n == 6
    got = C.conv2d(nee.from_numpy(base), nee.from_numpy(w), None, 1, "same").numpy()
    _close(got, _want(base, w, None, (1, 1), (1, 1, 1, 1), (1, 1)), "same")
    x16, w16 = base[:1, :, :9, :9].astype(np.float16), w.astype(np.float16)
    got = C.conv2d(nee.from_numpy(x16), nee.from_numpy(w16), None, 1, 1).numpy()
    assert got.dtype == np.float16
    want = _want(x16.astype(np.float32), w16.astype(np.float32), None, (1, 1), (1, 1, 1, 1), (1, 1))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    assert len(spy) == n + 2
    # float64, depthwise with 2 outputs per input channel: not taken, whatever the switch says
    x64 = base.astype(np.float64)
    C.conv2d(nee.from_numpy(x64), nee.from_numpy(w.astype(np.float64)), None, 1, 1)
    C.conv2d(nee.from_numpy(np.ascontiguousarray(base[:, :6])), nee.from_numpy(np.ascontiguousarray(w[:, :1])),
             None, 1, 1, 1, 6)
    assert len(spy) == n + 2
    # groups: one launch over all of them
    wg = np.ascontiguousarray(w[:, :5])
    got = C.conv2d(nee.from_numpy(base), nee.from_numpy(wg), nee.from_numpy(b), 1, 1, 1, 2).numpy()
    _close(got, F.conv2d(*[torch.from_numpy(a).double() for a in (base, wg, b)], 1, 1, 1, 2).numpy(), "groups")
    assert len(spy) == n + 3


def test_conv2d_rule_and_switch(spy, monkeypatch):
    x, w, b = _data((1, 24, 13, 13), (64, 24, 5, 5))
    want = _want(x, w, b, (1, 1), (2, 2, 2, 2), (1, 1))
    for mode, runs in (("", True), ("0", False), ("1", True)):
        monkeypatch.setattr(D, "MODE", [mode])
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 1, 2).numpy()
        _close(got, want, mode)
        assert bool(spy) == runs
        spy.clear()
    monkeypatch.setattr(D, "MODE", [""])
    # the rule: not the unpadded 1x1 convs (GEMM), not where the Winograd rule picks its path (the rule before
    # kernels/conv1x1_packed.py took the unpadded stride-1 1x1s, session 14: NEE_CONV_PK1X1=0)
    from neetorch.devices.cpu.kernels import conv1x1_packed
    monkeypatch.setattr(conv1x1_packed, "ON", [False])
    f32 = np.dtype(np.float32)
    assert D.pays((1, 24, 13, 13), (64, 24, 5, 5), (1, 64, 13, 13), 1, 1, 2, 2, 2, 2, 1, 1)
    assert D.pays((1, 128, 14, 14), (32, 128, 3, 3), (1, 32, 14, 14), 1, 1, 1, 1, 1, 1, 1, 1)
    assert D.pays((1, 128, 56, 56), (128, 128, 3, 3), (1, 128, 28, 28), 2, 2, 1, 1, 1, 1, 1, 1)
    assert D.pays((1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 112, 112), 2, 2, 3, 3, 3, 3, 1, 1)
    # unpadded 1x1: direct where the "chan" kernel takes it with most lanes used, else the GEMM
    # (AVX2: not from _AVX2_1X1_FLOPS on, the GEMM; 16 channels fill one AVX2 block of 2 x 8, half an AVX-512 one)
    assert D.pays((1, 256, 14, 14), (1024, 256, 1, 1), (1, 1024, 14, 14), 1, 1, 0, 0, 0, 0, 1, 1) == (D.VEC == 16)
    assert D.pays((1, 64, 55, 55), (16, 64, 1, 1), (1, 16, 55, 55), 1, 1, 0, 0, 0, 0, 1, 1) == (D.VEC == 8)
    assert not D.pays((1, 256, 14, 14), (1024, 256, 1, 1), (1, 1024, 7, 7), 2, 2, 0, 0, 0, 0, 1, 1)
    # unpadded 1x1 of under _SHORT_K input channels per group, and grouped convs but those 1x1: direct
    assert D.pays((1, 16, 55, 55), (64, 16, 1, 1), (1, 64, 55, 55), 1, 1, 0, 0, 0, 0, 1, 1)
    assert D.pays((1, 24, 56, 56), (112, 6, 1, 1), (1, 112, 56, 56), 1, 1, 0, 0, 0, 0, 1, 1, 4)
    # grouped 1x1 of more input channels per group: GEMMs on one thread; with more threads, direct where those
    # GEMMs would stay on the calling thread (under conv._PAR_FLOPS) and the kernel splits (_NATIVE_PAR_FLOPS)
    old = threads.get_num_threads()
    try:
        for nt in (1, 2):
            threads.set_num_threads(nt)
            assert D.pays((1, 272, 14, 14), (272, 68, 1, 1), (1, 272, 14, 14), 1, 1, 0, 0, 0, 0, 1, 1, 4) == (nt > 1)
            assert not D.pays((1, 272, 28, 28), (272, 68, 1, 1), (1, 272, 28, 28), 1, 1, 0, 0, 0, 0, 1, 1, 4)
            assert not D.pays((1, 136, 7, 7), (136, 34, 1, 1), (1, 136, 7, 7), 1, 1, 0, 0, 0, 0, 1, 1, 4)
            assert not D.pays((2, 272, 14, 14), (272, 68, 1, 1), (2, 272, 14, 14), 1, 1, 0, 0, 0, 0, 1, 1, 4)
    finally:
        threads.set_num_threads(old)
    assert D.pays((1, 128, 28, 28), (128, 4, 3, 3), (1, 128, 28, 28), 1, 1, 1, 1, 1, 1, 1, 1, 32)
    # depthwise: small planes only (many channels at 3x3)
    assert D.pays((1, 544, 7, 7), (544, 1, 3, 3), (1, 544, 7, 7), 1, 1, 1, 1, 1, 1, 1, 1, 544)
    assert not D.pays((1, 100, 7, 7), (100, 1, 3, 3), (1, 100, 7, 7), 1, 1, 1, 1, 1, 1, 1, 1, 100)
    assert not D.pays((1, 544, 14, 14), (544, 1, 3, 3), (1, 544, 14, 14), 1, 1, 1, 1, 1, 1, 1, 1, 544)
    assert D.pays((1, 480, 14, 14), (480, 1, 5, 5), (1, 480, 14, 14), 1, 1, 2, 2, 2, 2, 1, 1, 480)
    assert not D.pays((1, 144, 56, 56), (144, 1, 5, 5), (1, 144, 28, 28), 2, 2, 2, 2, 2, 2, 1, 1, 144)
    assert K._winograd_m(1, 64, 56, 56, 192, 1, 3, 3, 1, 1, 1, 1, 56, 56, f32)
    assert not D.pays((1, 64, 56, 56), (192, 64, 3, 3), (1, 192, 56, 56), 1, 1, 1, 1, 1, 1, 1, 1)
    # weights copied for the call (float16 widened): not by the rule (they would be packed on every call)
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    C.conv2d(nee.from_numpy(x16), nee.from_numpy(w16), None, 1, 2)
    assert not spy
    # no AVX-512F nor AVX2+FMA: the other paths, same values
    monkeypatch.setattr(D, "_feat", [False])
    monkeypatch.setattr(D, "MODE", ["1"])
    got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), 1, 2).numpy()
    _close(got, want, "no avx512")
    assert not spy


def test_direct_weight_cache(force):
    # packed per weight buffer in winograd's cache; contents changed in place are packed again
    force("chan", ((2, 8),))
    winograd.clear_cache()
    x, w, b = _data((1, 8, 10, 10), (20, 8, 3, 3))
    for step in range(4):
        want = _want(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1))
        got = np.empty(want.shape, np.float32)
        ran = D.conv2d(x, w, b, got, 1, 1, 1, 1, 1, 1, 1, 1)
        if ran:
            _close(got, want, step)
        assert len(winograd._cache) == 1
        if step == 0:
            assert ran
            cw = 2 * D.VEC
            np.testing.assert_array_equal(D.packed_weights(w, cw), D._pack(w, ("direct", cw, 1)))
        w[step % 20, 1, 2, 0] += 1.0
    # changed on two calls in a row (being trained): no packed copy, conv2d declines (the caller's paths run)
    assert not ran and D.packed_weights(w, 2 * D.VEC) is None
    winograd.clear_cache()


def test_direct_layouts_stay_in_bounds():
    # every geometry's reads (tap offsets + tile extents / pixel table) lie inside the scratch: checked by
    # _Layout itself (AssertionError); here over many odd geometries for both kernels
    rng = np.random.default_rng(3)
    n = 0
    for _ in range(300):
        KH, KW = rng.integers(1, 8, 2)
        sh, sw, dh, dw = rng.integers(1, 4, 4)
        pt, pb, pl, pr = rng.integers(0, 4, 4)
        H, W = rng.integers(1, 40, 2)
        OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
        OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
        if OH < 1 or OW < 1:
            continue
        C_, O = int(rng.integers(1, 20)), int(rng.integers(1, 80))
        for kind in ("pix", "chan"):
            lay = D._Layout((1, C_, H, W), (O, C_, KH, KW), OH, OW, sh, sw, pt, pb, pl, pr, dh, dw, kind)
            assert lay.kind == kind
            n += 1
    assert n > 200


def test_direct_rejects_bad_operands():
    x, w, b = _data((1, 4, 8, 8), (6, 4, 3, 3))
    out = np.empty((1, 6, 8, 8), np.float32)
    with pytest.raises(ValueError, match="conv_direct"):
        D.conv2d(x, w, b, np.empty((1, 6, 7, 8), np.float32), 1, 1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="conv_direct"):
        D.conv2d(x.astype(np.float64), w, b, out, 1, 1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="conv_direct"):
        D.conv2d(x, w[:, :3].copy(), b, out, 1, 1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="conv_direct"):
        D.conv2d(x, w, b[:5], out, 1, 1, 1, 1, 1, 1, 1, 1)
