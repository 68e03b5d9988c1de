"""Session 28: the nn ops lay out their results as torch 2.13's CPU kernels do (channels_last / channels_last_3d
kept where the input suggests it, row-major where torch's result is), values and strides compared with torch's
(ops/memory_format.py); and nee.jit gives the same values for channels-last inputs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

import neetorch as nee  # noqa: E402

NF = nee.nn.functional


def _lib(F):
    return torch if F is TF else nee


def _w(F, x, *shape):
    """A deterministic weight of ``shape`` in x's dtype (the same numbers for both libraries)."""
    a = np.cos(np.arange(int(np.prod(shape)), dtype=np.float64) * 0.37).reshape(shape)
    lib = _lib(F)
    return lib.from_numpy(a.copy()).to(x.dtype)


def _u8(F, x):
    lib = _lib(F)
    return ((x - x.min()) * 40).clamp(0, 255).to(lib.uint8)


S4, S5 = (2, 4, 7, 6), (2, 4, 5, 7, 6)
S4E = (2, 4, 8, 6)      # even H and W (pixel_unshuffle)
S4C8 = (2, 8, 5, 3)     # 8 channels (pixel_shuffle by 2)

CASES = {
    # pooling
    "max_pool2d": (S4, lambda F, x: F.max_pool2d(x, 2)),
    "max_pool2d_pad_idx": (S4, lambda F, x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
    "max_pool2d_ceil_dil": (S4, lambda F, x: F.max_pool2d(x, 2, 2, 0, 2, ceil_mode=True)),
    "avg_pool2d": (S4, lambda F, x: F.avg_pool2d(x, 3, 2, 1)),
    "avg_pool2d_nopad_div": (S4, lambda F, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False,
                                                           divisor_override=5)),
    "adaptive_avg_pool2d": (S4, lambda F, x: F.adaptive_avg_pool2d(x, (3, 2))),
    "adaptive_avg_pool2d_1": (S4, lambda F, x: F.adaptive_avg_pool2d(x, 1)),
    "adaptive_max_pool2d": (S4, lambda F, x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True)),
    "lp_pool2d": (S4, lambda F, x: F.lp_pool2d(x, 2, 2)),
    "max_pool3d": (S5, lambda F, x: F.max_pool3d(x, 2)),
    "max_pool3d_idx": (S5, lambda F, x: F.max_pool3d(x, (2, 3, 2), 1, 1, return_indices=True)),
    "avg_pool3d": (S5, lambda F, x: F.avg_pool3d(x, 2)),
    "adaptive_avg_pool3d": (S5, lambda F, x: F.adaptive_avg_pool3d(x, (3, 2, 2))),
    "adaptive_max_pool3d": (S5, lambda F, x: F.adaptive_max_pool3d(x, (3, 2, 2), return_indices=True)),
    "lp_pool3d": (S5, lambda F, x: F.lp_pool3d(x, 2, 2)),
    "max_unpool2d": (S4, lambda F, x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)),
    # resampling
    "nearest_scale": (S4, lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest")),
    "nearest_size": (S4, lambda F, x: F.interpolate(x, size=(5, 9), mode="nearest")),
    "nearest_exact": (S4, lambda F, x: F.interpolate(x, size=(5, 9), mode="nearest-exact")),
    "bilinear": (S4, lambda F, x: F.interpolate(x, size=(5, 9), mode="bilinear")),
    "bilinear_ac": (S4, lambda F, x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True)),
    "bicubic": (S4, lambda F, x: F.interpolate(x, size=(5, 9), mode="bicubic")),
    "bicubic_ac": (S4, lambda F, x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True)),
    "bilinear_aa": (S4, lambda F, x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True)),
    "bicubic_aa": (S4, lambda F, x: F.interpolate(x, size=(5, 3), mode="bicubic", antialias=True)),
    "bilinear_aa_same": (S4, lambda F, x: F.interpolate(x, size=(7, 6), mode="bilinear", antialias=True)),
    "area2d": (S4, lambda F, x: F.interpolate(x, size=(3, 2), mode="area")),
    "nearest3d": (S5, lambda F, x: F.interpolate(x, size=(3, 5, 4), mode="nearest")),
    "nearest_exact3d": (S5, lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest-exact")),
    "trilinear": (S5, lambda F, x: F.interpolate(x, size=(3, 5, 4), mode="trilinear")),
    "area3d": (S5, lambda F, x: F.interpolate(x, size=(3, 5, 4), mode="area")),
    "upsample": (S4, lambda F, x: F.upsample(x, scale_factor=2)),
    "upsample_nearest": (S4, lambda F, x: F.upsample_nearest(x, size=(9, 5))),
    "upsample_bilinear": (S4, lambda F, x: F.upsample_bilinear(x, scale_factor=2)),
    "u8_bilinear": (S4, lambda F, x: F.interpolate(_u8(F, x), size=(5, 9), mode="bilinear")),
    "u8_bicubic": (S4, lambda F, x: F.interpolate(_u8(F, x), size=(5, 9), mode="bicubic")),
    "u8_bilinear_aa": (S4, lambda F, x: F.interpolate(_u8(F, x), size=(3, 4), mode="bilinear", antialias=True)),
    "u8_nearest": (S4, lambda F, x: F.interpolate(_u8(F, x), size=(5, 9), mode="nearest")),
    # padding
    "pad_constant": (S4, lambda F, x: F.pad(x, (1, 2, 2, 1), value=0.5)),
    "pad_constant_last": (S4, lambda F, x: F.pad(x, (1, 2))),
    "pad_constant_neg": (S4, lambda F, x: F.pad(x, (-1, 2, 1, -1))),
    "pad_constant_all": (S4, lambda F, x: F.pad(x, (1, 1, 1, 1, 1, 1, 1, 1))),
    "pad_constant3d": (S5, lambda F, x: F.pad(x, (1, 2, 2, 1, 1, 1))),
    "pad_constant5_2d": (S5, lambda F, x: F.pad(x, (1, 1, 1, 1))),
    "pad_reflect": (S4, lambda F, x: F.pad(x, (1, 2, 2, 1), mode="reflect")),
    "pad_reflect_neg": (S4, lambda F, x: F.pad(x, (-1, 2, 1, -1), mode="reflect")),
    "pad_reflect_unbatched3d": (S4, lambda F, x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect")),
    "pad_reflect3d": (S5, lambda F, x: F.pad(x, (1, 2, 2, 1, 1, 1), mode="reflect")),
    "pad_replicate": (S4, lambda F, x: F.pad(x, (1, 2, 2, 1), mode="replicate")),
    "pad_replicate_neg": (S4, lambda F, x: F.pad(x, (2, -1, -1, 1), mode="replicate")),
    "pad_replicate3d": (S5, lambda F, x: F.pad(x, (1, 2, 2, 1, 1, 1), mode="replicate")),
    "pad_circular": (S4, lambda F, x: F.pad(x, (1, 2, 2, 1), mode="circular")),
    "pad_circular3d": (S5, lambda F, x: F.pad(x, (1, 2, 2, 1, 1, 1), mode="circular")),
    # shuffles
    "pixel_shuffle": (S4C8, lambda F, x: F.pixel_shuffle(x, 2)),
    "pixel_shuffle_1": (S4, lambda F, x: F.pixel_shuffle(x, 1)),
    "pixel_unshuffle": (S4E, lambda F, x: F.pixel_unshuffle(x, 2)),
    "pixel_unshuffle_1": (S4, lambda F, x: F.pixel_unshuffle(x, 1)),
    "channel_shuffle": (S4, lambda F, x: F.channel_shuffle(x, 2)),
    "channel_shuffle_1": (S4, lambda F, x: F.channel_shuffle(x, 1)),
    "channel_shuffle_c": (S4, lambda F, x: F.channel_shuffle(x, 4)),
    # normalization, dropout, activations
    "group_norm": (S4, lambda F, x: F.group_norm(x, 2)),
    "group_norm_affine": (S4, lambda F, x: F.group_norm(x, 2, _w(F, x, 4), _w(F, x, 4) + 1)),
    "group_norm3d": (S5, lambda F, x: F.group_norm(x, 4)),
    "batch_norm_eval": (S4, lambda F, x: F.batch_norm(x, _w(F, x, 4), _w(F, x, 4).abs() + 1, _w(F, x, 4),
                                                      _w(F, x, 4))),
    "batch_norm_train": (S5, lambda F, x: F.batch_norm(x, None, None, training=True)),
    "instance_norm": (S4, lambda F, x: F.instance_norm(x)),
    "instance_norm_running": (S4, lambda F, x: F.instance_norm(x, _w(F, x, 4), _w(F, x, 4).abs() + 1,
                                                               use_input_stats=False)),
    "layer_norm": (S4, lambda F, x: F.layer_norm(x, (7, 6))),
    "local_response_norm": (S4, lambda F, x: F.local_response_norm(x, 3)),
    "dropout_eval": (S4, lambda F, x: F.dropout(x, 0.5, training=False)),
    "dropout2d_eval": (S4, lambda F, x: F.dropout2d(x, 0.5, training=False)),
    "dropout3d_eval": (S5, lambda F, x: F.dropout3d(x, 0.5, training=False)),
    "relu": (S4, lambda F, x: F.relu(x)),
    "hardswish": (S4, lambda F, x: F.hardswish(x)),
    "gelu": (S5, lambda F, x: F.gelu(x)),
    "logsigmoid": (S4, lambda F, x: F.logsigmoid(x)),
    "rrelu_eval": (S4, lambda F, x: F.rrelu(x)),
    "prelu": (S4, lambda F, x: F.prelu(x, _w(F, x, 4))),
    "softmax_c": (S4, lambda F, x: F.softmax(x, 1)),
    # convolution
    "conv2d": (S4, lambda F, x: F.conv2d(x, _w(F, x, 3, 4, 3, 3), padding=1)),
    "conv2d_bias_stride": (S4, lambda F, x: F.conv2d(x, _w(F, x, 3, 4, 3, 3), _w(F, x, 3), stride=2)),
    "conv2d_groups": (S4, lambda F, x: F.conv2d(x, _w(F, x, 4, 2, 3, 3), groups=2, dilation=2)),
    "conv2d_depthwise": (S4, lambda F, x: F.conv2d(x, _w(F, x, 4, 1, 3, 3), groups=4, padding=1)),
    "conv2d_1x1": (S4, lambda F, x: F.conv2d(x, _w(F, x, 5, 4, 1, 1))),
    "conv_transpose2d": (S4, lambda F, x: F.conv_transpose2d(x, _w(F, x, 4, 3, 3, 3), stride=2)),
    "conv_transpose2d_bias": (S4, lambda F, x: F.conv_transpose2d(x, _w(F, x, 4, 3, 2, 2), _w(F, x, 3),
                                                                  padding=1, output_padding=1, stride=2)),
    "conv3d": (S5, lambda F, x: F.conv3d(x, _w(F, x, 3, 4, 2, 2, 2))),
    "conv3d_bias": (S5, lambda F, x: F.conv3d(x, _w(F, x, 3, 4, 2, 3, 2), _w(F, x, 3), padding=1)),
    "conv_transpose3d": (S5, lambda F, x: F.conv_transpose3d(x, _w(F, x, 4, 3, 2, 2, 2))),
    "conv_transpose3d_bias": (S5, lambda F, x: F.conv_transpose3d(x, _w(F, x, 4, 3, 2, 2, 2), _w(F, x, 3),
                                                                  stride=2)),
}

LAYOUTS = ["channels_last", "contiguous", "channels_last_sliced"]


def _inputs(shape, layout, dtype, seed=0):
    """(torch tensor, neetorch tensor) with the same values and strides."""
    rng = np.random.default_rng(seed)
    full = list(shape)
    if layout == "channels_last_sliced":
        full[-1] = 2 * full[-1]
    t = torch.from_numpy(rng.standard_normal(full).astype(dtype))
    if layout != "contiguous":
        t = t.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    if layout == "channels_last_sliced":
        t = t[..., ::2]
    n = nee.from_numpy(t.numpy())
    assert tuple(n.stride()) == tuple(t.stride())
    return t, n


def _outs(r):
    return list(r) if isinstance(r, tuple) else [r]


def _check(tr, nr, tol):
    for t, n in zip(_outs(tr), _outs(nr)):
        assert tuple(n.shape) == tuple(t.shape)
        np.testing.assert_allclose(n.numpy(), t.numpy(), rtol=tol, atol=tol)
        assert tuple(n.stride()) == tuple(t.stride()), (tuple(n.stride()), tuple(t.stride()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_result_layout_matches_torch(case, layout, dtype):
    shape, fn = CASES[case]
    if layout == "channels_last_sliced" and case in ("pixel_unshuffle",):
        pytest.skip("the sliced input's width is what the op divides")
    t, n = _inputs(shape, layout, dtype)
    tr = fn(TF, t)
    nr = fn(NF, n)
    _check(tr, nr, 1e-4 if dtype == np.float32 else 1e-9)


@pytest.mark.parametrize("shape", [(2, 1, 7, 6), (2, 3, 1, 1), (1, 1, 5, 3), (1, 3, 4, 1)])
@pytest.mark.parametrize("case", ["max_pool2d", "adaptive_avg_pool2d_1", "nearest_size", "bicubic", "pad_constant",
                                  "pad_replicate", "group_norm", "conv2d", "channel_shuffle_1"])
def test_ambiguous_sizes(case, shape):
    """Size-1 channel / spatial dims: c10's tie-breaking (contiguous and channels-last strides coincide)."""
    fn = CASES[case][1]
    if case == "group_norm":
        fn = lambda F, x: F.group_norm(x, 1)  # noqa: E731
    if case == "conv2d":
        fn = lambda F, x: F.conv2d(x, _w(F, x, 2, x.shape[1], 1, 1))  # noqa: E731
    for layout in ("channels_last", "contiguous"):
        t, n = _inputs(shape, layout, np.float32)
        if case.startswith("max_pool") and min(shape[2:]) < 2:
            continue
        _check(fn(TF, t), fn(NF, n), 1e-4)


def test_exact_channels_last_strides_of_a_size1_channel():
    """(N, 1, H, W) with NHWC strides (an empty_like / clone in channels_last gives them) suggests channels-last."""
    t = torch.randn(2, 1, 7, 6).clone(memory_format=torch.channels_last)
    t = torch.empty_strided((2, 1, 7, 6), (42, 1, 6, 1)).copy_(t)
    n = nee.from_numpy(t.numpy())
    for fn in (lambda F, x: F.max_pool2d(x, 2), lambda F, x: F.interpolate(x, scale_factor=2),
               lambda F, x: F.pad(x, (1, 1, 1, 1))):
        _check(fn(TF, t), fn(NF, n), 1e-5)


@pytest.mark.parametrize("case", ["pixel_shuffle_1", "pixel_unshuffle_1", "channel_shuffle_1", "channel_shuffle_c",
                                  "bilinear_aa_same"])
def test_identity_results_are_copies(case):
    """torch returns a new tensor where the op moves nothing; so does neetorch (not a view of the input)."""
    shape, fn = CASES[case]
    for layout in ("channels_last", "contiguous"):
        _, n = _inputs(shape, layout, np.float32)
        r = fn(NF, n)
        before = r.numpy().copy()
        n.add_(1.0)
        np.testing.assert_array_equal(r.numpy(), before)


def test_conv3d_small_single_image_is_row_major():
    """torch runs a small single-image float32 conv3d on its slow kernel: a row-major result."""
    for N in (1, 2):
        t, n = _inputs((N, 4, 5, 7, 6), "channels_last", np.float32)
        for fn in (lambda F, x: F.conv3d(x, _w(F, x, 3, 4, 2, 2, 2)),
                   lambda F, x: F.conv_transpose3d(x, _w(F, x, 4, 3, 2, 2, 2))):
            _check(fn(TF, t), fn(NF, n), 1e-4)


def test_channels_last_weight_gives_channels_last_conv():
    rng = np.random.default_rng(1)
    for dt in (np.float32, np.float64):
        x = torch.from_numpy(rng.standard_normal((2, 4, 7, 6)).astype(dt))
        w = torch.from_numpy(rng.standard_normal((3, 4, 3, 3)).astype(dt)).contiguous(
            memory_format=torch.channels_last)
        xn, wn = nee.from_numpy(x.numpy()), nee.from_numpy(w.numpy())
        _check(TF.conv2d(x, w), NF.conv2d(xn, wn), 1e-4)
        wt = torch.from_numpy(rng.standard_normal((4, 3, 3, 3)).astype(dt)).contiguous(
            memory_format=torch.channels_last)
        _check(TF.conv_transpose2d(x, wt, stride=2), NF.conv_transpose2d(xn, nee.from_numpy(wt.numpy()), stride=2),
               1e-4)


JIT_CASES = ["max_pool2d_pad_idx", "avg_pool2d", "adaptive_avg_pool2d", "max_pool3d", "bilinear", "bicubic",
             "nearest_size", "trilinear", "bilinear_aa", "pad_constant", "pad_reflect", "pad_replicate3d",
             "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "group_norm_affine", "conv2d_bias_stride",
             "conv_transpose2d", "conv3d_bias", "conv_transpose3d_bias", "lp_pool2d", "area2d", "u8_bilinear"]


@pytest.mark.parametrize("case", JIT_CASES)
def test_jit_values_with_channels_last_input(case):
    shape, fn = CASES[case]
    if case == "pixel_unshuffle":
        shape = S4E
    t, n = _inputs(shape, "channels_last", np.float32, seed=3)
    f = nee.jit(lambda x: fn(NF, x))
    for _ in range(2):
        got = f(n)
        for a, b in zip(_outs(got), _outs(fn(TF, t))):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)
