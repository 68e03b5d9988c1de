"""conv2d's bias / residual / relu epilogue chains run inside the conv kernel (kernels/conv_epilogue.py):
every conv path (direct "pix" / "chan" kernels with groups, Winograd, 1x1 GEMMs, grouped GEMMs, depthwise,
padded rows, im2col) with each chain, through ``nee.jit``, against torch in float64; NaN placement; the
chains that are not recognized and the aliasing / dtype declines keep the generic run."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as K
from neetorch.devices.cpu.kernels import conv_act
from neetorch.devices.cpu.kernels import conv_direct as D
from neetorch.devices.cpu.kernels import conv_epilogue as E
from neetorch.devices.cpu.kernels import fused

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = nee.nn.functional
RNG = np.random.default_rng(11)


@pytest.fixture
def inside(monkeypatch):
    """Counts conv2d_into calls carrying an epilogue (the chain ran inside the conv)."""
    calls = []
    orig = K.conv2d_into

    def wrapped(out, ins, attrs, b2=None, e=None, relu=False):
        if b2 is not None or e is not None or relu:
            calls.append((b2 is not None, e is not None, relu))
        return orig(out, ins, attrs, b2, e, relu)
    monkeypatch.setattr(K, "conv2d_into", wrapped)
    return calls


# (x shape, w shape, stride, padding, groups, path switches): every conv path of conv.py
PATHS = [
    ((1, 5, 11, 9), (7, 5, 3, 3), 2, 1, 1, {}),                              # direct, 3x3 stride 2
    ((1, 16, 9, 10), (20, 16, 3, 3), 1, 1, 1, {"wino": "4"}),                # Winograd F(4x4)
    ((2, 40, 6, 7), (24, 40, 1, 1), 1, 0, 1, {}),                            # 1x1 GEMM (batch 2)
    ((1, 8, 6, 7), (24, 8, 1, 1), 1, 0, 1, {}),                              # 1x1, short K: direct
    ((1, 68, 5, 6), (68, 34, 1, 1), 1, 0, 2, {}),                            # grouped 1x1: a GEMM per group
    ((1, 12, 9, 8), (18, 4, 3, 3), 1, 1, 3, {}),                             # grouped 3x3: direct
    ((1, 6, 9, 8), (6, 1, 3, 3), 1, 1, 6, {}),                               # depthwise
    ((1, 20, 10, 9), (8, 20, 3, 3), 1, 1, 1, {"direct": "0", "wide": True}),  # padded rows
    ((1, 9, 10, 9), (8, 9, 3, 3), 2, 1, 1, {"direct": "0"}),                 # im2col
]


def _setup(monkeypatch, sw):
    monkeypatch.setattr(D, "MODE", [sw.get("direct", "")])
    monkeypatch.setattr(K, "_WINO_FORCE", [sw.get("wino", "0")])
    if "wide" in sw:
        monkeypatch.setattr(K, "_wide_pays", lambda *a, **k: True)


def _ref(x, w, b, s, p, g, shift, res, relu):
    t = lambda a: None if a is None else torch.from_numpy(np.asarray(a, np.float64))
    y = TF.conv2d(t(x), t(w), t(b), s, p, 1, g)
    if shift is not None:
        y = y + t(shift)
    if res is not None:
        y = y + t(res)
    return (torch.relu(y) if relu else y).numpy()


CHAINS = [("shift",), ("relu",), ("shift", "relu"), ("shift", "res", "relu"), ("res",), ("res", "relu")]


def _attrs(s, p, g):
    return {"stride": (s, s), "padding": (p, p, p, p), "dilation": (1, 1), "groups": g}


@pytest.mark.parametrize("case", range(len(PATHS)))
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_chains_inside_every_path(monkeypatch, case, dt):
    # conv2d_into with each chain, straight (the JIT's runner below): bias and no bias, a non-contiguous
    # residual, float32 (the direct kernels where the rule picks them) and float64 (the other paths)
    xs, ws, s, p, g, sw = PATHS[case]
    _setup(monkeypatch, sw)
    x = RNG.standard_normal(xs).astype(dt)
    w = (RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(dt)
    O = ws[0]
    oshape = tuple(TF.conv2d(torch.zeros(xs, dtype=torch.float64), torch.zeros(ws, dtype=torch.float64), None, s, p,
                             1, g).shape)
    for k, chain in enumerate(CHAINS):
        b = RNG.standard_normal(O).astype(dt) if k % 2 else None
        shift = RNG.standard_normal(O).astype(dt) if "shift" in chain else None
        r = None
        if "res" in chain:
            r = RNG.standard_normal(oshape[:3] + (2 * oshape[3],)).astype(dt)[..., ::2] if k % 2 else \
                RNG.standard_normal(oshape).astype(dt)
        out = np.full(oshape, np.nan, dt)
        K.conv2d_into(out, [x, w] + ([b] if b is not None else []), _attrs(s, p, g), shift, r, "relu" in chain)
        want = _ref(x, w, b, s, p, g, None if shift is None else shift[:, None, None], r, "relu" in chain)
        tol = 1e-4 if dt == np.float32 else 1e-10
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()),
                                   err_msg=str((case, chain)))


def test_jit_chains_run_inside(inside):
    # the chains the ONNX CNNs give, through nee.jit: recognized (conv2d_into gets them), == torch
    xs, ws = (1, 6, 9, 8), (8, 6, 3, 3)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    shift = RNG.standard_normal((8, 1, 1)).astype(np.float32)
    r = RNG.standard_normal((1, 8, 9, 8)).astype(np.float32)
    wn, bn, sn = nee.from_numpy(w), nee.from_numpy(b), nee.from_numpy(shift)
    for chain in CHAINS:
        def f(xx, rr, chain=chain):
            y = F.conv2d(xx, wn, bn, 1, 1)
            if "shift" in chain:
                y = sn + y
            if "res" in chain:
                y = y + rr
            return F.relu(y) if "relu" in chain else y
        inside.clear()
        got = nee.jit(f)(nee.from_numpy(x), nee.from_numpy(r)).numpy()
        want = _ref(x, w, b, 1, 1, 1, shift if "shift" in chain else None, r if "res" in chain else None,
                    "relu" in chain)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(chain))
        assert inside == [("shift" in chain, "res" in chain, "relu" in chain)], chain


def test_nan_and_negative_zero_through_relu(monkeypatch, inside):
    # torch's relu keeps NaN; a NaN input reaches the outputs whose windows hold it, on every path
    for sw in ({}, {"direct": "0"}, {"wino": "2"}):
        _setup(monkeypatch, sw)
        x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
        x[0, 1, 3, 4] = np.nan
        w = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
        wn = nee.from_numpy(w)
        jf = nee.jit(lambda xx, wn=wn: F.relu(F.conv2d(xx, wn, None, 1, 1)))
        got = jf(nee.from_numpy(x)).numpy()
        want = _ref(x, w, None, 1, 1, 1, None, None, True)
        assert np.array_equal(np.isnan(got), np.isnan(want)), sw
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)
        assert (got[ok] >= 0).all()
    assert len(inside) == 3


def test_other_chains_keep_the_generic_run(inside):
    w = nee.from_numpy(RNG.standard_normal((6, 3, 3, 3)).astype(np.float32))
    x = RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))
    wt = t(w.numpy())
    sh = RNG.standard_normal((6, 1, 1)).astype(np.float32)
    cases = [
        # (O, 1, W): not a per-channel bias, nor an activation step: the generic run
        (lambda y: y + nee.from_numpy(sh[:, :, :1] * np.ones((1, 1, 5), np.float32)),
         lambda y: y + t(sh[:, :, :1] * np.ones((1, 1, 5))), False),
        # chains of activation steps (session 28, kernels/conv_act.py): inside the direct kernel, not as a relu flag
        (lambda y: F.relu(y) + 1.0, lambda y: torch.relu(y) + 1.0, True),             # relu before an add
        (lambda y: y * 0.5, lambda y: y * 0.5, True),                                  # a constant multiply
        (lambda y: F.relu(F.relu(y)), lambda y: torch.relu(y), True),                  # relu twice
    ]
    for fn, ref, steps in cases:
        inside.clear()
        jf = nee.jit(lambda xx, fn=fn: fn(F.conv2d(xx, w, None, 1, 0)))
        got = jf(nee.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, ref(TF.conv2d(t(x), wt)).numpy(), rtol=1e-4, atol=1e-4)
        if steps:
            assert inside and all(isinstance(r, tuple) and not conv_act.is_relu(r) for _, _, r in inside)
        else:
            assert inside == []


def test_switch_off_and_declines(monkeypatch, inside):
    x = RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)
    w = nee.from_numpy(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))
    want = torch.relu(TF.conv2d(t(x), t(w.numpy()), None, 1, 1)).numpy()
    monkeypatch.setattr(fused, "CONV_EPILOGUE", [False])
    jf = nee.jit(lambda xx: F.relu(F.conv2d(xx, w, None, 1, 1)))
    np.testing.assert_allclose(jf(nee.from_numpy(x)).numpy(), want, rtol=1e-4, atol=1e-4)
    assert inside == []
    monkeypatch.setattr(fused, "CONV_EPILOGUE", [True])
    # the runner declines an output sharing memory with an operand, and operands of another dtype
    jf = nee.jit(lambda xx, rr: F.relu(F.conv2d(xx, w, None, 1, 1) + rr))
    r = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    graph = jf.graph(nee.from_numpy(x), nee.from_numpy(r))
    node = next(n for n in graph.nodes if n.name.startswith("conv2d+"))
    op = node.op
    run = E.plan(op.matmul, op.epilogue, op.acc, list(op.epilogue.inputs))
    assert run is not None
    wa = w.numpy()
    out = np.empty((1, 4, 7, 7), np.float32)
    assert not run([r], [x, wa, r])                               # out is the residual
    assert not run([out], [x, wa, r.astype(np.float64)])          # residual of another dtype
    assert run([out], [x, wa, r])
    np.testing.assert_allclose(out, np.maximum(TF.conv2d(t(x), t(wa), None, 1, 1).numpy() + r, 0), rtol=1e-4,
                               atol=1e-4)
