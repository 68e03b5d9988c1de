"""Session 28: Cast / CastLike from floats to INT4 / UINT4 / INT2 / UINT2 out of range.

ONNX leaves a float -> integer cast out of range undefined; its expected outputs for these types come from
ml_dtypes at case-generation time.  ml_dtypes 0.5+ gives 0 there (NaN and infinities too), and neetorch wrapped
to the low bits, failing 24 of ONNX's own node cases (test_cast_FLOAT_to_INT4 ...).  Floats now follow the
installed ml_dtypes; integers keep wrapping (ml_dtypes and ONNX agree there)."""
import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import neetorch as nee  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

_TYPES = {"int4": (TensorProto.INT4, ml_dtypes.int4), "uint4": (TensorProto.UINT4, ml_dtypes.uint4),
          "int2": (TensorProto.INT2, ml_dtypes.int2), "uint2": (TensorProto.UINT2, ml_dtypes.uint2)}


def _run(x, to, like=False):
    src = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE,
           np.int8: TensorProto.INT8, np.int32: TensorProto.INT32}[x.dtype.type]
    if like:
        node = helper.make_node("CastLike", ["x", "t"], ["y"])
        inits = [helper.make_tensor("t", to, [1], [0])]
    else:
        node, inits = helper.make_node("Cast", ["x"], ["y"], to=to), []
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", src, list(x.shape))],
                          [helper.make_tensor_value_info("y", to, list(x.shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    return nee.onnx.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]


@pytest.mark.parametrize("like", [False, True])
@pytest.mark.parametrize("name", sorted(_TYPES))
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64])
def test_float_to_small_int_follows_ml_dtypes(name, src, like):
    to, mt = _TYPES[name]
    x = np.array([-100, -9, -8.5, -8, -2.5, -2, -1.5, -1, -0.5, -0.0, 0, 0.5, 1, 1.5, 2.5, 3, 3.5, 7, 7.9, 8, 15,
                  15.5, 16, 300, np.nan, np.inf, -np.inf], src)
    got = _run(x, to, like)
    with np.errstate(all="ignore"):
        want = x.astype(mt)
    assert got.dtype == mt
    np.testing.assert_array_equal(got.astype(np.int8), want.astype(np.int8))


@pytest.mark.parametrize("name", sorted(_TYPES))
@pytest.mark.parametrize("src", [np.int8, np.int32])
def test_integer_to_small_int_wraps(name, src):
    to, mt = _TYPES[name]
    x = np.array([-100, -9, -8, -3, -2, -1, 0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 100], src)
    got = _run(x, to)
    np.testing.assert_array_equal(got.astype(np.int8), x.astype(mt).astype(np.int8))
    lo, hi = (-(1 << (int(name[-1]) - 1)), (1 << (int(name[-1]) - 1)) - 1) if name[0] == "i" else \
        (0, (1 << int(name[-1])) - 1)
    span = hi - lo + 1
    np.testing.assert_array_equal(got.astype(np.int64), (x.astype(np.int64) - lo) % span + lo)


def test_onnx_own_cases_pass():
    import onnx_conformance_harness as H
    names = {f"test_{op}_{s}_to_{d}{e}" for op in ("cast", "castlike") for s in ("FLOAT", "FLOAT16")
             for d in ("INT4", "UINT4", "INT2", "UINT2") for e in ("", "_expanded") if not (op == "cast" and e)}
    cases = [c for c in H.node_cases() if c.name in names]
    assert len(cases) == 24
    res = H.evaluate(cases, H.run_nee)
    assert {k: v for k, v in res.items() if v is not None} == {}
