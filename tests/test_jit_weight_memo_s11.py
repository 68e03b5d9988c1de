"""Default-mode jit: products read re-laid-out copies of captured weights (jit/passes.py WeightMemo), kept in
step with every way a parameter can be written between calls (tensor/_storage.py write counters, exported
storages compared bitwise).  Reference: the same function run eagerly on the current parameters."""
import gc
import threading

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.jit import passes
from neetorch.tensor import _storage

S, D, H = 16, 32, 4


def _params(seed=0):
    nee.manual_seed(seed)
    p = {k: nee.randn(*shape) * 0.2 for k, shape in dict(
        wq=(D, D), wk=(D, D), wv=(D, D), wo=(D, D), w1=(4 * D, D), w2=(D, 4 * D)).items()}
    p.update({k: nee.randn(n) * 0.1 for k, n in dict(bq=D, bk=D, bv=D, bo=D, b1=4 * D, b2=D).items()})
    p["g1"], p["g2"] = nee.ones(D), nee.ones(D)
    return p


def _block(p):
    def heads(t):
        s = t.shape[1]
        return t.reshape(1, s, H, D // H).transpose(1, 2)

    def block(x):
        s = x.shape[1]
        n = F.layer_norm(x, (D,), p["g1"], None)
        q, k, v = (heads(F.linear(n, p["w" + c], p["b" + c])) for c in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, s, D)
        x = x + F.linear(a, p["wo"], p["bo"])
        n = F.layer_norm(x, (D,), p["g2"], None)
        return x + F.linear(F.gelu(F.linear(n, p["w1"], p["b1"])), p["w2"], p["b2"])
    return block


def _close(jf, x):
    got = jf(x).numpy()
    want = jf.eager(x).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    return got


def _np_write(p):
    p["wq"].numpy()[3:7] = 0.5


def _np_view_write(p):
    p["w1"].t().numpy()[:, 5] *= -3.0     # through a numpy view of a view


def _asarray_write(p):
    np.asarray(p["wv"])[0, :] = 2.0


def _dlpack_write(p):
    np.from_dlpack(p["wk"])[1] = -1.0


# name -> writer(params); each changes a weight a product reads (several read through F.linear's W.T); not by
# the same amount along a whole input row (the layer norms' zero-mean outputs would hide that)
WRITES = {
    "sub_": lambda p: p["wq"].sub_(0.3 * nee.randn(D, D)),
    "isub_no_grad": lambda p: _no_grad(lambda: p["w1"].__isub__(0.25 * nee.randn(4 * D, D))),
    "mul_": lambda p: p["w2"].mul_(-1.5),
    "add_alpha": lambda p: p["wo"].add_(nee.randn(D, D), alpha=0.5),
    "copy_": lambda p: p["wk"].copy_(nee.randn(D, D)),
    "fill_": lambda p: p["wv"].fill_(0.01),
    "zero_": lambda p: p["wo"].zero_(),
    "clamp_": lambda p: p["w1"].clamp_(-0.05, 0.05),
    "masked_fill_": lambda p: p["wq"].masked_fill_(p["wq"] > 0, 1.0),
    "uniform_": lambda p: p["w2"].uniform_(-1, 1),
    "normal_": lambda p: p["wk"].normal_(0, 1),
    "setitem_basic": lambda p: p["wq"].__setitem__((slice(0, 5), 2), 3.0),
    "setitem_tensor": lambda p: p["w1"].__setitem__(0, nee.ones(D) * 2),
    "setitem_advanced": lambda p: p["wv"].__setitem__(nee.tensor([1, 4, 9]), -2.0),
    "setitem_mask": lambda p: p["wo"].__setitem__(p["wo"] < 0, 0.0),
    "index_put_": lambda p: p["wv"].index_put_((nee.tensor([0, 3]),), nee.randn(2, D), accumulate=True),
    "out=": lambda p: nee.mul(p["w2"], 3.0, out=p["w2"]),
    "out=_other": lambda p: nee.add(nee.randn(D, D), p["wq"], out=p["wq"]),
    "view_slice_mul_": lambda p: p["w1"][4:9].mul_(5.0),
    "view_t_fill_": lambda p: p["wq"].t()[2].fill_(1.0),
    "view_reshape_setitem": lambda p: p["wv"].view(-1).__setitem__(slice(0, 40), 1.0),
    "data=": lambda p: setattr(p["wk"], "data", nee.randn(D, D)),
    "set_": lambda p: p["w2"].set_(nee.randn(D, 4 * D)),
    "numpy_write": _np_write,
    "numpy_view_write": _np_view_write,
    "asarray_write": _asarray_write,
    "dlpack_write": _dlpack_write,
}


def _no_grad(fn):
    with nee.no_grad():
        fn()


@pytest.mark.parametrize("name", sorted(WRITES))
def test_update_seen(name):
    p = _params()
    jf = nee.jit(_block(p))
    x = nee.randn(1, S, D)
    before = _close(jf, x)
    memos = jf.graph(x).weight_memos
    assert memos and len(memos) == 6
    WRITES[name](p)
    after = _close(jf, x)
    assert np.abs(after - before).max() > 1e-3, "the write did not change the block's result"
    WRITES[name](p)            # a second write of the same kind, on the now-revalidated copy
    _close(jf, x)


def test_memo_is_used():
    p = _params()
    jf = nee.jit(_block(p))
    x = nee.randn(1, S, D)
    _close(jf, x)
    g = jf.graph(x)
    held = {id(e.holder): e for e in g.weight_memos}
    # the products' weights are the row-major copies (K, N), not F.linear's transposed views
    mm = [n for n in g.nodes if n.name.startswith("matmul") and n.inputs[1] in g.consts]
    assert len(mm) == 6
    for n in mm:
        t = g.consts[n.inputs[1]]
        assert id(t) in held and t.is_contiguous() and t._data.flags.c_contiguous
        e = held[id(t)]
        np.testing.assert_array_equal(t._data, e.src.t()._data)   # (_data: numpy() would export)
    # no copy while nothing changes; one new copy for the one weight written
    c0 = passes.memo_stats["copies"]
    for _ in range(3):
        _close(jf, x)
    assert passes.memo_stats["copies"] == c0
    p["w1"].add_(1.0)
    _close(jf, x)
    assert passes.memo_stats["copies"] == c0 + 1
    assert jf.stats["traces"] == 1


def test_exported_storage_read_live():
    # a parameter over the caller's numpy array: its products read that memory itself (writes to the
    # array are not seen by neetorch), and go back to a copy when the parameter gets storage of its own
    a = (np.random.default_rng(1).standard_normal((D, D)) * 0.2).astype(np.float32)
    p = _params()
    p["wq"] = nee.from_numpy(a)
    jf = nee.jit(_block(p))
    x = nee.randn(1, S, D)
    before = _close(jf, x)
    e = [e for e in jf.graph(x).weight_memos if e.src is p["wq"]][0]
    assert e.live and np.shares_memory(e.holder._data, a)
    a[:, 0] += 3.0
    after = _close(jf, x)
    assert np.abs(after - before).max() > 1e-3
    p["wq"].data = nee.randn(D, D)          # fresh storage, not exported: a copy again
    _close(jf, x)
    assert not e.live and not np.shares_memory(e.holder._data, p["wq"]._data)
    arr = p["wq"].numpy()                    # exported now: read live from the next call on
    _close(jf, x)
    assert e.live
    arr[3] = 7.0
    _close(jf, x)


def test_shape_change_respecializes():
    p = _params()
    nee.manual_seed(3)
    w = nee.randn(24, D)
    jf = nee.jit(lambda x: F.linear(x, w) * 2.0)
    x = nee.randn(S, D)
    _close(jf, x)
    w.data = nee.randn(40, D)
    got = jf(x)
    assert tuple(got.shape) == (S, 40)
    np.testing.assert_allclose(got.numpy(), jf.eager(x).numpy(), rtol=2e-5, atol=2e-5)
    assert jf.stats["traces"] == 2


def test_dynamic_buckets():
    nee.manual_seed(4)
    w1, b1, w2 = nee.randn(64, D) * 0.2, nee.randn(64) * 0.1, nee.randn(D, 64) * 0.2
    jf = nee.jit(lambda x: F.linear(F.gelu(F.linear(x, w1, b1)), w2), dynamic={0: 0})
    for n in (12, 16, 9):
        _close(jf, nee.randn(n, D))
    assert jf.stats["bucket_specializations"] >= 1
    w1.sub_(0.5)
    for n in (13, 16, 10, 30):
        _close(jf, nee.randn(n, D))
    w2.numpy()[:, :3] = 1.0
    for n in (11, 16, 31):
        _close(jf, nee.randn(n, D))


def test_threads_see_updates():
    p = _params()
    jf = nee.jit(_block(p))
    nthreads, rounds = 4, 5
    xs = [nee.randn(1, S, D) for _ in range(nthreads)]
    for x in xs:
        jf(x)
    bar = threading.Barrier(nthreads + 1)
    errors = []

    def worker(i):
        try:
            for _ in range(rounds):
                bar.wait()
                for _ in range(3):
                    got = jf(xs[i]).numpy()
                want = jf.eager(xs[i]).numpy()
                if not np.allclose(got, want, rtol=2e-5, atol=2e-5):
                    errors.append((i, float(np.abs(got - want).max())))
                bar.wait()
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(repr(e))
            bar.abort()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    writers = [WRITES[k] for k in ("sub_", "numpy_write", "data=", "setitem_basic", "out=")]
    for r in range(rounds):
        bar.wait()          # threads call
        bar.wait()          # and are done: update between rounds
        writers[r](p)
    for t in ts:
        t.join()
    assert not errors, errors


# more in-place writers, on a plain linear (8 x 16 weight)
MORE = {
 "index_add_": lambda w: w.index_add_(0, nee.tensor([1, 3]), nee.randn(2, 16)),
 "index_fill_": lambda w: w.index_fill_(1, nee.tensor([0, 2]), 5.0),
 "index_copy_": lambda w: w.index_copy_(0, nee.tensor([0, 5]), nee.randn(2, 16)),
 "scatter_": lambda w: w.scatter_(1, nee.tensor([[0], [1]]), nee.randn(2, 1) + 9),
 "scatter_add_": lambda w: w.scatter_add_(1, nee.tensor([[0], [1]]), nee.randn(2, 1) + 9),
 "scatter_reduce_": lambda w: w.scatter_reduce_(1, nee.tensor([[0], [1]]), nee.randn(2, 1) + 9, "sum"),
 "masked_scatter_": lambda w: w.masked_scatter_(w > 0, nee.randn(8, 16) + 5),
 "put_": lambda w: w.put_(nee.tensor([0, 7, 30]), nee.tensor([4.0, 5.0, 6.0])),
 "index_reduce_": lambda w: w.index_reduce_(0, nee.tensor([1, 2]), nee.randn(2, 16), "prod"),
 "addmm_": lambda w: w.addmm_(nee.randn(8, 4), nee.randn(4, 16)),
 "lerp_": lambda w: w.lerp_(nee.randn(8, 16), 0.5),
 "addcmul_": lambda w: w.addcmul_(nee.randn(8, 16), nee.randn(8, 16)),
 "exp_": lambda w: w.exp_(),
 "neg_": lambda w: w.neg_(),
 "abs_": lambda w: w.abs_(),
 "sigmoid_": lambda w: w.sigmoid_(),
 "relu_": lambda w: w.relu_(),
 "F.relu_inplace": lambda w: F.relu(w, inplace=True),
 "F.dropout_inplace": lambda w: F.dropout(w, 0.5, training=True, inplace=True),
 "clamp_min_": lambda w: w.clamp_min_(0.3),
 "fill_diagonal_": lambda w: w.fill_diagonal_(7.0),
 "copysign_": lambda w: w.copysign_(-nee.ones(8, 16)),
 "div_": lambda w: w.div_(nee.randn(8, 16)),
 "pow_": lambda w: w.pow_(2),
 "bernoulli_": lambda w: w.bernoulli_(0.5),
 "exponential_": lambda w: w.exponential_(),
 "random_": lambda w: w.random_(0, 5),
 "cumsum_": lambda w: w.cumsum_(1),
 "sort_out": lambda w: nee.sort(nee.randn(8, 16), out=(w, nee.empty(8, 16, dtype=nee.int64))),
 "matmul_out": lambda w: nee.matmul(nee.randn(8, 3), nee.randn(3, 16), out=w),
 "sum_out": lambda w: nee.sum(nee.randn(8, 16, 2), 2, out=w),
 "cat_out": lambda w: nee.cat([nee.randn(4, 16), nee.randn(4, 16)], out=w),
 "where_out": lambda w: nee.where(w > 0, w, nee.randn(8, 16) * 9, out=w),
 "nn.init.normal_": lambda w: nee.nn.init.normal_(w),
 "nn.init.xavier_uniform_": lambda w: nee.nn.init.xavier_uniform_(w),
 "nn.init.kaiming_uniform_": lambda w: nee.nn.init.kaiming_uniform_(w),
 "nn.init.orthogonal_": lambda w: nee.nn.init.orthogonal_(w),
 "nn.init.zeros_": lambda w: nee.nn.init.zeros_(w),
 "embedding_renorm": lambda w: F.embedding(nee.tensor([0, 1, 2]), w, max_norm=0.5),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_writers_seen(name):
    nee.manual_seed(0)
    w = nee.randn(8, 16)
    jf = nee.jit(lambda x: F.linear(x, w) * 1.5)
    x = nee.randn(12, 16)
    before = _close(jf, x)
    assert jf.graph(x).weight_memos
    MORE[name](w)
    after = _close(jf, x)
    assert np.abs(after - before).max() > 1e-4


def test_module_state_dict_and_dtype():
    nee.manual_seed(5)
    m = nee.nn.Sequential(nee.nn.Linear(D, 48), nee.nn.GELU(), nee.nn.Linear(48, D))
    jf = nee.jit(m)
    x = nee.randn(S, D)
    before = _close(jf, x)
    nee.manual_seed(6)
    m2 = nee.nn.Sequential(nee.nn.Linear(D, 48), nee.nn.GELU(), nee.nn.Linear(48, D))
    m.load_state_dict(m2.state_dict())
    after = _close(jf, x)
    assert np.abs(after - before).max() > 1e-3
    with nee.no_grad():
        for q in m.parameters():
            q -= 0.1 * nee.randn(*q.shape)
    _close(jf, x)
    m.double()                     # new storage of another dtype: the program is specialized again
    xd = x.double()
    np.testing.assert_allclose(jf(xd).numpy(), m(xd).numpy(), rtol=1e-10, atol=1e-10)


def test_switch_off_and_watch_released(monkeypatch):
    p = _params()
    monkeypatch.setattr(passes, "_WEIGHT_MEMO", [False])
    jf = nee.jit(_block(p))
    x = nee.randn(1, S, D)
    _close(jf, x)
    assert getattr(jf.graph(x), "weight_memos", None) is None
    monkeypatch.setattr(passes, "_WEIGHT_MEMO", [True])
    root = _storage.root(p["w1"]._data)
    jf2 = nee.jit(_block(p))
    _close(jf2, x)
    assert id(root) in _storage.WATCH
    del jf2
    gc.collect()
    assert id(root) not in _storage.WATCH       # the counter goes with the last cache watching it
