"""Review s29 (helper h3): adversarial checks of the session's conv activations, packed / tiny products, topk
scan, constant Gather, native step chain and register pools, with tests for the bugs found.

Bug 1 (conv_epilogue._act_node): hardswish's steps end in ``("mulx", None)`` -- conv_act's ``x * v`` where x
is the chain's value before its FIRST activation step -- but hardswish(t) = t * relu6(t + 3) / 6 multiplies by
its own input t.  When any step came before it (``hardswish(conv(x) + 0.5)``, ``hardswish(relu(conv))``,
``hardswish(silu(conv))``: a heavy 'ew' step then hardswish), the fused kernel multiplied by the conv's
output instead of t: off by up to ~0.5 from the unfused run and torch.  Now such a hardswish is not fused into
the conv (the generic epilogue runs it)."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices.cpu.kernels import fused

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(2903)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _unfused(f, *xs):
    fused.CONV_EPILOGUE[0] = False
    try:
        return nee.jit(f)(*xs).numpy()
    finally:
        fused.CONV_EPILOGUE[0] = True


# ---- bug 1: hardswish after another activation step in a conv epilogue
HS_CHAINS = {
    "add_hs": (lambda y: F.hardswish(y + 0.5), lambda y: TF.hardswish(y + 0.5)),
    "mul_hs": (lambda y: F.hardswish(y * 0.5), lambda y: TF.hardswish(y * 0.5)),
    "relu_hs": (lambda y: F.hardswish(nee.relu(y)), lambda y: TF.hardswish(torch.relu(y))),
    "silu_hs": (lambda y: F.hardswish(F.silu(y)), lambda y: TF.hardswish(TF.silu(y))),
    "hs_hs": (lambda y: F.hardswish(F.hardswish(y)), lambda y: TF.hardswish(TF.hardswish(y))),
    "hs": (F.hardswish, TF.hardswish),
}
HS_CONVS = {    # (C, O, H, kernel, stride, groups)
    "dw3x3": (8, 8, 13, 3, 1, 8), "dw7x7s2": (8, 8, 13, 7, 2, 8), "dw7x7_1x1": (8, 8, 1, 7, 1, 8),
    "pw": (16, 48, 14, 1, 1, 1), "3x3": (16, 32, 14, 3, 1, 1),
}


@pytest.mark.parametrize("chain", sorted(HS_CHAINS))
@pytest.mark.parametrize("conv", sorted(HS_CONVS))
def test_hardswish_after_another_step_in_a_conv_epilogue(conv, chain):
    C, O, H, k, s, g = HS_CONVS[conv]
    wn = (RNG.standard_normal((O, C // g, k, k)) * 0.3).astype(np.float32)
    bn = RNG.standard_normal(O).astype(np.float32)
    w, b = nee.tensor(wn), nee.tensor(bn)
    nf, tf = HS_CHAINS[chain]

    def f(x):
        return nf(F.conv2d(x, w, b, stride=s, padding=k // 2, groups=g))

    j = nee.jit(f)
    for _ in range(2):
        xn = (RNG.standard_normal((1, C, H, H)) * 2).astype(np.float32)
        x = nee.tensor(xn)
        got = j(x).numpy()
        ref = tf(TF.conv2d(_t(xn), _t(wn), _t(bn), stride=s, padding=k // 2, groups=g)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, _unfused(f, x))


# ---- the rest: probes that found no bug, kept as regression checks (small shapes, fast)
from neetorch.devices.cpu.kernels import linalg as L            # noqa: E402
from neetorch.devices.cpu.kernels import winograd               # noqa: E402
from test_packed_gemm_avx2_s13 import avx2, needs_avx2          # noqa: E402,F401 - the 8-lane fixture


@pytest.mark.parametrize("dtype,kind", [(d, k) for d in (np.float32, np.float64, np.int8, np.uint8, np.int16,
                                                          np.int32, np.int64)
                                         for k in ("random", "ties", "special") if k != "special" or d in
                                         (np.float32, np.float64)])
def test_topk_scan_against_torch(dtype, kind):
    """Values (with the sign of zeros) and indices of torch.topk, both directions, sorted, every dim, k from 0 to
    n (through the scan up to 64): ties, NaN, +-inf, -0.0 / +0.0, integer extremes."""
    for shape, dim in [((3, 50), -1), ((50, 3), 0), ((4, 30, 5), 1), ((7,), 0)]:
        if kind == "ties":
            x = RNG.integers(0, 4, shape).astype(dtype)
        elif np.dtype(dtype).kind == "f":
            x = RNG.standard_normal(shape).astype(dtype)
            if kind == "special":
                f = x.reshape(-1)
                f[::5], f[1::7], f[2::7], f[3::9], f[4::9] = np.nan, -0.0, 0.0, np.inf, -np.inf
        else:
            info = np.iinfo(dtype)
            x = RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
        n = shape[dim]
        for k in sorted({0, 1, 5, min(n, 64), n}):
            for largest in (True, False):
                v, i = nee.topk(nee.tensor(x), k, dim, largest=largest)
                tv, ti = torch.topk(_t(x), k, dim, largest=largest)
                np.testing.assert_array_equal(v.numpy(), tv.numpy())
                np.testing.assert_array_equal(i.numpy(), ti.numpy())
                if v.numpy().dtype.kind == "f":
                    np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(tv.numpy()))


def test_topk_scan_non_contiguous_and_unsorted():
    x = RNG.standard_normal((40, 60)).astype(np.float32)
    for view in (lambda a: a.t(), lambda a: a[:, ::3]):
        for k in (1, 3, 10):
            v, i = nee.topk(view(nee.tensor(x)), k, -1)
            tv, ti = torch.topk(view(_t(x)), k, -1)
            np.testing.assert_array_equal(v.numpy(), tv.numpy())
            np.testing.assert_array_equal(i.numpy(), ti.numpy())
            v, i = nee.topk(view(nee.tensor(x)), k, -1, sorted=False)
            np.testing.assert_array_equal(np.sort(v.numpy(), -1), np.sort(tv.numpy(), -1))
            np.testing.assert_array_equal(np.take_along_axis(view(nee.tensor(x)).numpy(), i.numpy(), -1), v.numpy())


try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:     # (the ONNX checks skip; the rest runs)
    ort = None
needs_ort = pytest.mark.skipif(ort is None, reason="needs onnx and onnxruntime")


def _sessions(m):
    return nee.onnx.InferenceSession(m), ort.InferenceSession(m, providers=["CPUExecutionProvider"])


@needs_ort
@pytest.mark.parametrize("opset,largest,srt", [(1, None, None), (10, None, None), (11, 1, 1), (11, 0, 1), (11, 0, 0),
                                               (11, 1, 0)])
def test_onnx_topk_opsets_against_onnxruntime(opset, largest, srt):
    kw = {"axis": 0}
    if largest is not None:
        kw.update(largest=largest, sorted=srt)
    for k in (1, 7, 64):
        if opset == 1:
            node = helper.make_node("TopK", ["x"], ["v", "i"], k=k, **kw)
            ins, extra = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], {}
        else:
            node = helper.make_node("TopK", ["x", "k"], ["v", "i"], **kw)
            ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("k", TensorProto.INT64, [1])]
            extra = {"k": np.array([k], np.int64)}
        g = helper.make_graph([node], "t", ins, [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                                                 helper.make_tensor_value_info("i", TensorProto.INT64, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
        s, o = _sessions(m)
        x = RNG.integers(0, 3, (70, 9)).astype(np.float32)
        x.reshape(-1)[::9] = np.nan
        x.reshape(-1)[1::11] = -0.0
        feed = dict(x=x, **extra)
        (a, ai), (b, bi) = s.run(None, feed), o.run(None, feed)
        if srt == 0:    # (the order is unspecified: the same selection)
            np.testing.assert_array_equal(np.sort(a, 0), np.sort(b, 0))
            np.testing.assert_array_equal(np.sort(ai, 0), np.sort(bi, 0))
        else:
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(ai, bi)


@needs_ort
def test_onnx_gather_constant_scalar_outputs_do_not_alias():
    """A constant-index Gather is a view (select) of its input: as a graph output it must not alias the caller's
    input or an initializer (mutating one result changes neither the feed nor a later run); a 1-D input gives 0-d."""
    for xshape, axis, idx in [((5,), 0, -1), ((3, 4), 1, -4), ((2, 3, 4), 2, 3)]:
        nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=axis)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
                              [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(idx, np.int64), "i")])
        s, o = _sessions(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
        x = RNG.standard_normal(xshape).astype(np.float32)
        x0 = x.copy()
        a = s.run(None, {"x": x})[0]
        b = o.run(None, {"x": x})[0]
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        a[...] = 123.0
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], b)
        # the gathered tensor an initializer: its result mutated, the next run unchanged
        init = np.arange(np.prod(xshape), dtype=np.float32).reshape(xshape)
        g = helper.make_graph([helper.make_node("Gather", ["w", "i"], ["g"], axis=axis),
                               helper.make_node("Add", ["g", "z"], ["y"])], "g",
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("g", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(idx, np.int64), "i"),
                               numpy_helper.from_array(init, "w")])
        s, o = _sessions(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
        feed = {"z": np.array(1.0, np.float32)}
        first = s.run(None, feed)
        for u in first:
            u[...] = -7.0
        for u, v in zip(s.run(None, feed), o.run(None, feed)):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("M,K,N", [(5, 20, 1), (5, 16, 17), (9, 511, 31), (9, 513, 33), (7, 1025, 7), (13, 64, 45),
                                   (600, 64, 3), (1100, 513, 77), (40, 16, 100)])
def test_packed_any_width(nthreads, M, K, N):
    """Frozen-weight products of any width (the last panel through the scratch tile), K over 1-3 blocks, rows in
    chunks, the output a view of a wider array (nothing past N written), twice."""
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    assert winograd.freeze(b)
    wide = np.full((M, N + 5), np.nan, np.float32)
    out = wide[:, :N]
    g = L._pk_caller(out, a, b)
    assert g is not None
    for _ in range(2):
        g(out, a, b)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5 * np.sqrt(K))
        assert np.isnan(wide[:, N:]).all()


@needs_avx2
@pytest.mark.parametrize("M,K,N", [(5, 20, 1), (9, 513, 15), (13, 1025, 17), (600, 64, 9)])
def test_packed_any_width_8_lanes(avx2, M, K, N):   # noqa: F811
    test_packed_any_width(1, M, K, N)


@pytest.mark.parametrize("N", [1, 13, 33, 50])
def test_packed_jit_epilogues_odd_widths(nthreads, N):
    """Through nee.jit(freeze=True), batched input: layer_norm, residual add, softmax, gelu epilogues."""
    K = 513
    a = nee.tensor(RNG.standard_normal((2, 9, K)).astype(np.float32))
    W = nee.tensor((RNG.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32))
    B = nee.tensor(RNG.standard_normal(N).astype(np.float32))
    gm = nee.tensor(RNG.standard_normal(N).astype(np.float32))
    bt = nee.tensor(RNG.standard_normal(N).astype(np.float32))
    r = nee.tensor(RNG.standard_normal((2, 9, N)).astype(np.float32))
    fs = [lambda x, y: F.layer_norm(x @ W + y, (N,), gm, bt), lambda x, y: nee.softmax(x @ W + B, -1) + y,
          lambda x, y: F.gelu(x @ W + B) * y]
    for f in fs:
        j = nee.jit(f, freeze=True)
        for _ in range(3):
            got = j(a, r).numpy()
        np.testing.assert_allclose(got, f(a, r).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32])
def test_tiny_one_row_one_column_products(nthreads, dt):
    def r(*s):
        return RNG.standard_normal(s).astype(dt) if np.dtype(dt).kind == "f" else RNG.integers(-9, 9, s).astype(dt)
    cases = [((1, 16), (16, 8)), ((8, 16), (16, 1)), ((1, 3), (3, 5)), ((1, 4096), (4096, 1)), ((1, 1), (1, 1024)),
             ((100000, 4), (4, 1)), ((3, 1, 16), (3, 16, 8)), ((3, 1, 16), (16, 8)), ((64, 8, 8), (64, 8, 1)),
             ((2, 3, 1, 5), (3, 5, 4)), ((1, 0), (0, 3)), ((0, 5), (5, 1)), ((16,), (16, 8)), ((8, 16), (16,))]
    for sa, sb in cases:
        a, b = r(*sa), r(*sb)
        views = [(a, b)]
        if len(sb) == 2 and sb[0] and sb[1]:
            views.append((a, np.ascontiguousarray(b.T).T))
            views.append((a, np.repeat(b, 2, axis=1)[:, ::2]))
        for x, y in views:
            ref = (_t(x.copy()) @ _t(y.copy())).numpy()
            for got in ((nee.tensor(x) @ nee.tensor(y)).numpy(),
                        nee.jit(lambda p, q: p @ q)(nee.tensor(x), nee.tensor(y)).numpy()):
                assert got.shape == ref.shape and got.dtype == ref.dtype
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(max(1, sa[-1])))


DW_SHAPES = [(1, 8, 1, 1, 3, 1, 1, 1), (1, 8, 2, 3, 5, 1, 2, 1), (1, 8, 7, 7, 3, 1, 2, 2), (1, 8, 113, 97, 7, 2, 3, 1),
             (2, 8, 13, 13, 3, 1, 1, 1), (3, 5, 30, 31, 3, 2, 1, 1), (1, 3, 200, 201, 3, 1, 1, 1),
             (2, 32, 9, 9, 5, 2, 2, 1)]     # (N, C, H, W, k, stride, padding, dilation)


@pytest.mark.parametrize("shape", DW_SHAPES)
@pytest.mark.parametrize("act", ["silu", "gelu", "mish", "tanh"])
def test_depthwise_heavy_activation_odd_shapes(nthreads, shape, act):
    """A depthwise conv + bias + residual + heavy activation jitted: bitwise the unfused run, close to torch
    (NaN / inf in the input: the same bits too), the input a non-contiguous view."""
    N, C, H, W, k, s, p, d = shape
    nf, tf = {"silu": (F.silu, TF.silu), "gelu": (F.gelu, TF.gelu), "mish": (F.mish, TF.mish),
              "tanh": (nee.tanh, torch.tanh)}[act]
    wn = (RNG.standard_normal((C, 1, k, k)) * 0.3).astype(np.float32)
    bn = RNG.standard_normal(C).astype(np.float32)
    w, b = nee.tensor(wn), nee.tensor(bn)
    OH, OW = (H + 2 * p - d * (k - 1) - 1) // s + 1, (W + 2 * p - d * (k - 1) - 1) // s + 1

    def f(x, r):
        return nf(F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=C) + r)

    j = nee.jit(f)
    for it in range(3):
        xn = (RNG.standard_normal((N, C, H, W + 2)) * 2).astype(np.float32)[..., 1:W + 1]
        rn = RNG.standard_normal((N, C, OH, OW)).astype(np.float32)
        if it == 2:
            xn.reshape(-1)[::13] = np.nan
        x, r = nee.tensor(xn), nee.tensor(rn)
        got = j(x, r).numpy()
        np.testing.assert_array_equal(got, _unfused(f, x, r))
        if it < 2:
            ref = tf(TF.conv2d(_t(xn), _t(wn), _t(bn), stride=s, padding=p, dilation=d, groups=C) + _t(rn)).numpy()
            np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


def test_native_chain_interleaved_jits_threads_and_mutated_outputs():
    """Two jitted convnets called in turn (their step chains built and replayed as one native call), the thread
    count changed between calls, fresh inputs each call, returned outputs mutated by the caller: eager's values."""
    def mk(C, O):
        w1 = nee.tensor((RNG.standard_normal((O, C, 3, 3)) * 0.1).astype(np.float32))
        b1 = nee.tensor(RNG.standard_normal(O).astype(np.float32))
        w2 = nee.tensor((RNG.standard_normal((O, O, 1, 1)) * 0.1).astype(np.float32))
        w3 = nee.tensor((RNG.standard_normal((O, 1, 3, 3)) * 0.3).astype(np.float32))

        def f(x):
            y = nee.relu(F.conv2d(x, w1, b1, padding=1))
            y = F.silu(F.conv2d(y, w2))
            y = F.max_pool2d(F.conv2d(y, w3, None, padding=1, groups=O), 2)
            return y, y.mean((2, 3))
        return f
    f1, f2 = mk(16, 32), mk(8, 24)
    j1, j2 = nee.jit(f1), nee.jit(f2)
    old = nee.get_num_threads()
    try:
        for it in range(16):
            if it % 5 == 3:
                nee.set_num_threads(1 + (it // 5) % 2)
            x1 = nee.tensor(RNG.standard_normal((1, 16, 20, 20)).astype(np.float32))
            x2 = nee.tensor(RNG.standard_normal((2, 8, 14, 14)).astype(np.float32))
            g1, g2 = j1(x1), j2(x2)
            for g, r in zip(g1 + g2, f1(x1) + f2(x2)):
                np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)
            for g in g1 + g2:
                g.numpy()[...] = 1e9
    finally:
        nee.set_num_threads(old)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_register_pools_odd_sizes(nthreads, kind):
    for H, W in [(1, 1), (2, 3), (5, 7), (14, 15), (113, 97)]:
        for k in (1, 2, 3):
            for s in (1, 2):
                for p in range(0, k // 2 + 1):
                    for ceil in (False, True):
                        if H + 2 * p < k or W + 2 * p < k:
                            continue
                        xn = RNG.standard_normal((2, 5, H, W)).astype(np.float32)
                        xn.reshape(-1)[::11] = np.nan
                        for x in (xn, np.ascontiguousarray(xn.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
                            if kind == "max":
                                got = F.max_pool2d(nee.tensor(x), k, s, p, ceil_mode=ceil).numpy()
                                ref = TF.max_pool2d(_t(x), k, s, p, ceil_mode=ceil).numpy()
                                np.testing.assert_array_equal(got, ref)
                            else:
                                got = F.avg_pool2d(nee.tensor(x), k, s, p, ceil_mode=ceil).numpy()
                                ref = TF.avg_pool2d(_t(x), k, s, p, ceil_mode=ceil).numpy()
                                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@needs_avx2
@pytest.mark.parametrize("M,K,N", [(600, 200, 45), (1030, 129, 13), (600, 200, 1)])
def test_packed_epilogue_tiles_odd_widths_8_lanes(nthreads, monkeypatch, M, K, N):
    """The 8-lane kernel's long products (PK_AVX2_RULE on: 2 PK_MC rows and up, K over PK_AVX2_LONG_K) with an
    elementwise epilogue run packed in epilogue tiles (linalg.PK_EPI_TILES): a ragged last panel there too."""
    assert L._pk_host_ok()
    old = L.PK_VEC
    seen = []
    orig = L._pk_caller0

    def spy(out, a, b, rows_only=False, tiles=False):
        r = orig(out, a, b, rows_only, tiles)
        seen.append(tiles and r is not None)
        return r
    monkeypatch.setattr(L, "_pk_caller0", spy)
    L._pk_set_width(8)
    try:
        a = nee.tensor(RNG.standard_normal((1, M, K)).astype(np.float32))
        W = nee.tensor((RNG.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32))
        B = nee.tensor(RNG.standard_normal(N).astype(np.float32))

        def f(x):
            return F.gelu(x @ W + B)
        j = nee.jit(f, freeze=True)
        for _ in range(3):
            got = j(a).numpy()
        assert any(seen), "the epilogue-tiles path was not taken"
        np.testing.assert_allclose(got, f(a).numpy(), rtol=1e-4, atol=1e-4)
    finally:
        L._pk_set_width(old)
