"""The step chain (jit/executable.py _chain_build, devices/cpu/native_chain.py): from a thread's third call of a
compiled graph the native calls of its bound steps replay as one loop.  Checked against the unchained steps and
eager: the same results, in-place changes of the inputs followed, new input arrays, a thread-count change, two
Python threads, a chain whose check fails, and the bound kernels' ``calls`` against their own launches."""
import threading

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import native_chain
from neetorch.jit import executable as E

F = nee.nn.functional


def _t(rng, *s):
    return rng.standard_normal(s).astype(np.float32)


def _exes(f):
    return [entry[0] for entry in f._fast.values() if isinstance(entry, tuple)]


def _chain(f):
    (ex,) = _exes(f)
    return getattr(ex._local, "chain", None)


def _chained_calls(ch):
    return sum(len(x) for x in ch.plan if isinstance(x, list))


@pytest.fixture
def chain_on(monkeypatch):
    monkeypatch.setattr(E, "_CHAIN", [3])


def _mlp(rng, d=64, h=256):
    W1, b1, W2, b2 = (nee.from_numpy(a) for a in (_t(rng, d, h) * 0.1, _t(rng, h), _t(rng, h, d) * 0.1, _t(rng, d)))
    g, bt = nee.from_numpy(_t(rng, d)), nee.from_numpy(_t(rng, d))

    def fn(x):
        y = F.gelu(x @ W1 + b1) @ W2 + b2 + x
        return F.layer_norm(y, (d,), g, bt).exp()
    return fn


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_chained_mlp_follows_its_inputs(chain_on, rows):
    rng = np.random.default_rng(rows)
    fn = _mlp(rng)
    f = nee.jit(fn)
    xa = _t(rng, rows, 64)
    x = nee.from_numpy(xa)
    for _ in range(4):
        got = f(x).numpy()
    ch = _chain(f)
    assert isinstance(ch, E._Chain) and _chained_calls(ch) >= (3 if rows == 1 else 1)
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-4, atol=1e-5)
    for k in range(3):      # the same input array, new contents: the replayed calls read them
        xa[...] = _t(rng, rows, 64) * (k + 1)
        got = f(x).numpy()
        assert _chain(f) is ch
        np.testing.assert_allclose(got, fn(nee.from_numpy(xa.copy())).numpy(), rtol=1e-4, atol=1e-5)
    for k in range(3):      # new input arrays: the steps run (the guard), and stay right
        xb = _t(rng, rows, 64)
        np.testing.assert_allclose(f(nee.from_numpy(xb)).numpy(), fn(nee.from_numpy(xb)).numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_chain_equals_unchained_steps_bitwise(monkeypatch):
    rng = np.random.default_rng(1)
    fn = _mlp(rng)
    x = nee.from_numpy(_t(rng, 1, 64))
    monkeypatch.setattr(E, "_CHAIN", [1 << 62])
    ref = nee.jit(fn)
    want = [ref(x).numpy() for _ in range(5)][-1]
    assert _chain(ref) in (None, 0) or isinstance(_chain(ref), int)
    monkeypatch.setattr(E, "_CHAIN", [3])
    f = nee.jit(fn)
    for _ in range(5):
        got = f(x).numpy()
    assert isinstance(_chain(f), E._Chain)
    np.testing.assert_array_equal(got, want)


def test_thread_count_change_drops_and_rebuilds_the_chain(chain_on):
    rng = np.random.default_rng(2)
    fn = _mlp(rng, d=128, h=512)
    f = nee.jit(fn)
    xa = _t(rng, 32, 128)
    x = nee.from_numpy(xa)
    n0 = nee.get_num_threads()
    try:
        for nt in (1, 2, 1):
            nee.set_num_threads(nt)
            for k in range(5):
                xa[...] = _t(rng, 32, 128)
                np.testing.assert_allclose(f(x).numpy(), fn(nee.from_numpy(xa.copy())).numpy(), rtol=1e-4,
                                           atol=1e-5)
            ch = _chain(f)
            assert isinstance(ch, E._Chain) and ch.epoch[0] == nt
    finally:
        nee.set_num_threads(n0)


def test_a_chain_missing_calls_fails_its_check_and_is_not_used(chain_on, monkeypatch):
    rng = np.random.default_rng(3)
    fn = _mlp(rng)
    f = nee.jit(fn)
    x = nee.from_numpy(_t(rng, 4, 64))
    f(x)
    (ex,) = _exes(f)
    runners = ex._local.fast[2]
    chained = [r for r in runners if getattr(r, "chain_calls", None) is not None]
    assert chained
    # one bound step's calls claimed empty: the replay on the NaN-filled arena shows it
    monkeypatch.setattr(chained[0], "chain_calls", lambda env: [])
    for _ in range(4):
        got = f(x).numpy()
    assert _chain(f) is None
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-4, atol=1e-5)


def _cnn(rng):
    w1, b1 = nee.from_numpy(_t(rng, 16, 3, 3, 3) * 0.3), nee.from_numpy(_t(rng, 16))
    w2, b2 = nee.from_numpy(_t(rng, 24, 16, 1, 1) * 0.3), nee.from_numpy(_t(rng, 24))
    w3 = nee.from_numpy(_t(rng, 24, 24, 3, 3) * 0.1)

    def fn(x):
        y = F.relu(F.conv2d(x, w1, b1, stride=2, padding=1))
        y = F.max_pool2d(y, 3, 2)
        y = F.relu(F.conv2d(y, w2, b2))
        y = F.relu(F.conv2d(y, w3, None, padding=1) + y)
        return F.adaptive_avg_pool2d(y, 1).reshape(x.shape[0], -1)
    return fn


@pytest.mark.parametrize("shape", [(1, 3, 33, 33), (2, 3, 40, 29)])
def test_chained_cnn_follows_its_inputs(chain_on, shape):
    rng = np.random.default_rng(4)
    fn = _cnn(rng)
    f = nee.jit(fn)
    xa = _t(rng, *shape)
    x = nee.from_numpy(xa)
    for _ in range(4):
        f(x)
    ch = _chain(f)
    assert isinstance(ch, E._Chain) and _chained_calls(ch) >= 2
    for k in range(3):
        xa[...] = _t(rng, *shape)
        np.testing.assert_allclose(f(x).numpy(), fn(nee.from_numpy(xa.copy())).numpy(), rtol=1e-4, atol=1e-4)


def test_chains_are_per_thread(chain_on):
    rng = np.random.default_rng(5)
    fn = _mlp(rng)
    f = nee.jit(fn)
    errs = []
    xs = [_t(rng, 8, 64) for _ in range(2)]
    refs = [fn(nee.from_numpy(a)).numpy() for a in xs]

    def work(k):
        try:
            x = nee.from_numpy(xs[k])
            for _ in range(30):
                np.testing.assert_allclose(f(x).numpy(), refs[k], rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)
    ths = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errs, errs


def test_onnx_decoder_step_chained_matches_unchained(monkeypatch):
    pytest.importorskip("onnx")
    from asv_benchmarks import _onnx_models as M
    spec = M.gpt_step(past=8, d=64, heads=2, layers=2)
    outs = {}
    for on in (False, True):
        monkeypatch.setattr(E, "_CHAIN", [3 if on else 1 << 62])
        s = nee.onnx.InferenceSession(spec.model.SerializeToString())
        for _ in range(5):
            outs[on] = s.run(None, spec.feed)
        if on:
            # the attention jobs writing the returned caches (made at each call) chained too
            ch = _chain(s._jit)
            assert isinstance(ch, E._Chain) and _chained_calls(ch) >= 4
            assert any(not isinstance(x, list) and not hasattr(x, "step") for x in ch.plan)
            for k, a in enumerate(s.run(None, spec.feed)):   # the returned caches are new arrays each call
                assert not np.shares_memory(a, outs[True][k])
    for a, b in zip(outs[False], outs[True]):
        np.testing.assert_array_equal(a, b)
    # the same arrays fed with new contents: the chained step follows them
    feed = {k: v.copy() for k, v in spec.feed.items()}
    s = nee.onnx.InferenceSession(spec.model.SerializeToString())
    ref = nee.onnx.InferenceSession(spec.model.SerializeToString())
    rng = np.random.default_rng(7)
    for k in range(6):
        for v in feed.values():
            v[...] = rng.standard_normal(v.shape).astype(v.dtype)
        monkeypatch.setattr(E, "_CHAIN", [3])
        got = s.run(None, feed)
        monkeypatch.setattr(E, "_CHAIN", [1 << 62])
        want = ref.run(None, {n: v.copy() for n, v in feed.items()})
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert isinstance(_chain(s._jit), E._Chain)


def test_native_chain_current_follows_threads_and_driver():
    ep = native_chain.epoch()
    assert native_chain.current(ep)
    n0 = nee.get_num_threads()
    try:
        nee.set_num_threads(1 if n0 != 1 else 2)
        assert not native_chain.current(ep)
    finally:
        nee.set_num_threads(n0)
    assert native_chain.current(ep)
    assert native_chain.join([1], None) is None and native_chain.join([1], [2]) == [1, 2]


@pytest.mark.parametrize("freeze", [True, False])
def test_chained_bn_relu_prologue_conv(chain_on, freeze):
    # DenseNet's BatchNorm + ReLU folded into the packed 1x1 conv's packing (jit/fusion ConvPrologue): chained
    # where its per-channel operands are frozen constants (their packed rows are then kept)
    rng = np.random.default_rng(6)
    C, O, H = 64, 96, 28
    a, b, c, d = (nee.from_numpy(_t(rng, C, 1, 1)) for _ in range(4))
    w, cb = nee.from_numpy(_t(rng, O, C, 1, 1) / 8), nee.from_numpy(_t(rng, O))

    def fn(x):      # (the conv output an intermediate: the fused 1x1 kernel writes a returned one through views)
        return F.max_pool2d(F.relu(F.conv2d(F.relu((x * a + b) * c + d), w, cb)), 2)
    f = nee.jit(fn, freeze=freeze)
    xa = _t(rng, 1, C, H, H)
    x = nee.from_numpy(xa)
    for _ in range(4):
        f(x)
    for k in range(3):
        xa[...] = _t(rng, 1, C, H, H)
        np.testing.assert_allclose(f(x).numpy(), fn(nee.from_numpy(xa.copy())).numpy(), rtol=1e-4, atol=1e-4)
    ch = _chain(f)
    if freeze:
        assert isinstance(ch, E._Chain) and _chained_calls(ch) >= 1


@pytest.mark.parametrize("N", [1, 3])
def test_chained_conv_writing_a_returned_output_through_views(chain_on, N):
    # the direct conv writes each image of a returned output through a view of it: the view is made anew on
    # each call's output (_fresh_calls / _view_of)
    rng = np.random.default_rng(8)
    w, b = nee.from_numpy(_t(rng, 32, 16, 3, 3) * 0.2), nee.from_numpy(_t(rng, 32))

    def fn(x):
        return F.relu(F.conv2d(x, w, b, padding=1))
    f = nee.jit(fn, freeze=True)    # (frozen weights: their packed copy is kept, the conv's calls replayable)
    xa = _t(rng, N, 16, 20, 17)
    x = nee.from_numpy(xa)
    outs = []
    for k in range(6):
        xa[...] = _t(rng, N, 16, 20, 17)
        got = f(x)
        outs.append((got, fn(nee.from_numpy(xa.copy())).numpy()))
    for got, want in outs:          # every returned output its own, and right
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    ch = _chain(f)
    assert isinstance(ch, E._Chain)
    assert any(not isinstance(x, list) and not hasattr(x, "step") for x in ch.plan)


def test_a_chain_not_resetting_claim_counters_fails_its_check(chain_on, monkeypatch):
    # the direct conv's kernels claim their tiles from a counter the launch zeroes: a list without the resets
    # replays kernels that find nothing left to claim, which the check sees on the NaN-filled arena
    rng = np.random.default_rng(9)
    fn = _cnn(rng)
    f = nee.jit(fn, freeze=True)
    x = nee.from_numpy(_t(rng, 1, 3, 33, 33))
    f(x)
    (ex,) = _exes(f)
    hits = []
    for r in ex._local.fast[2]:
        cc = getattr(r, "chain_calls", None)
        if cc is None:
            continue

        def stripped(env, cc=cc):
            calls = cc(env)
            if calls is None:
                return None
            hits.extend(c for c in calls if c[2] is not None)
            return [(fn_, args, None) for fn_, args, _ in calls]
        monkeypatch.setattr(r, "chain_calls", stripped)
    for _ in range(4):
        got = f(x).numpy()
    assert hits, "no call with a claim counter in this graph"
    assert _chain(f) is None
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-4, atol=1e-4)


def test_captured_weights_written_between_calls_are_followed(chain_on):
    # default-mode jit: products read re-laid-out copies of captured weights, made again when the weight is
    # written (jit/passes.py WeightMemo swaps the constant's storage): a chain made on the old copy must not run
    rng = np.random.default_rng(10)
    nee.manual_seed(10)
    W1, W2 = nee.randn(48, 64) * 0.1, nee.randn(32, 48) * 0.1      # (neetorch's own storage: copies re-laid out)

    def fn(x):
        return F.linear(F.gelu(F.linear(x, W1)), W2)
    f = nee.jit(fn)
    x = nee.from_numpy(_t(rng, 1, 64))
    built = 0
    for k in range(40):
        if k % 7 == 6:
            W1.sub_(0.05 * nee.from_numpy(_t(rng, 48, 64)))
        if k == 25:
            W2.numpy()[3:9] = 0.5          # (through an exported array)
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-4, atol=1e-5)
        built += isinstance(_chain(f), E._Chain)
    assert built >= 10


def test_new_input_arrays_kept_are_chained_again(chain_on):
    rng = np.random.default_rng(11)
    fn = _mlp(rng)
    f = nee.jit(fn)
    x1 = nee.from_numpy(_t(rng, 1, 64))
    for _ in range(5):
        f(x1)
    ch1 = _chain(f)
    assert isinstance(ch1, E._Chain)
    x2 = nee.from_numpy(_t(rng, 1, 64))     # another input array, then kept: the chain is made again on it
    for _ in range(8):
        np.testing.assert_allclose(f(x2).numpy(), fn(x2).numpy(), rtol=1e-4, atol=1e-5)
    ch2 = _chain(f)
    assert isinstance(ch2, E._Chain) and ch2 is not ch1
    xs = [nee.from_numpy(_t(rng, 1, 64)) for _ in range(6)]     # a new array every call: the steps run
    for x in xs:
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-4, atol=1e-5)
    assert _chain(f) is ch2
