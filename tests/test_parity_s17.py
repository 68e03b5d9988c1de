"""Session 17 torch parity (helper 'parity'): differential tests against torch for F.linear with a 1-D weight and
a bias, float16 / bfloat16 rounding of logit / logsumexp / prod / std / scaled_dot_product_attention, and the
exception types torch raises for dtypes its kernels do not implement (NotImplementedError, a RuntimeError)."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as NF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

LOW = ["float16", "bfloat16"]


def _np(t):
    return t.float().numpy() if str(t.dtype).endswith(("float16", "bfloat16")) else t.numpy()


def _both(fn, *arrays, dtype=None):
    """fn(module, functional, *tensors) under torch and neetorch; the tensors cast to ``dtype``."""
    def mk(M, a):
        t = M.tensor(a)
        return t.to(getattr(M, dtype)) if dtype else t
    t = fn(torch, TF, *[mk(torch, a) for a in arrays])
    n = fn(nee, NF, *[mk(nee, a) for a in arrays])
    return t, n


def _assert_bitwise(t, n):
    assert str(t.dtype).split(".")[-1] == str(n.dtype).split(".")[-1]
    assert tuple(t.shape) == tuple(n.shape)
    a, b = _np(t), _np(n)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    assert same.all(), f"{(~same).sum()} of {a.size} differ; torch {a[~same][:5]} neetorch {b[~same][:5]}"


# ---------------------------------------------------------------- F.linear with a 1-D weight
@pytest.mark.parametrize("xs,bs", [((3, 4), None), ((3, 4), ()), ((3, 4), (1,)), ((4,), ()), ((4,), (1,)),
                                   ((2, 3, 4), ()), ((2, 3, 4), (1,)), ((2, 3, 4), (3,)), ((2, 3, 4), None)])
def test_linear_1d_weight_with_bias(xs, bs):
    rng = np.random.default_rng(0)
    x = rng.normal(size=xs).astype(np.float32)
    w = rng.normal(size=(4,)).astype(np.float32)
    b = None if bs is None else rng.normal(size=bs).astype(np.float32)

    def f(M, F):
        return F.linear(M.tensor(x), M.tensor(w), None if b is None else M.tensor(b))
    try:
        t = f(torch, TF)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="mat2 must be a matrix|does not broadcast"):
            f(nee, NF)
        return
    n = f(nee, NF)
    assert tuple(n.shape) == tuple(t.shape)
    np.testing.assert_allclose(n.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


def test_linear_1d_weight_noncontiguous_input_0d_bias():
    # torch's unfused path (matmul, then the bias added in place) takes a non-contiguous 3-D input
    x = np.random.default_rng(1).normal(size=(2, 4, 3)).astype(np.float32)
    t = TF.linear(torch.tensor(x).transpose(1, 2), torch.ones(4), torch.tensor(0.5))
    n = NF.linear(nee.tensor(x).transpose(1, 2), nee.ones((4,)), nee.tensor(0.5))
    np.testing.assert_allclose(n.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- float16 / bfloat16 rounding
@pytest.mark.parametrize("dt", LOW)
@pytest.mark.parametrize("eps", [None, 0.1, 0.02])
def test_logit_low_rounds_each_step(dt, eps):
    # torch's float16 / bfloat16 logit rounds 1 - x and x / (1 - x) to the input dtype (and eps, 1 - eps)
    x = np.random.default_rng(2).uniform(0.0, 1.0, 3000).astype(np.float32)
    t, n = _both(lambda M, F, a: M.logit(a, eps=eps), x, dtype=dt)
    _assert_bitwise(t, n)


@pytest.mark.parametrize("dt", LOW)
def test_logsumexp_low_composed_in_input_dtype(dt):
    x = np.random.default_rng(3).uniform(0.9, 1.1, (40, 100)).astype(np.float32)
    for dim in (0, 1, (0, 1)):
        t, n = _both(lambda M, F, a: M.logsumexp(a, dim), x, dtype=dt)
        _assert_bitwise(t, n)


@pytest.mark.parametrize("dt", LOW)
@pytest.mark.parametrize("shape", [(7,), (3, 70), (2, 3, 130), (200, 3), (4, 1, 64)])
def test_prod_low_accumulates_in_input_dtype(dt, shape):
    # torch multiplies float16 / bfloat16 in that dtype (every product rounded), in its vectorised order
    a = np.random.default_rng(4).uniform(0.85, 1.15, shape).astype(np.float32)
    T, N = torch.tensor(a).to(getattr(torch, dt)), nee.tensor(a).to(getattr(nee, dt))
    views = [lambda M: M]
    if len(shape) >= 2:
        views += [lambda M: M.transpose(0, -1), lambda M: M[..., ::2], lambda M: M[..., 1:]]
    for v in views:
        for dim in [None] + list(range(len(shape))):
            for kd in (False, True):
                t = v(T).prod() if dim is None else v(T).prod(dim, keepdim=kd)
                n = v(N).prod() if dim is None else v(N).prod(dim, keepdim=kd)
                _assert_bitwise(t, n)


@pytest.mark.parametrize("dt", LOW)
def test_std_low_sqrt_before_rounding(dt):
    x = np.random.default_rng(5).uniform(0.9, 1.1, (40, 100)).astype(np.float32)
    for dim in (0, 1):
        t, n = _both(lambda M, F, a: M.std(a, dim), x, dtype=dt)
        _assert_bitwise(t, n)
        t, n = _both(lambda M, F, a: M.std_mean(a, dim), x, dtype=dt)
        _assert_bitwise(t[0], n[0])
        _assert_bitwise(t[1], n[1])


@pytest.mark.parametrize("dt", LOW)
@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": 0.2}])
def test_sdpa_low_3d_in_float32(dt, kw):
    # torch's math path for 3-D float16 / bfloat16 attention computes in float32 and rounds the output once
    rng = np.random.default_rng(6)
    q = rng.normal(1, 0.5, (2, 7, 16)).astype(np.float32)
    k = rng.normal(1, 0.5, (2, 9, 16)).astype(np.float32)
    v = rng.normal(1, 0.5, (2, 9, 16)).astype(np.float32)
    t, n = _both(lambda M, F, a, b, c: F.scaled_dot_product_attention(a, b, c, **kw), q, k, v, dtype=dt)
    _assert_bitwise(t, n)


def test_sdpa_bf16_4d_flash_rounding():
    # torch's CPU flash kernel rounds the unnormalised probabilities to bfloat16 before the product with value;
    # its exp is an approximation, so a few outputs may still differ by an ulp
    rng = np.random.default_rng(7)
    q = rng.normal(1, 0.5, (2, 3, 7, 16)).astype(np.float32)
    k = rng.normal(1, 0.5, (2, 3, 9, 16)).astype(np.float32)
    v = rng.normal(1, 0.5, (2, 3, 9, 16)).astype(np.float32)
    t, n = _both(lambda M, F, a, b, c: F.scaled_dot_product_attention(a, b, c), q, k, v, dtype="bfloat16")
    a, b = _np(t), _np(n)
    assert (a != b).sum() <= a.size // 50, f"{(a != b).sum()} of {a.size} differ"
    np.testing.assert_allclose(b, a, rtol=1.6e-2, atol=1e-5)


# ---------------------------------------------------------------- NotImplementedError like torch's kernels
_X = np.arange(24).reshape(2, 3, 4) - 10


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda M, F, t: F.softmax(t, 1)),
    ("log_softmax", lambda M, F, t: F.log_softmax(t, 1)),
    ("layer_norm", lambda M, F, t: F.layer_norm(t, (4,))),
    ("group_norm", lambda M, F, t: F.group_norm(t, 1)),
    ("rms_norm", lambda M, F, t: F.rms_norm(t, (4,))),
    ("max_pool1d", lambda M, F, t: F.max_pool1d(t, 2)),
    ("adaptive_avg_pool1d", lambda M, F, t: F.adaptive_avg_pool1d(t, 2)),
    ("mse_loss", lambda M, F, t: F.mse_loss(t, t)),
    ("smooth_l1_loss", lambda M, F, t: F.smooth_l1_loss(t, t)),
    ("huber_loss", lambda M, F, t: F.huber_loss(t, t)),
    ("binary_cross_entropy", lambda M, F, t: F.binary_cross_entropy(t, t)),
    ("interpolate", lambda M, F, t: F.interpolate(t, scale_factor=2.0, mode="linear")),
    ("kthvalue_bool", lambda M, F, t: M.kthvalue(t.bool().flatten(), 1)),
    ("threshold_bool", lambda M, F, t: F.threshold(t.bool(), 0, 1)),
    ("clamp_bool", lambda M, F, t: M.clamp(t.bool(), True, False)),
    ("bincount_float", lambda M, F, t: M.bincount(t.flatten().abs().half())),
    ("cdist_half", lambda M, F, t: M.cdist(t[0].half(), t[1].half())),
    ("tril_indices_float", lambda M, F, t: M.tril_indices(3, 3, dtype=M.float32)),
])
def test_not_implemented_dtype_errors(name, fn):
    with pytest.raises(NotImplementedError):
        fn(torch, TF, torch.tensor(_X))
    with pytest.raises(NotImplementedError):
        fn(nee, NF, nee.tensor(_X))


def test_dropout_integer_training_refused():
    for M, F in ((torch, TF), (nee, NF)):
        with pytest.raises(RuntimeError, match="can't be cast"):
            F.dropout(M.tensor(_X), 0.5)
        assert F.dropout(M.tensor(_X), 0.5, training=False).dtype == M.int64
        assert (F.dropout(M.tensor(_X), 1.0) == 0).all()


# ---------------------------------------------------------------- F.pad with negative pads
@pytest.mark.parametrize("mode,shape,pads", [
    ("replicate", (1, 2, 3, 4), (0, 0, -3, 1)),     # torch pads the original, then crops: the last row
    ("replicate", (1, 2, 3, 4), (4, 0, -3, 0)),     # an empty dim of a 2-D pad is allowed
    ("reflect", (1, 2, 3, 4), (-3, 2, -2, -1)),
    ("circular", (2, 3, 5), (-6, 1)),               # crops past the input: empty
    ("circular", (2, 3, 5), (-1, 2)),
    ("circular", (1, 2, 4, 5), (-1, 2, 1, -2)),
    ("constant", (1, 2, 3, 4), (0, -3, 4, -4)),     # torch crops each side first: refused
    ("reflect", (2, 3, 5), (-5, 0)),                # 1-D reflection / replication pads need an output of >= 1
    ("replicate", (2, 3, 5), (-5, 0)),
    ("reflect", (1, 0, 4), (1, 1)),                 # a zero-size non-batch dim is refused
])
def test_pad_negative_and_empty_like_torch(mode, shape, pads):
    x = np.random.default_rng(8).normal(size=shape).astype(np.float32)
    try:
        t = TF.pad(torch.tensor(x), pads, mode=mode)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            NF.pad(nee.tensor(x), pads, mode=mode)
        return
    n = NF.pad(nee.tensor(x), pads, mode=mode)
    assert tuple(n.shape) == tuple(t.shape)
    np.testing.assert_array_equal(n.numpy(), t.numpy())
