"""``nee.jit(fn, freeze=...)``: captured tensors as frozen constants (jit/passes.freeze_constants)."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import passes

F = nee.nn.functional


def _linear_fn(w, b):
    return lambda x: F.gelu(F.linear(x, w, b))


def _ref(x, w, b):
    y = x @ w.T + b
    import math
    erf = np.vectorize(math.erf)
    return (0.5 * y * (1 + erf(y / math.sqrt(2)))).astype(np.float32)


def test_freeze_snapshots_and_lays_out_weights_row_major():
    rng = np.random.default_rng(0)
    wn, bn = rng.standard_normal((24, 16)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    w, b = nee.tensor(wn.copy()), nee.tensor(bn.copy())
    x = nee.tensor(rng.standard_normal((32, 16)).astype(np.float32))
    frozen, live = nee.jit(_linear_fn(w, b), freeze=True), nee.jit(_linear_fn(w, b))
    np.testing.assert_allclose(frozen(x).numpy(), _ref(x.numpy(), wn, bn), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(live(x).numpy(), _ref(x.numpy(), wn, bn), rtol=1e-5, atol=1e-5)
    consts = list(frozen.graph(x).consts.values())
    assert consts and all(t.is_contiguous() for t in consts)
    assert any(tuple(t.shape) == (16, 24) for t in consts)        # w.t(), now row-major
    # in-place updates after the first call: the frozen program keeps the snapshot, the default one reads live
    w.mul_(2.0)
    b.add_(1.0)
    np.testing.assert_allclose(frozen(x).numpy(), _ref(x.numpy(), wn, bn), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(live(x).numpy(), _ref(x.numpy(), 2 * wn, bn + 1), rtol=1e-5, atol=1e-5)
    # a new shape specializes again and still sees the first call's values, from the same copies
    x2 = nee.tensor(rng.standard_normal((5, 16)).astype(np.float32))
    np.testing.assert_allclose(frozen(x2).numpy(), _ref(x2.numpy(), wn, bn), rtol=1e-5, atol=1e-5)
    assert frozen.stats["specializations"] == 2
    # w.t() and b snapshotted once; the 5-row (matrix-vector-like) product reads w.t() column-major,
    # a second layout made from the snapshot (not from w, which changed)
    layouts = sorted(str(k[1]) for k in frozen._frozen)
    assert layouts == ["None", "None", "cols"]
    assert any(t.t().is_contiguous() and tuple(t.shape) == (16, 24) for t in frozen.graph(x2).consts.values())


def test_freeze_shape_buckets_share_one_copy_and_stay_exact():
    rng = np.random.default_rng(1)
    wn = rng.standard_normal((8, 12)).astype(np.float32)
    w = nee.tensor(wn)
    f = nee.jit(lambda x: F.linear(x, w).softmax(-1), dynamic={0: 0}, freeze=True)
    for n in (3, 9, 17, 33, 64):
        xn = rng.standard_normal((n, 12)).astype(np.float32)
        y = xn @ wn.T
        e = np.exp(y - y.max(-1, keepdims=True))
        np.testing.assert_allclose(f(nee.tensor(xn)).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    # one snapshot of w.t() for every bucket, plus its column-major layout for the 3-row bucket
    assert sorted(str(k[1]) for k in f._frozen) == ["None", "cols"]


def test_freeze_keeps_broadcast_constants_compact():
    rng = np.random.default_rng(2)
    bias = nee.tensor(rng.standard_normal(6).astype(np.float32))
    big = bias.expand(4096, 6)            # a stride-0 view: its snapshot must not be materialized
    f = nee.jit(lambda x: x * 2 + big, freeze=True)
    x = nee.tensor(rng.standard_normal((4096, 6)).astype(np.float32))
    want = x.numpy() * 2 + bias.numpy()
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
    frozen = [t for _, t in f._frozen.values() if t.ndim == 2]
    assert len(frozen) == 1 and frozen[0].stride()[0] == 0
    bias.add_(5.0)                        # the snapshot is a copy, not the captured memory
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)


def test_views_mode_moves_product_weights_to_their_layout_in_place():
    rng = np.random.default_rng(3)
    wn, on = rng.standard_normal((10, 7)).astype(np.float32), rng.standard_normal((7, 10)).astype(np.float32)
    w, other = nee.tensor(wn), nee.tensor(on)
    wt, ot = w.t(), other.t()              # the tensors the trace captures
    fn = lambda x: nee.matmul(x, wt) + ot[:1, :7].sum()  # noqa: E731
    f = nee.jit(fn, freeze="views")
    x = nee.tensor(rng.standard_normal((16, 7)).astype(np.float32))
    np.testing.assert_allclose(f(x).numpy(), x.numpy() @ wn.T + on.T[:1, :7].sum(), rtol=1e-5, atol=1e-5)
    # the 16-row product's weight now is row-major (same object, same values, new storage); the
    # constant read by something else than a product keeps its layout; no copy is remembered
    assert wt.is_contiguous() and np.array_equal(wt.numpy(), wn.T)
    assert not ot.is_contiguous() and not f._frozen
    np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)
    # a matrix-vector-like product (fewer than FREEZE_MIN_ROWS rows) wants it column-major
    wk = nee.tensor(rng.standard_normal((7, 10)).astype(np.float32))
    wk_values = wk.numpy().copy()
    h = nee.jit(lambda x: nee.matmul(x, wk), freeze="views")
    x1 = nee.tensor(rng.standard_normal((1, 7)).astype(np.float32))
    np.testing.assert_allclose(h(x1).numpy(), x1.numpy() @ wk_values, rtol=1e-5, atol=1e-5)
    assert 1 < passes.FREEZE_MIN_ROWS and wk.t().is_contiguous() and np.array_equal(wk.numpy(), wk_values)
    np.testing.assert_allclose(h(x1).numpy(), x1.numpy() @ wk_values, rtol=1e-5, atol=1e-5)


def test_freeze_rejects_unknown_values():
    with pytest.raises(ValueError, match="freeze must be"):
        nee.jit(lambda x: x, freeze="yes")


def test_onnx_gemm_transb_runs_on_a_row_major_copy():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    wn = rng.standard_normal((24, 40)).astype(np.float32)
    cn = rng.standard_normal(24).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])],
        [numpy_helper.from_array(wn, "w"), numpy_helper.from_array(cn, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = nee.onnx.InferenceSession(model.SerializeToString())
    for n in (16, 3, 40):
        xn = rng.standard_normal((n, 40)).astype(np.float32)
        (y,) = sess.run(None, {"x": xn})
        np.testing.assert_allclose(y, 0.5 * (xn @ wn.T) + cn, rtol=1e-5, atol=1e-5)
    (wt,) = [t for t in sess._jit.graph(nee.tensor(xn)).consts.values() if t.ndim == 2]
    assert tuple(wt.shape) == (40, 24) and wt.is_contiguous() and np.array_equal(wt.numpy(), wn.T)
