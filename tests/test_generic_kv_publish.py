"""jit/executable.py _generic_kv: the generic loop's KV-fusion plan is made once per executable and shared by the
threads calling it; it is published (``_gkv``, ``_gattn``) only once complete.  Published first and filled in after
(the old order), another thread's call could find a cat deferred to a whole-attention step whose other entries
were not there yet (the key cache's present then read unwritten) or half the pairs.  The interleaving is simulated:
the builder's own lookups (_kv_append, _attn_match) check what another thread would find at that moment."""
import numpy as np

import neetorch as nee
import neetorch.nn.functional as F


def _step(q, k, v, past_k, past_v):
    pk = nee.cat([past_k, k], 2)
    pv = nee.cat([past_v, v], 2)
    p = F.softmax(q @ pk.transpose(2, 3) * 0.25, -1)
    return p @ pv, pk, pv


def _exe(f):
    (exe, _), = {id(e[0]): e for e in f._fast.values()}.values()
    return exe


def test_generic_kv_plan_published_complete():
    rng = np.random.default_rng(3)
    H, P, D = 2, 5, 8
    shapes = [(1, H, 1, D)] * 3 + [(1, H, P, D)] * 2
    args = [nee.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    g = nee.jit(_step, dynamic={3: 2, 4: 2}, buckets=[8, 16])
    g(*args)
    exe = _exe(g)
    exe.__dict__.pop("_gkv", None)
    exe.__dict__.pop("_gattn", None)
    seen = []
    kv0, at0 = exe._kv_append, exe._attn_match

    def kv(*a, **k):
        seen.append(("kv", exe.__dict__.get("_gkv"), exe.__dict__.get("_gattn")))
        return kv0(*a, **k)

    def at(*a, **k):
        seen.append(("attn", exe.__dict__.get("_gkv"), exe.__dict__.get("_gattn")))
        return at0(*a, **k)
    exe._kv_append, exe._attn_match = kv, at
    try:
        plan = exe._generic_kv()
    finally:
        del exe._kv_append, exe._attn_match
    assert seen, "the plan's lookups did not run"
    assert plan and sorted(h[0] for h in plan.values()) == ["cat", "cat", "dot", "mm"]
    # what another thread would have found while the plan was being made: nothing (it makes its own)
    assert all(gkv is None for _, gkv, _ in seen), [(w, gkv) for w, gkv, _ in seen]
    assert exe._generic_kv() is plan and isinstance(exe.__dict__.get("_gattn"), dict)
    # and the generic loop (a past length other than traced) still computes the step
    a2 = [nee.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes[:3] + [(1, H, 7, D)] * 2]
    got = g(*a2)
    x = [t.numpy().astype(np.float64) for t in a2]
    K, V = np.concatenate([x[3], x[1]], 2), np.concatenate([x[4], x[2]], 2)
    s = x[0] @ np.swapaxes(K, 2, 3) * 0.25
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got[0].numpy(), (e / e.sum(-1, keepdims=True)) @ V, rtol=1e-4, atol=1e-5)
