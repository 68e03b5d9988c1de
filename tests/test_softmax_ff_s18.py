"""Session 18 (helper 'softmax'): the softmax row kernel (llvm_render.render_rows_ir: the prologue and the max
in one pass, the exp pass's float32 exp with one scale, rows numbered by carried counters), alone, after a
fused prologue and inside the batched packed kernel; and the FF1 + GELU product's epilogue.  Differential
against numpy in float64 (and torch where installed) on odd row lengths, -inf masks, all -inf rows and NaNs."""
import math

import numpy as np
import pytest

import neetorch  # noqa: F401  (the package first: the CPU backend registers its kernels)
from neetorch.devices.cpu import llvm_render
from neetorch.devices.cpu.kernels import nn as NN

LENGTHS = (1, 7, 8, 9, 127, 129, 1000)
_TOL = {"float32": 4e-6, "float64": 1e-13}
_ATOL = {"float32": 1e-37, "float64": 1e-300}     # (outputs below the smallest normal are flushed to 0)


def _ref(x, log=False, safe=False):
    """softmax / log_softmax over the last dim in float64 with max subtraction: an all -inf row gives NaN
    (0 with ``safe``, softmax only), a row holding a NaN or +inf gives NaN."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = x.max(-1, keepdims=True)
        d = x - m
        if log:
            return d - np.log(np.exp(d).sum(-1, keepdims=True))
        e = np.exp(d)
        r = e / e.sum(-1, keepdims=True)
    if safe:
        r[np.all(x == -np.inf, axis=-1)] = 0.0
    return r


def _inputs(rng, R, n, dt, mask=True):
    x = (rng.standard_normal((R, n)) * 4).astype(dt)
    if mask and n > 1:
        x[rng.random((R, n)) < 0.3] = -np.inf          # scattered -inf (attention masks)
        x[1, :] = -np.inf                              # an all -inf row
        x[2, n // 2:] = -np.inf                        # a causal-style half
        x[3, :] = np.float32(-1e4) if dt == "float32" else -1e5      # all equal, large negative
        x[4, 0] = np.nan                               # a NaN row
        x[5, n - 1] = np.inf                           # +inf: NaN row (inf - inf)
        x[6, :] = rng.standard_normal(n) * 300         # exps far below the smallest normal
    return x


def _check(got, ref, dt, log=False):
    """NaNs where the reference has them; elsewhere relative (log_softmax: absolute, its values near 0 are
    differences of numbers near log(sum) and x - max) within the dtype's tolerance."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=_TOL[dt], atol=_TOL[dt] * 4 if log else _ATOL[dt])


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("log,safe", [(False, False), (False, True), (True, False)])
def test_row_kernel_vs_numpy(nthreads, dt, n, log, safe):
    """softmax_launch (the IR row kernel over unit-stride rows), rows split across threads."""
    rng = np.random.default_rng(n * 7 + log + 2 * safe)
    x = _inputs(rng, 37, n, dt)
    out = np.full_like(x, 7.0)
    NN.softmax_launch(x, out, 1, log, safe)
    _check(out, _ref(x, log, safe), dt, log)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_row_kernel_rows_numbered(dt):
    """Rows given as (a, b) with independent strides (B > 1: row r = a * B + b), launches starting and ending
    at rows that are not multiples of B (the chunks of a split launch): each row is found from the counters
    carried from row to row, and no other row is written."""
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((7, 5, 33)) * 3).astype(dt)
    base[2, 3, 4:] = -np.inf
    x = base.transpose(1, 0, 2)                      # (5, 7, 33): rows 33 apart along a, 165 along b
    want = _ref(x)
    k = NN.ir_rows("softmax", dt, False)
    assert k is not None
    d = NN._dummy(dt)
    o2 = np.empty((5, 7, 33), dt)
    for r0, r1 in ((0, 35), (3, 17), (6, 8), (13, 35), (20, 21)):
        o2.fill(5.0)
        k(base.reshape(-1), o2.reshape(-1), d, d, d,
          llvm_render.row_meta(r0, r1, 7, 33, 0.0, [(33, 165, 0), (231, 33, 0)]))
        rows = {(r // 7, r % 7) for r in range(r0, r1)}
        for a in range(5):
            for b in range(7):
                if (a, b) in rows:
                    _check(o2[a, b], want[a, b], dt)
                else:
                    assert (o2[a, b] == 5.0).all()


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("n", LENGTHS)
def test_row_kernel_with_prologue(dt, n):
    """The prologue's value (x * s + mask) and the max in one pass: with the prologue's output kept (an
    output of the group) and without (a row scratch)."""
    rng = np.random.default_rng(n)
    x = _inputs(rng, 11, n, dt, mask=False)
    mask = np.where(rng.random((11, n)) < 0.25, -np.inf, 0.0).astype(dt)
    mask[1] = -np.inf
    s = np.array([0.37], dt)
    want = x.astype(np.float64) * np.float64(s[0]) + mask
    d = NN._dummy(dt)
    for ext in (False, True):
        pro = ((dt, dt, dt), (dt,), (f"t0 = np.{dt}(v0 * v1)", f"t1 = np.{dt}(t0 + v2)"), ("t1",),
               (False, True, False), 0, ext)
        for mode in ("softmax", "log_softmax"):
            for safe in ((False, True) if mode == "softmax" else (False,)):
                k = NN.ir_rows(mode, dt, safe, pro)
                assert k is not None
                out = np.full((11, n), 3.0, dt)
                kept = np.full((11, n), 3.0, dt)
                tmp = np.empty(n, dt)
                lays = [(n, 0, 0), (n, 0, 0), (0, 0, 0), (n, 0, 0), (n, 0, 0)]
                k(kept if ext else d, x, s, mask, out, d, d, tmp, llvm_render.row_meta(0, 11, 1, n, 0.0, lays))
                _check(out, _ref(want, mode == "log_softmax", safe), dt, mode == "log_softmax")
                if ext:
                    np.testing.assert_allclose(kept, want, rtol=_TOL[dt] / 4, atol=0)


def test_float32_exp_pass_accuracy():
    """exp over the whole reduced range: a row holding 0 and d in [-87.3, 0] (the exps the float32 pass
    computes with one scale), then a row with d just below the cut (-87.33: 0)."""
    d = np.concatenate([np.zeros(1), -np.linspace(0, 87.3, 4001)]).astype(np.float32)
    out = np.empty((1, d.size), np.float32)
    NN.softmax_launch(d[None, :], out, 1, False)
    ref = _ref(d[None, :])
    big = ref >= np.finfo(np.float32).tiny
    np.testing.assert_allclose(out[big], ref[big], rtol=2e-6)
    assert (out[~big] == 0).all()
    x = np.array([[0.0, -87.34, -90.0, -np.inf]], np.float32)
    o = np.empty_like(x)
    NN.softmax_launch(x, o, 1, False)
    assert o[0, 0] == 1.0 and (o[0, 1:] == 0).all()


@pytest.mark.parametrize("n", (7, 128, 129))
def test_matches_torch(n, torch_mod):
    """-inf, all -inf, NaN and +inf rows as torch.softmax / log_softmax give them."""
    rng = np.random.default_rng(n + 1)
    for dt in ("float32", "float64"):
        x = _inputs(rng, 9, n, dt)
        for log in (False, True):
            out = np.empty_like(x)
            NN.softmax_launch(x, out, 1, log)
            t = torch_mod.from_numpy(x)
            want = (torch_mod.log_softmax if log else torch_mod.softmax)(t, -1).numpy()
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
            ok = ~np.isnan(want)
            np.testing.assert_allclose(out[ok], want[ok], rtol=_TOL[dt] * 2, atol=_TOL[dt] * 4 if log else _ATOL[dt])


def _attention_model(B, S, H, D, masked):
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh
    inits = [nh.from_array(np.array([0, 0, H, D], np.int64), "shp"),
             nh.from_array(np.array(1.0 / math.sqrt(D), np.float32), "scale")]
    nodes = [h.make_node("Reshape", ["x", "shp"], ["xr"]),
             h.make_node("Transpose", ["xr"], ["q"], perm=[0, 2, 1, 3]),
             h.make_node("Transpose", ["xr"], ["kt"], perm=[0, 2, 3, 1]),
             h.make_node("MatMul", ["q", "kt"], ["s0"]),
             h.make_node("Mul", ["s0", "scale"], ["s1"])]
    last = "s1"
    if masked:
        m = np.triu(np.full((S, S), -np.inf, np.float32), 1)[None, None]
        m[..., S // 3:, :] = -np.inf if S > 3 else m[..., S // 3:, :]     # whole rows masked
        inits.append(nh.from_array(m, "mask"))
        nodes.append(h.make_node("Add", ["s1", "mask"], ["s2"]))
        last = "s2"
    nodes.append(h.make_node("Softmax", [last], ["y"], axis=-1))
    g = h.make_graph(nodes, "att", [h.make_tensor_value_info("x", TP.FLOAT, [B, S, H * D])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [B, H, S, S])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("B,S,H,D,masked", [(2, 32, 3, 16, False), (1, 48, 2, 32, True), (2, 9, 2, 16, True),
                                            (1, 128, 2, 32, True)])
def test_attention_softmax_vs_numpy(nthreads, B, S, H, D, masked):
    """Scores, scale (+ mask) and softmax as one fused step: inside the batched packed kernel (S a multiple of
    the panel) or the other paths; first run unbound, then bound."""
    from asv_benchmarks import _onnx_models as M
    m = _attention_model(B, S, H, D, masked)
    x = np.random.default_rng(S).standard_normal((B, S, H * D)).astype(np.float32) * 2
    xr = x.astype(np.float64).reshape(B, S, H, D)
    sc = np.einsum("bshd,bthd->bhst", xr, xr) * np.float64(np.float32(1.0 / math.sqrt(D)))
    if masked:
        mk = np.triu(np.full((S, S), -np.inf), 1)
        if S > 3:
            mk[S // 3:, :] = -np.inf
        sc = sc + mk
    want = _ref(sc)
    s = M.nee_session(m, nthreads)
    for _ in range(3):
        got = s.run(None, {"x": x})[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=2e-5, atol=1e-6)


def _ff_model(R0, S, d, hidden, gelu=True):
    from asv_benchmarks import _onnx_models as M
    b = M._Builder(3)
    h, TP = b.h, b.TP
    y = b.linear("x", d, hidden, "ff1")
    y = b.gelu_erf(y) if gelu else b.node("Relu", [y])
    b.node_to("Identity", [y], ["y"])
    m = b.model("ff", [h.make_tensor_value_info("x", TP.FLOAT, [R0, S, d])],
                [h.make_tensor_value_info("y", TP.FLOAT, [R0, S, hidden])])
    w = {i.name: np.frombuffer(i.raw_data, np.float32).reshape(tuple(i.dims)) for i in m.graph.initializer}
    return m, w


@pytest.mark.parametrize("R0,S,d,hidden,gelu", [(8, 128, 64, 256, True), (3, 37, 48, 112, True),
                                                (1, 7, 32, 48, False), (2, 300, 144, 160, True),
                                                (4, 128, 128, 1536, False), (1, 517, 200, 112, True)])
def test_ff_epilogue_in_packed_tasks(nthreads, monkeypatch, R0, S, d, hidden, gelu):
    """Linear + bias + GELU (or ReLU) as ONNX writes it: a long product (PK_AVX2_RULE's) in the packed kernel's
    tasks of about PK_EPI_TILE_BYTES with the epilogue in each task (on 1 thread too), against numpy in float64;
    and with the tiles off (BLAS blocks with the epilogue) within the same tolerance."""
    from asv_benchmarks import _onnx_models as M
    from neetorch.devices.cpu.kernels import linalg as L
    if not L._pk_host_ok():
        pytest.skip("packed kernel needs AVX2+FMA or AVX-512F")
    from scipy.special import erf
    m, w = _ff_model(R0, S, d, hidden, gelu)
    x = np.random.default_rng(S + d).standard_normal((R0, S, d)).astype(np.float32)
    (wv,) = [v for v in w.values() if v.ndim == 2]
    (bv,) = [v for v in w.values() if v.ndim == 1 and v.size == hidden]
    z = x.astype(np.float64) @ wv.astype(np.float64) + bv
    want = z * 0.5 * (1 + erf(z / math.sqrt(2))) if gelu else np.maximum(z, 0)
    tasks = []
    orig = L.pk_with_epilogue

    def spy(g, *a):
        h = orig(g, *a)
        tasks.append(getattr(h, "tasks", 0))
        return h
    monkeypatch.setattr(L, "pk_with_epilogue", spy)
    for tiles in (True, False):
        monkeypatch.setattr(L, "PK_EPI_TILES", [tiles])
        tasks.clear()
        s = M.nee_session(m, nthreads)
        for _ in range(3):          # first runs unbound, then the bound step
            got = s.run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
        R = R0 * S
        # the tiles are for the long products PK_AVX2_RULE otherwise leaves to BLAS
        expect = tiles and L.PK_VEC == 8 and L.PK_AVX2_RULE[0] and R >= 2 * L.PK_MC and d > L.PK_AVX2_LONG_K
        if expect:
            assert tasks and tasks[-1] >= 2
        if (not tiles or not expect) and nthreads == 1:
            assert not tasks
