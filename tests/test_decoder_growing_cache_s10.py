"""A decode loop whose KV cache grows by one row each step (each step's ``present`` fed back as the next
step's ``past``): the ONNX session's shape-polymorphic executable runs most steps at shapes other than traced
(its generic loop), where the cache append and the attention products run fused (jit/executable.py
_generic_kv; kernels/shape.py bind_cat_dot / bind_cat_matmul, whose layout plans are kept per layout).
Every step's outputs are compared with onnxruntime's and with the same loop with the fusion off; layouts
the fused kernels refuse (head size not a multiple of 8) run the plain steps with the same results."""
import os
import sys

import numpy as np
import pytest

from neetorch.devices.cpu.kernels import shape as S
from neetorch.jit import executable as E

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from asv_benchmarks import _onnx_models as M  # noqa: E402


def _loop(runs, spec, steps):
    """Runs the loop with ``runs[0]``, each step's feed also given to the other runs: their outputs per step."""
    names = [o.name for o in spec.model.graph.output]
    feed = dict(spec.feed)
    res = []
    for _ in range(steps):
        outs = [[np.array(o) for o in run(feed)] for run in runs]
        res.append((dict(feed), outs))
        for n, o in zip(names, outs[0]):
            if n.startswith("present_"):
                feed["past_" + n[len("present_"):]] = o
        feed["x"] = outs[0][0].reshape(feed["x"].shape)
    return res


def _counting(monkeypatch):
    calls = {"dot": 0, "mm": 0}
    dot, mm = S.bind_cat_dot, S.bind_cat_matmul

    def cdot(*a):
        f = dot(*a)
        calls["dot"] += f is not None
        return f

    def cmm(*a):
        f = mm(*a)
        calls["mm"] += f is not None
        return f
    monkeypatch.setattr(S, "bind_cat_dot", cdot)
    monkeypatch.setattr(S, "bind_cat_matmul", cmm)
    return calls


@pytest.mark.parametrize("d,heads,fused", [(32, 4, True), (36, 4, False)], ids=["dh8", "dh9"])
def test_growing_cache_matches_onnxruntime_and_unfused(nthreads, d, heads, fused, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    from neetorch.onnx import InferenceSession
    spec = M.gpt_step(past=5, d=d, heads=heads, layers=2)
    mb = spec.model.SerializeToString()
    steps = 7       # past 5..11: bucket (4, 8] at 5-7 (generic), its top 8 (fast path), (8, 16] at 9-11
    calls = _counting(monkeypatch)
    # (the pairwise fusions counted here: with it on, both paths run the whole attention in one step)
    monkeypatch.setattr(E, "_FUSE_ATTN", [False])
    sess, psess = InferenceSession(mb), InferenceSession(mb)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    osess = ort.InferenceSession(mb, so, providers=["CPUExecutionProvider"])

    def plain(feed):    # the same loop's steps with the fusion off (fast path and generic loop)
        E._FUSE_KV[0] = False
        try:
            return psess.run(None, feed)
        finally:
            E._FUSE_KV[0] = True
    monkeypatch.setattr(E, "_FUSE_KV", [True])
    res = _loop([lambda f: sess.run(None, f), plain, lambda f: osess.run(None, f)], spec, steps)
    if fused:   # the generic steps' appends ran fused: 2 layers x 6 generic steps, each side
        assert calls["dot"] >= 12 and calls["mm"] >= 12, calls
    else:
        assert calls == {"dot": 0, "mm": 0}
    names = [o.name for o in spec.model.graph.output]
    for s, (feed, (g, p, w)) in enumerate(res):
        for k, (a, c, b) in enumerate(zip(g, p, w)):
            assert a.shape == b.shape == c.shape == ((1, 1, d) if k == 0 else (1, heads, 6 + s, d // heads))
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"step {s} output {k}")
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6, err_msg=f"step {s} output {k}")
            if k:   # present = cat(past, new): past copied exactly; the first layer's new row as unfused
                assert np.array_equal(a[..., :5 + s, :], feed["past_" + names[k][len("present_"):]]), (s, k)
                if k <= 2:
                    assert np.array_equal(a, c), (s, k)


def test_kv_plan_cache_keeps_overlap_check():
    """The per-layout plans (_kv_plans) are reused at the same layouts, overlapping arrays still refused."""
    rng = np.random.default_rng(3)
    past = rng.standard_normal((1, 4, 9, 16)).astype(np.float32)
    q = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    ref = np.concatenate([past, np.ones((1, 4, 1, 16), np.float32)], -2)
    for _ in range(2):
        out = np.empty((1, 4, 10, 16), np.float32)
        out[..., 9:, :] = 1
        s = np.full((1, 4, 1, 10), np.nan, np.float32)
        f = S.bind_cat_dot(out, past, q, s)
        assert f is not None and f(out, past, q, s)
        assert np.array_equal(out, ref)
        np.testing.assert_allclose(s, q.astype(np.float64) @ np.swapaxes(ref, -1, -2), rtol=1e-5, atol=1e-5)
    big = np.empty((1, 4, 10, 16), np.float32)
    assert S.bind_cat_dot(big, big[..., :9, :], q, s) is None     # past inside present: refused


def test_jit_dynamic_past_matches_numpy_and_unfused(nthreads, monkeypatch):
    """nee.jit with the past length dynamic (buckets [8, 16]): a cache grown from 3 to 12 rows runs the fused
    steps at every length (mostly the generic loop's: other shapes than traced), each call equal to numpy's (caches exactly) and to the
    same calls with the fusion off; a float64 cache (a layout the kernels refuse) runs the plain steps."""
    import neetorch as nee
    F = nee.nn.functional
    H, D = 3, 16
    scale = 1.0 / np.sqrt(D)

    def fn(q, k, v, past_k, past_v):
        pk = nee.cat([past_k, k], 2)
        pv = nee.cat([past_v, v], 2)
        p = F.softmax(q @ pk.transpose(2, 3) * scale, -1)
        return p @ pv, pk, pv
    # (the pairwise fusions counted here: the fast path's call would run the whole attention in one step)
    monkeypatch.setattr(E, "_FUSE_ATTN", [False])
    for dt in (np.float32, np.float64):
        calls = _counting(monkeypatch)
        outs = {}
        for on in (True, False):
            monkeypatch.setattr(E, "_FUSE_KV", [on])
            f = nee.jit(fn, dynamic={3: 2, 4: 2}, buckets=[8, 16])
            rng = np.random.default_rng(5)
            pk, pv = (rng.standard_normal((1, H, 3, D)).astype(dt) for _ in range(2))
            res = []
            for _ in range(10):
                q, k, v = (rng.standard_normal((1, H, 1, D)).astype(dt) for _ in range(3))
                got = [r.numpy() for r in f(*[nee.from_numpy(a) for a in (q, k, v, pk, pv)])]
                K = np.concatenate([pk, k], 2).astype(np.float64)
                V = np.concatenate([pv, v], 2).astype(np.float64)
                s = q.astype(np.float64) @ np.swapaxes(K, 2, 3) * scale
                e = np.exp(s - s.max(-1, keepdims=True))
                assert np.array_equal(got[1], K.astype(dt)) and np.array_equal(got[2], V.astype(dt))
                np.testing.assert_allclose(got[0], (e / e.sum(-1, keepdims=True)) @ V, rtol=1e-4, atol=1e-5)
                res.append(got[0])
                pk, pv = got[1], got[2]
            outs[on] = res
        for a, b in zip(outs[True], outs[False]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        # every call's appends ran fused (the generic loop's, or the fast path's at a traced shape)
        assert calls == ({"dot": 10, "mm": 10} if dt == np.float32 else {"dot": 0, "mm": 0}), (dt, calls)
