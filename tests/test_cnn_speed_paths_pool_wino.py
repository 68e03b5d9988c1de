"""Speed paths of the ONNX CNNs (issue 4): MaxPool with extra padding at the end as ceil mode (no padded copy),
and the Winograd cost rule against conv_direct's kernel.  Outputs checked against onnxruntime / torch."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

import neetorch as nee  # noqa: E402
from neetorch.devices.cpu.kernels import conv as K  # noqa: E402
from neetorch.devices.cpu import threads  # noqa: E402
from neetorch.devices.cpu.kernels import conv_direct  # noqa: E402
from neetorch.onnx import InferenceSession, ops_nn  # noqa: E402


def _maxpool_model(shape, k, s, pads, d=(1, 1), ceil=0, indices=False):
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(pads), dilations=list(d), ceil_mode=ceil)
    outs = ["y", "i"] if indices else ["y"]
    node = helper.make_node("MaxPool", ["x"], outs, **attrs)
    g = helper.make_graph([node], "mp", [helper.make_tensor_value_info("x", 1, list(shape))],
                          [helper.make_tensor_value_info("y", 1, ["n", "c", "h", "w"])]
                          + ([helper.make_tensor_value_info("i", 7, ["n", "c", "h", "w"])] if indices else []))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("shape,k,s,pads,d,indices", [
    ((1, 3, 12, 12), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), False),    # Inception v2's pools, even plane
    ((2, 2, 11, 9), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), True),      # odd planes, with indices
    ((1, 2, 10, 13), (3, 2), (2, 3), (1, 0, 1, 1), (1, 1), True),     # symmetric rows, one more at the right
    ((1, 2, 9, 9), (3, 3), (2, 2), (0, 0, 2, 2), (1, 1), False),      # last window only padding: the copy path
    ((1, 2, 14, 14), (3, 3), (3, 3), (0, 0, 2, 1), (1, 1), False),
    ((1, 2, 13, 12), (2, 2), (2, 2), (0, 0, 1, 1), (2, 2), True),     # dilated
])
def test_maxpool_end_padding_matches_onnxruntime(shape, k, s, pads, d, indices, monkeypatch):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[0, 0, -1, -1] = 50.0          # a maximum in the last row / column: in the clipped windows
    m = _maxpool_model(shape, k, s, pads, d, indices=indices)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    copies = []
    real = ops_nn._pad_spatial
    monkeypatch.setattr(ops_nn, "_pad_spatial", lambda *a: copies.append(1) or real(*a))
    got = InferenceSession(m, jit=False).run(None, {"x": x})
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # ceil mode over the symmetric pads takes the same windows where the output sizes agree; where ceil mode
    # would drop a window lying in the padding only (pads (0, 0, 2, 2) on 9x9, k3 s2) the padded copy stays
    H, W = shape[2], shape[3]
    need_copy = any(
        (n + p0 + p1 - ((kk - 1) * dd + 1)) // ss + 1 != _torch_ceil_out(n, kk, ss, dd, p0)
        for n, kk, ss, dd, p0, p1 in ((H, k[0], s[0], d[0], pads[0], pads[2]), (W, k[1], s[1], d[1], pads[1], pads[3])))
    assert bool(copies) == need_copy


def _torch_ceil_out(n, k, s, d, p):
    o = -(-(n + 2 * p - ((k - 1) * d + 1)) // s) + 1
    return o - 1 if (o - 1) * s >= n + p else o


def test_winograd_rule_against_the_direct_kernel(monkeypatch):
    # without a column matrix to build (conv_direct's kernel) the direct side loses the im2col term: F(4) only
    # where it won in the models (see conv.py), not on the 14x14 planes of 128-192 channels nor 32->128 on 27x27
    # (the 8-lane kernel's rule; the 16-lane one's below)
    monkeypatch.setattr(conv_direct, "VEC", 8)
    for args in ((1, 128, 128, 14, 14), (1, 160, 160, 14, 14), (1, 128, 192, 14, 14), (1, 32, 128, 27, 27)):
        assert K._winograd_rule(*args) == 4                     # the GEMM paths' rule (float64, no AVX-512F)
        assert K._winograd_rule(*args, direct=True) == 0
    for args in ((1, 64, 192, 56, 56), (1, 96, 96, 28, 28), (1, 64, 64, 56, 56), (1, 128, 128, 28, 28)):
        assert K._winograd_rule(*args, direct=True) == 4
    # F(2) on 14x14 planes where F(4)'s 16-column products lost (session 17, conv._WINO_FEW_COLS)
    for args in ((1, 192, 256, 14, 14), (1, 256, 256, 14, 14)):
        assert K._winograd_rule(*args, direct=True) == 2
    # 16 lanes (AVX-512: the direct kernel 1.2x the rate, session 20 on Zen 5): direct on 14x14 and smaller, F(4) on
    # the larger planes where it won there
    # (the products on OpenBLAS: NEE_WINOGRAD_GEMM=blas)
    monkeypatch.setattr(conv_direct, "VEC", 16)
    for nt, gemm in ((1, "blas"), (2, "blas")):
        monkeypatch.setattr(threads, "NUM_THREADS", nt)
        monkeypatch.setattr(K, "_WINO_GEMM", [gemm])
        for args in ((1, 192, 256, 14, 14), (1, 256, 256, 14, 14), (1, 512, 512, 12, 12), (1, 512, 512, 7, 7)):
            assert K._winograd_rule(*args, direct=True) == 0
        for args in ((1, 64, 192, 56, 56), (1, 96, 96, 28, 28), (1, 128, 128, 28, 28)):
            assert K._winograd_rule(*args, direct=True) == 4
    # the products on the direct kernel (session 21, conv._wino_rate: at its rate; one thread or two): F(2) on the
    # 14x14 / 12x12 planes of 256+ channels, F(4) on 64 -> 64 at 56x56 too; still direct on 7x7 and Inception's 14x14s;
    # past _WINO_NATIVE_BYTES (the bands' OpenBLAS products) the OpenBLAS fit
    monkeypatch.setattr(K, "_WINO_GEMM", [""])
    for nt in (1, 2):
        monkeypatch.setattr(threads, "NUM_THREADS", nt)
        for args in ((1, 256, 256, 14, 14), (1, 512, 512, 14, 14), (1, 512, 512, 12, 12), (1, 256, 512, 12, 12)):
            assert K._winograd_rule(*args, direct=True) == 2
        for args in ((1, 512, 512, 7, 7), (1, 128, 128, 14, 14), (1, 192, 256, 14, 14), (1, 32, 128, 27, 27)):
            assert K._winograd_rule(*args, direct=True) == 0
        for args in ((1, 64, 192, 56, 56), (1, 64, 64, 56, 56), (1, 96, 96, 28, 28), (1, 128, 128, 28, 28)):
            assert K._winograd_rule(*args, direct=True) == 4
        assert K._wino_rate(True, K._WINO_NATIVE_BYTES) > K._wino_rate(True, K._WINO_NATIVE_BYTES + 1) == \
            K._WINO_FLOPS
    monkeypatch.undo()
    # float32 convs ask for the direct kernel's rule where the kernel runs (AVX-512F), others the GEMM paths'
    geo = (1, 128, 14, 14, 128, 1, 3, 3, 1, 1, 1, 1, 14, 14, np.dtype(np.float32))
    # (on any thread count by default since session 20; K._WINO_DIRECT_MT: "0" (one thread only) / "1" force either)
    for avail, nt, mt, m in ((True, 1, "0", 0), (False, 1, "0", 4), (True, 2, "0", 4), (True, 2, "1", 0),
                             (False, 2, "1", 4)):
        monkeypatch.setattr(conv_direct, "available", lambda: avail)
        monkeypatch.setattr(threads, "NUM_THREADS", nt)
        monkeypatch.setattr(K, "_WINO_DIRECT_MT", mt)
        assert K._winograd_m(*geo) == m
    assert K._winograd_m(*geo[:-1], np.dtype(np.float64)) == K._winograd_rule(1, 128, 128, 14, 14, 8)


@pytest.mark.parametrize("nt", [1, 2])
def test_conv_3x3_14x14_matches_torch(nt):
    # the convolution the rule change moves from Winograd to the direct kernel on one thread (F(4) on two),
    # against torch in float64
    torch = pytest.importorskip("torch")
    old = nee.get_num_threads()
    nee.set_num_threads(nt)
    try:
        _conv_3x3_14x14_vs_torch(torch)
    finally:
        nee.set_num_threads(old)


def _conv_3x3_14x14_vs_torch(torch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 128, 14, 14)).astype(np.float32)
    w = rng.standard_normal((128, 128, 3, 3)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    got = nee.nn.functional.conv2d(nee.tensor(x), nee.tensor(w), nee.tensor(b), padding=1).numpy()
    want = torch.nn.functional.conv2d(*(torch.from_numpy(a).double() for a in (x, w, b)), padding=1).numpy()
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-5
