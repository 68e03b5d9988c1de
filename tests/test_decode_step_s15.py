"""A decoder layer's whole attention over its KV caches in one step (session 15: kernels/shape.py
bind_kv_attention, jit/executable.py _fuse_kv_attention): ``present_k = cat([past_k, new_k]); present_v =
cat([past_v, new_v]); ctx = softmax(q @ present_k^T * c) @ present_v`` as one job per call.  Checked against
numpy (float64) for the kernel (odd head counts and row lengths, batch > 1 with the heads of a fused projection
at two strides, several new rows, past length 1, non-temporal stores on and off, 1 and 2 threads), against
onnxruntime for the ONNX GPT step (batch 1 and 3, several past lengths, a decode loop feeding present back as
past), against the same graphs with the fusion off, and for the layouts and graphs it must leave alone."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import shape as S
from neetorch.jit import executable as E

F = nee.nn.functional


def _t(rng, *s, dt=np.float32):
    return rng.standard_normal(s).astype(dt)


def _ref(kp, kn, vp, vn, q, scale):
    K = np.concatenate([kp, kn], -2).astype(np.float64)
    V = np.concatenate([vp, vn], -2).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(K, -1, -2) * np.float64(np.float32(scale))
    e = np.exp(s - s.max(-1, keepdims=True))
    return K, V, (e / e.sum(-1, keepdims=True)) @ V


def _heads(qkv, i, lead_b, H, D, Tn):
    """Part ``i`` of a fused projection (B, Tn, 3 H D) as heads (B, H, Tn, D): a strided view."""
    return qkv[..., i * H * D:(i + 1) * H * D].reshape(lead_b, Tn, H, D).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("pf", [0, 4096], ids=["noprefetch", "prefetch"])
@pytest.mark.parametrize("ntst", [True, False], ids=["ntstores", "stores"])
@pytest.mark.parametrize("B,H,P,D,Tn", [(1, 12, 512, 32, 1), (2, 3, 7, 16, 1), (1, 1, 1, 8, 1),
                                        (3, 2, 100, 64, 2), (1, 5, 33, 24, 1), (1, 2, 20, 72, 1)])
def test_kernel_matches_numpy(nthreads, B, H, P, D, Tn, ntst, pf, monkeypatch):
    monkeypatch.setattr(S, "KV_NT", [ntst and S.KV_NT[0]])
    monkeypatch.setattr(S, "KV_PREFETCH", [pf])
    rng = np.random.default_rng(P * 7 + D)
    kp, vp = _t(rng, B, H, P, D) * 3, _t(rng, B, H, P, D)
    qkv = _t(rng, B, Tn, 3 * H * D)
    q = _heads(qkv, 0, B, H, D, Tn)[:, :, :1]
    kn, vn = _heads(qkv, 1, B, H, D, Tn), _heads(qkv, 2, B, H, D, Tn)
    if Tn > 1:      # (several new rows: each head's rows contiguous)
        kn, vn = kn.copy(), vn.copy()
    scale = 1.0 / np.sqrt(D)
    for mis in (0, 1):          # present 16-byte aligned or not (ordinary stores then)
        size = B * H * (P + Tn) * D
        bufs = [np.full(size + 4, np.nan, np.float32) for _ in range(2)]
        ko, vo = (b[(-(b.ctypes.data // 4) % 4 + mis) % 4:][:size].reshape(B, H, P + Tn, D) for b in bufs)
        ctx = np.full((B, H, 1, D), np.nan, np.float32)
        f = S.bind_kv_attention(ko, kp, kn, vo, vp, vn, q, ctx, scale)
        assert f is not None and f(ko, kp, kn, vo, vp, vn, q, ctx)
        K, V, want = _ref(kp, kn, vp, vn, q, scale)
        assert np.array_equal(ko, K.astype(np.float32)) and np.array_equal(vo, V.astype(np.float32))
        np.testing.assert_allclose(ctx, want, rtol=2e-5, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("pf", [0, 4096], ids=["noprefetch", "prefetch"])
def test_pairwise_kernels_with_prefetch(pf, monkeypatch):
    """The pairwise KV kernels (bind_cat_dot / bind_cat_matmul) with and without the software prefetch."""
    monkeypatch.setattr(S, "KV_PREFETCH", [pf])
    rng = np.random.default_rng(11)
    H, P, D = 5, 300, 16
    past, new, q = _t(rng, 1, H, P, D), _t(rng, 1, H, 1, D), _t(rng, 1, H, 1, D)
    ref = np.concatenate([past, new], -2)
    p = rng.random((1, H, 1, P + 1)).astype(np.float32)
    for kind in ("dot", "mm"):
        out = np.full((1, H, P + 1, D), np.nan, np.float32)
        out[:, :, P:] = new
        if kind == "dot":
            y = np.empty((1, H, 1, P + 1), np.float32)
            f, want = S.bind_cat_dot(out, past, q, y), q.astype(np.float64) @ np.swapaxes(ref, -1, -2)
            assert f is not None and f(out, past, q, y)
        else:
            y = np.empty((1, H, 1, D), np.float32)
            f, want = S.bind_cat_matmul(out, past, p, y), p.astype(np.float64) @ ref
            assert f is not None and f(out, past, p, y)
        assert np.array_equal(out, ref)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_unrolled_and_looped_rows_agree(nthreads, monkeypatch):
    """Rows of up to 64 elements run unrolled (q and the sums in registers), longer ones a loop: both kernels
    give the same results (the same operations in the same order)."""
    rng = np.random.default_rng(12)
    B, H, P, D = 1, 6, 77, 40
    kp, vp, kn, vn, q = _t(rng, B, H, P, D), _t(rng, B, H, P, D), _t(rng, B, H, 1, D), _t(rng, B, H, 1, D), \
        _t(rng, B, H, 1, D)
    got = []
    for unroll in (8, 0):
        monkeypatch.setattr(S, "ATTN_UNROLL", [unroll])
        ko, vo, ctx = (np.empty((B, H, n, D), np.float32) for n in (P + 1, P + 1, 1))
        f = S.bind_kv_attention(ko, kp, kn, vo, vp, vn, q, ctx, 0.2)
        assert f is not None and f(ko, kp, kn, vo, vp, vn, q, ctx)
        got.append((ko, vo, ctx))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0][2], _ref(kp, kn, vp, vn, q, 0.2)[2], rtol=2e-5, atol=2e-6)


def test_kernel_softmax_extremes():
    """Scores far apart (exp underflows to 0 for all but one row), equal scores (uniform weights), a NaN in
    a head's keys (that head's context NaN, the others exact)."""
    rng = np.random.default_rng(1)
    H, P, D = 3, 40, 8
    kp, vp, kn, vn = _t(rng, H, P, D), _t(rng, H, P, D), _t(rng, H, 1, D), _t(rng, H, 1, D)
    q = _t(rng, H, 1, D)
    kp[0] *= 0
    kp[0, 5] = q[0, 0] * 50       # head 0: row 5 dominates, the others' scores 0
    kp[1] = 0
    kn[1] = 0                     # head 1: every score 0
    kp[2, 11, 3] = np.nan         # head 2: NaN
    ko, vo, ctx = np.empty((H, P + 1, D), np.float32), np.empty((H, P + 1, D), np.float32), \
        np.empty((H, 1, D), np.float32)
    f = S.bind_kv_attention(ko, kp, kn, vo, vp, vn, q, ctx, 1.0)
    assert f is not None and f(ko, kp, kn, vo, vp, vn, q, ctx)
    _, V, want = _ref(kp, kn, vp, vn, q, 1.0)
    np.testing.assert_allclose(ctx[:2], want[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ctx[1, 0], V[1].mean(0), rtol=1e-5, atol=1e-6)
    assert np.isnan(ctx[2]).all() and np.isnan(want[2]).all()


def test_kernel_refuses_other_layouts():
    rng = np.random.default_rng(2)
    H, P, D = 4, 6, 16
    kp, vp, kn, vn, q = _t(rng, 1, H, P, D), _t(rng, 1, H, P, D), _t(rng, 1, H, 1, D), _t(rng, 1, H, 1, D), \
        _t(rng, 1, H, 1, D)
    ko, vo, ctx = np.zeros((1, H, P + 1, D), np.float32), np.zeros((1, H, P + 1, D), np.float32), \
        np.zeros((1, H, 1, D), np.float32)
    args = [ko, kp, kn, vo, vp, vn, q, ctx]
    assert S.bind_kv_attention(*args, 0.25) is not None
    d64 = [a.astype(np.float64) for a in args]
    assert S.bind_kv_attention(*d64, 0.25) is None                                   # not float32
    assert S.bind_kv_attention(*[a[..., :12] for a in args], 0.25) is None           # rows of 12
    assert S.bind_kv_attention(ko, np.empty((1, H, 2 * P, D), np.float32)[:, :, ::2], kn, vo, vp, vn, q, ctx,
                               0.25) is None                                          # strided past rows
    assert S.bind_kv_attention(ko, kp, kn, vo, vp, vn, _t(rng, 1, H, 2, D), np.empty((1, H, 2, D), np.float32),
                               0.25) is None                                          # two query rows
    assert S.bind_kv_attention(ko, ko[:, :, :P], kn, vo, vp, vn, q, ctx, 0.25) is None   # past inside present
    assert S.bind_kv_attention(ko, kp, kn, vo, vp, vn, q, vo[:, :, :1], 0.25) is None    # ctx inside present
    assert S.bind_kv_attention(ko, kp, kn, ko, vp, vn, q, ctx, 0.25) is None             # one present for both
    zero = np.empty((1, H, 0, D), np.float32)
    assert S.bind_kv_attention(kn.copy(), zero, kn, vn.copy(), zero, vn, q, ctx, 0.25) is None   # no past


def test_kernel_ctx_over_its_inputs(nthreads):
    """ctx written over the buffer q and the new rows are views of (a memory plan reusing a dead buffer): the
    kernel writes a scratch and copies it, the results as with separate buffers."""
    rng = np.random.default_rng(3)
    B, H, P, D = 2, 3, 9, 16
    kp, vp = _t(rng, B, H, P, D), _t(rng, B, H, P, D)
    qkv = _t(rng, B, 1, 3 * H * D)
    q, kn, vn = (_heads(qkv, i, B, H, D, 1) for i in range(3))
    K, V, want = _ref(kp, kn, vp, vn, q, 0.5)
    for part in (0, 2):       # ctx exactly over q, over the new value rows
        buf = qkv.copy()
        q2, kn2, vn2 = (_heads(buf, i, B, H, D, 1) for i in range(3))
        ctx = _heads(buf, part, B, H, D, 1)
        ko, vo = np.empty((B, H, P + 1, D), np.float32), np.empty((B, H, P + 1, D), np.float32)
        f = S.bind_kv_attention(ko, kp, kn2, vo, vp, vn2, q2, ctx, 0.5)
        assert f is not None and f(ko, kp, kn2, vo, vp, vn2, q2, ctx)
        assert np.array_equal(ko, K.astype(np.float32)) and np.array_equal(vo, V.astype(np.float32))
        np.testing.assert_allclose(ctx, want, rtol=2e-5, atol=2e-6)


def _attn_runners(f):
    (exe, _), = {id(e[0]): e for e in f._fast.values()}.values()
    return sum("_kv_attention_part" in r.__qualname__ for r in exe._local.fast[2])


def _step(scale, div=False):
    def fn(q, k, v, past_k, past_v):
        pk = nee.cat([past_k, k], 2)
        pv = nee.cat([past_v, v], 2)
        s = q @ pk.transpose(2, 3)
        p = F.softmax(s / (1 / scale) if div else s * scale, -1)
        return p @ pv, pk, pv
    return fn


@pytest.mark.parametrize("B,H,P,D", [(1, 4, 9, 16), (2, 3, 1, 8), (1, 2, 30, 40)])
def test_jit_step_matches_numpy_and_unfused(nthreads, B, H, P, D):
    scale = 1.0 / np.sqrt(D)
    outs = {}
    for on in (True, False):
        E._FUSE_ATTN[0] = on
        try:
            f = nee.jit(_step(scale))
            res = []
            for call in range(3):
                rng = np.random.default_rng(call)
                args = [_t(rng, B, H, 1, D), _t(rng, B, H, 1, D), _t(rng, B, H, 1, D), _t(rng, B, H, P, D),
                        _t(rng, B, H, P, D)]
                got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
                K, V, want = _ref(args[3], args[1], args[4], args[2], args[0], scale)
                assert np.array_equal(got[1], K.astype(np.float32)) and np.array_equal(got[2], V.astype(np.float32))
                np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)
                res.append(got)
            outs[on] = res
            assert _attn_runners(f) == (1 if on else 0)
        finally:
            E._FUSE_ATTN[0] = True
    for a, b in zip(outs[True], outs[False]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_jit_step_past_as_views_of_a_larger_cache(nthreads):
    """The caches passed as views of preallocated buffers (a static cache: rows [0, P) of a (B, H, 64, D) buffer,
    heads 64 rows apart; and a head-reversed view): the same results as numpy."""
    f = nee.jit(_step(0.25))
    rng = np.random.default_rng(8)
    B, H, P, D = 2, 3, 10, 16
    bk, bv = _t(rng, B, H, 64, D), _t(rng, B, H, 64, D)
    for call, (pk, pv) in enumerate([(bk[:, :, :P], bv[:, :, :P]), (bk[:, ::-1, 3:3 + P], bv[:, ::-1, 5:5 + P])]):
        args = [_t(rng, B, H, 1, D), _t(rng, B, H, 1, D), _t(rng, B, H, 1, D), pk, pv]
        got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
        K, V, want = _ref(pk, args[1], pv, args[2], args[0], 0.25)
        assert np.array_equal(got[1], K.astype(np.float32)) and np.array_equal(got[2], V.astype(np.float32)), call
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


def test_other_epilogues_not_taken(nthreads):
    """Scores divided (not multiplied) or without the softmax keep the pairwise steps, with the same results."""
    rng = np.random.default_rng(4)
    args = [_t(rng, 1, 2, 1, 8), _t(rng, 1, 2, 1, 8), _t(rng, 1, 2, 1, 8), _t(rng, 1, 2, 5, 8), _t(rng, 1, 2, 5, 8)]
    f = nee.jit(_step(0.5, div=True))
    got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
    np.testing.assert_allclose(got[0], _ref(args[3], args[1], args[4], args[2], args[0], 0.5)[2], rtol=1e-4,
                               atol=1e-5)
    assert _attn_runners(f) == 0

    def relu_attn(q, k, v, past_k, past_v):
        pk, pv = nee.cat([past_k, k], 2), nee.cat([past_v, v], 2)
        return F.relu(q @ pk.transpose(2, 3) * 0.5) @ pv, pk, pv
    g = nee.jit(relu_attn)
    got = g(*[nee.from_numpy(a) for a in args])[0].numpy()
    K = np.concatenate([args[3], args[1]], 2).astype(np.float64)
    V = np.concatenate([args[4], args[2]], 2).astype(np.float64)
    np.testing.assert_allclose(got, np.maximum(args[0] @ np.swapaxes(K, 2, 3) * 0.5, 0) @ V, rtol=1e-4, atol=1e-5)
    assert _attn_runners(g) == 0


def test_refused_layout_runs_the_plain_steps(nthreads):
    """Rows of 12 (not a multiple of 8): the fused step is built and falls back to the five steps at the call."""
    f = nee.jit(_step(0.3))
    rng = np.random.default_rng(5)
    for call in range(2):
        args = [_t(rng, 1, 3, 1, 12), _t(rng, 1, 3, 1, 12), _t(rng, 1, 3, 1, 12), _t(rng, 1, 3, 4, 12),
                _t(rng, 1, 3, 4, 12)]
        got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
        K, V, want = _ref(args[3], args[1], args[4], args[2], args[0], 0.3)
        assert np.array_equal(got[1], K.astype(np.float32)) and np.array_equal(got[2], V.astype(np.float32))
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)
    assert _attn_runners(f) == 1


def test_thread_count_change_between_calls():
    old = threads.get_num_threads()
    f = nee.jit(_step(0.3))
    rng = np.random.default_rng(7)
    try:
        for nt in (2, 1, 2):
            nee.set_num_threads(nt)
            args = [_t(rng, 1, 5, 1, 8), _t(rng, 1, 5, 1, 8), _t(rng, 1, 5, 1, 8), _t(rng, 1, 5, 6, 8),
                    _t(rng, 1, 5, 6, 8)]
            got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in args])]
            K, V, want = _ref(args[3], args[1], args[4], args[2], args[0], 0.3)
            np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)
            assert np.array_equal(got[1], K.astype(np.float32))
        assert _attn_runners(f) == 1
    finally:
        nee.set_num_threads(old)


@pytest.mark.parametrize("batch,past", [(1, 16), (4, 8), (2, 1)])
def test_onnx_decoder_step_matches_onnxruntime(nthreads, batch, past, monkeypatch):
    """The ONNX GPT step (2 layers) with the attention fused, against onnxruntime and against the step
    with it off, over calls with new values."""
    ort = pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    spec = M.gpt_step(batch=batch, past=past, d=32, heads=4, layers=2)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(spec.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    calls = []
    real = S.bind_kv_attention

    def counting(*a):
        f = real(*a)
        calls.append(f is not None)
        return f
    monkeypatch.setattr(S, "bind_kv_attention", counting)
    sess = M.nee_session(spec.model, nthreads)
    monkeypatch.setattr(E, "_FUSE_ATTN", [False])
    plain = M.nee_session(spec.model, nthreads)
    monkeypatch.setattr(E, "_FUSE_ATTN", [True])
    feed = dict(spec.feed)
    for call in range(3):
        got, want, off = sess.run(None, feed), ref.run(None, feed), plain.run(None, feed)
        assert spec.close(got, want), call
        for a, b in zip(got, off):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        rng = np.random.default_rng(call)
        feed = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feed.items()}
    assert calls and all(calls)        # (bound at the first call, both layers: the fused kernel ran)


def test_onnx_decode_loop_feeds_present_back():
    """Four steps of a decode loop, each step's present fed back as the next step's past (the cache grows
    from 3 rows): every step's outputs equal to onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    spec = M.gpt_step(batch=2, past=3, d=32, heads=4, layers=2)
    ref = ort.InferenceSession(spec.model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = M.nee_session(spec.model, threads.get_num_threads())
    feed = dict(spec.feed)
    names = [o.name for o in spec.model.graph.output]
    rng = np.random.default_rng(9)
    for step in range(4):
        got, want = sess.run(None, feed), ref.run(None, feed)
        assert spec.close(got, want), step
        feed = {"x": rng.standard_normal(feed["x"].shape).astype(np.float32)}
        for name, g in zip(names, got):
            if name.startswith("present_"):
                feed[name.replace("present_", "past_")] = g
