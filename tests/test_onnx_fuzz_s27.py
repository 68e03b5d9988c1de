"""ONNX import: cases the differential fuzzer (single-node graphs against onnxruntime and ONNX's reference, session 27)
found in Celu, QuantizeLinear, DequantizeLinear and Resize.

* Celu with ``alpha=0``: the spec's ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` is 0 where x < 0 and NaN
  elsewhere (0 / 0, 0 * inf), as onnxruntime and ONNX's reference compute it; the lowering raised (torch's celu
  refuses alpha 0).
* QuantizeLinear from opset 23 divides in ``precision``, by default y_scale's type, both operands cast to it (the
  spec; onnxruntime does so for float16): a float16 scale of 0.007812 and x = -1.3082559 give x / scale = -167.5 in
  float16 (uint8 62 with zero point 230), the lowering divided in float32 (-167.45676: 63).
* DequantizeLinear's ``output_dtype`` (opset 23+) was ignored: the output had the scale's type.
* Resize, ``half_pixel_symmetric`` with nearest: the coordinate in float32 as onnxruntime computes it (the offset in
  float32, the rest in float64): 5 -> 12 at scale 2.5 maps output 7 to 2.9999998 in all-float32 arithmetic and to 3
  in onnxruntime's (and ONNX's reference), ``nearest_mode=ceil`` picks another input.

Not bugs of the lowering (onnxruntime departs from the spec and from ONNX's reference there, the lowering follows
those): Resize's ``align_corners`` / ``tf_crop_and_resize`` with scales use the fractional ``length_resized =
scale * length_original`` (ONNX's own test_resize_downsample_scales_{linear,cubic}_align_corners, which onnxruntime
fails); onnxruntime skips an axis whose output length equals its input length (no crop, no extrapolation on it).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from neetorch.onnx import InferenceSession  # noqa: E402
from onnx_single_node import model as _model, ort_run as _ort  # noqa: E402


def _same(m, feed, rtol=0.0, atol=0.0):
    got, ref = InferenceSession(m).run(None, feed), _ort(m, feed)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- Celu
@pytest.mark.parametrize("dt", [np.float32])
def test_celu_alpha_zero(dt):
    x = np.array([-2, -0.5, -1e-30, -0.0, 0.0, 0.5, 3, np.inf, -np.inf, np.nan], dt)
    m = _model(helper.make_node("Celu", ["x"], ["y"], alpha=0.0),
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])], opset=12)
    got = InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, _ort(m, {"x": x})[0])  # NaN where x >= 0 or NaN, 0 where x < 0
    np.testing.assert_array_equal(np.isnan(got), ~(x < 0))


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def _quant_model(x, scale, zp, opset, const_scale=True, **attrs):
    et = helper.np_dtype_to_tensor_dtype
    ins = [helper.make_tensor_value_info("x", et(x.dtype), list(x.shape))]
    inits = [numpy_helper.from_array(zp, "zp")]
    feed = {"x": x}
    if const_scale:
        inits.append(numpy_helper.from_array(scale, "s"))
    else:
        ins.append(helper.make_tensor_value_info("s", et(scale.dtype), list(scale.shape)))
        feed["s"] = scale
    return _model(helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], **attrs), ins, inits, opset), feed


@pytest.mark.parametrize("opset", [23, 25])
@pytest.mark.parametrize("const_scale", [True, False])
def test_quantize_divides_in_the_scales_float16(opset, const_scale):
    # float32 x, float16 scale: x / scale in float16 (x cast to float16 first, as onnxruntime)
    x = np.array([[-1.3082559, 0.4, 1000.3, -77.7], [250.1, -3.3, 1.2, 5.5]], np.float32)
    scale = np.array([0.007812, 1.37], np.float16)
    zp = np.array([230, 17], np.uint8)
    m, feed = _quant_model(x, scale, zp, opset, const_scale, axis=0)
    got = InferenceSession(m).run(None, feed)[0]
    assert got[0, 0] == 62  # -167.5 rounds to even -168
    _same(m, feed)
    # before opset 23 (x and y_scale of one type, the spec silent on the precision) onnxruntime divides in float32
    rng = np.random.default_rng(5)
    m, feed = _quant_model((rng.normal(size=(2, 64)) * 300).astype(np.float16), scale, zp, 21, const_scale, axis=0)
    _same(m, feed)


@pytest.mark.parametrize("opset", [23, 24])
def test_quantize_float16_x_and_scale_per_axis_and_blocked(opset):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(3, 5, 4)) * 900).astype(np.float16)
    s_axis = np.array([0.959, 0.0107, 0.411, 1.37, 0.137], np.float16)
    m, feed = _quant_model(x, s_axis, np.array([3, -200, 0, 17, 9], np.int16), opset, axis=1)
    _same(m, feed)
    s_blk = (rng.choice([0.137, 0.411, 0.959, 4.11], size=(3, 5, 2))).astype(np.float16)
    m, feed = _quant_model(x, s_blk, np.zeros((3, 5, 2), np.uint16), opset, axis=-1, block_size=2)
    _same(m, feed)


def test_quantize_precision_attribute_float16():
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(3, 2, 4)) * 100).astype(np.float32)
    scale = np.array([0.959, 0.0107, 0.0137], np.float32)
    m, feed = _quant_model(x, scale, np.array([7, -3, 0], np.int16), 23, axis=0, precision=TensorProto.FLOAT16)
    _same(m, feed)


def test_quantize_precision_attribute_bfloat16_matches_the_reference():
    # onnxruntime has no bfloat16 precision: ONNX's reference (x and the scale cast to bfloat16, the quotient too)
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(4, 6)) * 50).astype(np.float32)
    scale = np.array([0.137, 0.3, 0.7, 0.011], np.float32)
    m, feed = _quant_model(x, scale, np.array([3, -5, 0, 7], np.int16), 23, axis=0, precision=TensorProto.BFLOAT16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ReferenceEvaluator(m).run(None, feed)[0]
    got = InferenceSession(m).run(None, feed)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert (want != np.rint(x / scale[:, None]) + np.array([3, -5, 0, 7])[:, None]).any()  # not float32's


def test_dequantize_output_dtype():
    x = np.array([[-128, -3, 0, 5, 127, 99]], np.int8)
    for scale_dt, out_dt in [(np.float16, TensorProto.FLOAT), (np.float32, TensorProto.FLOAT16)]:
        node = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"], output_dtype=out_dt)
        m = _model(node, [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 6])],
                   [numpy_helper.from_array(np.array(0.0123, scale_dt), "s"),
                    numpy_helper.from_array(np.array(7, np.int8), "zp")], 23)
        _same(m, {"x": x}, rtol=1e-6)


# ---------------------------------------------------------------- Resize
@pytest.mark.parametrize("shape,nearest_mode,attrs,sizes,scales", [
    ([5], "ceil", {"axes": [0]}, None, [2.5]),
    ([3], "floor", {}, [1], None),
    ([3, 6], "floor", {"axes": [0]}, [1], None),
    ([5, 4, 6, 3], "floor", {}, None, [0.6, 0.34, 2.0, 2.0]),
    ([3, 5, 6], "floor", {"keep_aspect_ratio_policy": "not_larger"}, [4, 7, 2], None),
    ([2, 4, 5, 5], "floor", {"keep_aspect_ratio_policy": "not_larger"}, [2, 4, 3, 7], None),
])
def test_resize_nearest_half_pixel_symmetric_coordinates(shape, nearest_mode, attrs, sizes, scales):
    ins, inits = ["x", ""], []
    if sizes is not None:
        ins += ["", "sizes"]
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    else:
        ins.append("scales")
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
    node = helper.make_node("Resize", ins, ["y"], mode="nearest", coordinate_transformation_mode="half_pixel_symmetric",
                            nearest_mode=nearest_mode, **attrs)
    m = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], inits, opset=19)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    _same(m, {"x": x})
