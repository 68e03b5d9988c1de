"""Winograd's LLVM IR kernels (kernels/winograd.py, session 15) against its Numba kernels, bit for bit.

* input_tiles / output_tiles (the direct kernels) and the native tasks behind task_addr: F(2) and F(4), float32
  and float64, odd sizes (clipped last tile rows / columns), pads, several images, bands of tile rows (ti0 > 0,
  tstride 0), blocks of output channels (o0 > 0 of Oall), bias or not, relu; data with values whose float64
  intermediates (Numba types ``int literal * float32`` as float64) round differently from float32 ones, and
  overflowing ones (a float32 product would be inf where the float64 one is not).  Every output element, the
  untouched ones (NaN-filled) included, must have the same bits (NaNs: the same places).
* _same: equal / differing in the first, a middle or the last block, int32 and int64 views.
* bad sizes: IndexError / ValueError naming the kernel before any write.
* conv2d_into through Winograd (forced F(2) / F(4), one and two threads: the direct kernels and the native
  tasks) gives the same bits with NEE_WINO_IR's switch on and off.
"""
import ctypes

import numpy as np
import pytest

from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import pool_native
from neetorch.devices.cpu.kernels import winograd as W

pytestmark = pytest.mark.skipif(not pool_native.available(), reason="no llvmlite native target")


@pytest.fixture(autouse=True)
def _ir_on(monkeypatch):
    monkeypatch.setattr(W, "MODE", ["1"])        # (whatever NEE_WINO_IR says)


RNG = np.random.default_rng(1515)
DTS = [np.float32, np.float64]
_TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _data(n, dt, big=False):
    """Normal values of mixed scales (float32: plus some near the overflow threshold and some -0.0)."""
    a = RNG.standard_normal(n) * np.exp(RNG.uniform(-3, 3, n))
    if big:
        k = RNG.random(n) < 0.1
        a[k] = RNG.choice([-1, 1], k.sum()) * RNG.uniform(0.5, 1.0, k.sum()) * (3e38 if dt == np.float32 else 1e307)
        a[RNG.random(n) < 0.02] = -0.0
    return a.astype(dt)


def _same_bits(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"{what}: NaN places differ"
    iv = np.int32 if got.dtype == np.float32 else np.int64
    g, w = got[~gn].view(iv), want[~wn].view(iv)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, f"{what}: {bad.size} elements differ, first {got[~gn][bad[0]]!r} vs {want[~wn][bad[0]]!r}"


def _ir_off(monkeypatch):
    monkeypatch.setattr(W, "MODE", ["0"])


def _geo(H, W_, m, pads):
    pt, pb, pl, pr = pads
    OH, OW = H + pt + pb - 2, W_ + pl + pr - 2
    return OH, OW, -(-OH // m), -(-OW // m)


IN_CASES = [  # (N, C, H, W, pads)
    (1, 3, 9, 11, (1, 1, 1, 1)), (2, 4, 7, 6, (0, 0, 0, 0)), (1, 5, 14, 14, (1, 1, 1, 1)),
    (3, 2, 13, 5, (0, 2, 1, 0)), (1, 1, 3, 3, (0, 0, 0, 0)), (2, 3, 17, 10, (2, 1, 0, 2)),
    # tile rows of 8+ tiles (F(4): the row pass's 8-tile vectors, the last group overlapping) and of 4-7 (4-tile
    # vectors), session 23
    (1, 2, 6, 40, (1, 1, 1, 1)), (2, 2, 5, 34, (0, 0, 0, 0)), (1, 3, 9, 21, (1, 0, 2, 1)), (1, 2, 4, 66, (1, 1, 0, 0)),
]


def _run_in(fn, x, m, C, H, W_, ph, pw, ti0, th, tw, NT, tstride, p0, p1, vsize):
    dt = x.dtype
    V = np.full(vsize, np.nan, dt)
    xp = np.full((th * m + 2) * (tw * m + 2) + 3, np.nan, dt)
    tmp = np.full((m + 2) ** 2 * th * tw + 5, np.nan, dt)
    fn(x, V, xp, tmp, m, C, H, W_, ph, pw, ti0, th, tw, NT, tstride, p0, p1)
    return V, xp, tmp


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("big", [False, True])
def test_input_tiles_bits(m, dt, big):
    for N, C, H, W_, pads in IN_CASES:
        OH, OW, th, tw = _geo(H, W_, m, pads)
        x = _data(N * C * H * W_, dt, big)
        a2 = (m + 2) ** 2
        NT = N * th * tw
        # whole planes, all images; then a part of the planes
        for p0, p1 in ((0, N * C), (1, N * C - 1)) if N * C >= 3 else ((0, N * C),):
            args = (m, C, H, W_, pads[0], pads[2], 0, th, tw, NT, th * tw, p0, p1, a2 * C * NT)
            got, want = _run_in(W.input_tiles, x, *args), _run_in(W.input_tiles_nb, x, *args)
            for g, w_, nm in zip(got, want, ("V", "xp", "tmp")):
                _same_bits(g, w_, f"input_tiles {nm} {(N, C, H, W_, pads, m, p0, p1)}")
        # bands of tile rows of one image (conv._conv_winograd's bands: tstride 0)
        for t0, t1 in ((0, 1), (1, th), (th - 1, th)):
            if t0 >= t1:
                continue
            nb = (t1 - t0) * tw
            n = N - 1
            args = (m, C, H, W_, pads[0], pads[2], t0, t1 - t0, tw, nb, 0, n * C, (n + 1) * C, a2 * C * nb)
            got, want = _run_in(W.input_tiles, x, *args), _run_in(W.input_tiles_nb, x, *args)
            for g, w_, nm in zip(got, want, ("V", "xp", "tmp")):
                _same_bits(g, w_, f"input_tiles band {nm} {(N, C, H, W_, pads, m, t0, t1)}")


OUT_CASES = [  # (N, O, OH, OW)
    (1, 3, 7, 9), (2, 4, 8, 8), (1, 5, 13, 14), (3, 2, 5, 3), (1, 1, 1, 1), (2, 3, 6, 10), (1, 2, 11, 2),
    # rows of 8+ whole tiles (F(4): the width pass's 8-tile vectors, interleaved stores) and of 4-7, session 23
    (1, 2, 5, 37), (2, 2, 4, 32), (1, 3, 6, 19), (1, 2, 3, 30), (1, 2, 2, 66),
]


def _run_out(fn, M, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1, relu, nimg):
    dt = M.dtype
    out = np.full(nimg * Oall * OH * OW + 2, np.nan, dt)
    tmp = np.full(m * (m + 2) * th * tw + 3, np.nan, dt)
    fn(M, out, tmp, bias, has_bias, m, O, Oall, o0, OH, OW, ti0, th, tw, NT, tstride, q0, q1, relu)
    return out, tmp


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("big", [False, True])
def test_output_tiles_bits(m, dt, big):
    for ci, (N, O, OH, OW) in enumerate(OUT_CASES):
        th, tw = -(-OH // m), -(-OW // m)
        a2 = (m + 2) ** 2
        NT = N * th * tw
        for variant in range(4):
            has_bias, relu = variant & 1 == 1, variant & 2 == 2
            M = _data(a2 * O * NT, dt, big)
            M[0] = (-1.0 if (ci + variant) % 2 else 1.0) * abs(M[0])   # no bias: bv = M[0] * 0 (+0.0 / -0.0)
            M[1 + (variant % 3)::7] = -0.0                            # tiles summing to -0.0
            bias = _data(O + 3, dt, big) if has_bias else np.zeros(1, dt)
            args = (bias, has_bias, m, O, O, 0, OH, OW, 0, th, tw, NT, th * tw, 0, N * O, relu, N)
            got, want = _run_out(W.output_tiles, M, *args), _run_out(W.output_tiles_nb, M, *args)
            for g, w_, nm in zip(got, want, ("out", "tmp")):
                _same_bits(g, w_, f"output_tiles {nm} {(N, O, OH, OW, m, has_bias, relu)}")
            # a block of output channels [o0, o0 + ob) of Oall, planes of some images
            if O >= 2:
                o0, ob = 1, O - 1
                Mb = _data(a2 * ob * NT, dt, big)
                args = (bias, has_bias, m, ob, O, o0, OH, OW, 0, th, tw, NT, th * tw, 1, N * ob, relu, N)
                got, want = _run_out(W.output_tiles, Mb, *args), _run_out(W.output_tiles_nb, Mb, *args)
                for g, w_, nm in zip(got, want, ("out", "tmp")):
                    _same_bits(g, w_, f"output_tiles block {nm} {(N, O, OH, OW, m, has_bias, relu)}")
            # bands of tile rows of the last image (tstride 0)
            for t0, t1 in ((0, 1), (1, th), (th - 1, th)):
                if t0 >= t1:
                    continue
                nb = (t1 - t0) * tw
                Mb = _data(a2 * O * nb, dt, big)
                args = (bias, has_bias, m, O, O, 0, OH, OW, t0, t1 - t0, tw, nb, 0, 0, O, relu, 1)
                got, want = _run_out(W.output_tiles, Mb, *args), _run_out(W.output_tiles_nb, Mb, *args)
                for g, w_, nm in zip(got, want, ("out", "tmp")):
                    _same_bits(g, w_, f"output_tiles band {nm} {(N, O, OH, OW, m, has_bias, relu, t0, t1)}")


def _call_task(addr, x, y, s, mt):
    f = _TASK(addr)
    for row in mt:
        f(x.ctypes.data, y.ctypes.data, s.ctypes.data, row.ctypes.data)


@pytest.mark.parametrize("dt", DTS)
def test_tasks_bits(monkeypatch, dt):
    ir_in, ir_out = W.task_addr("in", dt), W.task_addr("out", dt)
    _ir_off(monkeypatch)
    nb_in, nb_out = W.task_addr("in", dt), W.task_addr("out", dt)
    assert len({ir_in, ir_out, nb_in, nb_out}) == 4
    for m in (2, 4):
        for (N, C, H, W_, pads), O in zip(IN_CASES, (4, 3, 7, 2, 1, 5)):
            OH, OW, th, tw = _geo(H, W_, m, pads)
            a2 = (m + 2) ** 2
            NT = N * th * tw
            x = _data(N * C * H * W_, dt, True)
            per_in = (th * m + 2) * (tw * m + 2) + a2 * th * tw
            chunks = threads.split(N * C, 3)
            mt = np.zeros((len(chunks), W.META), np.int64)
            for i, (c0, c1) in enumerate(chunks):
                mt[i] = (m, C, H, W_, pads[0], pads[2], th, tw, NT, x.size, a2 * C * NT, len(chunks) * per_in, c0, c1,
                         i * per_in, 0)
            res = []
            for addr in (ir_in, nb_in):
                V = np.full(a2 * C * NT, np.nan, dt)
                s = np.full(len(chunks) * per_in, np.nan, dt)
                _call_task(addr, x, V, s, mt)
                res.append((V, s))
            for g, w_ in zip(*res):
                _same_bits(g, w_, f"in task {(N, C, H, W_, pads, m)}")
            per_out = m * (m + 2) * th * tw
            chunks = threads.split(N * O, 3)
            for flags in range(4):
                Mx = _data(a2 * O * NT, dt, True)
                Mx[0] = -abs(Mx[0]) if flags % 2 == 0 else abs(Mx[0])
                mt = np.zeros((len(chunks), W.META), np.int64)
                sl = O + len(chunks) * per_out
                for i, (c0, c1) in enumerate(chunks):
                    mt[i] = (m, O, OH, OW, 0, 0, th, tw, NT, Mx.size, N * O * OH * OW, sl, c0, c1, O + i * per_out,
                             flags)
                bias = _data(O, dt, True)
                res = []
                for addr in (ir_out, nb_out):
                    out = np.full(N * O * OH * OW, np.nan, dt)
                    s = np.full(sl, np.nan, dt)
                    s[:O] = bias
                    _call_task(addr, Mx, out, s, mt)
                    res.append((out, s))
                for g, w_ in zip(*res):
                    _same_bits(g, w_, f"out task {(N, O, OH, OW, m, flags)}")


@pytest.mark.parametrize("iv", [np.int32, np.int64])
def test_same(iv):
    for n in (1, 7, 4096, 4097, 12289):
        a = RNG.integers(-2 ** 31, 2 ** 31 - 1, n).astype(iv)
        assert W._same(a, a.copy()) and W._same_nb(a, a.copy())
        for i in sorted({0, n // 2, n - 1, min(n - 1, 4096)}):
            b = a.copy()
            b[i] ^= iv(1) << iv(5)
            assert not W._same(a, b), (n, i)
            assert not W._same_nb(a, b)
    # float weights through _bits: -0.0 vs 0.0 and NaN payloads differ bitwise
    w = np.zeros(5000, np.float32)
    v = w.copy()
    v[4999] = -0.0
    assert W._same(W._bits(w), W._bits(w.copy())) and not W._same(W._bits(w), W._bits(v))


def test_bad_sizes_raise():
    m, C, H, W_ = 4, 2, 9, 9
    OH, OW, th, tw = _geo(H, W_, m, (1, 1, 1, 1))
    a2, NT = 36, th * tw
    x = np.zeros(C * H * W_, np.float32)
    xp = np.zeros((th * m + 2) * (tw * m + 2), np.float32)
    tmp = np.zeros(a2 * NT, np.float32)
    V = np.full(a2 * C * NT - 1, 7, np.float32)            # one element short
    with pytest.raises(IndexError, match="input_tiles"):
        W.input_tiles(x, V, xp, tmp, m, C, H, W_, 1, 1, 0, th, tw, NT, NT, 0, C)
    assert (V == 7).all()
    V = np.zeros(a2 * C * NT, np.float32)
    with pytest.raises(IndexError, match="input_tiles"):
        W.input_tiles(x[:-1], V, xp, tmp, m, C, H, W_, 1, 1, 0, th, tw, NT, NT, 0, C)
    with pytest.raises(ValueError, match="input_tiles"):
        W.input_tiles(x, V, xp, tmp, m, C, H, W_, -1, 1, 0, th, tw, NT, NT, 0, C)
    M = np.zeros(a2 * C * NT, np.float32)
    out = np.full(C * OH * OW - 1, 7, np.float32)
    t2 = np.zeros(m * (m + 2) * NT, np.float32)
    b = np.zeros(C, np.float32)
    with pytest.raises(IndexError, match="output_tiles"):
        W.output_tiles(M, out, t2, b, True, m, C, C, 0, OH, OW, 0, th, tw, NT, NT, 0, C)
    assert (out == 7).all()
    out = np.zeros(C * OH * OW, np.float32)
    with pytest.raises(IndexError, match="output_tiles"):
        W.output_tiles(M, out, t2, b[:1], True, m, C, C, 0, OH, OW, 0, th, tw, NT, NT, 0, C)
    with pytest.raises(ValueError, match="output_tiles"):
        W.output_tiles(M, out, t2, b, True, m, C, C, 1, OH, OW, 0, th, tw, NT, NT, 0, C)


def test_switch_off_runs_numba(monkeypatch):
    calls = []
    orig = W.input_tiles_nb
    monkeypatch.setattr(W, "input_tiles_nb", lambda *a: calls.append(1) or orig(*a))
    args = (3, 2, 6, 6, 1, 1, 0, 3, 3, 9, 9, 0, 3, 16 * 3 * 9)
    x = _data(3 * 6 * 6, np.float32)
    on = _run_in(W.input_tiles, x, 2, *args[1:])
    assert calls == []
    _ir_off(monkeypatch)
    off = _run_in(W.input_tiles, x, 2, *args[1:])
    assert calls == [1]
    for g, w_ in zip(on, off):
        _same_bits(g, w_, "switch")


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("dt", DTS)
def test_conv_same_bits_switch_on_off(monkeypatch, m, nt, dt):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(K, "_WINO_FORCE", [str(m)])
    monkeypatch.setattr(K.conv_direct, "MODE", ["0"])
    monkeypatch.setattr(K, "_PAR_FLOPS", 0)               # split over the threads (native tasks at 2)
    tasks = []
    orig = W.task_addr
    monkeypatch.setattr(W, "task_addr", lambda ph, d: tasks.append((ph, W.MODE[0])) or orig(ph, d))
    old = threads.get_num_threads()
    threads.set_num_threads(nt)
    try:
        for xs, o, pads, relu in (((1, 5, 17, 23), 6, (1, 1, 1, 1), True), ((2, 3, 9, 8), 4, (0, 2, 1, 0), False),
                                  ((1, 16, 14, 14), 24, (1, 1, 1, 1), True)):
            x = RNG.standard_normal(xs).astype(dt)
            w = (RNG.standard_normal((o, xs[1], 3, 3)) / 9).astype(dt)
            b = RNG.standard_normal(o).astype(dt)
            OH, OW = xs[2] + pads[0] + pads[1] - 2, xs[3] + pads[2] + pads[3] - 2
            attrs = {"stride": (1, 1), "padding": pads, "dilation": (1, 1), "groups": 1}
            got = []
            for mode in ("1", "0"):
                monkeypatch.setattr(W, "MODE", [mode])
                K._wino_jobs.clear()                       # (the task addresses are cached in the jobs)
                out = np.full((xs[0], o, OH, OW), np.nan, dt)
                K.conv2d_into(out, [x, w, b], attrs, None, None, relu)
                got.append(out)
            _same_bits(got[0], got[1], f"conv2d {(xs, o, pads, m, nt)}")
            t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
            ref = torch.nn.functional.conv2d(t(np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]))), t(w), t(b)).numpy()
            ref = np.maximum(ref, 0) if relu else ref
            tol = (1e-4 if dt == np.float32 else 1e-11) * np.abs(ref).max()
            np.testing.assert_allclose(got[0], ref, rtol=0, atol=tol)
        # two threads: the native tasks ran, IR and Numba ones (one thread: the direct kernels only)
        assert sorted(set(tasks)) == ([] if nt == 1 else [("in", "0"), ("in", "1"), ("out", "0"), ("out", "1")])
    finally:
        threads.set_num_threads(old)
        K._wino_jobs.clear()
