"""Session 18 (helper "resnet"): input prologues of 1x1 convs (jit/fusion.ConvPrologue, kernels/conv_epilogue.py's
compile_conv_prologue, kernels/conv1x1_packed.py's PRO_STEPS).

DenseNet's BatchNormalization + ReLU before each 1x1 conv (``relu((x * a + b) * c + d)`` per input channel) ran as
an elementwise pass writing a buffer the conv then read; the packed 1x1 kernel now applies those steps to the input
as it packs its panels.  Checked against float64 references (numpy / torch): the kernel with each step chain on odd
shapes (channels not multiples of 8, planes with partial panels, batches, the fused and unfused variants, 1 and 2
threads); conv2d_into's other paths (the steps applied first); through ``nee.jit``: the fusion taken where it
applies (with and without the conv's epilogue), left alone where it does not (the group's result read elsewhere,
3x3 / strided / grouped convs), convs routed off the packed kernel and float64 graphs (the group then the conv),
the switch off.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv1x1_packed as PK
from neetorch.devices.cpu.kernels import conv_epilogue as CE

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = nee.nn.functional
RNG = np.random.default_rng(18)

needs_pk = pytest.mark.skipif(not PK.available(), reason="no packed 1x1 kernel on this host (LLVM / AVX2)")


@pytest.fixture
def restored():
    n = nee.get_num_threads()
    fm, mode = PK._FUSED_MIN_L[0], PK.MODE[0]
    yield
    PK._FUSED_MIN_L[0], PK.MODE[0] = fm, mode
    nee.set_num_threads(n)


def _steps_ref(x, steps, S):
    """The prologue in float32, one rounding per step (as the kernel and the group compute it)."""
    y = x.astype(np.float32).copy()
    q = 0
    for st in steps:
        if st == "relu":
            y = np.where(y < 0, np.float32(0), y)
        else:
            v = S[q][None, :, None, None].astype(np.float32)
            q += 1
            y = (y * v) if st == "mul" else (y + v)
    return y


def _conv1x1_ref(y, w, b, e, relu):
    r = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), y.astype(np.float64))
    if b is not None:
        r = r + b.astype(np.float64)[None, :, None, None]
    if e is not None:
        r = r + e
    return np.maximum(r, 0) if relu else r


STEP_CHAINS = [("mul", "add", "mul", "add", "relu"), ("add", "relu"), ("relu",), ("mul",), ("relu", "mul", "add")]
# (N, C, O, H, W): channels not multiples of 8, planes with a partial last panel, batches, 28x28 (the fused variant)
SHAPES = [(1, 13, 19, 7, 7), (2, 37, 40, 5, 6), (1, 64, 128, 28, 28), (1, 33, 130, 14, 14), (2, 20, 8, 29, 30)]


@needs_pk
@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_prologue_against_reference(restored, nt, shape):
    nee.set_num_threads(nt)
    N, C, O, H, W = shape
    for i, steps in enumerate(STEP_CHAINS):
        has_b, has_e, relu = (i % 2 == 0), (i % 3 == 1), (i % 2 == 1)
        for fused_min in (784, 1):          # the unfused tasks and the fused variant (its min plane lowered)
            PK._FUSED_MIN_L[0] = fused_min
            nq = sum(1 for s in steps if s != "relu")
            x = RNG.standard_normal((N, C, H, W)).astype(np.float32)
            x[0, 0, 0, :2] = -0.0
            w = RNG.standard_normal((O, C, 1, 1)).astype(np.float32)
            b = RNG.standard_normal(O).astype(np.float32) if has_b else None
            e = RNG.standard_normal((N, O, H, W)).astype(np.float32) if has_e else None
            S = RNG.standard_normal((nq, C)).astype(np.float32)
            x0 = x.copy()
            out = np.full((N, O, H, W), np.nan, np.float32)
            assert PK.conv2d(x, w, b, out, 1, relu, None, e, (1, 1), pre=(steps, S)), (shape, steps)
            ref = _conv1x1_ref(_steps_ref(x, steps, S), w, b, e, relu)
            np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max(), err_msg=str((steps,
                                                                                                        fused_min)))
            np.testing.assert_array_equal(x, x0)      # the input is read, not written


@needs_pk
def test_kernel_prologue_nan_and_declines(restored):
    nee.set_num_threads(1)
    x = RNG.standard_normal((1, 24, 6, 6)).astype(np.float32)
    x[0, 3, 2, 2] = np.nan
    w = RNG.standard_normal((16, 24, 1, 1)).astype(np.float32)
    S = RNG.standard_normal((1, 24)).astype(np.float32)
    out = np.zeros((1, 16, 6, 6), np.float32)
    assert PK.conv2d(x, w, None, out, 1, False, None, None, (1, 1), pre=(("add", "relu"), S))
    assert np.isnan(out[0, :, 2, 2]).all()           # relu keeps NaN (as torch's)
    assert not np.isnan(np.delete(out.reshape(16, 36), 14, axis=1)).any()
    # operands the kernel does not take: nothing written
    out[...] = 7
    assert not PK.conv2d(x, w, None, out, 1, False, None, None, (1, 1), pre=(("add", "tanh"), S))
    assert not PK.conv2d(x, w, None, out, 1, False, None, None, (1, 1), pre=(("add", "mul"), S))      # 2 rows
    assert not PK.conv2d(x, w, None, out, 1, False, None, None, (1, 1), pre=(("add",), S.astype(np.float64)))
    assert not PK.conv2d(x, w, None, out, 1, False, None, None, (1, 1), pre=(("add",), np.ones((1, 48),
                                                                                            np.float32)[:, ::2]))
    wg = RNG.standard_normal((16, 12, 1, 1)).astype(np.float32)
    assert not PK.conv2d(x, wg, None, out, 2, False, None, None, (1, 1), pre=(("add",), S))          # groups
    assert (out == 7).all()


@pytest.mark.parametrize("case, dt", [("1x1", np.float32), ("1x1", np.float64), ("1x1_short_k", np.float32),
                                      ("1x1_short_k", np.float64), ("3x3_s2", np.float32), ("1x1_s2", np.float32)])
def test_conv2d_into_prologue_every_path(case, dt):
    # conv2d_into with a prologue: the packed kernel where it runs, else the steps applied first (any path, dtype)
    xs, ws, s, p = {"1x1": ((1, 40, 9, 7), (24, 40, 1, 1), 1, 0), "1x1_short_k": ((2, 6, 5, 4), (9, 6, 1, 1), 1, 0),
                    "3x3_s2": ((1, 11, 9, 8), (7, 11, 3, 3), 2, 1), "1x1_s2": ((1, 20, 9, 9), (12, 20, 1, 1), 2, 0)}[case]
    steps = ("mul", "add", "relu")
    x = RNG.standard_normal(xs).astype(dt)
    w = (RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(dt)
    b = RNG.standard_normal(ws[0]).astype(dt)
    S = RNG.standard_normal((2, xs[1])).astype(np.float32 if dt == np.float32 else dt)
    attrs = {"stride": (s, s), "padding": (p, p, p, p), "dilation": (1, 1), "groups": 1}
    t = torch.from_numpy
    y = torch.relu(t(x.astype(np.float64)) * t(S[0].astype(np.float64)).reshape(1, -1, 1, 1)
                   + t(S[1].astype(np.float64)).reshape(1, -1, 1, 1))
    ref = torch.relu(TF.conv2d(y, t(w.astype(np.float64)), t(b.astype(np.float64)), s, p)).numpy()
    out = np.empty(ref.shape, dt)
    CV.conv2d_into(out, [x, w, b], attrs, relu=True, pre=(steps, S))
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@pytest.fixture
def pre_calls(monkeypatch):
    """Records the prologues the packed kernel was handed (the fusion ran on it)."""
    calls = []
    orig = PK._pre_ok

    def wrapped(pre, *a):
        r = orig(pre, *a)
        if pre is not None:
            calls.append(r)
        return r
    monkeypatch.setattr(PK, "_pre_ok", wrapped)
    return calls


def _bn_relu_conv(x, a, b, c, d, w, cb, s2, epi=True, stride=1, groups=1, padding=0, also_y=False):
    y = F.relu((x * a + b) * c + d)
    z = F.conv2d(y, w, cb, stride=stride, padding=padding, groups=groups)
    if epi:
        z = F.relu(z + s2)
    return (z, y) if also_y else z


def _torch_ref(args, epi=True, stride=1, groups=1, padding=0):
    t = [torch.from_numpy(np.asarray(v, np.float64)) for v in args]
    y = torch.relu((t[0] * t[1] + t[2]) * t[3] + t[4])
    z = TF.conv2d(y, t[5], t[6], stride, padding, 1, groups)
    return (torch.relu(z + t[7]) if epi else z).numpy(), y.numpy()


def _args(N, C, O, H, W, k=1, groups=1, dt=np.float32):
    mk = lambda *s: RNG.standard_normal(s).astype(dt)
    return [mk(N, C, H, W), mk(C, 1, 1), mk(C, 1, 1), mk(C, 1, 1), mk(C, 1, 1),
            (mk(O, C // groups, k, k) / np.sqrt(C * k * k)).astype(dt), mk(O), mk(O, 1, 1)]


def _run_jit(fn, args, **kw):
    jf = nee.jit(lambda *a: fn(*a, **kw))
    out = jf(*[nee.tensor(v) for v in args])
    if isinstance(out, tuple):
        return [o.numpy() for o in out]
    return out.numpy()


@pytest.mark.parametrize("epi", [True, False])
@pytest.mark.parametrize("shape", [(1, 48, 40, 7, 7), (2, 37, 24, 5, 6), (1, 64, 128, 28, 28), (1, 19, 16, 3, 5)])
def test_jit_bn_relu_conv1x1_fused(pre_calls, epi, shape):
    args = _args(*shape)
    out = _run_jit(_bn_relu_conv, args, epi=epi)
    ref, _ = _torch_ref(args, epi)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    N, C, O, H, W = shape
    if PK.pays((N, C, H, W), (O, C, 1, 1), (N, O, H, W), 1, 1, 0, 0, 0, 0, 1):
        # the shapes the packed kernel takes (16+ input channels, planes filling 3/4 of their panels: all four on
        # AVX2, 16-column panels; the 3x5 plane not on AVX-512, 32) run the fused prologue there
        assert pre_calls and all(c == ("mul", "add", "mul", "add", "relu") for c in pre_calls)
    else:
        assert not pre_calls


@pytest.mark.parametrize("kind", ["y_returned", "3x3", "stride2", "groups2"])
def test_jit_prologue_not_taken(pre_calls, kind):
    # the group's result read elsewhere, or a conv the kernel does not take with a prologue: the generic run
    kw = {"y_returned": dict(also_y=True), "3x3": dict(padding=1), "stride2": dict(stride=2),
          "groups2": dict(groups=2)}[kind]
    k = 3 if kind == "3x3" else 1
    g = kw.get("groups", 1)
    args = _args(1, 32, 24, 9, 9, k=k, groups=g)
    out = _run_jit(_bn_relu_conv, args, **kw)
    ref, yref = _torch_ref(args, True, kw.get("stride", 1), g, kw.get("padding", 0))
    if kind == "y_returned":
        np.testing.assert_allclose(out[1], yref, rtol=1e-5, atol=1e-5)
        out = out[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert pre_calls == []


@pytest.mark.parametrize("case", ["short_k", "short_k_runtime", "float64", "switch_off"])
def test_jit_prologue_fallbacks(pre_calls, monkeypatch, case):
    # the group then the conv: a conv the packed kernel does not take (4 input channels: the compiler declines
    # and the parts run; "_runtime": compiled anyway, the runner's fallback, the group into a scratch), a float64
    # graph, NEE_CONV_PROLOGUE=0
    if case == "switch_off":
        monkeypatch.setattr(CE, "CONV_PROLOGUE", [False])
    if case == "short_k_runtime":
        monkeypatch.setattr(CE, "_may_pack", lambda op, cv: True)
    C = 4 if case.startswith("short_k") else 24
    dt = np.float64 if case == "float64" else np.float32
    args = _args(2, C, 12, 6, 7, dt=dt)
    out = _run_jit(_bn_relu_conv, args)
    ref, _ = _torch_ref(args)
    tol = 1e-10 if dt == np.float64 else 1e-4
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.abs(ref).max())
    assert pre_calls == []
