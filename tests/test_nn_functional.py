"""neetorch.nn.functional vs torch.nn.functional: softmax, normalization, embedding, attention, dropout,
distances and losses (differential; odd shapes, non-contiguous inputs, -inf rows, every reduction)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from conftest import assert_close, noncontig

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = {"float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12), "float16": (2e-3, 2e-3)}


def rnd(*shape, dtype="float32", seed=0, scale=1.0):
    a = np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
    return nee.from_numpy(a.copy()), torch.from_numpy(a.copy())


def T(x):
    return torch.from_numpy(np.array(x.numpy(), copy=True))


def close(a, e, dtype="float32", **kw):
    r, at = TOL[dtype]
    kw.setdefault("rtol", r)
    kw.setdefault("atol", at)
    assert_close(a, e, **kw)


# ---------------------------------------------------------------- softmax
SHAPES = [(7,), (3, 5), (2, 3, 4), (4, 1, 6), (3, 0)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_every_dim(shape, dtype):
    x, t = rnd(*shape, dtype=dtype, scale=3)
    for d in range(-len(shape), len(shape)):
        close(F.softmax(x, d), torch.softmax(t, d), dtype)
        close(F.log_softmax(x, d), torch.log_softmax(t, d), dtype)
        close(x.softmax(d), torch.softmax(t, d), dtype)
        close(nee.log_softmax(x, d), torch.log_softmax(t, d), dtype)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_noncontiguous(dim):
    x, t = rnd(6, 9, scale=2)
    for name, xv in noncontig(x) + [("t", x.t()), ("expanded", x[:, :1].expand(6, 9) if hasattr(x, "__getitem__")
                                                     else x)]:
        tv = T(xv)
        close(F.softmax(xv, dim), torch.softmax(tv, dim), msg=name)
        close(F.log_softmax(xv, dim), torch.log_softmax(tv, dim), msg=name)
    x3, t3 = rnd(4, 5, 6)
    xp = x3.permute(2, 0, 1)
    for d in range(3):
        close(F.softmax(xp, d), torch.softmax(t3.permute(2, 0, 1), d))


def test_softmax_inf_rows():
    a = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    a[0, :] = -np.inf
    a[1, ::2] = -np.inf
    a[2, 3] = np.inf
    a[3, 1] = np.nan
    x, t = nee.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for d in (0, 1):
        close(F.softmax(x, d), torch.softmax(t, d))
        close(F.log_softmax(x, d), torch.log_softmax(t, d))


@pytest.mark.parametrize("shape,dim", [((130, 1024), -1), ((300, 257), 0), ((5, 300, 70), 1)])
def test_softmax_large_parallel(shape, dim):
    x, t = rnd(*shape, scale=4)
    close(F.softmax(x, dim), torch.softmax(t, dim), rtol=1e-5, atol=1e-7)
    close(F.log_softmax(x, dim), torch.log_softmax(t, dim), rtol=1e-5, atol=1e-5)
    x64, t64 = rnd(*shape, dtype="float64", scale=4)
    close(F.softmax(x64, dim), torch.softmax(t64, dim), "float64")


def test_softmax_dtype_and_half_and_errors():
    x, t = rnd(3, 7)
    close(F.softmax(x, -1, dtype=nee.float64), torch.softmax(t, -1, dtype=torch.float64), "float64")
    h, th = rnd(5, 11, dtype="float16")
    close(F.softmax(h, 1), torch.softmax(th.float(), 1).half(), "float16")
    close(F.log_softmax(h, 0), torch.log_softmax(th.float(), 0).half(), "float16")
    s, ts = rnd(dtype="float32")
    close(F.softmax(s, 0), torch.softmax(ts, 0))
    with pytest.raises(RuntimeError):
        nee.softmax(nee.arange(4), 0)
    with pytest.raises(IndexError):
        nee.softmax(x, 2)
    with pytest.warns(UserWarning):
        close(F.softmax(x), TF.softmax(t, 1))
    close(F.softmin(x, 1), TF.softmin(t, 1))


# ---------------------------------------------------------------- layer / rms / group / batch / instance norm
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,ns", [((4, 7), (7,)), ((2, 3, 5), (3, 5)), ((3, 1, 9), (9,)), ((300, 257), (257,))])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape, ns, affine, dtype):
    x, t = rnd(*shape, dtype=dtype, scale=3)
    x = x + 5.0
    t = t + 5.0
    w, tw = rnd(*ns, dtype=dtype, seed=2) if affine else (None, None)
    b, tb = rnd(*ns, dtype=dtype, seed=3) if affine else (None, None)
    close(F.layer_norm(x, ns, w, b, eps=1e-4), TF.layer_norm(t, ns, tw, tb, eps=1e-4), dtype)
    close(F.rms_norm(x, ns, w), TF.rms_norm(t, ns, tw), dtype)
    close(F.rms_norm(x, ns, w, eps=1e-3), TF.rms_norm(t, ns, tw, eps=1e-3), dtype)


def test_layer_norm_layouts_half_errors():
    x, t = rnd(6, 8, 5)
    w, tw = rnd(5, seed=4)
    for name, xv in noncontig(x):
        close(F.layer_norm(xv, (5,), w), TF.layer_norm(T(xv), (5,), tw), msg=name)
        close(F.layer_norm(xv, (8, 5)), TF.layer_norm(T(xv), (8, 5)), msg=name)
    close(F.layer_norm(x.permute(1, 0, 2), (5,)), TF.layer_norm(t.permute(1, 0, 2), (5,)))
    h, th = rnd(4, 16, dtype="float16")
    close(F.layer_norm(h, (16,)), TF.layer_norm(th.float(), (16,)).half(), "float16")
    close(F.rms_norm(h * 1e-3, (16,)), TF.rms_norm(th * 1e-3, (16,)), "float16")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x, (4,))
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x, (5,), nee.ones(4))
    const = nee.full((3, 6), 2.0)
    close(F.layer_norm(const, (6,)), TF.layer_norm(torch.full((3, 6), 2.0), (6,)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_group_and_instance_norm(dtype):
    x, t = rnd(3, 6, 5, 4, dtype=dtype, scale=2)
    w, tw = rnd(6, dtype=dtype, seed=5)
    b, tb = rnd(6, dtype=dtype, seed=6)
    for g in (1, 2, 3, 6):
        close(F.group_norm(x, g, w, b), TF.group_norm(t, g, tw, tb), dtype)
        close(F.group_norm(x, g), TF.group_norm(t, g), dtype)
    x3, t3 = rnd(2, 4, 7, dtype=dtype)
    close(F.group_norm(x3, 2), TF.group_norm(t3, 2), dtype)
    close(F.group_norm(x.permute(0, 1, 3, 2), 3, w, b), TF.group_norm(t.permute(0, 1, 3, 2), 3, tw, tb), dtype)
    with pytest.raises(RuntimeError, match="divisible"):
        F.group_norm(x, 4)
    close(F.instance_norm(x, weight=w, bias=b), TF.instance_norm(t, weight=tw, bias=tb), dtype)
    rm, rv = nee.zeros(6, dtype=dtype), nee.ones(6, dtype=dtype)
    trm, trv = torch.zeros(6, dtype=t.dtype), torch.ones(6, dtype=t.dtype)
    close(F.instance_norm(x, rm, rv, momentum=0.3), TF.instance_norm(t, trm, trv, momentum=0.3), dtype)
    close(rm, trm, dtype)
    close(rv, trv, dtype)
    close(F.instance_norm(x, rm, rv, use_input_stats=False), TF.instance_norm(t, trm, trv, use_input_stats=False),
          dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm(shape, dtype):
    x, t = rnd(*shape, dtype=dtype, scale=2)
    w, tw = rnd(3, dtype=dtype, seed=7)
    b, tb = rnd(3, dtype=dtype, seed=8)
    rm0 = np.array([0.5, -1.0, 2.0], dtype)
    rv0 = np.array([1.5, 0.25, 3.0], dtype)
    rm, rv = nee.from_numpy(rm0.copy()), nee.from_numpy(rv0.copy())
    trm, trv = torch.from_numpy(rm0.copy()), torch.from_numpy(rv0.copy())
    close(F.batch_norm(x, rm, rv, w, b), TF.batch_norm(t, trm, trv, tw, tb), dtype)
    close(F.batch_norm(x, rm, rv), TF.batch_norm(t, trm, trv), dtype)
    close(F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2, eps=1e-3),
          TF.batch_norm(t, trm, trv, tw, tb, training=True, momentum=0.2, eps=1e-3), dtype)
    close(rm, trm, dtype)
    close(rv, trv, dtype)
    close(F.batch_norm(x, None, None, training=True), TF.batch_norm(t, None, None, training=True), dtype)
    with pytest.raises(ValueError, match="more than 1 value"):
        F.batch_norm(x[:1, :, ...] if x.ndim > 2 and x.shape[2] == 1 else nee.randn(1, 3), None, None,
                     training=True)


# ---------------------------------------------------------------- embedding
def test_embedding():
    w, tw = rnd(10, 4)
    idx = np.array([[1, 0, 9], [3, 3, 2]], np.int64)
    close(F.embedding(nee.from_numpy(idx), w), TF.embedding(torch.from_numpy(idx), tw))
    close(F.embedding(nee.from_numpy(idx.astype(np.int32)), w, padding_idx=3),
          TF.embedding(torch.from_numpy(idx.astype(np.int32)), tw, padding_idx=3))
    close(F.embedding(nee.from_numpy(idx), w, padding_idx=-1), TF.embedding(torch.from_numpy(idx), tw, padding_idx=-1))
    for name, wv in noncontig(w):
        close(F.embedding(nee.from_numpy(idx), wv), TF.embedding(torch.from_numpy(idx), T(wv)), msg=name)
    close(F.embedding(nee.tensor(4), w), TF.embedding(torch.tensor(4), tw))
    close(nee.embedding(w, nee.from_numpy(idx)), torch.embedding(tw, torch.from_numpy(idx)))
    h, th = rnd(6, 3, dtype="float16")
    close(F.embedding(nee.tensor([5, 0]), h), TF.embedding(torch.tensor([5, 0]), th), "float16")
    big_w, big_tw = rnd(1000, 96)
    bi = np.random.default_rng(3).integers(0, 1000, size=(40, 50))
    close(F.embedding(nee.from_numpy(bi), big_w), TF.embedding(torch.from_numpy(bi), big_tw))


def test_embedding_errors_and_max_norm():
    w, tw = rnd(10, 4)
    with pytest.raises(IndexError, match=r"index out of range in self.*\b10\b.*10 rows"):
        F.embedding(nee.tensor([1, 10]), w)
    with pytest.raises(IndexError, match=r"-1"):
        F.embedding(nee.tensor([[-1]]), w)
    big = nee.from_numpy(np.random.default_rng(0).integers(0, 5, 100000))
    big._data[77777] = 1 << 40
    with pytest.raises(IndexError, match=str(1 << 40)):
        F.embedding(big, w)
    with pytest.raises(RuntimeError):
        F.embedding(nee.tensor([1.0]), w)
    with pytest.raises(AssertionError):
        F.embedding(nee.tensor([1]), w, padding_idx=10)
    w2, tw2 = rnd(10, 4, scale=3)
    i = np.array([1, 2, 2, 7])
    close(F.embedding(nee.from_numpy(i), w2, max_norm=1.5), TF.embedding(torch.from_numpy(i), tw2, max_norm=1.5))
    close(w2, tw2)


# ---------------------------------------------------------------- attention
def sdpa_pair(qs, ks, vs, dtype="float32", **kw):
    q, tq = rnd(*qs, dtype=dtype, seed=1)
    k, tk = rnd(*ks, dtype=dtype, seed=2)
    v, tv = rnd(*vs, dtype=dtype, seed=3)
    tkw = {kk: (T(vv) if isinstance(vv, nee.Tensor) else vv) for kk, vv in kw.items()}
    close(F.scaled_dot_product_attention(q, k, v, **kw), TF.scaled_dot_product_attention(tq, tk, tv, **tkw), dtype,
          rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sdpa_basic_causal(dtype):
    sdpa_pair((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dtype)
    sdpa_pair((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dtype, is_causal=True)
    sdpa_pair((2, 3, 7, 8), (2, 3, 4, 8), (2, 3, 4, 8), dtype, is_causal=True)
    sdpa_pair((4, 6, 8), (4, 6, 8), (4, 6, 8), dtype, scale=0.3)
    sdpa_pair((6, 8), (9, 8), (9, 3), dtype, is_causal=True)


def test_sdpa_masks_and_gqa():
    rng = np.random.default_rng(5)
    bm = rng.random((5, 7)) > 0.4
    bm[2, :] = False  # a fully masked row -> zeros like torch
    sdpa_pair((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), attn_mask=nee.from_numpy(bm))
    bm4 = rng.random((2, 1, 5, 7)) > 0.5
    sdpa_pair((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), attn_mask=nee.from_numpy(bm4))
    fm = rng.standard_normal((5, 7)).astype(np.float32)
    fm[1, :] = -np.inf
    fm[3, 2] = -np.inf
    sdpa_pair((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), attn_mask=nee.from_numpy(fm))
    sdpa_pair((1, 8, 5, 16), (1, 2, 6, 16), (1, 2, 6, 4), enable_gqa=True, is_causal=True)
    sdpa_pair((2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8), enable_gqa=True,
              attn_mask=nee.from_numpy(rng.random((5, 6)) > 0.3))
    q, _ = rnd(1, 2, 3, 4)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q, attn_mask=nee.ones(3, 3, dtype=nee.bool), is_causal=True)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert tuple(out.shape) == (1, 2, 3, 4)


# ---------------------------------------------------------------- dropout
def test_dropout():
    x = nee.ones(200, 300)
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x
    close(F.dropout(x, 1.0), torch.zeros(200, 300))
    nee.manual_seed(123)
    y = F.dropout(x, 0.25)
    a = y.numpy()
    frac = (a == 0).mean()
    assert abs(frac - 0.25) < 0.01
    np.testing.assert_allclose(a[a != 0], 1 / 0.75, rtol=1e-6)
    nee.manual_seed(123)
    np.testing.assert_array_equal(F.dropout(x, 0.25).numpy(), a)
    z = nee.ones(4, 5)
    r = F.dropout(z, 0.5, inplace=True)
    assert r is z and set(np.unique(z.numpy())) <= {0.0, 2.0}
    with pytest.raises(ValueError):
        F.dropout(x, 1.5)
    c = F.dropout2d(nee.ones(8, 16, 3, 3), 0.5).numpy()
    per_chan = c.reshape(8, 16, 9)
    assert np.all(per_chan.min(-1) == per_chan.max(-1))
    assert F.alpha_dropout(x, 0.2, training=False) is x
    assert tuple(F.alpha_dropout(x, 0.2, training=True).shape) == (200, 300)
    assert tuple(nee.dropout(x, 0.5, True).shape) == (200, 300)


# ---------------------------------------------------------------- distances / normalize / one_hot
def test_normalize_and_distances():
    x, t = rnd(4, 6, 5)
    for p in (2.0, 1.0, 3.0, math.inf):
        for d in (0, 1, -1):
            close(F.normalize(x, p=p, dim=d), TF.normalize(t, p=p, dim=d), rtol=1e-5, atol=1e-6)
    z = nee.zeros(2, 3)
    close(F.normalize(z), TF.normalize(torch.zeros(2, 3)))
    a, ta = rnd(5, 7, seed=1)
    b, tb = rnd(5, 7, seed=2)
    close(F.cosine_similarity(a, b), TF.cosine_similarity(ta, tb))
    close(F.cosine_similarity(a, b, dim=0), TF.cosine_similarity(ta, tb, dim=0))
    c, tc = rnd(1, 7, seed=3)
    close(F.cosine_similarity(a, c), TF.cosine_similarity(ta, tc))
    close(nee.cosine_similarity(a, b), torch.cosine_similarity(ta, tb))
    for p in (2.0, 1.0, 3.5):
        close(F.pairwise_distance(a, b, p=p), TF.pairwise_distance(ta, tb, p=p), rtol=1e-5, atol=1e-6)
    close(F.pairwise_distance(a, c, keepdim=True), TF.pairwise_distance(ta, tc, keepdim=True))


def test_one_hot():
    i = np.array([[0, 3], [2, 1]])
    assert_close(F.one_hot(nee.from_numpy(i)), TF.one_hot(torch.from_numpy(i)))
    assert_close(F.one_hot(nee.from_numpy(i), 6), TF.one_hot(torch.from_numpy(i), 6))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(nee.from_numpy(i), 3)
    with pytest.raises(RuntimeError, match="non-negative"):
        F.one_hot(nee.tensor([-1, 0]))


# ---------------------------------------------------------------- losses
RED = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", RED)
def test_cross_entropy_nll(reduction):
    rng = np.random.default_rng(0)
    x, t = rnd(6, 5, scale=2)
    tgt = rng.integers(0, 5, 6)
    tgt[2] = -100
    nt, tt = nee.from_numpy(tgt), torch.from_numpy(tgt)
    w, tw = nee.from_numpy(rng.random(5).astype(np.float32)), None
    tw = T(w)
    close(F.cross_entropy(x, nt, reduction=reduction), TF.cross_entropy(t, tt, reduction=reduction))
    close(F.cross_entropy(x, nt, weight=w, reduction=reduction), TF.cross_entropy(t, tt, weight=tw,
                                                                                  reduction=reduction))
    close(F.cross_entropy(x, nt, weight=w, reduction=reduction, label_smoothing=0.2),
          TF.cross_entropy(t, tt, weight=tw, reduction=reduction, label_smoothing=0.2))
    close(F.cross_entropy(x, nt, reduction=reduction, label_smoothing=0.1),
          TF.cross_entropy(t, tt, reduction=reduction, label_smoothing=0.1))
    tg0 = tgt.copy()
    tg0[tg0 == -100] = 1
    close(F.cross_entropy(x, nee.from_numpy(tg0), ignore_index=1, reduction=reduction),
          TF.cross_entropy(t, torch.from_numpy(tg0), ignore_index=1, reduction=reduction))
    lp = F.log_softmax(x, 1)
    close(F.nll_loss(lp, nt, reduction=reduction), TF.nll_loss(T(lp), tt, reduction=reduction))
    close(F.nll_loss(lp, nt, weight=w, reduction=reduction), TF.nll_loss(T(lp), tt, weight=tw, reduction=reduction))
    # spatial (N, C, d1, d2)
    x4, t4 = rnd(2, 4, 3, 5, seed=4)
    tg4 = rng.integers(0, 4, (2, 3, 5))
    close(F.cross_entropy(x4, nee.from_numpy(tg4), reduction=reduction, label_smoothing=0.05),
          TF.cross_entropy(t4, torch.from_numpy(tg4), reduction=reduction, label_smoothing=0.05))
    # class probabilities
    p = F.softmax(nee.randn(6, 5), 1)
    close(F.cross_entropy(x, p, reduction=reduction), TF.cross_entropy(t, T(p), reduction=reduction))
    close(F.cross_entropy(x, p, weight=w, reduction=reduction, label_smoothing=0.3),
          TF.cross_entropy(t, T(p), weight=tw, reduction=reduction, label_smoothing=0.3))
    p4 = F.softmax(nee.randn(2, 4, 3, 5), 1)
    close(F.cross_entropy(x4, p4, reduction=reduction), TF.cross_entropy(t4, T(p4), reduction=reduction))
    # unbatched
    x1, t1 = rnd(5, seed=9)
    close(F.cross_entropy(x1, nee.tensor(3), reduction=reduction), TF.cross_entropy(t1, torch.tensor(3),
                                                                                     reduction=reduction))


def test_loss_errors_and_legacy():
    x, t = rnd(3, 4)
    with pytest.raises(IndexError, match="target 4"):
        F.cross_entropy(x, nee.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match="batch_size"):
        F.cross_entropy(x, nee.tensor([0, 1]))
    with pytest.raises(ValueError, match="not a valid value"):
        F.mse_loss(x, x, reduction="avg")
    close(F.mse_loss(x, x * 2, size_average=False), TF.mse_loss(t, t * 2, size_average=False))
    close(F.l1_loss(x, x * 2, reduce=False), TF.l1_loss(t, t * 2, reduce=False))
    allign = nee.full((3,), -100, dtype=nee.int64)
    assert math.isnan(F.cross_entropy(x, allign).item())


@pytest.mark.parametrize("reduction", RED)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pointwise_losses(reduction, dtype):
    a, ta = rnd(4, 7, dtype=dtype, seed=1, scale=2)
    b, tb = rnd(4, 7, dtype=dtype, seed=2, scale=2)
    w, tw = rnd(7, dtype=dtype, seed=5)
    close(F.mse_loss(a, b, reduction=reduction), TF.mse_loss(ta, tb, reduction=reduction), dtype)
    close(F.l1_loss(a, b, reduction=reduction), TF.l1_loss(ta, tb, reduction=reduction), dtype)
    w2, tw2 = rnd(4, 7, dtype=dtype, seed=6)
    close(F.mse_loss(a, b, reduction=reduction, weight=w2.abs()),
          TF.mse_loss(ta, tb, reduction=reduction, weight=tw2.abs()), dtype)
    close(F.l1_loss(a, b, reduction=reduction, weight=w2.abs()),
          TF.l1_loss(ta, tb, reduction=reduction, weight=tw2.abs()), dtype)
    close(F.huber_loss(a, b, reduction=reduction, weight=w2.abs()),
          TF.huber_loss(ta, tb, reduction=reduction, weight=tw2.abs()), dtype)
    with pytest.raises(ValueError, match="same size"):
        F.mse_loss(a, b, weight=w)
    for beta in (1.0, 0.5, 0.0):
        close(F.smooth_l1_loss(a, b, reduction=reduction, beta=beta),
              TF.smooth_l1_loss(ta, tb, reduction=reduction, beta=beta), dtype)
    for delta in (1.0, 2.5):
        close(F.huber_loss(a, b, reduction=reduction, delta=delta),
              TF.huber_loss(ta, tb, reduction=reduction, delta=delta), dtype)
    p = F.sigmoid(a)
    y = (b > 0).to(a.dtype)
    close(F.binary_cross_entropy(p, y, reduction=reduction), TF.binary_cross_entropy(T(p), T(y), reduction=reduction),
          dtype, rtol=1e-5 if dtype == "float32" else 1e-10)
    close(F.binary_cross_entropy(p, y, weight=w.abs(), reduction=reduction),
          TF.binary_cross_entropy(T(p), T(y), weight=tw.abs(), reduction=reduction), dtype,
          rtol=1e-5 if dtype == "float32" else 1e-10)
    close(F.binary_cross_entropy_with_logits(a, y, reduction=reduction),
          TF.binary_cross_entropy_with_logits(ta, T(y), reduction=reduction), dtype)
    close(F.binary_cross_entropy_with_logits(a * 30, y, weight=w, pos_weight=w.abs() + 0.5, reduction=reduction),
          TF.binary_cross_entropy_with_logits(ta * 30, T(y), weight=tw, pos_weight=tw.abs() + 0.5,
                                              reduction=reduction), dtype)
    lp = F.log_softmax(a, 1)
    q = F.softmax(b, 1)
    for red in (reduction, "batchmean") if reduction == "sum" else (reduction,):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            close(F.kl_div(lp, q, reduction=red), TF.kl_div(T(lp), T(q), reduction=red), dtype)
            close(F.kl_div(lp, q.log(), reduction=red, log_target=True),
                  TF.kl_div(T(lp), T(q).log(), reduction=red, log_target=True), dtype)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(a, y)


# ---------------------------------------------------------------- the functional namespace
ACTS = [
    ("relu", {}), ("relu6", {}), ("leaky_relu", {"negative_slope": 0.2}), ("gelu", {}),
    ("gelu", {"approximate": "tanh"}), ("silu", {}), ("mish", {}), ("elu", {"alpha": 0.7}), ("celu", {"alpha": 1.3}),
    ("selu", {}), ("softplus", {"beta": 2.0, "threshold": 5.0}), ("softsign", {}), ("hardtanh", {"min_val": -0.5}),
    ("hardsigmoid", {}), ("hardswish", {}), ("sigmoid", {}), ("tanh", {}), ("logsigmoid", {}), ("tanhshrink", {}),
    ("threshold", {"threshold": 0.1, "value": -2.0}), ("glu", {"dim": 1}), ("hardshrink", {"lambd": 0.3}),
    ("softshrink", {"lambd": 0.3}), ("rrelu", {}),
]


@pytest.mark.parametrize("name,kw", ACTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ACTS)])
def test_activations(name, kw):
    x, t = rnd(3, 8, scale=3)
    close(getattr(F, name)(x, **kw), getattr(TF, name)(t, **kw), rtol=1e-5, atol=1e-6)
    code = getattr(getattr(TF, name), "__code__", None)
    if code is not None and "inplace" in code.co_varnames:
        y = x.clone()
        r = getattr(F, name)(y, inplace=True, **kw)
        assert r is y
        close(y, getattr(TF, name)(t, **kw), rtol=1e-5, atol=1e-6)


def test_prelu_and_inplace_underscore():
    x, t = rnd(2, 3, 4)
    w, tw = rnd(3, seed=4)
    close(F.prelu(x, w), TF.prelu(t, tw))
    close(F.prelu(x, nee.tensor([0.25])), TF.prelu(t, torch.tensor([0.25])))
    y = x.clone()
    F.relu_(y)
    close(y, TF.relu(t))
    y = x.clone()
    F.elu_(y)
    close(y, TF.elu(t), rtol=1e-5, atol=1e-6)


def test_lazy_reexports():
    for name in ("linear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d",
                 "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
                 "interpolate", "upsample", "unfold", "fold", "pad", "pixel_shuffle"):
        assert callable(getattr(F, name)), name
    with pytest.raises(AttributeError):
        F.no_such_function
    x, t = rnd(2, 5)
    w, tw = rnd(3, 5, seed=1)
    close(F.linear(x, w), TF.linear(t, tw), rtol=1e-5, atol=1e-6)
    close(F.pad(x, (1, 2)), TF.pad(t, (1, 2)))


@pytest.mark.parametrize("reduction", RED)
def test_composed_losses(reduction):
    a, ta = rnd(5, 6, seed=1)
    b, tb = rnd(5, 6, seed=2)
    c, tc = rnd(5, 6, seed=3)
    y = nee.from_numpy(np.sign(np.random.default_rng(4).standard_normal((5, 6))).astype(np.float32))
    ty = T(y)
    close(F.soft_margin_loss(a, y, reduction=reduction), TF.soft_margin_loss(ta, ty, reduction=reduction))
    close(F.margin_ranking_loss(a, b, y, margin=0.3, reduction=reduction),
          TF.margin_ranking_loss(ta, tb, ty, margin=0.3, reduction=reduction))
    close(F.hinge_embedding_loss(a, y, reduction=reduction), TF.hinge_embedding_loss(ta, ty, reduction=reduction))
    close(F.poisson_nll_loss(a, b.abs(), reduction=reduction), TF.poisson_nll_loss(ta, tb.abs(), reduction=reduction))
    close(F.poisson_nll_loss(a.abs(), b.abs() * 3, log_input=False, full=True, reduction=reduction),
          TF.poisson_nll_loss(ta.abs(), tb.abs() * 3, log_input=False, full=True, reduction=reduction))
    close(F.gaussian_nll_loss(a, b, c.abs(), reduction=reduction),
          TF.gaussian_nll_loss(ta, tb, tc.abs(), reduction=reduction))
    y1 = y.select(1, 0)
    close(F.cosine_embedding_loss(a, b, y1, margin=0.1, reduction=reduction),
          TF.cosine_embedding_loss(ta, tb, T(y1), margin=0.1, reduction=reduction), rtol=1e-5, atol=1e-6)
    close(F.triplet_margin_loss(a, b, c, reduction=reduction, swap=True),
          TF.triplet_margin_loss(ta, tb, tc, reduction=reduction, swap=True), rtol=1e-5, atol=1e-6)


def test_gumbel_softmax():
    nee.manual_seed(0)
    x = nee.randn(4, 5)
    s = F.gumbel_softmax(x, tau=0.5)
    np.testing.assert_allclose(s.numpy().sum(-1), 1, rtol=1e-5)
    h = F.gumbel_softmax(x, hard=True).numpy()
    assert set(np.unique(h)) <= {0.0, 1.0} and np.all(h.sum(-1) == 1)
