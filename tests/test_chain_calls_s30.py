"""Native calls of bound steps in the step chain: depthwise convs and softmax.

Depthwise convs in the step chain (devices/cpu/kernels/depthwise_native.py ``_launch``'s ``calls``,
kernels/conv.py ``_bind_depthwise``): a compiled graph's depthwise conv step replays as native calls with the steps
around it instead of breaking the chain into a Python step.  Checked: the chain holds no Python step, its results
are bitwise the unchained steps' (1 and 2 threads, with and without a bias, a second per-channel bias, relu and
heavier activations, stride 1 / 2, batch 2), new contents of the same input array are followed, and an ONNX
MobileNetV3 session's chain has only native calls before its output step.

A bound one-launch softmax (devices/cpu/kernels/nn.py ``bind_softmax``) carries its native call too, so a
classifier's closing softmax replays with the steps before it: the same bits as the unchained steps, new contents of
the same input array followed."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import executable as E

F = nee.nn.functional


def _t(rng, *s):
    return rng.standard_normal(s).astype(np.float32)


def _chain(f):
    (ex,) = [e[0] for e in f._fast.values() if isinstance(e, tuple)]
    return getattr(ex._local, "chain", None)


def _chained(monkeypatch, fn, xa, nt):
    """(the unchained jit, the chained jit, the chained one's input tensor on ``xa``, its 5th result, the unchained
    one's 4th, the chain) at ``nt`` threads (the caller restores the thread count)."""
    nee.set_num_threads(nt)
    monkeypatch.setattr(E, "_CHAIN", [1 << 62])
    ref = nee.jit(fn)
    want = [ref(nee.from_numpy(xa)).numpy() for _ in range(4)][-1]
    monkeypatch.setattr(E, "_CHAIN", [3])
    f = nee.jit(fn)
    x = nee.from_numpy(xa)
    for _ in range(5):
        got = f(x).numpy()
    ch = _chain(f)
    assert isinstance(ch, E._Chain)
    return ref, f, x, got, want, ch


def _python_steps(ch):
    """The chain's steps run by their Python runners (the output step's calls on its fresh arrays,
    ``_fresh_calls``, have no ``step``: native calls too)."""
    return [x for x in ch.plan if not isinstance(x, list) and hasattr(x, "step")]


_ACTS = {
    "none": lambda y: y,
    "relu": F.relu,
    "hardswish": F.hardswish,
    "silu": F.silu,
}


def _model(rng, C, k, stride, bias, b2, act):
    w = nee.from_numpy(_t(rng, C, 1, k, k) * 0.3)
    b = nee.from_numpy(_t(rng, C)) if bias else None
    c = nee.from_numpy(_t(rng, 1, C, 1, 1)) if b2 else None
    w2 = nee.from_numpy(_t(rng, 2 * C, C, 1, 1) * 0.2)

    def fn(x):
        y = F.conv2d(x, w, b, stride=stride, padding=k // 2, groups=C)
        if c is not None:
            y = y + c
        y = _ACTS[act](y)
        return F.relu(F.conv2d(y, w2))
    return fn


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("shape,k,stride", [((1, 32, 56, 56), 3, 1), ((2, 24, 29, 31), 5, 2), ((1, 16, 7, 9), 3, 1)])
@pytest.mark.parametrize("bias,b2", [(False, False), (True, False), (True, True), (False, True)])
@pytest.mark.parametrize("act", sorted(_ACTS))
def test_depthwise_step_is_chained_natively_and_bitwise(monkeypatch, nt, shape, k, stride, bias, b2, act):
    rng = np.random.default_rng(hash((shape, k, bias, b2, act)) % 2**32)
    fn = _model(rng, shape[1], k, stride, bias, b2, act)
    xa = _t(rng, *shape)
    n0 = nee.get_num_threads()
    try:
        ref, f, x, got, want, ch = _chained(monkeypatch, fn, xa, nt)
        if not (bias and b2):
            # (a bias and a second one: replayed only where both are frozen constants, their sum made once; a
            # jit's captured tensors may be written in place, so that step runs its Python runner)
            assert not _python_steps(ch), [s.step for s in _python_steps(ch)]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, fn(nee.from_numpy(xa)).numpy(), rtol=1e-4, atol=1e-4)
        for j in range(2):      # new contents of the same array: the replayed calls read them
            xa[...] = _t(rng, *shape) * (j + 2)
            got = f(x).numpy()
            assert _chain(f) is ch
            np.testing.assert_array_equal(got, ref(nee.from_numpy(xa.copy())).numpy())
    finally:
        nee.set_num_threads(n0)


def test_onnx_mobilenet_v3_chain_is_native(monkeypatch):
    pytest.importorskip("onnx")
    from asv_benchmarks import _onnx_models as M
    spec = M.spec("mobilenet_v3", tiny=False)      # (the tiny one's convs take paths without native calls)
    outs = {}
    for on in (False, True):
        monkeypatch.setattr(E, "_CHAIN", [3 if on else 1 << 62])
        s = nee.onnx.InferenceSession(spec.model.SerializeToString())
        for _ in range(5):
            outs[on] = s.run(None, spec.feed)
        if on:
            ch = _chain(s._jit)
            assert isinstance(ch, E._Chain)
            # every conv, the depthwise ones included, replays as native calls
            assert not _python_steps(ch), [x.step for x in _python_steps(ch)]
    for a, b in zip(outs[False], outs[True]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(1, 1000), (3, 37), (2, 5, 64)])
def test_softmax_chained_bitwise(monkeypatch, log, shape):
    rng = np.random.default_rng(shape[1])
    sm = F.log_softmax if log else F.softmax

    def fn(x):
        return sm(x, dim=-1) * 3.0    # (the softmax feeds another step: its output in the arena)
    xa = _t(rng, *shape)
    n0 = nee.get_num_threads()
    try:
        ref, f, x, got, want, ch = _chained(monkeypatch, fn, xa, 1)
        assert not [s for s in _python_steps(ch) if "softmax" in str(s.step[1])]
        np.testing.assert_array_equal(got, want)
        xa[...] = _t(rng, *shape)
        np.testing.assert_array_equal(f(x).numpy(), ref(nee.from_numpy(xa.copy())).numpy())
    finally:
        nee.set_num_threads(n0)
