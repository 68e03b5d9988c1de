"""Round 2 of the differential fuzzing against PyTorch (the reference, tests only): ``nn.functional``, the
``nn`` modules, ``linalg`` and the sorting / scanning / scattering tensor ops.  Each case runs ``f(L, *arrays)``
with ``L = torch`` and ``L = neetorch`` on the same numpy inputs (``tests/torch_check.py``): where torch raises
neetorch must raise, where it returns the results must match in type, dtype, shape and values.

Covered: ``grid_sample(mode='bicubic')`` (padding applied per tap) and NaN / inf grids, ``interpolate``
(``antialias=True``, bit-exact uint8 bilinear / bicubic, 1-D / 3-D nearest scale factors), ``avg_pool3d``'s
input-smaller-than-kernel check, integer ``max_pool``, ``take_along_dim`` negative indices, ``einsum``'s sublist
format, loss target / integer dtype rules, ``torch.norm(p='nuc')`` and ``matrix_norm``'s dim checks,
``linalg.vander``, ``searchsorted`` on a sequence ending in NaN, float-only activations, ``cosine_similarity``
dtypes and float16 norms, ``multi_head_attention_forward``, ``feature_alpha_dropout``.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check

check = make_check(torch, {"float16": 2e-3, "float32": 1e-5, "other": 1e-12})
_rng = np.random.RandomState(11)


def _r(*shape, dt=np.float32):
    return np.asarray(_rng.randn(*shape)).astype(dt)


def F(L):
    return L.nn.functional


# ------------------------------------------------------------------------------------------------ grid_sample
@pytest.mark.parametrize("padding_mode,align_corners",
                         list(itertools.product(["zeros", "border", "reflection"], [True, False])))
def test_grid_sample_bicubic(padding_mode, align_corners):
    for hw in [(5, 7), (1, 4), (2, 1)]:
        for dt in (np.float32, np.float64):
            x = _r(2, 3, *hw, dt=dt)
            g = ((_rng.rand(2, 4, 6, 2) * 5 - 2.5)).astype(dt)           # well outside [-1, 1] too
            check(lambda L, x, g: F(L).grid_sample(x, g, "bicubic", padding_mode, align_corners), x, g, tol=2e-5)


def test_grid_sample_bicubic_5d_refused():
    check(lambda L, x, g: F(L).grid_sample(x, g, "bicubic", align_corners=False), _r(1, 2, 3, 4, 5), _r(1, 2, 2, 2, 3))


# ------------------------------------------------------------------------------------------------ interpolate
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias(mode):
    x = _r(2, 3, 9, 7)
    for ac in (False, True):
        for size in [3, (2, 9), (9, 4), 12, (1, 1)]:
            check(lambda L, x: F(L).interpolate(x, size=size, mode=mode, align_corners=ac, antialias=True), x)
        for sf in [0.4, (0.6, 2.5)]:
            for rsf in (None, True):
                check(lambda L, x: F(L).interpolate(x, scale_factor=sf, mode=mode, align_corners=ac, antialias=True,
                                                    recompute_scale_factor=rsf), x)
    check(lambda L, x: F(L).interpolate(x, size=(3, 2), mode=mode, antialias=True), _r(1, 2, 7, 5, dt=np.float64))
    check(lambda L, x: F(L).interpolate(x, size=(3, 2), mode=mode, antialias=True), _r(1, 2, 7, 5, dt=np.float16))


def test_interpolate_antialias_refused_modes():
    for mode in ("nearest", "area", "linear"):
        check(lambda L, x: F(L).interpolate(x, size=3, mode=mode, antialias=True), _r(1, 2, 7, 5))
    check(lambda L, x: F(L).interpolate(x, size=3, mode="linear", antialias=True), _r(1, 2, 7))


def test_grid_sample_nan_and_inf_grid():
    # NaN / inf sample points: no out-of-bounds gather; border / reflection clip a NaN coordinate to 0 like torch
    x = _r(1, 2, 4, 5)
    g = np.array([[[[np.nan, 0.2], [0.1, np.nan], [np.inf, 0.3], [-np.inf, 0.3], [0.3, 0.3], [np.nan, np.nan]]]],
                 np.float32)
    for mode, pm, ac in itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"],
                                          [True, False]):
        check(lambda L, x, g: F(L).grid_sample(x, g, mode=mode, padding_mode=pm, align_corners=ac), x, g)


# ------------------------------------------------------------------------------------------------ indexing
def test_take_along_dim_negative_indices():
    x = _r(4, 5)
    check(lambda L, x, i: L.take_along_dim(x, i, -1), x, _rng.randint(-5, 0, (4, 3)).astype(np.int64))
    check(lambda L, x, i: L.take_along_dim(x, i, 0), x, _rng.randint(-4, 4, (1, 3)).astype(np.int64))
    check(lambda L, x, i: x.take_along_dim(i, 1), x, np.array([[-1, 2]], np.int64))


def test_einsum_sublist_format():
    check(lambda L, a, b: L.einsum(a, [0, 1], b, [1, 2], [0, 2]), _r(2, 3), _r(3, 2))
    check(lambda L, a, b: L.einsum(a, [0, 1], b, [1, 2]), _r(2, 3), _r(3, 2))
    check(lambda L, a, b: L.einsum(a, [Ellipsis, 0, 1], b, [Ellipsis, 1, 2], [Ellipsis, 0, 2]), _r(4, 2, 3), _r(3, 2))
    check(lambda L, a: L.einsum(a, [30, 51]), _r(2, 3))
    check(lambda L, a: L.einsum(a, [0, 0]), _r(3, 3))
    check(lambda L, a: L.einsum(a, [0, 1], [1]), _r(3, 3))


# ------------------------------------------------------------------------------------------------ interpolate
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_nearest_1d_3d_use_the_scale(mode):
    # only torch's 2-D nearest kernel copies / halves indices for a 1x / 2x output; 1-D and 3-D use 1/scale_factor
    for sf in (1.15, 2.08, 2.0, 0.5):
        for shape in [(1, 2, 6), (1, 2, 6, 5), (1, 2, 6, 5, 3)]:
            for dt in (np.float32, np.float64, np.uint8):
                x = (_r(*shape) * 10).astype(dt)
                check(lambda L, x: F(L).interpolate(x, scale_factor=sf, mode=mode), x)


# ------------------------------------------------------------------------------------------------ pooling
def test_avg_pool3d_input_smaller_than_kernel_refused():
    # torch checks the unpadded input against the kernel (3-D only); 2-D pads first
    for k, p, shape in [((2, 2, 3), (0, 0, 1), (9, 8, 1)), ((1, 4, 2), (0, 1, 1), (7, 2, 5)),
                        ((2, 2, 2), 1, (2, 2, 2))]:
        for cm in (False, True):
            check(lambda L, x: F(L).avg_pool3d(x, k, 1, p, ceil_mode=cm), _r(1, 2, *shape))


# ------------------------------------------------------------------------------------------------ losses
def test_cross_entropy_target_dtypes():
    x, t = _r(5, 4), _rng.randint(0, 4, 5)
    for dt in (np.int64, np.uint8, np.int32, np.int16):                 # Long / Byte class indices only
        check(lambda L, x, t: F(L).cross_entropy(x, t), x, t.astype(dt))
        check(lambda L, x, t: F(L).nll_loss(x, t), x, t.astype(dt))
    p = np.abs(_r(5, 4, dt=np.float64))                                 # probabilities: the loss dtype promotes
    for red in ("none", "mean", "sum"):
        check(lambda L, x, t: F(L).cross_entropy(x, t, reduction=red, label_smoothing=0.1), x, p, tol=1e-6)
    check(lambda L, x, t: F(L).cross_entropy(x, t), x.astype(np.float16), p.astype(np.float32), tol=2e-3)


def test_pointwise_losses_on_integers():
    a, b, f = np.array([1, 2, 3]), np.array([0, 2, 5]), np.array([0.0, 2.0, 5.0], np.float32)
    for red in ("none", "mean", "sum"):
        for name in ("l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss"):
            check(lambda L, a, b: getattr(F(L), name)(a, b, reduction=red), a, b)
            check(lambda L, a, b: getattr(F(L), name)(a, b, reduction=red), f, a)
            check(lambda L, a, b: getattr(F(L), name)(a, b, reduction=red), a.astype(np.uint8), b.astype(np.uint8))


# ------------------------------------------------------------------------------------------------ linalg
def test_linalg_vander():
    for dt in (np.float32, np.float64, np.int32, np.uint8, np.bool_, np.float16):
        for shape in [(4,), (2, 3), (), (2, 0)]:
            x = (_r(*shape) * 2).astype(dt)
            for n in (None, 5, 1):
                check(lambda L, x: L.linalg.vander(x, N=n), x)


def test_norm_nuc_and_matrix_norm_dims():
    x3, x2 = _r(2, 3, 4), _r(3, 4)
    for p in ("nuc", "fro"):
        for dim in [None, (1, 2), (0, 1), (0, 1, 2), (-1, -2)]:
            for kd in (False, True):
                check(lambda L, x: L.norm(x, p=p, dim=dim, keepdim=kd), x3)
                check(lambda L, x: x.norm(p=p, dim=dim, keepdim=kd), x2)       # (1, 2) out of range on 2-D
    check(lambda L, x: L.norm(x, p="nuc", dtype=L.float64), x2)
    for dim in [(0, 2), (0,), (0, 1, 2), 1]:
        check(lambda L, x: L.linalg.matrix_norm(x, "fro", dim=dim), x2)


# ------------------------------------------------------------------------------------------------ searching
def test_searchsorted_sequence_ending_in_nan():
    # torch's binary search goes right at every NaN: values past the last number and NaN land after the NaNs
    s = np.array([1, 2, 2, 3, np.nan, np.nan], np.float32)
    v = np.array([[0, 2, 2.5, 3, 9, np.nan], [1, 5, 3, np.nan, -1, np.inf]], np.float32)
    for right in (False, True):
        check(lambda L, s, v: L.searchsorted(s, v, right=right), s, v)
        check(lambda L, s, v: L.searchsorted(s, v, right=right), np.stack([s, np.sort(_r(6))]), v)
        check(lambda L, s, v: L.bucketize(v, s, right=right, out_int32=True), s, v)
        check(lambda L, s, v, st: L.searchsorted(s, v, right=right, sorter=st),
              np.array([np.nan, 2, 1, 3], np.float32), v, np.array([2, 1, 3, 0]))


# ------------------------------------------------------------------------------------------------ activations
def test_float_only_activations_refuse_integers():
    x = _rng.randint(-3, 4, 6).astype(np.int64)
    for fn in ["elu", "selu", "celu", "silu", "mish", "hardswish", "hardsigmoid", "softplus", "logsigmoid",
               "leaky_relu", "gelu", "softshrink", "hardshrink", "glu", "rrelu", "relu", "relu6", "hardtanh",
               "sigmoid", "tanh"]:
        for a in (x, x > 0, x.astype(np.float32)):
            check(lambda L, a: getattr(F(L), fn)(a), a)
    check(lambda L, a: F(L).prelu(a, L.tensor([1])), x)
    check(lambda L, a: L.nn.ELU()(a), x)


# ------------------------------------------------------------------------------------------------ pooling
@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.int16, np.int32, np.bool_], ids=lambda d: np.dtype(d).name)
def test_max_pool_on_integers(dt):
    x = (_r(2, 2, 7, 6) * 50).astype(dt)
    check(lambda L, x: F(L).max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), x)
    check(lambda L, x: F(L).max_pool2d(x, 2, dilation=2), x)
    check(lambda L, x: F(L).max_pool1d(x[0], 2, return_indices=True), x)
    check(lambda L, x: F(L).max_pool3d(x, 2, return_indices=True), x)
    check(lambda L, x: F(L).max_pool3d(x[0], 2, 1, 1), x)


# ------------------------------------------------------------------------------------------------ distances
def test_cosine_similarity_dtypes_and_half_norms():
    i, f, d, h = _rng.randint(0, 3, (3, 4)), _r(3, 4), _r(3, 4, dt=np.float64), _r(3, 4, dt=np.float16)
    for a, b in [(i, i), (i, f), (f, i), (i > 0, i > 0), (i, d), (f, d), (h, f), (h, i)]:
        check(lambda L, a, b: F(L).cosine_similarity(a, b), a, b, tol=1e-6)
    x = _r(3, 40, dt=np.float16)                       # float16 norms accumulate in float32 like torch
    for p in (2, 1, 3):
        check(lambda L, x: F(L).normalize(x, p=p), x, tol=1e-3)
        check(lambda L, x: F(L).pairwise_distance(x, x[::-1].copy(), p=p), x, tol=1e-3)


# ------------------------------------------------------------------------------------------------ attention
def test_multi_head_attention_forward():
    E, H, T, S, B = 8, 2, 4, 5, 3
    torch.manual_seed(0)
    w = {k: v.detach().numpy().copy()
         for k, v in torch.nn.MultiheadAttention(E, H, add_bias_kv=True).state_dict().items()}
    w2 = {k: v.detach().numpy().copy()
          for k, v in torch.nn.MultiheadAttention(E, H, kdim=6, vdim=3, bias=False).state_dict().items()}

    def f(L, q, k, v, ipw, ipb, bk, bv, ow, ob, kpm, am):
        if unb:
            q, k, v, kpm = q[:, 0], k[:, 0], v[:, 0], kpm[0]
        return F(L).multi_head_attention_forward(q, k, v, E, H, ipw, ipb, bk, bv, zero, 0.0, ow, ob, training=False,
                                                 key_padding_mask=kpm, need_weights=nw, attn_mask=am,
                                                 average_attn_weights=avg)
    for (nw, avg), zero, unb in itertools.product([(True, True), (True, False), (False, True)], [False, True],
                                                  [False, True]):
        check(f, _r(T, B, E), _r(S, B, E), _r(S, B, E), w["in_proj_weight"], w["in_proj_bias"], w["bias_k"],
              w["bias_v"], w["out_proj.weight"], w["out_proj.bias"], _rng.rand(B, S) > 0.7, _r(T, S))

    def g(L, q, k, v, qw, kw, vw, ow):
        return F(L).multi_head_attention_forward(q, k, v, E, H, None, None, None, None, False, 0.0, ow, None,
                                                 training=False, use_separate_proj_weight=True, q_proj_weight=qw,
                                                 k_proj_weight=kw, v_proj_weight=vw)
    check(g, _r(T, B, E), _r(S, B, 6), _r(S, B, 3), w2["q_proj_weight"], w2["k_proj_weight"], w2["v_proj_weight"],
          w2["out_proj.weight"])
    check(lambda L, x, ipw, ow: F(L).multi_head_attention_forward(x, x, x, E, H, ipw, None, None, None, False, 0.0,
                                                                   ow, None, is_causal=True), _r(T, B, E),
          w["in_proj_weight"], w["out_proj.weight"])                  # is_causal needs attn_mask: both raise


# ------------------------------------------------------------------------------------------------ dropout
def test_feature_alpha_dropout_drops_whole_channels():
    p, alpha = 0.3, 1.7580993408473766
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))

    def structure(L, x):
        L.manual_seed(0)
        y = F(L).feature_alpha_dropout(x, p, training=True).numpy()
        xn = x.numpy()
        kept = np.isclose(y, xn * a + alpha * a * p, atol=1e-5).all(axis=(2, 3))
        dropped = np.isclose(y, -alpha * a + alpha * a * p, atol=1e-5).all(axis=(2, 3))
        return bool((kept | dropped).all()), y.shape            # one draw per (N, C) slice, like torch
    check(structure, _r(8, 6, 5, 5))
    check(lambda L, x: (F(L).feature_alpha_dropout(x, p), L.nn.FeatureAlphaDropout(p).eval()(x)), _r(2, 3, 4))
    check(lambda L, x: F(L).feature_alpha_dropout(x, 1.0, training=True), _r(2, 3, 4))
    check(lambda L, x: F(L).feature_alpha_dropout(x, 0.5, training=True), _r(4))          # needs 2 dims: raises
    check(lambda L, x: F(L).feature_alpha_dropout(x, 1.5, training=True), _r(2, 3))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_uint8_bit_exact(mode):
    # torch's uint8 kernels (int16 fixed-point weights, a uint8 rounding per pass), antialiased or not
    for C, (H, W) in [(3, (9, 7)), (1, (4, 4)), (5, (16, 13))]:
        x = _rng.randint(0, 256, (2, C, H, W)).astype(np.uint8)
        for aa, ac in itertools.product([False, True], [False, True]):
            for size in [(5, 3), (12, 17), (9, 4), (3, 14)]:
                check(lambda L, x: F(L).interpolate(x, size=size, mode=mode, antialias=aa, align_corners=ac), x)
            check(lambda L, x: F(L).interpolate(x, scale_factor=(2.0, 0.6), mode=mode, antialias=aa, align_corners=ac),
                  x)


def test_linalg_householder_product():
    for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-10)):
        for shape, k in [((5, 3), 2), ((4, 4), 4), ((5, 3), 0), ((2, 6, 3), 2), ((3, 5), 2), ((5, 3), 4), ((5,), 1)]:
            check(lambda L, a, t: L.linalg.householder_product(a, t), _r(*shape, dt=dt), _r(*shape[:-2], k, dt=dt),
                  tol=tol)
    ga, gt = torch.geqrf(torch.from_numpy(_r(6, 4)))                  # Q of a QR factorisation
    check(lambda L, a, t: L.linalg.householder_product(a, t), ga.numpy(), gt.numpy(), tol=1e-5)
    check(lambda L, a, t: L.linalg.householder_product(a, t), _r(5, 3), _r(2, dt=np.float64))
    check(lambda L, a, t: L.linalg.householder_product(a, t), _r(2, 5, 3), _r(3, 2))


def test_matrix_norm_of_empty_matrices():
    # torch: the max-type norms (2, 1, inf) of an empty matrix are 0; the min-type ones raise on an empty reduction
    for shape in [(2, 0, 0), (0, 0), (3, 0), (0, 3), (2, 3, 0)]:
        for o in [2, -2, 1, -1, np.inf, -np.inf, "nuc", "fro"]:
            for kd in (False, True):
                check(lambda L, a: L.linalg.matrix_norm(a, o, keepdim=kd), _r(*shape))


# ------------------------------------------------------------------------------------------------ normalization
def test_batch_norm_training_on_an_empty_batch():
    z = _r(0, 3, 5, 5)
    check(lambda L, x, m, v: (F(L).batch_norm(x, m, v, training=True, momentum=0.5), m, v), z, _r(3),
          np.abs(_r(3)))
    check(lambda L, x: F(L).batch_norm(x, None, None, training=True), z)
    check(lambda L, x: F(L).batch_norm(x, None, None, training=True), _r(1, 3))      # one value per channel

    def module(L, x):
        bn = L.nn.BatchNorm2d(3)
        return bn(x).detach(), bn.running_mean, bn.running_var, bn.num_batches_tracked
    check(module, z)


def test_top_level_trace_is_torch_trace():
    # ``neetorch.trace`` is also the tracer's subpackage: calling it is torch.trace (sum of the diagonal)
    a = np.arange(12.0).reshape(3, 4)
    for dt in (np.float32, np.int64):
        check(lambda L, x: L.trace(x), a.astype(dt))
    check(lambda L, x: L.trace(x), a[0].astype(np.float32))     # both raise on a vector
    import neetorch as nee
    assert callable(nee.trace.trace) and nee.trace.Graph.__name__ == "Graph"
