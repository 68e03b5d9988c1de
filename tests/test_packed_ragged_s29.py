"""Session 29: packed-weight products whose output width is not a multiple of the panel (32 columns; 16 with the
8-lane kernel): a classifier's 1000 classes, a vocabulary of 2000 / 30522 / 50257 tokens.

They went to BLAS through the driver, 2-3x the packed kernel's time (16 x 256 x 2000: 244 us against 84 for
2016 columns, numpy 126).  Now the weight's last panel is zero-padded and the kernel computes that panel's tiles
into a scratch tile on its stack, copying the columns that exist out (and in first, for a later K block:
linalg._pk_ir), whatever the width.  Checked: the kernel takes them, narrow ones too, the values against float64, columns past N never written
(an output that is a view of a wider array), K over several blocks, rows in chunks, column tasks on two threads,
the fused epilogues (bias + GELU in tasks, softmax over rows) and both kernel widths."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import linalg as L
from neetorch.devices.cpu.kernels import winograd
from test_packed_gemm_avx2_s13 import avx2, needs_avx2   # noqa: F401 - (tests/ is on the path) the 8-lane fixture

RNG = np.random.default_rng(29)
SHAPES = [(16, 256, 2000), (5, 16, 129), (12, 600, 1000), (37, 1100, 130), (600, 300, 161), (13, 513, 200),
          (40, 64, 1001)]


def _frozen(w):
    assert winograd.freeze(w)
    return w


def _ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _product(M, K, N, nt):
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = _frozen(RNG.standard_normal((K, N)).astype(np.float32))
    wide = np.full((M, N + 7), np.nan, np.float32)     # the output a view with a wider row stride
    out = wide[:, :N]
    g = L._pk_caller(out, a, b)
    assert g is not None, "the packed kernel did not take the product"
    g(out, a, b)
    np.testing.assert_allclose(out, _ref(a, b), rtol=2e-5, atol=2e-5 * np.sqrt(K))
    assert np.isnan(wide[:, N:]).all(), "columns past N were written"
    g(out, a, b)            # (again: the scratch tile's state between calls)
    np.testing.assert_allclose(out, _ref(a, b), rtol=2e-5, atol=2e-5 * np.sqrt(K))


@pytest.mark.parametrize("shape", SHAPES)
def test_ragged_widths_take_the_packed_kernel(nthreads, shape):
    _product(*shape, nthreads)


@needs_avx2
@pytest.mark.parametrize("shape", [(16, 256, 2000), (7, 40, 70), (600, 300, 161), (12, 600, 1000)])
def test_ragged_widths_on_the_8_lane_kernel(avx2, shape):      # noqa: F811
    _product(*shape, 1)


@pytest.mark.parametrize("shape", [(16, 64, 20), (128, 256, 48), (8, 300, 100), (5, 17, 1)])
def test_narrow_outputs(shape):
    """Widths under a panel or two (a partial panel only: 20, 1 column) take the packed kernel too (measured
    faster than BLAS from 20 columns, see linalg.py)."""
    _product(*shape, 1)


def test_padding_of_the_packed_weight():
    w = RNG.standard_normal((20, 70)).astype(np.float32)
    p = L.pk_pack(w)
    nr = L.PK_NR
    assert p.shape == (-(-70 // nr), 20, nr) and p.ctypes.data % 64 == 0
    full = 70 // nr
    np.testing.assert_array_equal(p[:full].transpose(1, 0, 2).reshape(20, full * nr), w[:, :full * nr])
    np.testing.assert_array_equal(p[full, :, :70 - full * nr], w[:, full * nr:])
    assert not p[full, :, 70 - full * nr:].any()


@pytest.mark.parametrize("epi", ["bias_gelu", "softmax", "plain"])
@pytest.mark.parametrize("shape", [(16, 256, 2000), (200, 96, 1001), (40, 600, 130)])
def test_jit_with_epilogues(nthreads, epi, shape):
    """Through nee.jit(freeze=True): the product with a fused epilogue (tasks with the epilogue in each, or
    rows with a softmax), against the eager run and float64."""
    M, K, N = shape
    a = RNG.standard_normal((1, M, K)).astype(np.float32)
    w = RNG.standard_normal((K, N)).astype(np.float32)
    bias = RNG.standard_normal(N).astype(np.float32)
    W, B = nee.tensor(w), nee.tensor(bias)
    f = {"bias_gelu": lambda x: nee.nn.functional.gelu(x @ W + B), "softmax": lambda x: nee.softmax(x @ W + B, -1),
         "plain": lambda x: x @ W}[epi]
    j = nee.jit(f, freeze=True)
    x = nee.tensor(a)
    for _ in range(3):
        got = j(x).numpy()
    ref = _ref(a[0], w)
    if epi != "plain":
        ref = ref + bias
        if epi == "softmax":
            ref = np.exp(ref - ref.max(-1, keepdims=True))
            ref = ref / ref.sum(-1, keepdims=True)
        else:
            from math import erf, sqrt
            ref = ref * 0.5 * (1 + np.vectorize(erf)(ref / sqrt(2)))
    np.testing.assert_allclose(got[0], ref, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    np.testing.assert_allclose(got, f(x).numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(K))


def test_onnx_classifier_head_against_onnxruntime():
    """A Gemm to 1000 classes (transB, as exporters write it) on 16 rows: the packed path, onnxruntime's values."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    w = (RNG.standard_normal((1000, 320)) * 0.05).astype(np.float32)
    b = RNG.standard_normal(1000).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "head",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 320])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 1000])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    s = nee.onnx.InferenceSession(model)
    o = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(3):
        x = RNG.standard_normal((16, 320)).astype(np.float32)
        np.testing.assert_allclose(s.run(None, {"x": x})[0], o.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
