"""ONNX import: behaviours where a model exported from PyTorch (or built the onnxruntime way) met another answer.

* GridSample "cubic" with border / reflection padding: PyTorch and onnxruntime keep the point's coordinate and
  clamp / reflect each of its 16 taps (a point past the border keeps its fractional weights); the lowering used
  to clamp the coordinate first, as the linear and nearest modes do.
* A graph input or output declared without a shape (``make_tensor_value_info(name, type, None)``: any rank):
  onnxruntime runs such models (an input takes its feed's shape), ONNX's checker refuses them.
* ReduceMean over an empty axis: 0 as onnxruntime (the spec leaves it undefined); PyTorch's embedding_bag "mean"
  exported by the legacy exporter reduces each empty bag that way and expects 0.
"""
from __future__ import annotations

import io
import zlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from neetorch.onnx import InferenceSession  # noqa: E402


def _grid_model(mode, pad, ac, xshape, gshape, opset=20):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=pad, align_corners=ac)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape),
                                        helper.make_tensor_value_info("grid", TensorProto.FLOAT, gshape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("xshape,gshape", [((1, 1, 4, 5), (1, 1, 5, 2)), ((2, 3, 6, 7), (2, 4, 9, 2)),
                                           ((1, 2, 1, 3), (1, 3, 3, 2))])
@pytest.mark.parametrize("pad", ["border", "reflection", "zeros"])
@pytest.mark.parametrize("ac", [0, 1])
@pytest.mark.parametrize("mode", ["cubic", "linear", "nearest"])
def test_gridsample_matches_torch(mode, pad, ac, xshape, gshape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(zlib.crc32(repr((mode, pad, ac, xshape)).encode()))
    x = rng.standard_normal(xshape).astype(np.float32)
    grid = (rng.standard_normal(gshape) * 1.5).astype(np.float32)   # a third of the points past the border
    if mode == "nearest":
        # away from the rounding ties of the unnormalized coordinate (x.5: which neighbour is a rounding question)
        grid = np.round(grid * 8) / 8 + 1.0 / 64
    got = InferenceSession(_grid_model(mode, pad, ac, xshape, gshape)).run(None, {"x": x, "grid": grid})[0]
    tmode = {"cubic": "bicubic", "linear": "bilinear"}.get(mode, mode)
    ref = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode=tmode, padding_mode=pad,
                                          align_corners=bool(ac)).numpy()
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_gridsample_cubic_border_point_past_the_edge():
    """One point past the bottom border, one past the left: the taps clamp, the weights keep the fraction."""
    x = np.arange(20, dtype=np.float32).reshape(1, 1, 4, 5) ** 1.5
    grid = np.array([[[[0.5, 1.1], [-1.25, -0.3]]]], np.float32)
    got = InferenceSession(_grid_model("cubic", "border", 0, (1, 1, 4, 5), (1, 1, 2, 2))).run(
        None, {"x": x, "grid": grid})[0].ravel()

    def cubic(t):
        A = -0.75
        return np.array([((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                         ((A + 2) * t - (A + 3)) * t * t + 1,
                         ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                         ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A])

    def sample(gx, gy):
        ix, iy = ((gx + 1) * 5 - 1) / 2, ((gy + 1) * 4 - 1) / 2     # align_corners 0, not clamped
        x0, y0 = int(np.floor(ix)), int(np.floor(iy))
        wx, wy = cubic(ix - x0), cubic(iy - y0)
        v = 0.0
        for a in range(4):
            for b in range(4):
                r = min(max(y0 - 1 + a, 0), 3)
                c = min(max(x0 - 1 + b, 0), 4)
                v += wy[a] * wx[b] * float(x[0, 0, r, c])
        return v
    np.testing.assert_allclose(got, [sample(0.5, 1.1), sample(-1.25, -0.3)], rtol=1e-5)


def test_output_declared_without_shape_runs():
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(m)          # the checker alone refuses it: what this test is about
    s = InferenceSession(m)
    x = np.array([[-1.0, 2.0, 0.5], [3.0, -4.0, 0.0]], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))
    o = s.get_outputs()[0]
    assert o.name == "y" and o.type == "tensor(float)"


@pytest.mark.parametrize("op,extra", [("Relu", []), ("Add", ["x"]), ("ReduceSum", []), ("Softmax", [])])
def test_input_declared_without_shape_takes_any_rank(op, extra):
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node(op, ["x"] + extra, ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = InferenceSession(m)
    o = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert s.get_inputs()[0].shape == o.get_inputs()[0].shape and s.get_inputs()[0].type == "tensor(float)"
    rng = np.random.default_rng(3)
    for shape in ((1, 2), (2, 3, 4), (5,), ()):
        if op == "Softmax" and shape == ():
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        got = s.run(None, {"x": x})[0]
        ref = o.run(None, {"x": x})[0]
        assert got.shape == ref.shape and got.dtype == ref.dtype, (shape, got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_checker_still_refuses_a_broken_model():
    """The shapeless-output allowance is only that: a node reading an undefined value is still refused."""
    node = helper.make_node("Add", ["x", "nowhere"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="checker rejected"):
        InferenceSession(m)


@pytest.mark.parametrize("keep", [0, 1])
@pytest.mark.parametrize("shape,axes", [((0, 3), [0]), ((2, 0, 4), [1]), ((0,), [0])])
def test_reduce_mean_of_nothing_is_zero(shape, axes, keep):
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keep)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.zeros(shape, np.float32)
    got = InferenceSession(m).run(None, {"x": x})[0]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, np.zeros(ref.shape, np.float32))


def test_embedding_bag_mean_with_an_empty_bag():
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = torch.nn.EmbeddingBag(10, 4, mode="mean")

        def forward(self, i, o):
            return self.e(i, o)
    torch.manual_seed(0)
    m = M().eval()
    i = torch.tensor([1, 2, 4, 5, 4, 3], dtype=torch.int64)
    o = torch.tensor([0, 2, 2, 5], dtype=torch.int64)        # the second bag is empty
    f = io.BytesIO()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (i, o), f, dynamo=False, opset_version=17, input_names=["i", "o"],
                          dynamic_axes={"i": [0], "o": [0]})
    got = InferenceSession(f.getvalue()).run(None, {"i": i.numpy(), "o": o.numpy()})[0]
    ref = m(i, o).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert not np.isnan(got).any() and np.all(got[1] == 0)


@pytest.mark.parametrize("scale", [0.6, 0.3, 0.7, 1.7, 2.5, 0.45, 1.3333])
@pytest.mark.parametrize("hw", [(6, 9), (17, 23), (31, 10)])
@pytest.mark.parametrize("ctm,nm", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                                    ("half_pixel", "ceil"), ("pytorch_half_pixel", "floor")])
def test_resize_nearest_by_scales_matches_onnxruntime(scale, hw, ctm, nm):
    """Nearest picks by a coordinate computed in float32 (3 / 0.6f is 5.0 in float32, 4.9999998 in float64) and the
    output size is floor(in * scale) in float32 (10 x 0.7f: 7): the indices onnxruntime (and PyTorch) take.
    (align_corners by scales is left out: there the spec's resized length is in * scale, fractional, as ONNX's
    reference and its conformance cases have it, and onnxruntime takes the integer output size.)"""
    ort = pytest.importorskip("onnxruntime")
    H, W = hw
    sc = np.array([1, 1, scale, scale], np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode=ctm,
                            nearest_mode=nm)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[onnx.numpy_helper.from_array(sc, "scales")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(2 * H * W, dtype=np.float32).reshape(1, 2, H, W)
    got = InferenceSession(m).run(None, {"x": x})[0]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_resize_nearest_torch_export_float32_size_and_index():
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=0.7, mode="nearest")
    x = torch.arange(310, dtype=torch.float32).reshape(1, 1, 31, 10)
    f = io.BytesIO()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M(), (x,), f, dynamo=False, opset_version=17, input_names=["x"])
    got = InferenceSession(f.getvalue()).run(None, {"x": x.numpy()})[0]
    ref = M()(x).numpy()
    assert got.shape == ref.shape == (1, 1, 21, 7)
    np.testing.assert_array_equal(got, ref)


def _ort_run(m, feed):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("xs,ks,strides,out_shape", [
    ((1, 1, 1, 3), (1, 1, 1, 2), [1, 3], [1, 10]),        # 2 past the full width: zeros after it
    ((1, 1, 3, 3), (1, 2, 3, 3), [3, 2], [10, 8]),         # (ONNX's own case: 1 past)
    ((1, 2, 4, 5), (2, 3, 3, 2), [3, 3], [14, 16]),        # 2 past each (less than a stride: onnxruntime's bound)
    ((1, 2, 4, 5), (2, 3, 3, 2), [2, 2], [8, 9]),          # cropped: onnxruntime's split
    ((2, 1, 5), (1, 2, 3), [3], [17]),                     # 1-D, 2 past
])
def test_convtranspose_output_shape_past_the_full_result(xs, ks, strides, out_shape):
    rng = np.random.default_rng(len(xs) * 31 + out_shape[-1])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ks).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=strides, output_shape=out_shape)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs),
                                        helper.make_tensor_value_info("w", TensorProto.FLOAT, ks)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    got = InferenceSession(m).run(None, {"x": x, "w": w})[0]
    ref = _ort_run(m, {"x": x, "w": w})[0]
    assert got.shape == ref.shape == (xs[0], ks[1], *out_shape)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset,attrs", [(11, {"axis": 1}), (12, {"axis": -2}), (9, {}), (11, {"axis": 0}),
                                         (11, {"axis": 2})])
def test_hardmax_before_opset13_is_over_the_flattened_rows(opset, attrs):
    """onnx.version_converter keeps an opset-11 Hardmax as it is; its old meaning (one 1 per row of the input
    coerced to 2-D at ``axis``) is restored after conversion."""
    x = np.random.default_rng(opset).standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Hardmax", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    got = InferenceSession(m).run(None, {"x": x})[0]
    axis = attrs.get("axis", 1) % 3
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
    want = np.zeros_like(rows)
    want[np.arange(rows.shape[0]), rows.argmax(1)] = 1
    np.testing.assert_array_equal(got, want.reshape(x.shape))
    np.testing.assert_array_equal(got, _ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("op,opset", [("Upsample", 9), ("Upsample", 7), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_old_upsample_and_resize10_keep_asymmetric_coordinates(op, opset, mode):
    """Upsample / Resize-10 mean asymmetric coordinates and floor for nearest; the converter's Resize-11 left the
    opset-11 defaults (half_pixel, round_prefer_floor)."""
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(1, 2, 3, 5) ** 1.3
    sc = [1.0, 1.0, 1.7, 3.0] if mode == "nearest" else [1.0, 1.0, 2.0, 2.5]
    if opset == 7:
        node = helper.make_node(op, ["x"], ["y"], mode=mode, scales=sc)
        inits = []
    else:
        node = helper.make_node(op, ["x", "s"], ["y"], mode=mode)
        inits = [onnx.numpy_helper.from_array(np.array(sc, np.float32), "s")]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset > 7 else 3
    got = InferenceSession(m).run(None, {"x": x})[0]
    ref = _ort_run(m, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-5)


def test_sign_of_nan_is_nan():
    x = np.array([np.nan, -np.nan, 1.5, -2.0, 0.0, np.inf, -np.inf], np.float32)
    node = helper.make_node("Sign", ["x"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    got = InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, [np.nan, np.nan, 1, -1, 0, 1, -1])
    np.testing.assert_array_equal(got, _ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("nm", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("sc", [[1, 1, 1.5, 0.5], [1, 1, 0.6, 1.7], [1, 1, 0.3, 2.5]])
@pytest.mark.parametrize("opset", [11, 12])
def test_resize_tf_half_pixel_for_nn(nm, sc, opset):
    x = np.random.default_rng(opset).standard_normal((1, 2, 7, 9)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "roi", "s"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode=nm)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[onnx.numpy_helper.from_array(np.array([], np.float32), "roi"),
                                       onnx.numpy_helper.from_array(np.array(sc, np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    got = InferenceSession(m).run(None, {"x": x})[0]
    ref = _ort_run(m, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("opset", [18, 20])
def test_group_normalization_18_per_group_scale(opset):
    """GroupNormalization-18 (scale / bias per group; deprecated by onnx, whose checker refuses it): onnxruntime
    runs it, so does the session."""
    rng = np.random.default_rng(opset)
    feed = {"x": rng.standard_normal((2, 6, 3, 2)).astype(np.float32),
            "s": rng.standard_normal(3).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-5)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 3, 2]),
                                        helper.make_tensor_value_info("s", TensorProto.FLOAT, [3]),
                                        helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 3, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    got = InferenceSession(m).run(None, feed)[0]
    x = feed["x"].reshape(2, 3, -1).astype(np.float64)
    y = (x - x.mean(2, keepdims=True)) / np.sqrt(x.var(2, keepdims=True) + 1e-5)
    want = y.reshape(2, 3, 2, 3, 2) * feed["s"].reshape(1, 3, 1, 1, 1) + feed["b"].reshape(1, 3, 1, 1, 1)
    np.testing.assert_allclose(got, want.reshape(2, 6, 3, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, _ort_run(m, feed)[0], rtol=1e-5, atol=1e-5)


def test_output_declared_without_a_type_runs():
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_value_info("y", onnx.TypeProto())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    got = InferenceSession(m).run(None, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0, 0, 2])
    np.testing.assert_array_equal(got, _ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("axis", [0, 1])
def test_split_outputs_do_not_alias_the_callers_input(axis):
    """Split's outputs are views of its input inside the graph; the caller gets arrays of its own (writing one
    must not change the input it fed, as onnxruntime)."""
    g = helper.make_graph([helper.make_node("Split", ["X"], ["a", "b", "c"], axis=axis, num_outputs=3)], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abc"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    s = InferenceSession(m)
    for _ in range(2):
        x = np.arange(9, dtype=np.float32).reshape(3, 3)
        outs = s.run(None, {"X": x})
        for o in outs:
            assert not np.shares_memory(o, x)
            o += 100
        np.testing.assert_array_equal(x, np.arange(9, dtype=np.float32).reshape(3, 3))


def test_regex_full_match_perl_classes_are_ascii_as_re2():
    g = helper.make_graph([helper.make_node("RegexFullMatch", ["X"], ["Y"], pattern=r"\w+\d*")], "g",
                          [helper.make_tensor_value_info("X", TensorProto.STRING, ["n"])],
                          [helper.make_tensor_value_info("Y", TensorProto.BOOL, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    x = np.array(["abc", "über", "café", "日本", "١٢٣", "a_1", "x٣"], dtype=object)
    got = InferenceSession(m).run(None, {"X": x})[0]
    assert got.tolist() == [True, False, False, False, False, True, False]


def _one(node, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph([node] if not isinstance(node, list) else node, "g", inputs, outputs,
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("target", [[2, 4], [7, 2, 5], [3, 3]])
def test_expand_to_a_shape_that_does_not_broadcast_fails(target):
    from neetorch.onnx.ort_api import Fail
    m = _one(helper.make_node("Expand", ["x", "s"], ["y"]),
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("s", TensorProto.INT64, [len(target)])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = InferenceSession(m)
    with pytest.raises(Fail, match="Expand"):
        s.run(None, {"x": np.ones((2, 3), np.float32), "s": np.array(target, np.int64)})
    good = [2, 3] if len(target) == 2 else [4, 1, 3]
    ok = s.run(None, {"x": np.ones((2, 3), np.float32), "s": np.array(good, np.int64)})[0]
    assert ok.shape == ((2, 3) if len(target) == 2 else (4, 2, 3))


def test_split_sizes_that_do_not_add_up_fail():
    from neetorch.onnx.lowering import LoweringError
    from neetorch.onnx.ort_api import Fail
    m = _one(helper.make_node("Split", ["x", "sp"], ["a", "b"]),
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5]),
              helper.make_tensor_value_info("sp", TensorProto.INT64, [2])],
             [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"])
    s = InferenceSession(m)
    with pytest.raises(Fail, match="do not add up") as ei:
        s.run(None, {"x": np.arange(5, dtype=np.float32), "sp": np.array([2, 2], np.int64)})
    assert isinstance(ei.value, LoweringError)          # (still the class it was)
    a, b = s.run(None, {"x": np.arange(5, dtype=np.float32), "sp": np.array([2, 3], np.int64)})
    assert a.tolist() == [0, 1] and b.tolist() == [2, 3, 4]


def test_matmul_shape_mismatch_at_run_time_is_onnxruntimes_fail():
    from neetorch.onnx.ort_api import Fail
    vi = helper.make_tensor_value_info
    m = _one(helper.make_node("MatMul", ["a", "b"], ["y"]), [vi("a", TensorProto.FLOAT, ["m", "k"]),
                                                          vi("b", TensorProto.FLOAT, ["k2", "n"])],
             [vi("y", TensorProto.FLOAT, None)])
    with pytest.raises(Fail):
        InferenceSession(m).run(None, {"a": np.ones((2, 5), np.float32), "b": np.ones((3, 2), np.float32)})


@pytest.mark.parametrize("dt,npdt", [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
@pytest.mark.parametrize("keep", [0, 1])
def test_reduce_mean_of_integers_truncates(dt, npdt, keep):
    m = _one(helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=keep),
             [helper.make_tensor_value_info("x", dt, [2, 4])], [helper.make_tensor_value_info("y", dt, None)])
    x = np.array([[1, 2, 4, 6], [-1, -2, -4, -6]], npdt)
    got = InferenceSession(m).run(None, {"x": x})[0]
    assert got.dtype == npdt and got.reshape(-1).tolist() == [3, -3]
    np.testing.assert_array_equal(got, _ort_run(m, {"x": x})[0])


def test_one_element_array_for_a_scalar_input():
    m = _one([helper.make_node("Mul", ["a", "b"], ["c"]), helper.make_node("Identity", ["a"], ["d"])],
             [helper.make_tensor_value_info("a", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
             [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "cd"])
    s = InferenceSession(m)
    b = np.arange(3, dtype=np.float32)
    for a in (np.array([2.0], np.float32), np.array([[2.0]], np.float32), np.array(2.0, np.float32)):
        got = s.run(None, {"a": a, "b": b})
        ref = _ort_run(m, {"a": a, "b": b})
        for g_, r_ in zip(got, ref):
            assert g_.shape == r_.shape
            np.testing.assert_array_equal(g_, r_)
    from neetorch.onnx.ort_api import InvalidArgument
    with pytest.raises(InvalidArgument, match="rank 0"):
        s.run(None, {"a": np.ones(2, np.float32), "b": b})


def test_nodes_out_of_topological_order_are_sorted():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Mul", ["t", "x"], ["y"]), helper.make_node("Relu", ["x"], ["t"])]
    m = _one(nodes, [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, None)])
    before = m.SerializeToString()
    x = np.array([-1.0, 2.0], np.float32)
    got = InferenceSession(m).run(None, {"x": x})[0]
    assert got.tolist() == [0.0, 4.0]
    assert m.SerializeToString() == before           # the caller's ModelProto is not reordered


def test_backend_run_node_in_the_ml_domain_and_module_functions():
    from neetorch.onnx import backend
    node = helper.make_node("Normalizer", ["x"], ["y"], norm="L1", domain="ai.onnx.ml")
    (y,) = backend.run_node(node, [np.array([[1.0, 3.0]], np.float32)])
    np.testing.assert_allclose(y, [[0.25, 0.75]])
    m = _one(helper.make_node("Relu", ["X"], ["R"]), [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
             [helper.make_tensor_value_info("R", TensorProto.FLOAT, [3])])
    assert backend.is_compatible(m)
    (r,) = backend.run(m, [np.array([-1, 0, 1], np.float32)])
    assert r.tolist() == [0, 0, 1]
