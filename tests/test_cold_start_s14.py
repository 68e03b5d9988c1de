"""Session 14: the CNN-path kernels moved from Numba to LLVM IR (kernels/ir_small.py) so that an ONNX CNN
session's first run never initializes Numba's target: global pooling (conv._pool_global), row sums / means
(reduction.py's row mode: GlobalAveragePool lowered as a mean), the conv bias / relu / residual pass
(conv._finish_epilogue).  Differential against the Numba kernels they replace (bitwise where the arithmetic is
the same), numpy / torch, and a subprocess check that a small CNN session runs without Numba."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv, ir_small, reduction

torch = pytest.importorskip("torch")


@pytest.fixture(params=[1, 2], ids=["t1", "t2"])
def nthreads(request):
    old = threads.NUM_THREADS
    nee.set_num_threads(request.param)
    yield request.param
    nee.set_num_threads(old)


def _specials(x, rng):
    """NaN, +-inf, -0.0 sprinkled into x (float) in place."""
    f = x.reshape(-1)
    n = f.size
    for v in (np.nan, np.inf, -np.inf, -0.0, 0.0):
        f[rng.integers(0, n, max(1, n // 40))] = v
    return x


# ------------------------------------------------------------------------------------ global pooling
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("is_max", [False, True])
def test_pool_global_kernel_bitwise_vs_numba(dt, is_max):
    rng = np.random.default_rng(1)
    nb = conv._pool_global.fallback           # the Numba kernel the IR one replaces
    for n in (1, 2, 3, 4, 5, 7, 8, 9, 13, 49, 169, 1001):
        for special in (False, True):
            P = 11
            x = rng.standard_normal(P * n).astype(dt)
            if special:
                _specials(x, rng)
            dv = np.full(1, 7 if n == 1 else n, dt)
            a = np.full(P, -5, dt)
            b = np.full(P, -5, dt)
            conv._pool_global(x, a, n, is_max, dv, 2, 9)
            nb(x, b, n, is_max, dv, 2, 9)
            assert a.tobytes() == b.tobytes(), (n, special, a, b)
            assert (a[:2] == -5).all() and (a[9:] == -5).all()
            ref = x.reshape(P, n)[2:9].astype(np.float64)
            with np.errstate(invalid="ignore"):
                r = np.where(np.isnan(ref).any(1), np.nan, ref.max(1)) if is_max else ref.sum(1) / dv[0]
            np.testing.assert_allclose(a[2:9], r.astype(dt), rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-6)


def test_pool_global_falls_back_on_other_arrays():
    # a non-contiguous or out-of-bounds call goes to the Numba kernel (which the callers never make): no IR call
    x = np.arange(40, dtype=np.float32)[::2]
    out = np.zeros(5, np.float32)
    conv._pool_global(x, out, 4, False, np.full(1, 4, np.float32), 0, 5)
    np.testing.assert_array_equal(out, x.reshape(5, 4).mean(1))


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 5, 13, 13), (3, 2, 1, 3), (1, 1, 2, 1), (2, 64, 5, 9)])
def test_global_pool_ops_vs_torch(nthreads, dt, shape):
    g = torch.Generator().manual_seed(3)
    t = torch.randn(shape, generator=g, dtype=dt)
    t.view(-1)[::17] = float("nan")
    t.view(-1)[5::23] = float("inf")
    x = nee.tensor(t.numpy())
    k = shape[2:]
    for name in ("avg_pool2d", "max_pool2d"):
        ref = getattr(torch.nn.functional, name)(t, k)
        got = getattr(nee.nn.functional, name)(x, k)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6 if dt == torch.float32 else 1e-13,
                                   atol=0, equal_nan=True)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_bound_global_pool_step(nthreads, dt):
    # pool_native.bind_pool: a compiled graph's step for global windows (through conv._pool_global)
    from neetorch.devices.cpu.kernels import pool_native
    rng = np.random.default_rng(5)
    for shape in ((1, 7, 7, 7), (2, 300, 13, 13), (1, 1000, 13, 13)):
        x = _specials(rng.standard_normal(shape).astype(dt), rng)
        out = np.empty(shape[:2] + (1, 1), dt)
        for is_max in (False, True):
            attrs = {"kernel_size": shape[2:], "stride": shape[2:], "padding": (0, 0), "dilation": (1, 1),
                     "count_include_pad": True, "divisor_override": None}
            f = pool_native.bind_pool(is_max, attrs, out, [x])
            assert f is not None
            assert f([out], [x]) is True
            t = torch.from_numpy(x)
            ref = (torch.nn.functional.max_pool2d if is_max else torch.nn.functional.avg_pool2d)(t, shape[2:])
            np.testing.assert_allclose(out, ref.numpy(), rtol=1e-6 if dt == np.float32 else 1e-13, equal_nan=True)


# ------------------------------------------------------------------------------------ row sums / means
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["mean", "sum"])
def test_row_reduce_vs_numpy_and_numba(nthreads, dt, kind):
    rng = np.random.default_rng(7)
    for shape, dims in (((2, 3, 7, 7), (2, 3)), ((1, 1000, 13, 13), (2, 3)), ((5, 2049), (1,)),
                        ((3, 4100), (1,)), ((1, 1), (1,)), ((6,), (0,)), ((300, 1000), (1,)),
                        ((2, 3, 5), (0, 1, 2)), ((4, 0), (1,))):
        x = rng.standard_normal(shape).astype(dt) * 3
        out = np.empty(tuple(1 if d in dims else n for d, n in enumerate(shape)), dt)
        reduction.reduce_into(kind, x, out, dims)
        x64 = x.astype(np.float64)
        ref = x64.sum(axis=dims, keepdims=True)
        if kind == "mean":
            with np.errstate(invalid="ignore"):
                ref = ref / max(1, int(np.prod([shape[d] for d in dims]))) if x.size else ref / 0
        np.testing.assert_allclose(out, ref.astype(dt), rtol=2e-7 if dt == np.float32 else 1e-13, atol=1e-12)
        # the Numba kernel this replaces: float32 results agree to the bit (float64 sums, rounded once)
        xb, ob, m = reduction.plan(x, np.empty_like(out), dims, False)
        if dt == np.float32 and x.size:
            reduction._get(kind, x.dtype, out.dtype)[0](xb, ob, reduction._EMPTY_I64, np.array(m, np.int64))
            assert np.array_equal(ob.reshape(out.shape), out)


def test_row_reduce_specials_and_views(nthreads):
    rng = np.random.default_rng(9)
    for dt in (np.float32, np.float64):
        base = _specials(rng.standard_normal((6, 40, 33)).astype(dt), rng)
        for x in (base, base[:, ::2], base[1:5, 3:37, 1:30], base[::-1]):      # strided / offset views
            for kind in ("mean", "sum"):
                got = getattr(nee, kind)(nee.tensor(x), -1, keepdim=True).numpy()
                ref = getattr(torch, kind)(torch.from_numpy(np.ascontiguousarray(x)), -1, keepdim=True).numpy()
                np.testing.assert_allclose(got, ref, rtol=1e-5 if dt == np.float32 else 1e-12, equal_nan=True)


def test_bound_mean_step(nthreads):
    rng = np.random.default_rng(11)
    for dt in (np.float32, np.float64):
        for shape in ((1, 1000, 13, 13), (2, 512, 7, 7), (3, 5, 1, 1)):
            x = rng.standard_normal(shape).astype(dt)
            out = np.empty(shape[:2] + (1, 1), dt)
            f = reduction.bind_reduce("mean", {"dims": (2, 3)}, out, [x])
            assert f is not None and f([out], [x]) is True
            np.testing.assert_allclose(out, x.astype(np.float64).mean((2, 3), keepdims=True).astype(dt),
                                       rtol=2e-7 if dt == np.float32 else 1e-13, atol=1e-12)


# ------------------------------------------------------------------------------------ conv bias / relu pass
def _epilogue_ref(ref, b0, e0, hb, he, relu, dt):
    if he or hb:
        ref = ref + (b0.reshape(1, -1, 1, 1) if hb else dt(0))
    if he:
        ref = ref + e0
    if relu:
        ref = np.where(ref < 0, dt(0), ref)
    return ref


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_finish_epilogue_bitwise(nthreads, dt):
    rng = np.random.default_rng(13)
    for shape in ((2, 5, 7, 3), (1, 136, 28, 28), (1, 1, 1, 1), (3, 4, 1, 9)):
        r0 = _specials(rng.standard_normal(shape).astype(dt), rng)
        b0 = _specials(rng.standard_normal(shape[1]).astype(dt), rng)
        e0 = _specials(rng.standard_normal(shape).astype(dt), rng)
        for hb, he, relu in itertools.product((False, True), repeat=3):
            b = b0 if hb else None
            e = e0 if he else None
            got = r0.copy()
            conv._finish_epilogue(got, b, e, relu)
            ref = r0.copy()
            with np.errstate(invalid="ignore"):
                ref = _epilogue_ref(ref, b0, e0, hb, he, relu, dt)
            assert got.tobytes() == ref.tobytes(), (shape, hb, he, relu)
            # and the Numba kernel it replaces
            nb = r0.copy().reshape(-1)
            O = shape[1]
            L = r0.size // (shape[0] * O)
            conv._bias_act(nb, b0 if hb else conv._NO_BIAS[np.dtype(dt)], hb, e0.reshape(-1) if he else nb, he,
                           relu, L, O, 0, shape[0] * O)
            if hb or he or relu:
                assert got.tobytes() == nb.tobytes()


def test_finish_epilogue_non_contiguous_residual():
    rng = np.random.default_rng(17)
    r = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    e = rng.standard_normal((2, 4, 6, 12)).astype(np.float32)[..., ::2]
    b = rng.standard_normal(4).astype(np.float32)
    got = r.copy()
    conv._finish_epilogue(got, b, e, True)
    np.testing.assert_array_equal(got, np.maximum(r + b.reshape(1, 4, 1, 1) + e, 0))


def test_bias_act_bounds_checked():
    r = np.zeros(10, np.float32)
    f = ir_small.bias_act(r, np.zeros(1, np.float32), False, r, False, True, 5, 1, conv._bias_act)
    with pytest.raises(IndexError, match="conv bias/relu"):
        f(0, 3)


# ------------------------------------------------------------------------------------ no Numba in a session
_SCRIPT = textwrap.dedent("""
    import gc, sys
    import numpy as np
    import numba.core.base as B
    calls = [0]
    orig = B.BaseContext.refresh
    def refresh(self):
        calls[0] += 1
        return orig(self)
    B.BaseContext.refresh = refresh
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import neetorch as nee
    from neetorch.onnx import InferenceSession
    nee.set_num_threads(2)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(8).astype(np.float32)
    fw = rng.standard_normal((5, 8)).astype(np.float32)
    fb = rng.standard_normal(5).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fw, "fw"), (fb, "fb"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y0"], transB=1),
             helper.make_node("Softmax", ["y0"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 13, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
    sess = InferenceSession(model)
    y = sess.run(None, {"x": x})[0]
    y2 = sess.run(None, {"x": x})[0]
    # the torch reference runs in the parent (torch's import is ~2.5 s of CPU in a fresh process)
    np.savez(sys.argv[1], x=x, w=w, b=b, fw=fw, fb=fb, y=y, y2=y2)
    from numba.core.dispatcher import Dispatcher
    used = sorted(d.py_func.__qualname__ for d in gc.get_objects() if isinstance(d, Dispatcher) and d.signatures)
    print("NUMBA", calls[0], used)
""")


@pytest.mark.parametrize("mode", ["1", "0"])
def test_cnn_session_first_run_without_numba(mode, tmp_path):
    """NEE_IR_SMALL=1 (the default): the session's runs call no Numba dispatcher and Numba's target is never
    refreshed.  NEE_IR_SMALL=0 (the Numba kernels, as before): the same check sees Numba (it can fail)."""
    pytest.importorskip("onnx")
    env = dict(os.environ, NEE_IR_SMALL=mode, NEE_IR_REDUCE=mode)   # (reductions: reduce_ir)
    out = tmp_path / "run.npz"
    p = subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = np.load(out)
    x, w, b, fw, fb, y, y2 = (r[k] for k in ("x", "w", "b", "fw", "fb", "y", "y2"))
    t = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                   torch.from_numpy(b).double(), padding=1).relu().mean((2, 3))
    ref = torch.softmax(t @ torch.from_numpy(fw).double().T + torch.from_numpy(fb).double(), 1).numpy()
    assert y.dtype == np.float32 and y.shape == (2, 5), (y.dtype, y.shape)
    assert np.allclose(y, ref, rtol=1e-4, atol=1e-6) and np.array_equal(y, y2), (y, ref)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("NUMBA")][-1]
    refreshed = int(line.split()[1])
    if mode == "1":
        assert refreshed == 0 and line.endswith("[]"), line
    else:
        assert refreshed > 0 and not line.endswith("[]"), line
