"""Round 3 of the differential fuzzing against PyTorch (the reference, tests only; ``tests/torch_check.py``):
integer convolution / pooling and the other dtype rules round 2 left open, then seeded sweeps over reductions,
binary-op dtype promotion, integer division semantics, clamp, scans, indexing and views.  Where torch raises
neetorch must raise, where it returns the results must match in type, dtype, shape and values.

Integer convolution (every integer dtype; dilated: int64 only; transposed: int64 only), int64 average pooling
(truncating division), integer max pooling (exact int64, torch's indices; ``max_pool1d`` without indices refuses
integers like torch), bool ``unfold`` / ``fold``, and the refusals: integer nearest interpolation, bool reflect /
replicate padding, ``F.batch_norm(momentum=None)``, a bare-int ``normalized_shape``, ``roll`` of a 0-d tensor
along a dim, an empty ``ctc_loss``.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check

check = make_check(torch, {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "other": 1e-12})
_rng = np.random.RandomState(3)


def _r(*shape, dt=np.float32):
    return np.asarray(_rng.randn(*shape)).astype(dt)


def _i(*shape, dt=np.int64, lo=-9, hi=10):
    return _rng.randint(lo, hi, size=shape).astype(dt)


def F(L):
    return L.nn.functional


# ------------------------------------------------------------------------------------------------ integer conv
@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_integer_conv(dt):
    big = {"lo": -100, "hi": 100} if dt != np.uint8 else {"lo": 0, "hi": 250}   # products wrap in int8 / uint8
    x1, w1, b1 = _i(2, 4, 9, dt=dt, **big), _i(6, 2, 3, dt=dt, **big), _i(6, dt=dt)
    check(lambda L, x, w, b: F(L).conv1d(x, w, b, stride=2, padding=1, groups=2), x1, w1, b1)
    check(lambda L, x, w: F(L).conv1d(x, w, padding="same"), x1[0], _i(3, 4, 4, dt=dt))
    x2, w2 = _i(2, 3, 7, 6, dt=dt, **big), _i(4, 3, 3, 2, dt=dt, **big)
    check(lambda L, x, w: F(L).conv2d(x, w, stride=(2, 1), padding=(1, 0)), x2, w2)
    check(lambda L, x, w: F(L).conv2d(x, w, dilation=(2, 1)), x2, w2)       # dilated: int64 only
    check(lambda L, x, w: F(L).conv3d(x, w, padding=1, stride=(1, 2, 1)), _i(1, 2, 4, 5, 3, dt=dt),
          _i(3, 2, 2, 3, 2, dt=dt))
    check(lambda L, x, w: F(L).conv3d(x, w, dilation=(2, 1, 1)), _i(1, 2, 5, 3, 3, dt=dt), _i(3, 2, 2, 2, 2, dt=dt))
    check(lambda L, x, w: F(L).conv_transpose1d(x, w, stride=2, padding=1, output_padding=1), _i(2, 4, 5, dt=dt),
          _i(4, 3, 3, dt=dt))                                                # transposed: int64 only
    check(lambda L, x, w, b: F(L).conv_transpose2d(x, w, b, stride=(2, 3), padding=(2, 0), output_padding=(1, 2),
                                                   groups=2, dilation=(1, 2)),
          _i(2, 4, 4, 3, dt=dt), _i(4, 3, 3, 2, dt=dt), _i(6, dt=dt))
    check(lambda L, x, w: F(L).conv_transpose3d(x, w, stride=2, padding=(1, 0, 1)), _i(1, 2, 3, 2, 3, dt=dt),
          _i(2, 2, 2, 3, 2, dt=dt))


def test_integer_conv_wraps_like_torch():
    x = np.array([[[2 ** 62, 2 ** 62, 3]]], np.int64)
    check(lambda L, x, w, b: F(L).conv1d(x, w, b), x, np.array([[[3, 1]]], np.int64), np.array([5], np.int64))
    check(lambda L, x, w: F(L).conv2d(x, w), _i(1, 1, 3, 3, dt=np.bool_, lo=0, hi=2),
          _i(1, 1, 2, 2, dt=np.bool_, lo=0, hi=2))                           # bool: refused


# ------------------------------------------------------------------------------------------------ integer pools
@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.int64])
def test_integer_max_pool(dt):
    lo, hi = (int(np.iinfo(dt).min), int(np.iinfo(dt).max) + 1) if dt != np.int64 else (-2 ** 62, 2 ** 62)
    x = _rng.randint(lo, hi, size=(2, 3, 7, 8), dtype=np.int64).astype(dt)
    x[0, 0, :3, :3] = np.iinfo(dt).min                                       # a window of minima next to padding
    x[1, 1] = 5                                                               # ties: the first in scan order
    for ks, st, pad, dil, ceil in [(2, None, 0, 1, False), (3, 2, 1, 1, True), ((3, 2), (2, 1), (1, 0), (1, 2), False),
                                   (3, 2, 1, 2, True)]:
        for ri in (False, True):
            check(lambda L, x: F(L).max_pool2d(x, ks, st, pad, dil, ceil, ri), x)
            check(lambda L, x: F(L).max_pool1d(x, ks if isinstance(ks, int) else 3, st if isinstance(st, int) else 2,
                                               1, 1, ceil, ri), x[0])
    x5 = x[:, :, :6].reshape(2, 3, 4, 3, 4).copy()
    for ri in (False, True):
        check(lambda L, x: F(L).max_pool3d(x, 2, 1, (1, 0, 1), 1, True, ri), x5)
        check(lambda L, x: F(L).max_pool3d(x, (2, 3, 2), 2, 1, (1, 1, 2), False, ri), x5)
        check(lambda L, x: F(L).max_pool2d(x, 2, return_indices=ri), x5[0, 0])   # unbatched
    check(lambda L, x: F(L).max_pool2d(x, 2), x.astype(np.bool_))             # bool: refused
    check(lambda L, x: F(L).adaptive_max_pool2d(x, 2), x)                     # refused


@pytest.mark.parametrize("dt", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_avg_pool(dt):
    x = _i(2, 3, 7, 6, dt=dt, lo=-50 if dt != np.uint8 else 0, hi=50)
    for ks, st, pad, ceil, cip, dv in [(2, None, 0, False, True, None), (3, 2, 1, True, True, None),
                                       (3, 2, 1, True, False, None), ((3, 2), (2, 1), (1, 0), False, True, 5),
                                       (3, 2, 1, False, False, -2)]:
        check(lambda L, x: F(L).avg_pool2d(x, ks, st, pad, ceil, cip, dv), x)
        check(lambda L, x: F(L).avg_pool1d(x, 3, 2, 1, ceil, cip), x[0])
        check(lambda L, x: F(L).avg_pool3d(x, 2, (1, 2, 1), 1, ceil, cip, dv), x[:, :, None].repeat(3, 2))
    check(lambda L, x: F(L).adaptive_avg_pool2d(x, 2), x)                     # refused


def test_bool_unfold_fold():
    for dt in (np.bool_, np.int64):                                          # integer im2col / col2im: refused
        x = _i(2, 3, 5, 4, dt=dt, lo=0, hi=2)
        check(lambda L, x: F(L).unfold(x, (2, 3), dilation=(1, 2)[::-1], padding=1, stride=(2, 1)), x)
        check(lambda L, x: F(L).unfold(x, 2), x[0])
        c = _i(2, 3 * 4, 16, dt=dt, lo=0, hi=2)
        check(lambda L, c: F(L).fold(c, (5, 5), 2, stride=1), c)
        check(lambda L, c: F(L).fold(c, (4, 4), 2, stride=1, padding=(1, 0), dilation=(1, 2)), c[:, :, :10])


# ------------------------------------------------------------------------------------------------ refusals
def test_integer_nearest_interpolate_refused():
    for dt, shape in itertools.product([np.int64, np.int32, np.int8, np.bool_, np.uint8],
                                       [(1, 2, 4), (1, 2, 4, 3), (1, 2, 3, 4, 2)]):
        x = _i(*shape, dt=dt, lo=0, hi=2)
        for mode in ("nearest", "nearest-exact"):
            check(lambda L, x: F(L).interpolate(x, scale_factor=2, mode=mode), x)


def test_batch_norm_momentum_none():
    x = _r(6, 3, 2)

    def f(L, x, functional):
        rm, rv = L.zeros(3), L.ones(3)
        if functional:
            return F(L).batch_norm(x, rm, rv, training=True, momentum=None)   # torch: a float only
        m = L.nn.BatchNorm1d(3, momentum=None)            # the module: a cumulative moving average
        for i in range(3):
            m(x * (i + 1) + i)
        m.eval()
        return m(x).detach(), m.running_mean, m.running_var, m.num_batches_tracked
    check(f, x, True)
    check(f, x, False)
    check(lambda L, x: F(L).batch_norm(x, L.zeros(3), L.ones(3), momentum=None), x)
    check(lambda L, x: F(L).instance_norm(x, momentum=None), x)


def test_normalized_shape_is_a_sequence():
    x = _r(4, 3)
    for ns in [3, [3], (3,), 3.0, (3.0,), (True,), (np.int64(3),)]:
        check(lambda L, x: F(L).layer_norm(x, ns), x)
        check(lambda L, x: F(L).rms_norm(x, ns), x)
    check(lambda L, x: F(L).layer_norm(x, L.tensor([3])), x)
    check(lambda L, x: F(L).layer_norm(x, (L.tensor(3),)), x)
    check(lambda L, x: L.nn.LayerNorm(3)(x).detach(), x)
    check(lambda L, x: L.nn.RMSNorm(np.int64(3))(x).detach(), x)


def test_bool_reflect_replicate_pad_refused():
    for mode, (nd, p) in itertools.product(["reflect", "replicate", "circular", "constant"],
                                           [(3, (1, 1)), (4, (1, 0, 0, 1)), (5, (1,) * 6), (3, (0, 0)), (3, (-1, 0))]):
        x = _i(*((2,) * nd), dt=np.bool_, lo=0, hi=2)
        check(lambda L, x: F(L).pad(x, p, mode=mode), x)


def test_roll_zero_dim():
    x = np.array(3.5, np.float32)
    for shifts, dims in [(1, None), (1, 0), (1, -1), ((1,), (0,)), (2, ()), ((), ()), ((1, 2), ())]:
        check(lambda L, x: L.roll(x, shifts, dims) if dims is not None else L.roll(x, shifts), x)


def test_ctc_loss_empty_refused():
    def f(L, T, N, C, S, reduction="mean"):
        lp = L.zeros(T, N, C)
        return F(L).ctc_loss(lp, L.zeros(N, S, dtype=L.long) + 1, L.full((N,), T, dtype=L.long),
                             L.full((N,), S, dtype=L.long), reduction=reduction)
    for T, N, C, S in [(0, 2, 5, 0), (0, 2, 5, 1), (3, 0, 5, 1), (3, 2, 0, 1), (3, 2, 5, 0)]:
        for red in ("mean", "none"):
            check(f, T, N, C, S, red)


# ------------------------------------------------------------------------------------------------ new API
def test_ldl_factor_and_solve_match_lapack():
    # Bunch-Kaufman pivoting (LAPACK sytf2 / sytrs): pivots, LD and info bit-for-bit in pattern, values to rounding
    for n, trial in itertools.product([1, 2, 3, 5, 9], range(6)):
        A = _rng.randn(2, n, n)
        A = A + A.transpose(0, 2, 1)
        if trial % 3 == 0:
            A[:, range(n), range(n)] = 0                                      # forces 2x2 pivots
        elif trial % 3 == 1:
            A *= np.r_[1e-3, np.ones(n - 1)][None, :, None]
        check(lambda L, A: L.linalg.ldl_factor_ex(A), A, tol=1e-9)
        check(lambda L, A: L.linalg.ldl_factor_ex(A.float()), A, tol=2e-4)
        B = _rng.randn(2, n, 3)
        check(lambda L, A, B: L.linalg.ldl_solve(*L.linalg.ldl_factor(A), B), A, B, tol=1e-7)
    sing = np.zeros((3, 3))
    check(lambda L, A: L.linalg.ldl_factor_ex(A), sing)
    check(lambda L, A: L.linalg.ldl_factor(A), np.ones((3, 2)))
    check(lambda L, A: L.linalg.ldl_factor(A), np.ones((3, 3), np.int64))
    A = _r(4, 4, dt=np.float64)
    A = A + A.T
    check(lambda L, A, B: L.linalg.ldl_solve(*L.linalg.ldl_factor(A), B), A, _r(4, 2))           # dtype mismatch
    check(lambda L, A, B: L.linalg.ldl_solve(*L.linalg.ldl_factor(A), B), A, _r(4, dt=np.float64))
    check(lambda L, A: L.linalg.ldl_factor(A), np.zeros((2, 0, 0)))


def test_geqrf_orgqr_ormqr():
    for shape in [(6, 4), (4, 6), (2, 5, 5), (3, 1)]:
        A = _r(*shape, dt=np.float64)
        check(lambda L, A: L.geqrf(A), A, tol=1e-10)
        check(lambda L, A: A.geqrf(), A.astype(np.float32), tol=1e-5)
        check(lambda L, A: L.orgqr(*L.geqrf(A)), A, tol=1e-10) if shape[-2] >= shape[-1] else None
        m = shape[-2]
        for left, tr in itertools.product([True, False], [True, False]):
            C = _r(*(shape[:-2] + ((m, 3) if left else (3, m))), dt=np.float64)
            check(lambda L, A, C: L.ormqr(*L.geqrf(A), C, left=left, transpose=tr), A, C, tol=1e-10)
            check(lambda L, A, C: A.geqrf()[0].ormqr(A.geqrf()[1], C, left, tr), A, C, tol=1e-10)
    check(lambda L, A: L.geqrf(A), np.ones((3, 3), np.int64))
    check(lambda L, A: L.geqrf(A), np.ones(3))
    A = _r(5, 3, dt=np.float64)
    check(lambda L, A, C: L.ormqr(*L.geqrf(A), C), A, _r(4, 2, dt=np.float64))
    check(lambda L, A, C: L.ormqr(*L.geqrf(A), C), A, _r(5, 2))


def test_lowrank_svd_and_pca_properties():
    import neetorch as nee
    A = _r(3, 30, 4, dt=np.float64) @ _r(3, 4, 12, dt=np.float64)            # rank 4
    nee.manual_seed(5)
    U, S, V = nee.svd_lowrank(nee.tensor(A), q=6)
    assert tuple(U.shape) == (3, 30, 6) and tuple(S.shape) == (3, 6) and tuple(V.shape) == (3, 12, 6)
    rec = U.numpy() @ (S.numpy()[..., None] * V.numpy().swapaxes(-1, -2))
    np.testing.assert_allclose(rec, A, atol=1e-10)
    np.testing.assert_allclose(U.numpy().swapaxes(-1, -2) @ U.numpy(), np.broadcast_to(np.eye(6), (3, 6, 6)),
                               atol=1e-10)
    np.testing.assert_allclose(S.numpy()[:, :4], np.linalg.svd(A, compute_uv=False)[:, :4], rtol=1e-10)
    nee.manual_seed(5)
    assert np.array_equal(nee.svd_lowrank(nee.tensor(A), q=6)[0].numpy(), U.numpy())   # the global generator
    W = A[0].T                                                                # (12, 30): the transposed branch
    _, S2, _ = nee.svd_lowrank(nee.tensor(W), q=5, niter=1, M=nee.tensor(W).mean(-2, keepdim=True))
    _, tS2, _ = torch.svd_lowrank(torch.from_numpy(W), q=5, niter=1, M=torch.from_numpy(W).mean(-2, keepdim=True))
    np.testing.assert_allclose(S2.numpy()[:3], tS2.numpy()[:3], rtol=1e-8)
    _, S3, V3 = nee.pca_lowrank(nee.tensor(W))
    _, tS3, tV3 = torch.pca_lowrank(torch.from_numpy(W))
    np.testing.assert_allclose(S3.numpy()[:3], tS3.numpy()[:3], rtol=1e-8)
    np.testing.assert_allclose(np.abs(V3.numpy()[:, :3]), np.abs(tV3.numpy()[:, :3]), atol=1e-8)  # up to sign
    check(lambda L, W: L.pca_lowrank(W, q=20), W)                             # q > min(m, n): ValueError


def test_native_norms_conv_tbc_and_cells():
    x = _r(2, 3, 4)
    for dt in (np.float32, np.float64, np.float16):
        tol = 3e-3 if dt == np.float16 else None
        xx = x.astype(dt)
        check(lambda L, x: L.native_layer_norm(x, [4], None, None, 1e-5), xx, tol=tol)
        check(lambda L, x, g: L.native_layer_norm(x, [3, 4], g, g, 1e-5), xx, xx[0], tol=tol)
        for train in (True, False):
            check(lambda L, x: L.native_batch_norm(x, None, None, L.zeros(3, dtype=x.dtype),
                                                   L.ones(3, dtype=x.dtype), train, 0.1, 1e-5), xx, tol=tol)
        check(lambda L, x: L.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5), xx, tol=tol)
        check(lambda L, x: L.native_group_norm(x.reshape(2, 4, 3), None, None, 2, 4, 3, 2, 1e-5), xx, tol=tol)
    check(lambda L, x, w, b: L.conv_tbc(x, w, b, 1), _r(5, 2, 3), _r(3, 3, 4), _r(4))
    check(lambda L, x, w, b: L.conv_tbc(x, w, b), _r(5, 2, 3), _r(3, 3, 4), _r(3))
    h, c = _r(3, 4), _r(3, 4)
    for k, name in [(4, "lstm"), (3, "gru"), (1, "rnn_tanh"), (1, "rnn_relu")]:
        w = (_r(k * 4, 5), _r(k * 4, 4), _r(k * 4), _r(k * 4))
        hx = (lambda L, h, c: (h, c)) if name == "lstm" else (lambda L, h, c: h)
        check(lambda L, x, h, c, *w: getattr(L, name + "_cell")(x, hx(L, h, c), *w), _r(3, 5), h, c, *w)
        check(lambda L, x, h, c, *w: getattr(L, name + "_cell")(x, hx(L, h, c), *w), _r(3, 5), h, c, *w[:2])
    check(lambda L, x: L.native_dropout(x, 0.5, False), x)
    check(lambda L, x: L.native_channel_shuffle(x.reshape(1, 6, -1), 3), x)
    check(lambda L, x, w: L.convolution(x, w, None, [1, 2], [1, 0], [1, 1], False, [0, 0], 1), _r(1, 2, 5, 5),
          _r(3, 2, 2, 2))
    check(lambda L, x, w: L.convolution(x, w, None, [2], [1], [1], True, [1], 1), _r(1, 2, 5), _r(2, 3, 2))


def test_embedding_bag_aten_form():
    w = _r(10, 3)
    i = np.array([1, 2, 2, 5, 4, 3, 2, 9])
    for o, mode, pad, ilo in itertools.product([np.array([0, 4, 4, 8]), np.array([0, 0, 8])], (0, 1, 2), (None, 2),
                                               (False, True)):
        check(lambda L, w, i, o: L.embedding_bag(w, i, o, False, mode, False, None, ilo, pad), w, i, o)
    check(lambda L, w, i, o: L.embedding_bag(w, i, o, False, 0, False, L.ones(8), False, None), w, i, np.array([0, 3]))
    check(lambda L, w, i: L.embedding_bag(w, i, None), w, i)


def test_histogramdd_and_segment_reduce():
    x = _r(20, 2)
    x[3] = [0.5, 0.5]
    for bins, r, dens in itertools.product([3, [2, 4]], [None, [-1., 1., 0., 2.]], [False, True]):
        check(lambda L, x: L.histogramdd(x, bins=bins, range=r, density=dens), x)
        check(lambda L, x, w: L.histogramdd(x, bins=bins, range=r, density=dens, weight=w), x,
              _rng.rand(20).astype(np.float32))
    check(lambda L, x: L.histogramdd(x, bins=[L.tensor([-1., 0., 1.]), L.tensor([-2., 0., 0.5, 2.])]), x)
    check(lambda L, x: L.histogramdd(x.reshape(2, 10, 2).double(), bins=(2, 3)), x)
    check(lambda L, x: L.histogramdd(x[:, 0], bins=4), x)
    d = _r(6, 3)
    for red, init in itertools.product(["sum", "prod", "mean", "max", "min", "amax", "amin", "bad"], [None, 2.0]):
        check(lambda L, d: L.segment_reduce(d, red, lengths=L.tensor([2, 0, 3, 1]), initial=init), d)
        check(lambda L, d: L.segment_reduce(d, red, offsets=L.tensor([0, 2, 2, 5, 6]), initial=init), d)
        check(lambda L, d: L.segment_reduce(d, red, lengths=L.tensor([[1, 2], [3, 0], [0, 3], [2, 1], [1, 1],
                                                                      [3, 0]]), axis=1, initial=init), d)
        check(lambda L, d: L.segment_reduce(d[:, 0], red, lengths=L.tensor([2, 2]), initial=init, unsafe=True), d)
        check(lambda L, d: L.segment_reduce(d[:, 0], red, lengths=L.tensor([2, 2]), initial=init), d)
    check(lambda L, d: L.segment_reduce(d, "sum", lengths=L.tensor([-1, 7])), d)
    check(lambda L, d: L.segment_reduce(d, "sum"), d)
    check(lambda L, d: L.segment_reduce(d.long(), "sum", lengths=L.tensor([6])), d)


def test_nn_modules_crossmaplrn_nllloss2d_adaptive_softmax():
    import warnings

    import neetorch as nee
    for C, size in itertools.product((1, 2, 3, 5, 8), (1, 2, 3, 5, 6)):
        check(lambda L, x: L.nn.CrossMapLRN2d(size, 1e-2, 0.75, 1)(x), _r(2, C, 3, 2) * 3)
    check(lambda L, x: L.nn.CrossMapLRN2d(3)(x), _r(2, 3, 3))

    def nll2d(L, x, t):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = L.nn.NLLLoss2d(ignore_index=1)
        assert any(issubclass(i.category, FutureWarning) for i in w)
        return m(x, t)
    check(nll2d, _r(2, 4, 3, 3), _rng.randint(0, 4, (2, 3, 3)))
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 10, 15], div_value=2.0, head_bias=True).double()
    nm = nee.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 10, 15], div_value=2.0, head_bias=True, dtype=nee.float64)
    assert {k: tuple(v.shape) for k, v in tm.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in nm.state_dict().items()}
    nm.load_state_dict({k: nee.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})

    def m(L):
        return tm if L is torch else nm
    x, t = _r(7, 8, dt=np.float64), np.array([0, 3, 5, 19, 12, 4, 9])
    check(lambda L, x, t: tuple(v.detach() for v in m(L)(x, t)), x, t)
    check(lambda L, x, t: tuple(v.detach() for v in m(L)(x, t)), x[2], t[2])
    check(lambda L, x, t: tuple(v.detach() for v in m(L)(x, t)), x, t + 1)                 # 20: out of range
    check(lambda L, x: m(L).log_prob(x).detach(), x)
    check(lambda L, x: m(L).predict(x), x)
    with pytest.raises(ValueError):
        nee.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 4])


def test_dlpack_bfloat16_and_capsules():
    import neetorch as nee
    x = torch.randn(3, 4, dtype=torch.bfloat16)
    a = nee.from_dlpack(x)
    assert a.dtype is nee.bfloat16 and np.array_equal(a.float().numpy(), x.float().numpy())
    x[0, 0] = 7                                                   # zero-copy: shares the producer's memory
    assert float(a[0, 0]) == 7.0
    b = nee.tensor(x.t())                                         # a copy, through DLPack
    assert b.dtype is nee.bfloat16 and np.array_equal(b.float().numpy(), x.t().float().numpy())
    x[1, 1] = 9
    assert float(b[1, 1]) != 9.0
    for dt in (torch.float32, torch.int8, torch.bool, torch.bfloat16, torch.complex64):
        y = (torch.randn(3, 4) * 3).to(dt)
        c = nee.from_dlpack(torch.to_dlpack(y.t()))               # a bare capsule, strided
        assert np.array_equal(c.to(nee.complex128).numpy() if dt != torch.bfloat16 else c.float().numpy(),
                              y.t().to(torch.complex128).numpy() if dt != torch.bfloat16 else y.t().float().numpy())
    check(lambda L, x: L.from_dlpack(L.to_dlpack(x)), _r(2, 3))


def test_removed_and_deprecated_entry_points():
    A = _r(3, 3, dt=np.float64)
    for name in ("eig", "lstsq", "solve", "symeig", "matrix_rank"):
        check(lambda L, A: getattr(L, name)(A, A) if name in ("lstsq", "solve") else getattr(L, name)(A), A)
    check(lambda L, A: L.lu(A), A)
    check(lambda L, A: L.lu(A, get_infos=True), A)
    check(lambda L, A: A.lu(), A)
    check(lambda L, A: L.nuclear_norm(A), A)
    check(lambda L, A: L.nuclear_norm(A.reshape(1, 3, 3), (0, 2), True), A)
    check(lambda L, A: L.nuclear_norm(A.reshape(1, 3, 3)), A)
    check(lambda L, x, i, v: (L.index_put_(x, (i,), v, accumulate=True), x), _r(5), np.array([1, 1, -1]), _r(3))
    check(lambda L, x, m, v: (L.addmv_(x, m, v, beta=2, alpha=0.5), x), _r(3), _r(3, 2), _r(2))


# ------------------------------------------------------------------------------------------------ round-3 sweeps
# (seeded sweeps over reductions with dim tuples / keepdim / empty dims, binary-op promotion with 0-d tensors and
# Python scalars, integer division / remainder / shifts with negatives, clamp with tensor bounds and NaN, scans on
# empty and 0-d inputs, indexing and setitem, view write-through, out= and in-place overlap rules; what they found
# is pinned here)
def test_int_only_dim_arguments():
    a = _r(3, 4)
    for dims in [(0,), (1, 0), [0], ()]:
        check(lambda L, a: L.prod(a, dims), a)                                # torch: prod takes one int dim
        check(lambda L, a: L.aminmax(a, dim=dims), a)
    check(lambda L, a: L.prod(a, 1, keepdim=True), a)
    check(lambda L, a: L.aminmax(a, dim=-1), a)


def test_ldexp_zero_dim_exponent_precision():
    for da, db in itertools.product([np.float64, np.float32, np.float16, np.int64], [np.float16, np.float32,
                                                                                     np.float64]):
        a = _r(4, dt=da) if da != np.int64 else _i(4)
        check(lambda L, a, b: L.ldexp(a, b), a, np.array(0.7, db))
        check(lambda L, a, b: L.ldexp(a, b), a, np.array([0.7], db))


def test_complex_python_scalar_into_real_tensor():
    for v in (1 + 0j, 1 + 2j, -3j):
        check(lambda L, x: (x.__setitem__(0, v), x)[1], _r(3))
        check(lambda L, x: (x.__setitem__(slice(None), v), x)[1], _r(3))
        check(lambda L, x: (x.__setitem__(L.tensor([0]), v), x)[1], _r(3))
        check(lambda L, x: x.fill_(v), _r(3))
        check(lambda L, x: L.full((2,), v, dtype=L.float32), _r(3))
        check(lambda L, x: (x.__setitem__(0, v), x)[1], _i(3))


def test_out_argument_rules():
    import warnings as _w
    a, b = _r(3, 4), _r(3, 4)
    makers = {"right": lambda L: L.empty(3, 4), "empty": lambda L: L.empty(0), "wrong": lambda L: L.empty(2, 2),
              "f64": lambda L: L.empty(3, 4, dtype=L.float64), "i64": lambda L: L.empty(0, dtype=L.int64),
              "bool": lambda L: L.empty(3, 4, dtype=L.bool), "f16": lambda L: L.empty(0, dtype=L.float16),
              "0d": lambda L: L.empty(())}
    ops = {
        "add": lambda L, a, b, o: L.add(a, b, out=o), "exp": lambda L, a, b, o: L.exp(a, out=o),
        "neg": lambda L, a, b, o: L.neg(a, out=o), "abs": lambda L, a, b, o: L.abs(a, out=o),
        "round": lambda L, a, b, o: L.round(a, out=o), "where": lambda L, a, b, o: L.where(a > 0, a, b, out=o),
        "clamp": lambda L, a, b, o: L.clamp(a, -0.5, 0.5, out=o), "eq": lambda L, a, b, o: L.eq(a, b, out=o),
        "sum": lambda L, a, b, o: L.sum(a, 1, out=o), "mm": lambda L, a, b, o: L.mm(a, b.T, out=o),
        "cat": lambda L, a, b, o: L.cat([a, b], out=o), "cumsum": lambda L, a, b, o: L.cumsum(a, 1, out=o),
        "cumprod": lambda L, a, b, o: L.cumprod(a, 1, out=o), "var": lambda L, a, b, o: L.var(a, 1, out=o),
        "std": lambda L, a, b, o: L.std(a, 1, out=o), "logsumexp": lambda L, a, b, o: L.logsumexp(a, 1, out=o),
        "norm": lambda L, a, b, o: L.norm(a, dim=1, out=o), "amax": lambda L, a, b, o: L.amax(a, 1, out=o),
        "amin": lambda L, a, b, o: L.amin(a, (0, 1), out=o),
        "max": lambda L, a, b, o: L.max(a, 1, out=(o, L.empty(0, dtype=L.long))),
        "sort": lambda L, a, b, o: L.sort(a, out=(o, L.empty(0, dtype=L.long))),
        "masked_select": lambda L, a, b, o: L.masked_select(a, a > 0, out=o),
        "index_select": lambda L, a, b, o: L.index_select(a, 0, L.tensor([0, 2]), out=o),
        "gather": lambda L, a, b, o: L.gather(a, 1, L.tensor([[0], [1], [2]]), out=o),
        "argmax": lambda L, a, b, o: L.argmax(a, 1, out=o), "nonzero": lambda L, a, b, o: L.nonzero(a > 0, out=o),
        "zeros": lambda L, a, b, o: L.zeros(2, 3, out=o), "ones": lambda L, a, b, o: L.ones(4, out=o),
        "full": lambda L, a, b, o: L.full((2,), 3.0, out=o), "eye": lambda L, a, b, o: L.eye(3, out=o),
        "arange": lambda L, a, b, o: L.arange(5, out=o), "linspace": lambda L, a, b, o: L.linspace(0, 1, 5, out=o),
        "logspace": lambda L, a, b, o: L.logspace(0, 1, 3, out=o),
    }
    tol = {"exp": 2e-7, "var": None, "std": None, "logsumexp": 1e-7}
    for (name, f), (mname, mk) in itertools.product(ops.items(), makers.items()):
        def g(L, a, b):
            o = mk(L)
            with _w.catch_warnings(record=True) as w:
                _w.simplefilter("always")
                r = f(L, a, b, o)
            resized = any("resized" in str(i.message) for i in w)
            return (o, (r[0] if isinstance(r, tuple) else r) is o, resized)
        check(g, a, b, tol=tol.get(name) if mname == "f64" else None)


def test_partial_overlap_and_expanded_writes():
    x = _r(3, 4)
    check(lambda L, x: (x[1:].sub_(x[:-1]), x)[1], x)                       # partial overlap: refused
    check(lambda L, x: (x[1:].copy_(x[:-1]), x)[1], x)
    check(lambda L, x: (L.add(x[:, 1:], 1, out=x[:, :-1]), x)[1], x)        # not dense: allowed
    check(lambda L, x: (x.add_(x), x)[1], x)                                # the same memory: allowed
    check(lambda L, x: (x.t().add_(x), x)[1], x[:, :3].copy())
    check(lambda L, x: (x[:1].expand(3, 4).__setitem__(0, 1.0), x)[1], x)   # a row of an expanded view
    check(lambda L, x: (x[:1].expand(3, 4).__setitem__(slice(None), 1.0), x)[1], x)
    check(lambda L, x: x[:1].expand(3, 4).add_(1), x)


def test_aten_grid_sampler_affine_grid_and_embedding_renorm():
    x, g = _r(2, 3, 5, 6), (_rng.rand(2, 4, 3, 2) * 2.4 - 1.2).astype(np.float32)
    for m, p, ac in itertools.product((0, 1, 2), (0, 1, 2), (False, True)):
        check(lambda L, x, g: L.grid_sampler(x, g, m, p, ac), x, g)
    check(lambda L, x, g: L.grid_sampler_2d(x, g, 1, 2, True), x, g)
    check(lambda L, x, g: L.grid_sampler_3d(x, g, 0, 1, False), _r(1, 2, 3, 4, 5),
          (_rng.rand(1, 2, 2, 2, 3) * 2 - 1).astype(np.float32))
    th = _r(2, 2, 3)
    for ac in (False, True):
        check(lambda L, t: L.affine_grid_generator(t, [2, 3, 4, 5], ac), th)
    w = _r(6, 3) * 3
    check(lambda L, w: (L.embedding_renorm_(w, L.tensor([1, 2, 2, 5]), 1.5, 2.0), w)[1], w)
    check(lambda L, w: L.embedding_renorm_(w, L.tensor([0, 3]), 2.0, 1.0), w)


def test_linalg_and_special_out():
    import warnings as _w
    A = _r(3, 3)
    with _w.catch_warnings():
        _w.simplefilter("ignore")
        for o in (lambda L: L.empty(2, 2), lambda L: L.empty(0, dtype=L.float64), lambda L: L.empty(0)):
            check(lambda L, A: L.linalg.inv(A, out=o(L)), A)
            check(lambda L, A: L.special.erf(A, out=o(L)), A, tol=1e-6)      # (torch's float32 erf: 1 ulp)
            check(lambda L, A: L.linalg.vector_norm(A, out=o(L)), A)
            check(lambda L, A: L.linalg.det(A, out=o(L)), A)
            check(lambda L, A: L.linalg.solve(A, A, out=o(L)), A)
            check(lambda L, A: L.linalg.norm(A, out=o(L)), A)


def test_inplace_dtype_sweep_findings():
    # float16.copysign_(float64) aborted the process (an LLVM float64->float16 truncation without its runtime
    # symbol): in-place and out= ops now compute in the result dtype and cast into self, like torch
    for op in ("copysign_", "add_", "atan2_", "hypot_", "mul_"):
        check(lambda L, a, b: getattr(a, op)(b), _r(3, dt=np.float16), _r(3, dt=np.float64), tol=2e-3)
    check(lambda L, a: a.pow_(True), np.array([True, False]))
    check(lambda L, a: a.pow_(False), np.array([True, False]))
    for dt in (np.int8, np.uint8, np.int64):
        check(lambda L, a: a.pow_(300), _i(3, dt=dt, lo=0, hi=3))              # exponent must fit the dtype
        check(lambda L, a: L.pow(a, 2), _i(3, dt=dt, lo=0, hi=3))
    for dt in (np.float16, np.float32, np.float64):
        check(lambda L, a: a.lerp_(a * 2, 1e40), _r(3, dt=dt))                # weight must fit the compute float
        check(lambda L, a: a.lerp(a * 2, 0.25), _r(3, dt=dt))


def test_dim_checks_on_zero_dim_and_empty_inputs():
    x0 = np.array(1.5, np.float32)
    for d in (None, 0, -1):
        check(lambda L, x: L.repeat_interleave(x, 2, d), x0)             # a 0-d input takes no dim
    for shape, d in itertools.product([(0,), (2, 0, 3)], [-5, -1, 0, 4]):
        x = np.zeros(shape, np.float32)
        check(lambda L, x: L.roll(x, 1, d), x)                            # empty: torch looks at no dim
        check(lambda L, x: tuple(L.cummax(x, d)), x)
        check(lambda L, x: tuple(L.cummin(x, d)), x)
        check(lambda L, x: L.cumsum(x, d), x)


def test_tensor_of_one_element_tensors_promotes_like_scalars():
    def mk(L, spec):
        T = L.tensor
        return [
            [T(1.5), T(2)], [T(1, dtype=L.int32), T(2, dtype=L.int8)], [T(1.), 2.5], [T(1), 2.5],
            [T(1., dtype=L.float16), T(2.)], [T(1, dtype=L.int8), 3], [T(True), T(1, dtype=L.uint8)],
            [[T(1.5)], [T(2)]], [T([1.])], [T(2 ** 40), T(1., dtype=L.float64)],
        ][spec]
    for k in range(10):
        check(lambda L: L.tensor(mk(L, k)))
