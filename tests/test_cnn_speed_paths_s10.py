"""The conv_direct paths of this round (kernels/conv_direct.py), pinned taken and checked against torch (float64).

* Strided convs on the "chan" kernel read the padded input unsplit (one phase: each pixel's position from the
  table, stride included): a copy of contiguous rows instead of the phase split's strided copy.
* The cost rule (``plan``): strided convs take the "chan" kernel; 1x1 convs over few (channel, tap) pairs
  (below _SHORT_K), where the "pix" kernel writes straight to the output, take "pix" at a lower lane-use bar.
"""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.ops import conv as C

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX-512F or AVX2+FMA")

RNG = np.random.default_rng(10)


def _want(x, w, b, s, pads, d, groups=1, relu=False):
    pt, pb, pl, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    t = torch.from_numpy
    r = F.conv2d(t(xp), t(w.astype(np.float64)), None if b is None else t(b.astype(np.float64)), s, 0, d,
                 groups).numpy()
    return np.maximum(r, 0) if relu else r


def _close(got, want, what):
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err < 2e-6, (what, err)


def _last_layout():
    return D._layouts[next(reversed(D._layouts))]


@pytest.fixture
def fresh(monkeypatch):
    from neetorch.devices.cpu.kernels import conv1x1_packed
    monkeypatch.setattr(conv1x1_packed, "ON", [False])     # the paths before kernels/conv1x1_packed.py (session 14)
    monkeypatch.setattr(D, "FORCE", [None])
    monkeypatch.setattr(D, "MODE", [""])
    D._layouts.clear()
    yield
    D._layouts.clear()


# (x shape, w shape, stride, (top, bottom, left, right) pads, dilation): strided, on the default rule's kernel
STRIDED = [
    ((1, 3, 33, 31), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),      # stem-like 3 -> 24 (was "pix")
    ((2, 3, 29, 30), (20, 3, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),      # unpadded, batch 2
    ((1, 5, 23, 21), (17, 5, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),      # 7x7 stem-like, odd channels
    ((1, 7, 19, 17), (33, 7, 3, 2), (3, 2), (0, 2, 1, 0), (2, 1)),      # mixed strides, dilation, asymmetric pads
    ((2, 12, 11, 13), (16, 12, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),    # strided 1x1
    ((1, 4, 9, 10), (9, 4, 3, 3), (3, 3), (1, 2, 2, 1), (1, 2)),        # stride 3 past the input's end
    ((1, 3, 2, 3), (5, 3, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),         # one output pixel per row
]


@pytest.mark.parametrize("relu", [False, True])
def test_strided_chan_unsplit_matches_torch(nthreads, fresh, relu):
    for i, (xs, ws, s, pads, d) in enumerate(STRIDED):
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        b = RNG.standard_normal(ws[0]).astype(np.float32) if i % 3 != 1 else None
        want = _want(x, w, b, s, pads, d, relu=relu)
        got = np.full(want.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, *s, *pads, *d, relu)
        lay = _last_layout()
        if D._small_k_strided(s[0], s[1], *ws[1:]) and D.FORCE[0] is None:
            # AVX2, few (channel, tap) pairs: the "pix" kernel on the phase planes (session 13)
            assert lay.kind == "pix" and lay.nph == len(D.geometry(*xs[2:], *ws[2:], *s, *pads, *d)[2])
            _close(got, want, (xs, ws, s, pads, d, relu))
            continue
        # the rule's kernel for strided convs, one phase (the padded input unsplit)
        assert lay.kind == "chan" and lay.nph == 1, (xs, ws, lay.kind, lay.nph)
        assert not lay.bare, (xs, ws, pads)      # strided: copied (in-model: a sequential copy of a cold input)
        Hp, Wp = xs[2] + pads[0] + pads[1], xs[3] + pads[2] + pads[3]
        assert lay.fill[:2] == (Hp, Wp)
        _close(got, want, (xs, ws, s, pads, d, relu))


def test_strided_groups_and_shift(fresh):
    # groups (each group's channel blocks on their own) with a second bias and relu, stride 2, batch 2
    xs, ws = (2, 12, 15, 14), (18, 4, 3, 3)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / 6).astype(np.float32)
    b, b2 = RNG.standard_normal(18).astype(np.float32), RNG.standard_normal(18).astype(np.float32)
    want = np.maximum(_want(x, w, b, (2, 2), (1, 0, 2, 1), (1, 1), 3) + b2[:, None, None], 0)
    got = np.full(want.shape, np.nan, np.float32)
    assert D.conv2d(x, w, b, got, 2, 2, 1, 0, 2, 1, 1, 1, True, b2)
    lay = _last_layout()
    assert lay.kind == "chan" and lay.nph == 1
    _close(got, want, "groups")


def test_strided_forced_pix_keeps_phase_planes(fresh, monkeypatch):
    # forced "pix" (its vectors of consecutive wide pixels need the phase planes) still splits: same values
    monkeypatch.setattr(D, "FORCE", ["pix"])
    xs, ws = (1, 3, 33, 31), (24, 3, 3, 3)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / 5).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    want = _want(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1))
    got = np.full(want.shape, np.nan, np.float32)
    assert D.conv2d(x, w, b, got, 2, 2, 1, 1, 1, 1, 1, 1)
    lay = _last_layout()
    assert lay.kind == "pix" and lay.nph == 4
    _close(got, want, "pix")


def test_plan_rule_small_k_and_strides():
    # 1x1 over few pairs: "pix" (no compaction: Wq == OW) where the plain bonus kept "chan"
    assert D.plan(28, 56, 56, 56, 6)[0] == "pix"            # ShuffleNet's 24 -> 112 in 4 groups
    assert D.plan(64, 56, 56, 56, 8)[0] == "pix"
    assert D.plan(64, 56, 56, 56, 0)[0] == "chan"           # K unknown: the plain bonus
    assert D.plan(64, 56, 56, 56, 8, "chan")[0] == "chan"   # forced
    assert D.plan(128, 27, 27, 27, 32)[0] == "chan"         # from _SHORT_K on: unchanged
    assert D.plan(64, 56, 56, 58, 27)[0] == "chan"          # padded (compaction): unchanged
    # the layouts the rule builds: strided -> "chan" even where "pix" has more useful lanes
    # (AVX-512's tiles: 24 channels fill no block of 16 lanes; AVX2's "chan" 3 x 8 fits them)
    assert D.plan(24, 112, 112, 113, 27)[0] == ("pix" if D.VEC == 16 else "chan")
    lay = D._Layout((1, 3, 224, 224), (24, 3, 3, 3), 112, 112, 2, 2, 1, 1, 1, 1, 1, 1, None)
    # (AVX2: strided convs of fewer than _SHORT_K pairs take "pix" on the phase planes, session 13)
    assert (lay.kind, lay.nph) == (("pix", 4) if D.VEC == 8 else ("chan", 1))
    lay = D._Layout((1, 5, 224, 224), (24, 5, 3, 3), 112, 112, 2, 2, 1, 1, 1, 1, 1, 1, None)     # K = 45
    assert lay.kind == "chan" and lay.nph == 1
    lay = D._Layout((1, 24, 56, 56), (112, 6, 1, 1), 56, 56, 1, 1, 0, 0, 0, 0, 1, 1, None)
    assert lay.kind == "pix" and lay.direct_out


def test_unforced_layouts_stay_in_bounds():
    # the rule's layouts (strided: unsplit) over many odd geometries: _Layout checks every read
    rng = np.random.default_rng(11)
    n = 0
    for _ in range(300):
        KH, KW = rng.integers(1, 8, 2)
        sh, sw, dh, dw = rng.integers(1, 4, 4)
        pt, pb, pl, pr = rng.integers(0, 3, 4) * rng.integers(0, 2)
        H, W = rng.integers(1, 40, 2)
        OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
        OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
        if OH < 1 or OW < 1:
            continue
        C_, O = int(rng.integers(1, 20)), int(rng.integers(1, 80))
        lay = D._Layout((1, C_, H, W), (O, C_, KH, KW), OH, OW, sh, sw, pt, pb, pl, pr, dh, dw, None)
        if (sh > 1 or sw > 1) and not D._small_k_strided(sh, sw, C_, KH, KW):   # (AVX2 few pairs: "pix", s13)
            assert lay.kind == "chan" and lay.nph == 1
        n += 1
    assert n > 200


def test_op_takes_the_new_paths(fresh):
    # through the op on the default rule: the stem-like strided 3x3 (unsplit "chan") and
    # the grouped short-K 1x1 ("pix"), against torch
    cases = [((1, 3, 40, 38), (24, 3, 3, 3), 2, 1, 1, "chan"), ((1, 3, 41, 41), (64, 3, 3, 3), 2, 0, 1, "chan"),
             ((2, 24, 20, 20), (112, 6, 1, 1), 1, 0, 4, "pix")]
    for xs, ws, s, p, g, kind in cases:
        if s > 1 and D._small_k_strided(s, s, *ws[1:]):
            kind = "pix"        # AVX2: strided convs of few (channel, tap) pairs (session 13)
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / 4).astype(np.float32)
        b = RNG.standard_normal(ws[0]).astype(np.float32)
        n = len(D._layouts)
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), s, p, 1, g).numpy()
        assert len(D._layouts) == n + 1, "the direct kernel was not taken"
        lay = _last_layout()
        assert lay.kind == kind and (kind == "pix" or lay.nph == 1) and not lay.bare
        _close(got, _want(x, w, b, (s, s), (p,) * 4, (1, 1), g), (xs, ws))


def test_output_prefetch_flag(nthreads, fresh, monkeypatch):
    # the "chan" kernel prefetches its output rows ahead where an image's output is large (params word _C_PF):
    # on for a SqueezeNet-sized stem, off for small outputs and depthwise; forced on here for small convs (channel
    # tails: rows past the group's last channel prefetched, never stored), against torch
    # (the "chan" layout: on AVX2 the rule gives this stem "pix", conv_direct._small_k_strided)
    big = D._Layout((1, 3, 224, 224), (64, 3, 3, 3), 111, 111, 2, 2, 0, 0, 0, 0, 1, 1,
                    "chan" if D._small_k_strided(2, 2, 3, 3, 3) else None)
    small = D._Layout((1, 16, 20, 20), (40, 16, 3, 3), 20, 20, 1, 1, 1, 1, 1, 1, 1, 1, "chan")
    assert big.kind == "chan" and big.base[D._C_PF] == 1 and small.base[D._C_PF] == 0
    monkeypatch.setattr(D, "_PF_MIN_BYTES", 0)
    D._layouts.clear()
    for xs, ws, s, p, g in [((2, 16, 20, 20), (40, 16, 3, 3), 1, 1, 1), ((1, 3, 35, 33), (24, 3, 3, 3), 2, 1, 1),
                            ((1, 12, 9, 11), (20, 3, 3, 3), 1, 1, 4)]:
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        b = RNG.standard_normal(ws[0]).astype(np.float32)
        want = _want(x, w, b, (s, s), (p,) * 4, (1, 1), g, relu=True)
        got = np.full(want.shape, np.nan, np.float32)
        monkeypatch.setattr(D, "FORCE", ["chan"])
        assert D.conv2d(x, w, b, got, s, s, p, p, p, p, 1, 1, True)
        assert _last_layout().base[D._C_PF] == 1
        _close(got, want, (xs, ws))
    dw = D._Layout((1, 32, 8, 8), (32, 1, 3, 3), 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, None)
    assert dw.kind == "dw" and dw.base[D._C_PF] == 0


def test_grouped_1x1_one_batched_matmul(nthreads, fresh, monkeypatch):
    # grouped unpadded 1x1 convs the rule leaves to the GEMMs (>= _SHORT_K inputs per group), one image: one
    # batched matmul on the calling thread (not _gemms' list of per-group products); batches still go to _gemms
    from neetorch.devices.cpu.kernels import conv as K
    calls = []
    real = K._gemms
    monkeypatch.setattr(K, "_gemms", lambda jobs: (calls.append(len(jobs)), real(jobs)))
    for N, C_, O, g, hw, s in [(1, 136, 136, 4, (9, 7), 1), (1, 96, 60, 3, (5, 5), 2), (2, 136, 136, 4, (6, 6), 1)]:
        x = RNG.standard_normal((N, C_) + hw).astype(np.float32)
        w = (RNG.standard_normal((O, C_ // g, 1, 1)) / 6).astype(np.float32)
        b = RNG.standard_normal(O).astype(np.float32)
        calls.clear()
        got = C.conv2d(nee.from_numpy(x), nee.from_numpy(w), nee.from_numpy(b), s, 0, 1, g).numpy()
        assert bool(calls) == (N > 1), (N, calls)
        _close(got, _want(x, w, b, (s, s), (0,) * 4, (1, 1), g), (N, C_, O, g))


def test_packed_weights_memo(fresh, monkeypatch):
    # frozen weights (ONNX initializers, JIT constants) are looked up by the array object passed (no keying in
    # winograd.weights); weights not frozen keep the bitwise check: changed in place, the result follows
    winograd = D.winograd       # (the module conv_direct calls, even if another test re-imported the package)
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    wf = (RNG.standard_normal((20, 8, 3, 3)) / 8).astype(np.float32)
    assert winograd.freeze(wf)
    calls = []
    real = winograd.weights
    monkeypatch.setattr(winograd, "weights", lambda *a: (calls.append(1), real(*a))[1])
    outs = []
    for _ in range(3):
        got = np.full((1, 20, 9, 9), np.nan, np.float32)
        assert D.conv2d(x, wf, None, got, 1, 1, 1, 1, 1, 1, 1, 1)
        outs.append(got)
    assert len(calls) == 1 and all(np.array_equal(o, outs[0]) for o in outs)
    _close(outs[0], _want(x, wf, None, (1, 1), (1,) * 4, (1, 1)), "frozen")
    w = wf.copy()                       # not frozen: checked against its kept copy on every call
    for k in range(2):                  # (changed on winograd._VOLATILE calls in a row: declined, trained)
        got = np.full((1, 20, 9, 9), np.nan, np.float32)
        assert D.conv2d(x, w, None, got, 1, 1, 1, 1, 1, 1, 1, 1)
        _close(got, _want(x, w, None, (1, 1), (1,) * 4, (1, 1)), ("changed", k))
        w[k] *= -2.0
    assert len(calls) == 3
    # the memo's entry goes with the array (entries of earlier tests' dead arrays are collected first: only
    # wf's may go between the two counts)
    import gc
    gc.collect()
    n = len(D._wmemo)
    del wf
    gc.collect()
    assert len(D._wmemo) == n - 1
    winograd.clear_cache()
