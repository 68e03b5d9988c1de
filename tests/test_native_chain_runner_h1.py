"""A step chain's list of native calls run as one native call (devices/cpu/native_chain.py ``runner`` /
``NativeList``, NEE_JIT_CHAIN_NATIVE).

The runner does what the Python loop does (each claim counter reset, then the kernel on the arrays' data), bit for
bit, on bound conv calls (the direct kernel with its fill and claim counters, the packed 1x1 on gemm_driver's
workers) at 1 and 2 threads, run again and again; lists holding anything but llvm_call trampolines on arrays stay
Python lists; a chained ONNX model gives the same outputs with the runner on and off, its chain holding NativeLists
(still lists of the calls: what counts chained calls sees them), and NEE_JIT_CHAIN_NATIVE=0 keeps plain lists.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import native_chain as NC
from neetorch.devices.cpu.kernels import conv, winograd
from neetorch.jit import executable as E

RNG = np.random.default_rng(1907)


def _bound_conv_calls(C, H, O, k, p):
    x = RNG.standard_normal((1, C, H, H), dtype=np.float32)
    w = (RNG.standard_normal((O, C, k, k)) / np.sqrt(C * k * k)).astype(np.float32)
    b = RNG.standard_normal(O, dtype=np.float32)
    winograd.freeze(w)
    winograd.freeze(b)
    OH = H + 2 * p - k + 1
    attrs = dict(groups=1, stride=(1, 1), padding=(p, p, p, p), dilation=(1, 1))
    out = np.full((1, O, OH, OH), np.nan, np.float32)
    f = conv.bind_into(out, [x, w, b], attrs, relu=True)
    if f is None or not f(out, [x, w, b], None, None):
        return None
    calls = f.calls(out, [x, w, b], None, None)
    return calls, out, (x, w, b)


def _py(calls):
    for fn, args, ctr in calls:
        if ctr is not None:
            ctr[0][ctr[1]] = 0
        fn(*args)


@pytest.mark.parametrize("shape", [(16, 23, 40, 3, 1), (48, 13, 192, 1, 0), (7, 9, 33, 3, 1), (32, 27, 128, 3, 1)])
def test_runner_bitwise_the_python_loop(nthreads, shape):
    got = _bound_conv_calls(*shape)
    if got is None or got[0] is None:
        pytest.skip("no bound native calls for this conv here")
    calls, out, _ = got
    _py(calls)
    ref = out.copy()
    nl = NC.runner(calls)
    assert isinstance(nl, NC.NativeList) and isinstance(nl, list) and list(nl) == list(calls)
    for _ in range(5):
        out.fill(np.nan)
        nl({})
        assert np.array_equal(out, ref), shape
    # counters left as a run leaves them: the Python loop after it still gives the same
    out.fill(np.nan)
    _py(calls)
    assert np.array_equal(out, ref)


def test_runner_refuses_other_calls(monkeypatch):
    a = np.zeros(4, np.float32)
    assert NC.runner([(np.copyto, (a, a), None)]) is None
    assert NC.runner([(lambda *x: None, (a,), None)]) is None
    assert NC.runner([]) is None
    got = _bound_conv_calls(16, 23, 40, 3, 1)
    if got is None or got[0] is None:
        pytest.skip("no bound native calls")
    calls = got[0]
    assert NC.runner(calls + [(np.copyto, (a, a), None)]) is None
    fn, args, ctr = calls[0]
    assert NC.runner([(fn, tuple(args) + (3,), ctr)]) is None          # (a non-array argument)
    monkeypatch.setattr(NC, "NATIVE", [False])
    assert NC.runner(calls) is None


def _squeezenet():
    onnx = pytest.importorskip("onnx")
    import os
    path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")
    if not os.path.exists(path):
        pytest.skip("no light_squeezenet in the onnx package")
    return path


def _chain_of(s):
    exes = [entry[0] for entry in s._jit._fast.values() if isinstance(entry, tuple)]
    (ex,) = exes
    return getattr(ex._local, "chain", None)


@pytest.mark.parametrize("native", [True, False])
def test_model_chain_native_on_off(nthreads, monkeypatch, native):
    path = _squeezenet()
    monkeypatch.setattr(E, "_CHAIN", [3])
    x = RNG.standard_normal((1, 3, 224, 224), dtype=np.float32)
    monkeypatch.setattr(NC, "NATIVE", [False])
    s0 = nee.onnx.InferenceSession(path)
    name = s0.get_inputs()[0].name
    ref = [s0.run(None, {name: x})[0] for _ in range(5)]
    monkeypatch.setattr(NC, "NATIVE", [native])
    s = nee.onnx.InferenceSession(path)
    outs = [s.run(None, {name: x})[0] for _ in range(6)]
    for o in outs:
        np.testing.assert_array_equal(o, ref[-1])
    ch = _chain_of(s)
    assert isinstance(ch, E._Chain)
    kinds = [type(it) for it in ch.plan if isinstance(it, list)]
    assert kinds and all(k is (NC.NativeList if native else list) for k in kinds)
    assert sum(len(it) for it in ch.plan if isinstance(it, list)) >= 30
    # another input array: the steps run (guards), then chained again; the same results as the unchained session
    x2 = RNG.standard_normal((1, 3, 224, 224), dtype=np.float32)
    for _ in range(4):
        np.testing.assert_array_equal(s.run(None, {name: x2})[0], s0.run(None, {name: x2})[0])
