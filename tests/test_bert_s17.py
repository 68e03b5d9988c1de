"""Session 17 (helper 'bert'): batches of small float32 products through linalg's batched packed kernel
(attention's q @ k^T and p @ v on (B, H, S, dh) views whose batch dims do not merge), alone and with a
softmax row epilogue fused per matrix (fused._InBlockRows.bind_batched); differential against numpy
(float64) and onnxruntime, on 1 and 2 threads."""
import numpy as np
import pytest

import neetorch  # noqa: F401  (the package first: the CPU backend registers its kernels)
from neetorch.devices.cpu.kernels import linalg as L


def _host_ok():
    return L._pk_host_ok()


pytestmark = pytest.mark.skipif(not _host_ok(), reason="packed kernel needs AVX2+FMA or AVX-512F")


def _heads(rng, B, S, H, D):
    x = rng.standard_normal((B, S, H * D)).astype(np.float32)
    return x, x.reshape(B, S, H, D).transpose(0, 2, 1, 3), x.reshape(B, S, H, D).transpose(0, 2, 3, 1)


def _check(out, a, b):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("B,S,H,D", [(3, 37, 5, 16), (2, 64, 4, 32), (1, 13, 3, 48), (4, 128, 12, 32)])
def test_attention_views(nthreads, B, S, H, D):
    """q @ k^T (k^T a gather: unit stride along K, rows S*H*D apart) and p @ v (v rows H*D apart), odd
    sizes; taken by the batched kernel wherever N is a multiple of the panel."""
    rng = np.random.default_rng(B * 1000 + S)
    _, q, kt = _heads(rng, B, S, H, D)
    Sp = S if S % L.PK_NR == 0 else S + (-S % L.PK_NR)     # a key count the kernel takes
    _, _, kt2 = _heads(rng, B, Sp, H, D)
    out = np.full((B, H, S, Sp), np.nan, np.float32)
    assert L._bpk_caller(out, q, kt2) is not None
    L.matmul_into(out, q, kt2)
    _check(out, q, kt2)
    p = rng.standard_normal((B, H, S, Sp)).astype(np.float32)
    _, v, _ = _heads(rng, B, Sp, H, D)
    o2 = np.full((B, H, S, D), np.nan, np.float32)
    taken = L._bpk_caller(o2, p, v) is not None
    assert taken == (D % L.PK_NR == 0 and Sp <= L.PK_KC and Sp * D <= L.BPK_MAX_PANEL)
    L.matmul_into(o2, p, v)
    _check(o2, p, v)
    # not a multiple of the panel: the other paths, same results
    o3 = np.empty((B, H, S, S), np.float32)
    L.matmul_into(o3, q, kt)
    _check(o3, q, kt)


@pytest.mark.parametrize("case", ["bcast_a", "bcast_b", "lead_b", "contig", "three_groups", "strided_out"])
def test_layouts(nthreads, case):
    rng = np.random.default_rng(7)
    M, K, N = 19, 24, 32
    if case == "bcast_a":        # one a for every matrix (stride 0)
        a = np.broadcast_to(rng.standard_normal((M, K)).astype(np.float32), (3, 4, M, K))
        b = rng.standard_normal((3, 4, K, N)).astype(np.float32)
    elif case == "bcast_b":      # b broadcast along the inner batch dim
        a = rng.standard_normal((3, 4, M, K)).astype(np.float32)
        b = rng.standard_normal((3, 1, K, N)).astype(np.float32)
    elif case == "lead_b":       # b with fewer batch dims
        a = rng.standard_normal((3, 4, M, K)).astype(np.float32)
        b = rng.standard_normal((4, K, N)).astype(np.float32)
    elif case == "contig":
        a = rng.standard_normal((6, M, K)).astype(np.float32)
        b = rng.standard_normal((6, K, N)).astype(np.float32)
    elif case == "three_groups":  # batch dims in three non-merging groups: not taken, still right
        a = rng.standard_normal((2, 3, 4, M, K)).astype(np.float32).transpose(0, 2, 1, 3, 4)
        b = rng.standard_normal((2, 4, 3, K, N)).astype(np.float32)
        assert L._bpk_caller(np.empty((2, 4, 3, M, N), np.float32), a, b) is None
    else:                        # b with a column stride (transposed) and a row stride
        a = rng.standard_normal((5, M, K)).astype(np.float32)
        b = rng.standard_normal((5, N, 2 * K)).astype(np.float32)[:, :, ::2].transpose(0, 2, 1)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (M, N)
    out = np.full(shape, np.nan, np.float32)
    L.matmul_into(out, a, b)
    _check(out, a, b)


def test_not_taken():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 16, 8)).astype(np.float32)
    b = rng.standard_normal((4, 8, 24)).astype(np.float32)          # N not a multiple of the panel
    assert L._bpk_caller(np.empty((4, 16, 24), np.float32), a, b) is None
    a64 = a.astype(np.float64)
    b64 = rng.standard_normal((4, 8, 32))
    assert L._bpk_caller(np.empty((4, 16, 32)), a64, b64) is None      # float64
    big = rng.standard_normal((2, 16, 1024)).astype(np.float32)
    bb = rng.standard_normal((2, 1024, 32)).astype(np.float32)
    assert L._bpk_caller(np.empty((2, 16, 32), np.float32), big, bb) is None   # K past one block
    a3 = rng.standard_normal((4, 3, 8)).astype(np.float32)          # fewer rows than the few-row kernel's
    assert L._bpk_caller(np.empty((4, 3, 32), np.float32), a3, rng.standard_normal((4, 8, 32)).astype(np.float32)) \
        is None


def test_toggle_matches():
    """The kernel on and off give the same products (to float32 rounding)."""
    rng = np.random.default_rng(11)
    _, q, kt = _heads(rng, 2, 48, 3, 32)
    o1 = np.empty((2, 3, 48, 48), np.float32)
    o2 = np.empty_like(o1)
    L.matmul_into(o1, q, kt)
    L.BPK_ON[0] = False
    try:
        L._bpk_plans.clear()
        L.matmul_into(o2, q, kt)
    finally:
        L.BPK_ON[0] = True
        L._bpk_plans.clear()
    np.testing.assert_allclose(o1, o2, rtol=1e-5, atol=1e-5)


def _attention_model(B, S, H, D, pv=True):
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh
    inits = [nh.from_array(np.array([0, 0, H, D], np.int64), "sh"),
             nh.from_array(np.array(1.0 / np.sqrt(D), np.float32), "sc")]
    nodes = [h.make_node("Reshape", ["x", "sh"], ["r"]), h.make_node("Transpose", ["r"], ["q"], perm=[0, 2, 1, 3]),
             h.make_node("Transpose", ["r"], ["kt"], perm=[0, 2, 3, 1]), h.make_node("MatMul", ["q", "kt"], ["s"]),
             h.make_node("Mul", ["s", "sc"], ["s2"]), h.make_node("Softmax", ["s2"], ["p"], axis=-1)]
    if pv:
        nodes.append(h.make_node("MatMul", ["p", "q"], ["y"]))
        oshape = [B, H, S, D]
    else:
        nodes.append(h.make_node("Identity", ["p"], ["y"]))
        oshape = [B, H, S, S]
    g = h.make_graph(nodes, "att", [h.make_tensor_value_info("x", TP.FLOAT, [B, S, H * D])],
                     [h.make_tensor_value_info("y", TP.FLOAT, oshape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("B,S,H,D,pv", [(2, 32, 4, 16, True), (3, 48, 2, 32, False), (1, 20, 3, 16, True)])
def test_onnx_attention_vs_ort(nthreads, B, S, H, D, pv, monkeypatch):
    """Scores + scale + softmax (+ p @ v) as the ONNX graph writes them: the fused step's bound path runs the
    batched kernel with the softmax on each matrix (S a multiple of the panel) or the other paths."""
    ort = pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    from neetorch.devices.cpu.kernels import fused as F
    bound = []
    orig = F._InBlockRows.bind_batched

    def spy(self, outs, ins):
        f = orig(self, outs, ins)
        bound.append(f is not None)
        return f
    monkeypatch.setattr(F._InBlockRows, "bind_batched", spy)
    m = _attention_model(B, S, H, D, pv)
    x = np.random.default_rng(S).standard_normal((B, S, H * D)).astype(np.float32) * 2
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    s = M.nee_session(m, nthreads)
    for _ in range(3):      # first run unbound, then the bound steps
        got = s.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert any(bound) == (S % L.PK_NR == 0)


def test_bert_tiny_vs_ort(nthreads):
    pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    spec = M.bert(batch=2, seq=32, d=64, heads=4, layers=2)
    ref = M.ort_session(spec.model, 1).run(None, spec.feed)
    s = M.nee_session(spec.model, nthreads)
    for _ in range(3):
        got = s.run(None, spec.feed)
        assert spec.close(got, ref)
