"""Session 16, the decoder step: the one-step attention (kernels/shape.py bind_kv_attention) in the generic loop
(a decode loop whose cache grows: jit/executable.py _generic_kv's deferred appends, _generic_attn, and
_generic_deferred where the kernel refuses a layout), the fast path's attention runner reusing its binding for the
same input arrays, the 3-input bound runner passing the last call's input list again, and gemv.py's one-closure
weight guard.  Every result is compared with numpy (float64) or onnxruntime, and with the same calls with the
fusion off."""
import os
import sys

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import gemv, linalg, shape as S, winograd
from neetorch.jit import executable as E

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from asv_benchmarks import _onnx_models as M  # noqa: E402
from tests.test_decoder_growing_cache_s10 import _loop  # noqa: E402  (the decode loop driver)
from tests.test_decoder_step_kv_fusion import _ref, _step as _attn_fn  # noqa: E402

F = nee.nn.functional


def _counting(monkeypatch):
    calls = {"attn": 0, "attn_refused": 0, "dot": 0, "mm": 0}
    real = {"attn": S.bind_kv_attention, "dot": S.bind_cat_dot, "mm": S.bind_cat_matmul}

    def wrap(k):
        def f(*a):
            g = real[k](*a)
            calls[k] += g is not None
            if k == "attn" and g is None:
                calls["attn_refused"] += 1
            return g
        return f
    monkeypatch.setattr(S, "bind_kv_attention", wrap("attn"))
    monkeypatch.setattr(S, "bind_cat_dot", wrap("dot"))
    monkeypatch.setattr(S, "bind_cat_matmul", wrap("mm"))
    return calls


@pytest.mark.parametrize("d,heads,batch", [(32, 4, 1), (48, 3, 2)], ids=["dh8", "dh16b2"])
def test_growing_cache_generic_loop_runs_the_whole_attention(nthreads, d, heads, batch, monkeypatch):
    """ONNX decode loop, past 5..11 (buckets: the generic loop at all but the bucket top): the generic steps run
    each layer's attention as one job (bind_kv_attention bound, the pairwise KV kernels not), outputs equal to
    onnxruntime's and to the loop with the one-step attention off; the presents' past rows copied exactly."""
    ort = pytest.importorskip("onnxruntime")
    from neetorch.onnx import InferenceSession
    spec = M.gpt_step(batch=batch, past=5, d=d, heads=heads, layers=2)
    mb = spec.model.SerializeToString()
    calls = _counting(monkeypatch)
    sess, psess = InferenceSession(mb), InferenceSession(mb)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    osess = ort.InferenceSession(mb, so, providers=["CPUExecutionProvider"])

    def plain(feed):
        E._FUSE_ATTN[0] = False
        try:
            return psess.run(None, feed)
        finally:
            E._FUSE_ATTN[0] = True
    monkeypatch.setattr(E, "_FUSE_ATTN", [True])
    res = _loop([lambda f: sess.run(None, f), plain, lambda f: osess.run(None, f)], spec, 7)
    # sess: 2 layers x 6 generic steps (each a new layout) + the bucket top's fast path (2 layers, bound once)
    assert calls["attn"] >= 12 + 2 and calls["attn_refused"] == 0, calls
    # (psess: the pairwise fusions, as before; the key side's takes one batch only)
    assert calls["mm"] >= 12 and (calls["dot"] >= 12 or batch > 1), calls
    names = [o.name for o in spec.model.graph.output]
    for s, (feed, (g, p, w)) in enumerate(res):
        for k, (a, c, b) in enumerate(zip(g, p, w)):
            assert a.shape == b.shape == c.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"step {s} output {k}")
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6, err_msg=f"step {s} output {k}")
            if k:
                past = feed["past_" + names[k][len("present_"):]]
                assert np.array_equal(a[..., :past.shape[-2], :], past), (s, k)


def test_generic_loop_falls_back_where_the_kernel_refuses(nthreads, monkeypatch):
    """The one-step attention refused at the context's product (after the appends were deferred to it): the
    deferred appends and scores run there (_generic_deferred), the same results as onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    from neetorch.onnx import InferenceSession
    spec = M.gpt_step(past=5, d=32, heads=4, layers=2)
    mb = spec.model.SerializeToString()
    tried = []
    monkeypatch.setattr(S, "bind_kv_attention", lambda *a: tried.append(1))     # (returns None: refused)
    sess = InferenceSession(mb)
    osess = ort.InferenceSession(mb, providers=["CPUExecutionProvider"])
    res = _loop([lambda f: sess.run(None, f), lambda f: osess.run(None, f)], spec, 5)
    assert len(tried) >= 2 * 3, tried       # (the generic steps asked, each layer)
    for s, (feed, (g, w)) in enumerate(res):
        assert spec.close(g, w), s


@pytest.mark.parametrize("rows,dt,D", [(1, np.float32, 16), (2, np.float32, 16), (1, np.float64, 16),
                                       (1, np.float32, 12)], ids=["f32", "two_query_rows", "f64", "D12"])
def test_jit_dynamic_past_attention(nthreads, rows, dt, D, monkeypatch):
    """nee.jit, the past length dynamic (buckets [8, 16]), the cache grown from 3 to 12 rows: float32 rows of
    whole vectors run the one-step attention in the generic loop; two query rows (the kernel refuses them after
    the appends were deferred), float64 and 12-element rows (not deferred) the other steps; each call equal to
    numpy's (caches exactly) and to the calls with the one-step attention off."""
    H = 3
    scale = 1.0 / np.sqrt(D)
    calls = _counting(monkeypatch)
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(E, "_FUSE_ATTN", [on])
        f = nee.jit(_attn_fn(scale), dynamic={3: 2, 4: 2}, buckets=[8, 16])
        rng = np.random.default_rng(5)
        pk, pv = (rng.standard_normal((1, H, 3, D)).astype(dt) for _ in range(2))
        res = []
        for _ in range(10):
            q = rng.standard_normal((1, H, rows, D)).astype(dt)
            k, v = (rng.standard_normal((1, H, 1, D)).astype(dt) for _ in range(2))
            got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in (q, k, v, pk, pv)])]
            want, K, V = _ref(q, k, v, pk, pv, scale)
            assert np.array_equal(got[1], K.astype(dt)) and np.array_equal(got[2], V.astype(dt))
            tol = 1e-4 if dt == np.float32 else 1e-10
            np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol)
            res.append(got)
            pk, pv = got[1], got[2]
        outs[on] = res
        if on:
            taken = calls["attn"]
            if rows == 1 and dt == np.float32 and D % 8 == 0:
                assert taken >= 8, calls          # (the generic calls: lengths 3..7 and 9..12)
            else:
                assert taken == 0, calls
    for a, b in zip(outs[True], outs[False]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _exe(f):
    return next(iter(f._fast.values()))[0]


def test_fast_attention_runner_same_and_new_arrays(monkeypatch):
    """The fast path's one-step attention: called again with the same arrays (its binding reused without the
    layout comparison), with new arrays of the same layout, with caches of another layout (views of a larger
    buffer: bound anew), and after the thread count changed; every call equal to numpy's."""
    B, H, P, D = 1, 4, 9, 16
    scale = 1.0 / np.sqrt(D)
    f = nee.jit(_attn_fn(scale))
    rng = np.random.default_rng(1)

    def args():
        return [rng.standard_normal(s).astype(np.float32) for s in [(B, H, 1, D)] * 3 + [(B, H, P, D)] * 2]
    binds = []
    real = S.bind_kv_attention

    def counting(*a):
        g = real(*a)
        binds.append(g is not None)
        return g
    monkeypatch.setattr(S, "bind_kv_attention", counting)
    old = nee.get_num_threads()
    try:
        a0 = args()
        t0 = [nee.from_numpy(a) for a in a0]
        for call in range(6):
            if call == 2:
                a0 = args()                                   # new arrays, same layouts
                t0 = [nee.from_numpy(a) for a in a0]
            if call == 3:
                big = [rng.standard_normal((B, H, 32, D)).astype(np.float32) for _ in range(2)]
                a0 = a0[:3] + [b[:, :, :P] for b in big]      # heads 32 rows apart: another layout
                t0 = [nee.from_numpy(a) for a in a0]
            if call == 4:
                nee.set_num_threads(2 if old == 1 else 1)
            got = [r.numpy() for r in f(*t0)]
            want, K, V = _ref(*a0[:3], a0[3], a0[4], scale)
            assert np.array_equal(got[1], K.astype(np.float32)) and np.array_equal(got[2], V.astype(np.float32))
            np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5, err_msg=f"call {call}")
    finally:
        nee.set_num_threads(old)
    assert binds and all(binds) and len(binds) <= 4, binds      # (first layout, the views' layout, the thread count)
    runs = [r for r in _exe(f)._local.fast[2] if "_kv_attention_part" in r.__qualname__]
    assert len(runs) == 1


def test_outputs_of_earlier_calls_are_kept():
    """The fast path's fresh presents: a call's outputs are not overwritten by the next call's (the runner's
    same-inputs shortcut still makes new presents)."""
    B, H, P, D = 1, 2, 5, 8
    scale = 0.3
    f = nee.jit(_attn_fn(scale))
    rng = np.random.default_rng(2)
    a = [rng.standard_normal(s).astype(np.float32) for s in [(B, H, 1, D)] * 3 + [(B, H, P, D)] * 2]
    t = [nee.from_numpy(x) for x in a]
    r1 = [r.numpy() for r in f(*t)]
    keep = [x.copy() for x in r1]
    a[1][...] = 7.0          # the new key row changes in place; the same arrays passed again
    r2 = [r.numpy() for r in f(*t)]
    for x, y in zip(r1, keep):
        assert np.array_equal(x, y)
    want, K, V = _ref(*a[:3], a[3], a[4], scale)
    assert np.array_equal(r2[1], K.astype(np.float32))
    np.testing.assert_allclose(r2[0], want, rtol=1e-4, atol=1e-5)


def test_gemv_guard_other_weight_and_same_data():
    """gemv's bound call: the weight it was bound for (the object, or another array over the same data, shape and
    strides) runs the packed kernel; another weight goes to linalg.matmul_into; both equal to numpy."""
    rng = np.random.default_rng(4)
    K, N = 96, 128
    w = rng.standard_normal((K, N)).astype(np.float32)
    assert winograd.freeze(w)
    x = rng.standard_normal((1, K)).astype(np.float32)
    out = np.empty((1, N), np.float32)
    g = gemv.caller(out, x, w)
    assert g is not None and g.gemv[0].size >= K * N
    other = rng.standard_normal((K, N)).astype(np.float32)
    same = w[:]                       # another object over the same memory
    for b in (w, same, other, w):
        y = np.full((1, N), np.nan, np.float32)
        g(y, x, b)
        np.testing.assert_allclose(y, x.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    # a transposed view (other strides) of the same memory: not the packed weight
    sq = rng.standard_normal((K, K)).astype(np.float32)
    assert winograd.freeze(sq)
    o2 = np.empty((1, K), np.float32)
    g2 = gemv.caller(o2, x, sq)
    y = np.empty((1, K), np.float32)
    g2(y, x, sq.T)
    np.testing.assert_allclose(y, x.astype(np.float64) @ sq.T.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert linalg is not None


def test_three_input_bound_step_follows_its_inputs(nthreads):
    """A projection step with three inputs (activation, frozen weight, bias) on the fast path: the last call's input
    list reused while the arrays are the same, new caller arrays each call still read; equal to numpy."""
    rng = np.random.default_rng(6)
    W = rng.standard_normal((64, 200)).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    Wt, bt = nee.from_numpy(W), nee.from_numpy(b)

    def fn(x):
        h = F.gelu(F.linear(x * 2.0, Wt.t(), bt))     # (x * 2: the product's activation an arena buffer)
        return h.sum(-1)

    def fn2(x):
        return F.linear(x, Wt.t(), bt).sum(-1)       # (the caller's x read by the product itself)
    f, f2 = nee.jit(fn), nee.jit(fn2)
    from math import erf
    verf = np.vectorize(erf)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    for call in range(5):
        if call != 2:          # (call 2: the same array again)
            x = rng.standard_normal((1, 64)).astype(np.float32)
        got, got2 = f(nee.from_numpy(x)).numpy(), f2(nee.from_numpy(x)).numpy()
        z = (x.astype(np.float64) * 2) @ W.astype(np.float64) + b
        want = (0.5 * z * (1 + verf(z / np.sqrt(2)))).sum(-1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=f"call {call}")
        want2 = (x.astype(np.float64) @ W.astype(np.float64) + b).sum(-1)
        np.testing.assert_allclose(got2, want2, rtol=1e-4, atol=1e-3, err_msg=f"call {call}")


@pytest.mark.parametrize("group", [1, 5, 12])
def test_attention_kernel_heads_grouped_per_task(nthreads, group, monkeypatch):
    """bind_kv_attention with runs of ``group`` consecutive heads per task (NEE_KV_ATTN_GROUP; 12 heads: 5, 5, 2
    with 5; here 6 heads a batch, 12 in all), caches as views of larger buffers: equal to numpy, the presents exact, at 1 and 2 threads."""
    monkeypatch.setattr(S, "ATTN_GROUP", [group])
    rng = np.random.default_rng(7)
    B, H, P, D = 2, 6, 37, 16
    kbig, vbig = (rng.standard_normal((B, H, 50, D)).astype(np.float32) for _ in range(2))
    kp, vp = kbig[:, :, :P], vbig[:, :, :P]
    qkv = rng.standard_normal((B, 1, 3 * H * D)).astype(np.float32)
    q, kn, vn = (qkv[..., i * H * D:(i + 1) * H * D].reshape(B, 1, H, D).transpose(0, 2, 1, 3) for i in range(3))
    ko, vo = np.empty((B, H, P + 1, D), np.float32), np.empty((B, H, P + 1, D), np.float32)
    ctx = np.full((B, H, 1, D), np.nan, np.float32)
    scale = 0.25
    f = S.bind_kv_attention(ko, kp, kn, vo, vp, vn, q, ctx, scale)
    assert f is not None and f(ko, kp, kn, vo, vp, vn, q, ctx)
    want, K, V = _ref(q, kn, vn, kp, vp, scale)
    assert np.array_equal(ko, K.astype(np.float32)) and np.array_equal(vo, V.astype(np.float32))
    np.testing.assert_allclose(ctx, want, rtol=1e-4, atol=1e-5)
