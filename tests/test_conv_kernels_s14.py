"""Session 14's AVX2 direct-conv kernel changes (kernels/conv_direct.py at 8 lanes) against torch (float64) and numpy.

* "chan": a full tile's rows stored with plain stores of 4 / 2 / 1 lanes (8 at R = 8) instead of masked ones; pixel
  tails still masked.  Every row length 1..8 on full and tail tiles, channel-block tails, relu, a residual.
* "pix": the compact output written by the kernel itself (``_render_pix8`` / ``_pix_store8``: vectors inside a row
  stored plainly, ones crossing row ends masked per row, tile counters carried from tile to tile, tiles in
  super-tiles of all channel blocks): narrow rows (a vector over several rows), stride-2 phase planes, pads,
  dilation, groups, batches; nothing written outside the output; the same bits for every super-tile length and
  as the "chan" kernel's output (both sum each output in the same order).
* The fill (``_fill``: phase planes by a compiled kernel, split over the threads) against the numpy fill it
  replaced, on garbage-filled scratch; its bounds check.
* NaN / inf inputs through both families; 1 and 2 threads.
* The 16-lane (AVX-512) kernels' IR text unchanged (sha256 of the text before session 14).
"""
import hashlib

import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv_direct as D
from test_conv_direct import _data, _last_layout, _want, force, nthreads  # noqa: F401

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not D.available(), reason="no AVX2+FMA / AVX-512F")

RNG = np.random.default_rng(14)


@pytest.fixture(scope="module", autouse=True)
def lanes8():
    old = D.VEC
    if old != 8:
        D._set_width(8)
    yield
    if old != 8:
        D._set_width(old)


# sha256 of the 16-lane "pix" (6x4, 12x2; relu or not) and "chan" (not "dw"; 4x6, 2x8, 3x8, 2x7, 1x1, 1x5; relu,
# residual or not) kernels' IR text, concatenated, before session 14 (git b3ca721); changed on purpose in session 21
# (the "chan" kernel's weight prefetch, conv_direct.WPF)
IR16_SHA256 = "b2617d7b379131f924ab7e867a1bedf6130438ca228965aa4f0593c541fc18b5"


def test_avx512_ir_unchanged():
    D._set_width(16)
    try:
        h = hashlib.sha256()
        for R, P in ((6, 4), (12, 2)):
            for relu in (False, True):
                h.update(D._render(R, P, relu).encode())
        for NB, R in ((4, 6), (2, 8), (3, 8), (2, 7), (1, 1), (1, 5)):
            for relu in (False, True):
                for res in (False, True):
                    h.update(D._render_c(NB, R, relu, False, res).encode())
    finally:
        D._set_width(8)
    assert h.hexdigest() == IR16_SHA256


def _run(x, w, b, s, pads, d, relu=False, b2=None, e=None, sentinel=True):
    """D.conv2d into a NaN-filled output inside a NaN-filled buffer (an image before and after it): returns the
    output, the buffer's outer images checked untouched."""
    N, O = x.shape[0], w.shape[0]
    OH = (x.shape[2] + pads[0] + pads[1] - d[0] * (w.shape[2] - 1) - 1) // s[0] + 1
    OW = (x.shape[3] + pads[2] + pads[3] - d[1] * (w.shape[3] - 1) - 1) // s[1] + 1
    big = np.full((N + 2, O, OH, OW), np.nan, np.float32)
    got = big[1:N + 1]
    assert D.conv2d(x, w, b, got, *s, *pads, *d, relu, b2, e)
    if sentinel:
        assert np.isnan(big[0]).all() and np.isnan(big[-1]).all(), "written outside the output"
    return got


def _reference(x, w, b, s, pads, d, relu=False, b2=None, e=None, groups=1):
    want = _want(x, w, b, s, pads, d, groups)
    if b2 is not None:
        want = want + b2[:, None, None]
    if e is not None:
        want = want + e
    return np.maximum(want, 0) if relu else want


def _close(got, want, what):
    assert not np.isnan(got).any(), what
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err < 2e-6, (what, err)


# "chan" cases: (x shape, w shape, stride, pads, dilation); pixel counts L = 30, 36, 40, 48, 56, 168 (multiples
# of most row lengths: full tiles only) and 35, 11 (tails)
CHAN_CASES = [
    ((1, 5, 5, 6), (8, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),           # L 30, one block
    ((2, 4, 6, 6), (19, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # L 36, channel tail, batch
    ((1, 7, 5, 8), (16, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),          # L 40, 1x1 (reads x)
    ((1, 3, 12, 16), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),        # L 48, stride 2 (table positions)
    ((1, 6, 7, 8), (13, 6, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # L 56
    ((1, 9, 12, 14), (17, 9, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),        # L 168
    ((1, 5, 7, 5), (10, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # L 35: tail for every R but 1, 5, 7
    ((1, 2, 11, 3), (9, 2, 3, 3), (1, 1), (1, 1, 0, 0), (2, 1)),          # L 11, dilation, asymmetric
]


@pytest.mark.parametrize("shape", [(1, r) for r in range(1, 9)] + [(2, 6), (3, 4)])
def test_chan_row_stores(nthreads, force, shape):
    force("chan", (shape,))
    for i, (xs, ws, s, pads, d) in enumerate(CHAN_CASES):
        x, w, b = _data(xs, ws, bias=i % 2 == 0, rng=RNG)
        relu = i % 3 != 1
        b2 = RNG.standard_normal(ws[0]).astype(np.float32) if i % 4 == 3 else None
        e = None
        if i % 3 == 2:
            e = RNG.standard_normal(_want(x, w, b, s, pads, d).shape).astype(np.float32)
        got = _run(x, w, b, s, pads, d, relu, b2, e)
        lay = _last_layout()
        assert (lay.kind, lay.A, lay.B) == ("chan",) + shape
        _close(got, _reference(x, w, b, s, pads, d, relu, b2, e), (shape, xs, ws, relu, e is not None))


# "pix" cases: rows narrower than a vector (one vector over several rows), Wq - OW of 0, 1, 2, 4 padding columns,
# stride-2 phase planes, dilation, groups, batches, P * 8 wide pixels over several rows
PIX_CASES = [
    ((1, 3, 5, 4), (7, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),        # OW 4 < 8, Wq 6
    ((1, 2, 9, 1), (5, 2, 3, 1), (1, 1), (1, 1, 0, 0), (1, 1), 1),        # OW 1 (Wq == OW: one long row)
    ((2, 3, 23, 29), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),     # stem-like, stride 2, pad 1, batch
    ((1, 3, 24, 30), (13, 3, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),     # SqueezeNet-like stem, no pad
    ((1, 4, 13, 19), (14, 4, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1),     # dilation 2, 4 padding columns
    ((1, 6, 10, 17), (9, 6, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),      # 1x1 (Wq == OW)
    ((1, 8, 9, 11), (12, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),      # 4 groups of 3 outputs
    ((1, 3, 31, 7), (6, 3, 5, 5), (2, 1), (2, 2, 2, 2), (1, 1), 1),       # mixed strides, 5x5, OW 7
    ((1, 1, 3, 3), (2, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),        # a single output pixel
]


@pytest.mark.parametrize("shape", [(6, 2), (12, 1), (4, 3)])
def test_pix_compact_store(nthreads, force, shape):
    force("pix", (shape,))
    for i, (xs, ws, s, pads, d, g) in enumerate(PIX_CASES):
        x, w, b = _data(xs, ws, bias=i % 2 == 0, rng=RNG)
        relu = i % 3 != 1
        b2 = RNG.standard_normal(ws[0]).astype(np.float32) if g > 1 else None
        e = None
        if i % 4 == 2:
            e = RNG.standard_normal(_want(x, w, b, s, pads, d, g).shape).astype(np.float32)
        got = _run(x, w, b, s, pads, d, relu, b2, e)
        lay = _last_layout()
        assert (lay.kind, lay.A, lay.B, lay.direct_out) == ("pix",) + shape + (True,)
        _close(got, _reference(x, w, b, s, pads, d, relu, b2, e, g), (shape, xs, ws, s, pads, d, g))


def test_pix_super_tiles(nthreads, force, monkeypatch):
    """The "pix" tiles in super-tiles of _PIX_SPT8 pixel tiles (all channel blocks of one, then the next; the last
    one shorter): every super-tile length gives the same bits (each output summed alike), close to torch."""
    force("pix", ((4, 3),))
    for xs, ws, s, pads, d, g in PIX_CASES:
        x, w, b = _data(xs, ws, rng=RNG)
        want = _reference(x, w, b, s, pads, d, True, groups=g)
        outs = []
        for spt in (8, 1, 3, 10 ** 6):
            monkeypatch.setattr(D, "_PIX_SPT8", spt)
            D._layouts.clear()
            outs.append(_run(x, w, b, s, pads, d, True).copy())
            _close(outs[-1], want, (xs, ws, spt))
        assert all(o.tobytes() == outs[0].tobytes() for o in outs), xs


def test_pix_and_chan_bitwise_equal(nthreads, force):
    """Both families sum each output in the same order (bias, then the (channel, tap) pairs): the compact rows
    the "pix" kernel writes itself carry the same bits as the "chan" kernel's transposed tile."""
    for xs, ws, s, pads, d, g in PIX_CASES[:5]:
        x, w, b = _data(xs, ws, rng=RNG)
        force("pix", ((6, 2),))
        a = _run(x, w, b, s, pads, d, True).copy()
        force("chan", ((2, 6),))
        c = _run(x, w, b, s, pads, d, True)
        assert a.tobytes() == c.tobytes(), (xs, ws)


@pytest.mark.parametrize("kind,shape", [("pix", (6, 2)), ("pix", (4, 3)), ("chan", (2, 6)), ("chan", (1, 8))])
def test_nan_inf(nthreads, force, kind, shape):
    force(kind, (shape,))
    for xs, ws, s, pads, d in (((1, 3, 11, 13), (10, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
                               ((1, 4, 9, 10), (17, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1))):
        x, w, b = _data(xs, ws, rng=RNG)
        x[0, 1, 3, 4] = np.inf
        x[0, 2, 6, 2] = -np.inf
        x[0, 0, 8, 7] = np.nan
        for relu in (False, True):
            got = _run(x, w, b, s, pads, d, relu, sentinel=False)
            want = _reference(x, w, b, s, pads, d, relu)
            assert (np.isnan(got) == np.isnan(want)).all(), (kind, relu)
            assert (np.isposinf(got) == np.isposinf(want)).all() and (np.isneginf(got) == np.isneginf(want)).all()
            fin = np.isfinite(want)
            assert np.isnan(want).any() and np.isinf(want).any() and fin.sum() > want.size // 2
            _close(got[fin], want[fin], (kind, relu))


def _fill_numpy(x3, xq, fill):
    """The numpy fill _fill replaced (session 13): the reference."""
    Hq, Wq, parts = fill
    C = x3.shape[0]
    xq[:, :, Hq * Wq:] = 0
    for pi, part in enumerate(parts):
        plane = xq[:, pi, :Hq * Wq].reshape(C, Hq, Wq)
        if part is None:
            plane[...] = 0
            continue
        r0, r1, c0, c1, rs, cs = part
        plane[...] = 0
        plane[:, r0:r1, c0:c1] = x3[:, rs, cs]


# (x shape, w shape, stride, pads, dilation, forced kind): the fills of pix (phase planes) and chan (padded copy)
FILL_CASES = [
    ((1, 16, 55, 55), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "chan"),
    ((1, 3, 37, 45), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "pix"),
    ((1, 3, 40, 41), (8, 3, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1), "pix"),
    ((1, 2, 17, 26), (8, 2, 5, 4), (3, 2), (2, 1, 0, 3), (1, 2), "pix"),     # 3 x 2 phases, column stride 2
    ((1, 5, 19, 23), (8, 5, 3, 3), (3, 3), (4, 4, 4, 4), (1, 1), "pix"),     # column stride 3, wide pads
    ((1, 2, 4, 5), (8, 2, 1, 1), (3, 3), (5, 5, 5, 5), (1, 1), "pix"),       # pads wider than the stride
    ((1, 3, 7, 30), (8, 3, 2, 2), (1, 2), (0, 1, 1, 0), (2, 1), "pix"),      # odd row lengths, 1 x 2 phases
]


@pytest.mark.parametrize("nt", [1, 2])
def test_fill_matches_numpy(monkeypatch, force, nt):
    old = threads.get_num_threads()
    threads.set_num_threads(nt)
    monkeypatch.setattr(D, "_FILL_PAR", 0)         # split every fill over the threads
    try:
        for xs, ws, s, pads, d, kind in FILL_CASES:
            force(kind)
            x = RNG.standard_normal(xs).astype(np.float32)
            x[0, 0, 0, 0], x[0, -1, -1, -1] = np.nan, np.inf
            OH = (xs[2] + pads[0] + pads[1] - d[0] * (ws[2] - 1) - 1) // s[0] + 1
            OW = (xs[3] + pads[2] + pads[3] - d[1] * (ws[3] - 1) - 1) // s[1] + 1
            lay = D._Layout(xs, ws, OH, OW, *s, *pads, *d, kind)
            assert lay.kind == kind and not lay.bare
            got = np.full((xs[1], lay.nph, lay.S), np.nan, np.float32)
            want = np.full_like(got, 7.0)
            D._fill(x[0], got, lay.fill)
            _fill_numpy(x[0], want, lay.fill)
            assert np.array_equal(got, want, equal_nan=True), (xs, ws, s, pads, d)
            assert np.isnan(got).sum() <= 1          # (the NaN scratch all overwritten: at most x's NaN)
    finally:
        threads.set_num_threads(old)


def test_fill_bounds_checked():
    lay = D._Layout((1, 3, 20, 20), (8, 3, 3, 3), 10, 10, 2, 2, 1, 1, 1, 1, 1, 1, "pix")
    Hq, Wq, parts = lay.fill
    D._fill_params(parts, 3, 20, 20, Hq, Wq, lay.S)
    with pytest.raises(AssertionError, match="out of bounds"):
        D._fill_params(parts, 3, 19, 20, Hq, Wq, lay.S)       # an input row fewer than the parts read
    with pytest.raises(AssertionError, match="out of bounds"):
        D._fill_params(parts, 3, 20, 20, Hq, Wq - 1, lay.S)   # narrower planes than the parts write
    with pytest.raises(AssertionError, match="wrong layout"):
        D._fill(np.zeros((3, 20, 20), np.float32), np.zeros((2, lay.nph, lay.S), np.float32), lay.fill)
