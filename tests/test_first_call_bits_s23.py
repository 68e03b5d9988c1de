"""A compiled graph's first call gives the bits of its later calls (session 23).

The first call runs the steps unbound (binding them for the next calls): its products went through the GEMM driver's
fused plans / OpenBLAS or linalg's few-row kernel, the bound steps through the packed kernels (frozen weights:
linalg._pk_caller, gemv.py's one-row kernel; batches of small products: the batched packed kernel), which sum in
another order: ONNX sessions of ResNet-50, Inception v1 / v2, BERT, the MLP returned other last bits on their first
run than on every later one.  Now the unbound paths take the kernel the bound step takes.

Each case: outputs of the first calls == the later calls' bit for bit, at 1 and 2 threads, and close to numpy.
"""
import numpy as np
import pytest

import neetorch as nee

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import neetorch.onnx as nonnx  # noqa: E402

RNG = np.random.default_rng(2323)


def _session(nodes, inputs, inits, outputs):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, sh) for n, sh in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return nonnx.InferenceSession(m.SerializeToString())


def _runs(sess, feed, n=5):
    return [[o.copy() for o in sess.run(None, feed)] for _ in range(n)]


def _same_bits(runs):
    for r in runs[1:]:
        for got, want in zip(r, runs[0]):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), \
                f"a later call differs from the first: max |diff| {np.abs(got - want).max()}"


@pytest.mark.parametrize("R,K,N,relu,transB", [(64, 784, 1024, True, True), (64, 1024, 1024, True, True),
                                               (48, 512, 256, False, False), (1, 784, 1024, True, True),
                                               (1, 300, 200, False, False), (3, 256, 128, True, True)])
def test_gemm_first_call_bits(nthreads, R, K, N, relu, transB):
    w = (RNG.standard_normal((N, K) if transB else (K, N)) / np.sqrt(K)).astype(np.float32)
    b = RNG.standard_normal(N).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=int(transB)),
             helper.make_node("Relu" if relu else "Identity", ["g"], ["y"])]
    s = _session(nodes, [("x", [R, K])], {"w": w, "b": b}, [("y", [R, N])])
    x = RNG.standard_normal((R, K)).astype(np.float32)
    runs = _runs(s, {"x": x})
    _same_bits(runs)
    want = x.astype(np.float64) @ (w.T if transB else w).astype(np.float64) + b
    if relu:
        want = np.maximum(want, 0)
    np.testing.assert_allclose(runs[0][0], want, rtol=1e-4, atol=1e-4)


def test_attention_first_call_bits(nthreads):
    # scores = softmax(q @ k^T * s), out = scores @ v: batches of small products (the batched packed kernel)
    B, H, L, D = 1, 4, 64, 32
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "s"], ["qs"]),
             helper.make_node("Softmax", ["qs"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    s = _session(nodes, [("q", [B, H, L, D]), ("k", [B, H, L, D]), ("v", [B, H, L, D])],
                 {"s": np.array(D ** -0.5, np.float32)}, [("y", [B, H, L, D]), ("p", [B, H, L, L])])
    feed = {n: RNG.standard_normal((B, H, L, D)).astype(np.float32) for n in ("q", "k", "v")}
    runs = _runs(s, feed)
    _same_bits(runs)
    sc = feed["q"].astype(np.float64) @ np.swapaxes(feed["k"], -1, -2) * D ** -0.5
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(runs[0][0], p @ feed["v"], rtol=1e-4, atol=1e-5)


def test_jit_linear_first_call_bits(nthreads):
    w1 = nee.tensor((RNG.standard_normal((96, 1024)) / 32).astype(np.float32))
    w2 = nee.tensor((RNG.standard_normal((1024, 64)) / 32).astype(np.float32))
    b1 = nee.tensor(RNG.standard_normal(1024).astype(np.float32))

    @nee.jit(freeze=True)
    def f(x):
        return nee.relu(x @ w1 + b1) @ w2

    x = nee.tensor(RNG.standard_normal((40, 96)).astype(np.float32))
    outs = [f(x).numpy().copy() for _ in range(5)]
    _same_bits([[o] for o in outs])
    want = np.maximum(x.numpy().astype(np.float64) @ w1.numpy() + b1.numpy(), 0) @ w2.numpy()
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4)
