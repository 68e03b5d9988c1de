"""A decoder step's KV-cache append fused with the attention products reading it (jit/executable.py
_fuse_kv_products; kernels/shape.py bind_cat_matmul / bind_cat_dot): the copy of ``past`` into ``present``
and ``softmax(q present^T * s)`` / ``p @ present`` in one pass.  Checked against numpy (float64), against the
same graph with the fusion off, and against onnxruntime, over several calls with new values; layouts the
fused kernels do not take (float64, rows not a multiple of 8, a strided past) must fall back to the plain
steps with the same results."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import shape as S
from neetorch.jit import executable as E

F = nee.nn.functional


def _t(rng, *s, dt=np.float32):
    return rng.standard_normal(s).astype(dt)


@pytest.mark.parametrize("nt", [True, False], ids=["ntstores", "stores"])
@pytest.mark.parametrize("lead,P,D", [((1, 12), 512, 32), ((2, 3), 5, 16), ((4,), 1, 8)])
def test_kernels_match_numpy(nthreads, lead, P, D, nt, monkeypatch):
    monkeypatch.setattr(S, "KV_NT", [nt and S.KV_NT[0]])
    rng = np.random.default_rng(P + D)
    past, new = _t(rng, *lead, P, D), _t(rng, *lead, 1, D)
    ref = np.concatenate([past, new], -2).astype(np.float64)
    # q as a strided view (a head split of a fused projection: heads one stride apart), p contiguous
    if lead[0] == 1:
        qkv = _t(rng, 1, 1, 3 * lead[-1] * D)
        q = np.moveaxis(qkv[..., :lead[-1] * D].reshape(1, 1, lead[-1], D), -2, -3)
    else:
        q = _t(rng, *lead, 1, D)
    p = rng.random(lead + (1, P + 1)).astype(np.float32)
    size = int(np.prod(lead)) * (P + 1) * D
    for kind, mis in (("dot", 0), ("mm", 0), ("dot", 1), ("mm", 3)):
        # present 16-byte aligned (non-temporal stores) or not (ordinary ones)
        buf = np.full(size + 4, np.nan, np.float32)
        off = (-(buf.ctypes.data // 4) % 4 + mis) % 4
        out = buf[off:off + size].reshape(lead + (P + 1, D))
        assert (out.ctypes.data % 16 == 0) == (mis == 0)
        out[..., P:, :] = new
        if kind == "dot":
            y = np.full(lead + (1, P + 1), np.nan, np.float32)
            f = S.bind_cat_dot(out, past, q, y)
            want = q.astype(np.float64) @ np.swapaxes(ref, -1, -2)
            assert f is not None and f(out, past, q, y)
        else:
            y = np.full(lead + (1, D), np.nan, np.float32)
            f = S.bind_cat_matmul(out, past, p, y)
            want = p.astype(np.float64) @ ref
            assert f is not None and f(out, past, p, y)
        assert np.array_equal(out, ref.astype(np.float32))
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_kernels_refuse_other_layouts():
    rng = np.random.default_rng(0)
    past, p = _t(rng, 1, 4, 6, 16), rng.random((1, 4, 1, 7)).astype(np.float32)
    out, ctx = np.empty((1, 4, 7, 16), np.float32), np.empty((1, 4, 1, 16), np.float32)
    assert S.bind_cat_matmul(out, past, p, ctx) is not None
    assert S.bind_cat_matmul(out.astype(np.float64), past.astype(np.float64), p.astype(np.float64),
                             ctx.astype(np.float64)) is None                        # not float32
    assert S.bind_cat_matmul(out[..., :12], past[..., :12], p, ctx[..., :12]) is None   # rows of 12
    assert S.bind_cat_matmul(out, np.empty((1, 4, 12, 16), np.float32)[:, :, ::2], p, ctx) is None  # strided
    assert S.bind_cat_matmul(out, past, np.empty((1, 4, 2, 7), np.float32), ctx) is None       # two queries
    assert S.bind_cat_matmul(out, out[:, :, :6], p, ctx) is None                    # past overlaps present
    # heads laid out otherwise in p / q than in the cache (the same count): a broadcasting product
    pt = rng.random((4, 1, 1, 7)).astype(np.float32)
    assert S.bind_cat_matmul(out, past, pt, ctx) is None
    assert S.bind_cat_dot(out, past, _t(rng, 4, 1, 1, 16), np.empty((1, 4, 1, 7), np.float32)) is None
    assert S.bind_cat_dot(out, past, _t(rng, 1, 4, 1, 16), np.empty((1, 4, 1, 7), np.float32)) is not None


def _step(scale):
    def fn(q, k, v, past_k, past_v):
        pk = nee.cat([past_k, k], 2)
        pv = nee.cat([past_v, v], 2)
        p = F.softmax(q @ pk.transpose(2, 3) * scale, -1)
        return p @ pv, pk, pv
    return fn


def _ref(q, k, v, pk, pv, scale):
    K = np.concatenate([pk, k], 2).astype(np.float64)
    V = np.concatenate([pv, v], 2).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(K, 2, 3) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ V, K, V


def _fused_runners(f):
    (exe, _), = {id(e[0]): e for e in f._fast.values()}.values()
    names = [r.__qualname__ for r in exe._local.fast[2]]
    # (a whole attention fused in one step, _fuse_kv_attention, stands for both caches' fused steps)
    return sum("_fuse_kv_scores" in n or "_kv_product_part" in n for n in names) + \
        2 * sum("_kv_attention_part" in n for n in names)


@pytest.mark.parametrize("H,P,D,dt,fused", [(4, 9, 16, np.float32, 2), (3, 5, 4, np.float32, 2),
                                            (2, 6, 8, np.float64, 2)])
def test_jit_step_matches_numpy_and_unfused(nthreads, H, P, D, dt, fused):
    """The fused steps are built for this graph (both caches); rows of 4 and float64 are layouts the kernels
    refuse at the first call: the steps then copy the cache and run the plain products."""
    scale = 1.0 / np.sqrt(D)
    outs = {}
    for on in (True, False):
        E._FUSE_KV[0] = on
        try:
            f = nee.jit(_step(scale))
            res = []
            for call in range(3):
                rng2 = np.random.default_rng(call)
                args = [_t(rng2, 1, H, 1, D, dt=dt), _t(rng2, 1, H, 1, D, dt=dt), _t(rng2, 1, H, 1, D, dt=dt),
                        _t(rng2, 1, H, P, D, dt=dt), _t(rng2, 1, H, P, D, dt=dt)]
                got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
                want = _ref(*args, scale)
                for g, w in zip(got[1:], want[1:]):
                    assert np.array_equal(g, w.astype(dt))
                np.testing.assert_allclose(got[0], want[0], rtol=1e-4 if dt == np.float32 else 1e-10, atol=1e-5)
                res.append(got)
            outs[on] = res
            assert _fused_runners(f) == (fused if on else 0)
        finally:
            E._FUSE_KV[0] = True
    for a, b in zip(outs[True], outs[False]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_past_used_elsewhere_is_not_fused(nthreads):
    """A present read by two steps (scores through a transpose and the context product) keeps the plain cat."""
    rng = np.random.default_rng(3)

    def fn(q, k, past):
        pk = nee.cat([past, k], 2)
        p = F.softmax(q @ pk.transpose(2, 3), -1)
        return p @ pk, pk
    f = nee.jit(fn)
    args = [_t(rng, 1, 2, 1, 8), _t(rng, 1, 2, 1, 8), _t(rng, 1, 2, 5, 8)]
    got = f(*[nee.from_numpy(a) for a in args])
    K = np.concatenate([args[2], args[1]], 2).astype(np.float64)
    s = args[0] @ np.swapaxes(K, 2, 3)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got[0].numpy(), (e / e.sum(-1, keepdims=True)) @ K, rtol=1e-4, atol=1e-5)
    assert _fused_runners(f) == 0


def test_onnx_decoder_step_matches_onnxruntime(nthreads):
    ort = pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    spec = M.gpt_step(past=16, d=32, heads=4, layers=2)        # rows of 8: the fused kernels run
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(spec.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess = M.nee_session(spec.model, nthreads)
    feed = dict(spec.feed)
    for call in range(3):
        got = sess.run(None, feed)
        want = ref.run(None, feed)
        assert spec.close(got, want), call
        rng = np.random.default_rng(call)
        feed = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feed.items()}


def test_thread_count_change_between_calls():
    """Steps bound at one thread count are bound anew at another (results unchanged)."""
    old = threads.get_num_threads()
    scale = 0.3
    f = nee.jit(_step(scale))
    rng = np.random.default_rng(7)
    try:
        for nt in (2, 1, 2):
            nee.set_num_threads(nt)
            args = [_t(rng, 1, 3, 1, 8), _t(rng, 1, 3, 1, 8), _t(rng, 1, 3, 1, 8), _t(rng, 1, 3, 6, 8),
                    _t(rng, 1, 3, 6, 8)]
            got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
            want = _ref(*args, scale)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
            assert np.array_equal(got[1], want[1].astype(np.float32))
        assert _fused_runners(f) == 2
    finally:
        nee.set_num_threads(old)
