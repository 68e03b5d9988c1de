"""Bound and chained conv steps (session 22): Winograd convs, the direct kernel's partial-sum launches, strided 1x1s.

A compiled graph's float32 Winograd conv (frozen weights: ONNX initializers, the JIT's frozen constants) is bound once
(kernels/conv.py ``_bind_winograd``: the transforms' jobs, their metas and the products' bound launch made once)
and chained (one call of the step chain); conv_direct's "chan" launches with several chunks of (channel, tap) (their
partial sums in a per-thread scratch) are replayed like the others (``_replay``).  Checked: the bound call gives
conv2d_into's bits (both thread counts, F(2) / F(4), batches, bias, a second bias, relu), an inf / NaN input falls
back to the other paths (torch's NaN locality), settings and weights changed give False, unfrozen weights are not
bound, and a compiled CNN's chain holds its Winograd steps and matches torch, its input rewritten between calls.
Strided unpadded 1x1s (ResNet's downsamples) that the direct kernel takes subsampled run on it strided (its fill
subsampling; conv.py's _strided_1x1 copied the input on the calling thread first): the copy path's bits, bound.
Products matmul_into runs on gemm_driver (2+ threads) are bound with its descriptor and chainable, its bits.
"""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import winograd
from neetorch.jit import executable as E

torch = pytest.importorskip("torch")
TF = torch.nn.functional

pytestmark = pytest.mark.skipif(not D.available(), reason="conv_direct's kernel needs AVX-512F or AVX2+FMA")
# (after available(): the kernels' width is fixed)
wino16 = pytest.mark.skipif(not (D.available() and K._products_direct()),
                            reason="Winograd's products on conv_direct's kernel: its 16-lane (AVX-512F) kernels only")

RNG = np.random.default_rng(22)



def _chained(monkeypatch, fn, shape):
    """(compiled fn (frozen constants), its input's array, the input, the step chain made from the third call)."""
    monkeypatch.setattr(E, "_CHAIN", [3])
    f = nee.jit(fn, freeze=True)
    xa = RNG.standard_normal(shape).astype(np.float32)
    x = nee.from_numpy(xa)
    for _ in range(4):
        f(x)
    ch = [e[0] for e in f._fast.values() if isinstance(e, tuple)][0]._local.chain
    assert isinstance(ch, E._Chain)
    return f, xa, x, ch


def _frozen(a):
    a = np.ascontiguousarray(a, np.float32)
    assert winograd.freeze(a)
    return a


def _attrs(p=1):
    return {"stride": (1, 1), "padding": (p, p, p, p), "dilation": (1, 1), "groups": 1}


def _ref(x, w, b, b2=None, relu=False, p=1):
    y = TF.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                  None if b is None else torch.from_numpy(b.astype(np.float64)), padding=p)
    if b2 is not None:
        y = y + torch.from_numpy(b2.astype(np.float64)).reshape(1, -1, 1, 1)
    return (TF.relu(y) if relu else y).numpy()


# (N, C, O, H, W, tile size): F(4) on 56x56 / 28x28 planes, F(2) on 14x14, odd sizes
SHAPES = [(1, 64, 64, 28, 28, "4"), (2, 24, 40, 17, 13, "4"), (1, 96, 80, 14, 14, "2"), (1, 48, 33, 11, 9, "2")]


@wino16
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("epi", ["", "b", "b2+relu", "b+b2+relu"])
def test_bound_winograd_gives_conv2d_intos_bits(monkeypatch, nthreads, shape, epi):
    N, C, O, H, W, m = shape
    monkeypatch.setattr(K, "_WINO_FORCE", [m])
    monkeypatch.setattr(D, "MODE", ["0"])          # (the 3x3 itself not on the direct kernel)
    x = RNG.standard_normal((N, C, H, W)).astype(np.float32)
    w = _frozen(RNG.standard_normal((O, C, 3, 3)) * 0.1)
    b = _frozen(RNG.standard_normal(O)) if "b" in epi.split("+") else None
    b2 = RNG.standard_normal(O).astype(np.float32) if "b2" in epi else None
    relu = "relu" in epi
    ins = [x, w] + ([b] if b is not None else [])
    out = np.full((N, O, H, W), np.nan, np.float32)
    f = K.bind_into(out, ins, _attrs(), b2, None, relu)
    assert f is not None, "the Winograd conv was not bound"
    want = np.full_like(out, np.nan)
    K.conv2d_into(want, ins, _attrs(), b2, None, relu)
    for _ in range(3):
        out[...] = np.nan
        assert f(out, ins, b2, None) is True
        np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(out, _ref(x, w, b, b2, relu), rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # the chain's form of the step: one call doing the same
    (fn, args, ctr), = f.calls(out, ins, b2, None)
    out[...] = np.nan
    fn(*args)
    np.testing.assert_array_equal(out, want)


@wino16
def test_bound_winograd_falls_back_on_inf_and_nan(monkeypatch, nthreads):
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    monkeypatch.setattr(D, "MODE", ["0"])
    x = RNG.standard_normal((1, 32, 20, 20)).astype(np.float32)
    w = _frozen(RNG.standard_normal((48, 32, 3, 3)) * 0.1)
    b = _frozen(RNG.standard_normal(48))
    out = np.zeros((1, 48, 20, 20), np.float32)
    f = K.bind_into(out, [x, w, b], _attrs(), None, None, True)
    assert f is not None
    x[0, 3, 5, 7], x[0, 9, 15, 2] = np.inf, np.nan
    assert f(out, [x, w, b], None, None) is False          # nothing done: the caller's conv2d_into follows
    (fn, args, _), = f.calls(out, [x, w, b], None, None)
    fn(*args)                                               # the chained step runs conv2d_into's other paths
    want = _ref(x, w, b, relu=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    fin = np.isfinite(want)
    assert not fin.all() and fin.sum() > 0.9 * fin.size     # (torch's locality: only the windows holding them)
    np.testing.assert_allclose(out[fin], want[fin], rtol=1e-4, atol=1e-4)
    x[...] = RNG.standard_normal(x.shape)
    assert f(out, [x, w, b], None, None) is True
    np.testing.assert_allclose(out, _ref(x, w, b, relu=True), rtol=1e-4, atol=1e-4)


@wino16
def test_bound_winograd_declines_what_changed(monkeypatch, nthreads):
    monkeypatch.setattr(K, "_WINO_FORCE", ["2"])
    monkeypatch.setattr(D, "MODE", ["0"])
    x = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w = _frozen(RNG.standard_normal((16, 16, 3, 3)))
    out = np.zeros((1, 16, 12, 12), np.float32)
    # weights that can change in place (not frozen): not bound (U would go stale)
    assert K.bind_into(out, [x, w.copy()], _attrs(), None, None, False) is None
    f = K.bind_into(out, [x, w], _attrs(), None, None, False)
    assert f is not None and f(out, [x, w], None, None)
    assert f(out, [x, _frozen(w.copy())], None, None) is False          # other weights
    assert f(out, [x, w], np.ones(16, np.float32), None) is False       # a second bias not bound
    assert f(out, [x, w], None, np.zeros_like(out)) is False            # a residual
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    assert f(out, [x, w], None, None) is False                          # a switch changed
    monkeypatch.setattr(K, "_WINO_FORCE", ["2"])
    threads.set_num_threads(3 - nthreads)
    try:
        assert f(out, [x, w], None, None) is False                      # the thread count changed
    finally:
        threads.set_num_threads(nthreads)
    assert f(out, [x, w], None, None) is True


def test_partial_sum_launches_are_replayed():
    """conv_direct's "chan" launch with several chunks of (channel, tap) (lay.multi; partial sums in the
    "direct_out" scratch) replays its native calls (the bound f's memo) and gives the launch's bits."""
    old = threads.NUM_THREADS
    threads.set_num_threads(2)
    try:
        x = RNG.standard_normal((1, 192, 7, 7)).astype(np.float32)
        w = _frozen(RNG.standard_normal((320, 192, 3, 3)) * 0.05)
        b = _frozen(RNG.standard_normal(320))
        lay, prep = D._setup(x, w, b, np.zeros((1, 320, 7, 7), np.float32), 1, 1, 1, 1, 1, 1, 1, 1, True, None, None)
        if not (lay.multi and not lay.direct_out):
            pytest.skip("this host's layout of the case has no partial sums")
        assert D._scratch_tags(lay)[-1] == "direct_out"
        want = np.zeros((1, 320, 7, 7), np.float32)
        assert D.conv2d(x, w, b, want, 1, 1, 1, 1, 1, 1, 1, 1, True)
        out = np.zeros_like(want)
        f = D.bind(x, w, b, out, 1, 1, 1, 1, 1, 1, 1, 1, True)
        for _ in range(3):
            out[...] = np.nan
            assert f(x, w, b, out, None, None)
            np.testing.assert_array_equal(out, want)
        calls = f.calls(x, w, b, out, None, None)
        assert calls, "the launch was not replayed"
        out[...] = np.nan
        for fn, args, (p, slot) in calls:
            p[slot] = 0
            fn(*args)
        np.testing.assert_array_equal(out, want)
        np.testing.assert_allclose(out, _ref(x, w, b, relu=True), rtol=1e-4, atol=1e-4)
    finally:
        threads.set_num_threads(old)


@wino16
def test_compiled_cnn_with_winograd_convs_is_one_chain(monkeypatch, nthreads):
    monkeypatch.setattr(K, "_WINO_FORCE", ["4"])
    Fn = nee.nn.functional
    w1 = nee.from_numpy(RNG.standard_normal((32, 8, 3, 3)).astype(np.float32) * 0.2)
    b1 = nee.from_numpy(RNG.standard_normal(32).astype(np.float32))
    w2 = nee.from_numpy(RNG.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1)

    def fn(x):
        y = Fn.relu(Fn.conv2d(x, w1, b1, padding=1))
        return Fn.relu(Fn.conv2d(y, w2, None, padding=1))
    f, xa, x, ch = _chained(monkeypatch, fn, (1, 8, 24, 24))
    # the first conv one call of a list; the second writes the returned output (new each call: _fresh_calls)
    assert any(getattr(c[0], "__qualname__", "").startswith("_bind_winograd") for p in ch.plan
               if isinstance(p, list) for c in p), ch.plan
    assert not any("_bound_runner" in getattr(p, "__qualname__", "") for p in ch.plan), ch.plan
    tw = [torch.from_numpy(t.numpy().astype(np.float64)) for t in (w1, b1, w2)]
    for k in range(3):
        xa[...] = RNG.standard_normal(xa.shape)
        if k == 1:
            xa[0, 2, 4, 4] = np.nan
        got = f(x).numpy()
        y = TF.relu(TF.conv2d(torch.from_numpy(xa.astype(np.float64)), tw[0], tw[1], padding=1))
        want = TF.relu(TF.conv2d(y, tw[2], None, padding=1)).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4 * np.abs(want[fin]).max())


@pytest.mark.parametrize("shape", [(1, 64, 96, 20, 20), (2, 48, 40, 13, 11), (1, 128, 160, 14, 14)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("res", [False, True])
def test_strided_1x1_on_the_direct_kernel(monkeypatch, nthreads, shape, res):
    """ResNet's downsamples (unpadded 1x1, stride 2): where the direct kernel takes the subsampled stride-1 conv,
    it runs the strided one itself (no copy on the calling thread), bound like any direct conv, with the copy's
    bits."""
    N, C, O, H, W = shape
    monkeypatch.setattr(D, "MODE", ["1"])          # (the direct kernel for the subsampled conv, whatever the rule)
    monkeypatch.setattr(D, "_pk1x1_takes", lambda *a, **k: False)
    x = RNG.standard_normal((N, C, H, W)).astype(np.float32)
    w = _frozen(RNG.standard_normal((O, C, 1, 1)) * 0.1)
    b = _frozen(RNG.standard_normal(O))
    OH, OW = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    e = RNG.standard_normal((N, O, OH, OW)).astype(np.float32) if res else None
    attrs = {"stride": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
    assert D.route(x, w, np.zeros((N, O, OH, OW), np.float32), attrs, True) == "direct"
    want = np.full((N, O, OH, OW), np.nan, np.float32)
    K.conv2d_into(want, [x, w, b], attrs, None, e, True)
    # the copy path's bits: the subsampled input's stride-1 conv
    xs = np.ascontiguousarray(x[:, :, ::2, ::2])
    sub = np.full_like(want, np.nan)
    K.conv2d_into(sub, [xs, w, b], dict(attrs, stride=(1, 1)), None, e, True)
    np.testing.assert_array_equal(want, sub)
    ref = TF.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                    torch.from_numpy(b.astype(np.float64)), stride=2)
    if res:
        ref = ref + torch.from_numpy(e.astype(np.float64))
    np.testing.assert_allclose(want, TF.relu(ref).numpy(), rtol=1e-4, atol=1e-4)
    out = np.full_like(want, np.nan)
    f = K.bind_into(out, [x, w, b], attrs, None, e, True)
    assert f is not None and f(out, [x, w, b], None, e)
    np.testing.assert_array_equal(out, want)
    calls = f.calls(out, [x, w, b], None, e)
    assert calls                                    # (replayed: chainable)


@pytest.mark.parametrize("shape", [((1, 12, 128, 128), (1, 12, 128, 32), True), ((3, 96, 80), (80, 112), False),
                                   ((200, 300), (300, 72), False)], ids=["heads_pv", "batched", "plain"])
def test_products_on_the_gemm_driver_are_bound(shape):
    """A compiled graph's matmul that matmul_into runs through gemm_driver (2+ threads, large enough; BERT's
    attention p @ v on a permuted v) is bound (fused.bind_kernel: the driver's descriptor looked up once) and its
    call chainable, with matmul_into's bits."""
    from neetorch.devices.cpu import gemm_driver
    from neetorch.devices.cpu.kernels import fused
    from neetorch.devices.cpu.kernels import linalg as L
    from neetorch.ops.registry import OPS
    if not gemm_driver.available():
        pytest.skip("no gemm_driver on this host")
    old = threads.NUM_THREADS
    threads.set_num_threads(2)
    try:
        sa, sb, permuted = shape
        a = RNG.standard_normal(sa).astype(np.float32)
        if permuted:      # (v as attention reads it: (B, S, H, dh) transposed to (B, H, S, dh))
            b = np.ascontiguousarray(RNG.standard_normal((sb[0], sb[2], sb[1], sb[3])).astype(np.float32)) \
                .transpose(0, 2, 1, 3)
        else:
            b = RNG.standard_normal(sb).astype(np.float32)
        out = np.full(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), np.nan, np.float32)
        want = np.full_like(out, np.nan)
        L.matmul_into(want, a, b)
        np.testing.assert_allclose(want, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-4)
        assert L._drv_desc(out, a, b) is not None, "matmul_into does not take the driver here"
        f = fused.bind_kernel(OPS["matmul"], [out], [a, b])
        assert f is not None and f([out], [a, b]) is True
        np.testing.assert_array_equal(out, want)
        (fn, args, ctr), = f.calls([out], [a, b])
        out[...] = np.nan
        fn(*args)
        np.testing.assert_array_equal(out, want)
        threads.set_num_threads(1)
        assert f([out], [a, b]) is False                    # the thread count changed
        assert L._drv_caller(out, a, b) is None            # (one thread: not the driver's)
    finally:
        threads.set_num_threads(old)


@pytest.mark.parametrize("K", [1024, 1536])
def test_packed_products_with_padded_rows_are_chainable(nthreads, K):
    """linalg's packed product copies rows 2 KiB apart (K a multiple of 512) to a padded-stride scratch first
    (numpy's copy); that copy is now a call of the chain too, so such products (BERT's FFN-down with its residual +
    norm, the MLP's 1024 x 1024 linear) are chained: the calls give the bound call's bits."""
    from neetorch.devices.cpu.kernels import linalg as L
    a = RNG.standard_normal((64, K)).astype(np.float32)
    w = _frozen(RNG.standard_normal((K, 256)) * 0.05)
    out = np.full((64, 256), np.nan, np.float32)
    g = L._pk_caller(out, a, w)
    if g is None:
        pytest.skip("the packed kernel does not take this product on this host")
    g(out, a, w)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w.astype(np.float64), rtol=1e-4, atol=1e-4)
    want = out.copy()
    calls = g.calls(out, a, w)
    assert calls and calls[0][0] is np.copyto       # (64 rows 4 / 6 KiB apart: padded)
    a[...] = RNG.standard_normal(a.shape)          # (the chain reads a's new values: the copy is in it)
    g(want, a, w)
    out[...] = np.nan
    for fn, args, ctr in calls:
        fn(*args)
    np.testing.assert_array_equal(out, want)


def test_compiled_linear_with_padded_rows_is_chained(monkeypatch, nthreads):
    Fn = nee.nn.functional
    W = nee.from_numpy(RNG.standard_normal((1024, 512)).astype(np.float32) * 0.03)
    b = nee.from_numpy(RNG.standard_normal(512).astype(np.float32))
    W2 = nee.from_numpy(RNG.standard_normal((512, 64)).astype(np.float32) * 0.05)

    def fn(x):
        return Fn.relu(x @ W + b) @ W2
    f, xa, x, ch = _chained(monkeypatch, fn, (64, 1024))
    if nthreads == 2:     # (one thread: the product + epilogue take another bound path)
        assert any(c[0] is np.copyto for p in ch.plan if isinstance(p, list) for c in p), ch.plan
    for _ in range(3):
        xa[...] = RNG.standard_normal(xa.shape)
        got = f(x).numpy()
        ref = np.maximum(xa.astype(np.float64) @ W.numpy().astype(np.float64) + b.numpy(), 0) @ W2.numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
