"""nee.compare and ``python3 -m neetorch.compare``: the same function / ONNX model on two devices or dtypes.

The reported errors are checked against errors computed here from the two sides' outputs.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import neetorch as nee

CMP = sys.modules["neetorch.compare"]
HAVE_CL = any(d.type == "opencl" and d.available for d in nee.devices())
needs_cl = pytest.mark.skipif(not HAVE_CL, reason="no OpenCL device (pip install 'neetorch[opencl]')")


def _f(x, w):
    h = (x @ w) * 0.5 + 1.0
    return {"probs": nee.softmax(h, -1), "act": h.relu().exp() - 1.0, "count": (h > 1.0).sum(-1)}


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((9, 33)).astype(np.float32), rng.standard_normal((33, 17)).astype(np.float32)]


@needs_cl
def test_function_cpu_vs_opencl_matches_independent_errors():
    x, w = _inputs()
    rep = nee.compare(_f, [x, w], devices=("cpu", "opencl"), rtol=1e-5, atol=1e-6)
    assert rep.a == "cpu" and rep.b == "opencl:0"
    assert [o.name for o in rep.outputs] == ["probs", "act", "count"]
    a = _f(nee.tensor(x), nee.tensor(w))
    b = _f(nee.tensor(x).to("opencl"), nee.tensor(w).to("opencl"))
    for name in ("probs", "act"):
        ea, eb = a[name].numpy().astype(np.float64), b[name].cpu().numpy().astype(np.float64)
        o = rep[name]
        assert o.shape == (9, 17) and o.dtypes == ("float32", "float32")
        assert o.max_abs == pytest.approx(np.abs(eb - ea).max(), abs=0)
        nz = ea != 0
        assert o.max_rel == pytest.approx((np.abs(eb - ea)[nz] / np.abs(ea[nz])).max(), rel=1e-12)
        # act = exp(relu(h)) - 1 cancels near h = 0: a few ulps of difference between the two matmuls' sums
        # (the CPU's fused multiply-adds, OpenCL's plain ones) come out as ~5e-5 relative there (the CPU's own
        # result is 1.5e-5 from float64's); within= above is the check at the requested tolerance
        assert o.within and o.max_rel < 1e-4
    assert rep["count"].dtypes == ("int64", "int64") and rep["count"].max_abs == 0
    assert rep.ok
    text = str(rep)
    assert "probs" in text and "(9, 17)" in text and "all outputs within tolerance" in text


def test_float16_long_sum_is_out_of_tolerance():
    x = np.full(4096, 0.1, np.float32) + np.linspace(0, 1e-3, 4096, dtype=np.float32)
    rep = nee.compare(lambda t: (t.sum(), t * 2), [x], devices="cpu", dtypes=("float32", "float16"),
                      rtol=0.0, atol=1e-3)
    s, dbl = rep["output[0]"], rep["output[1]"]
    assert rep.a == "cpu float32" and rep.b == "cpu float16"
    assert s.dtypes == ("float32", "float16") and s.shape == ()
    ref32 = nee.tensor(x).sum().item()
    ref16 = nee.tensor(x).half().sum().item()
    assert s.max_abs == pytest.approx(abs(ref16 - ref32), rel=1e-6) and s.max_abs > 1e-3
    assert not s.within and s.mismatched == 1
    assert dbl.within and 0 < dbl.max_abs < 1e-3    # per output: the elementwise x * 2 stays within atol
    assert not rep.ok
    assert "NO" in str(rep) and "OUT of tolerance" in str(rep)
    with pytest.raises(AssertionError, match="OUT of tolerance"):
        rep.assert_ok()
    loose = nee.compare(lambda t: t.sum(), [x], devices="cpu", dtypes=("float32", "float16"), rtol=1e-2, atol=0)
    assert loose.ok


def test_diff_rules():
    d = CMP._diff
    inf, nan = np.inf, np.nan
    o = d("x", np.array([1.0, nan, inf, -inf, 0.0]), np.array([1.0, nan, inf, -inf, 0.0]), 0, 0)
    assert o.within and o.max_abs == 0 and o.max_rel == 0
    o = d("x", np.array([1.0, nan, 2.0]), np.array([1.0, 3.0, 2.0]), 1e-3, 1e-3)
    assert not o.within and o.mismatched == 1 and "NaN" in o.note and o.max_abs == inf
    o = d("x", np.array([1.0, inf]), np.array([1.0, -inf]), 1e-3, 1e-3)
    assert not o.within and o.mismatched == 1
    o = d("x", np.array([100.0, 0.0]), np.array([100.5, 0.001]), 1e-2, 1e-2)
    assert o.within and o.max_abs == pytest.approx(0.5) and o.max_rel == pytest.approx(0.005)
    o = d("i", np.array([1, 2, 3]), np.array([1, 2, 4]), 1.0, 1.0)     # integers: exact, whatever the tolerance
    assert not o.within and o.max_abs == 1
    o = d("s", np.zeros((2, 3)), np.zeros((3, 2)), 1, 1)
    assert not o.within and "shapes differ" in o.note


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="both sides are cpu"):
        nee.compare(lambda t: t, [np.ones(3)], devices="cpu")
    with pytest.raises(ValueError, match="one value or a pair"):
        nee.compare(lambda t: t, [np.ones(3)], devices=("cpu", "cpu", "cpu"))
    with pytest.raises(TypeError, match="output output is a str"):
        nee.compare(lambda t: "x", [np.ones(3)], devices="cpu", dtypes=("float32", "float64"))
    with pytest.raises(RuntimeError, match="nosuchdev"):
        nee.compare(lambda t: t, [np.ones(3)], devices=("cpu", "nosuchdev"))


# ------------------------------------------------------------------------------- ONNX
def _model():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1),
             helper.make_node("ReduceSum", ["h"], ["s"], keepdims=0)]
    g = helper.make_graph(nodes, "cmp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


@needs_cl
def test_onnx_model_cpu_vs_opencl_and_float16(tmp_path):
    m = _model()
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    rep = nee.compare(m, {"x": x}, devices=("cpu", "opencl"), rtol=1e-5, atol=1e-6)
    assert [o.name for o in rep.outputs] == ["y", "s"] and rep["y"].shape == (5, 6) and rep.ok
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = nee.onnx.InferenceSession(m, device="opencl").run(None, {"x": x})
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)
    # float16: the weights are converted too; errors are float16-sized, and the reported max error is the real one
    half = nee.compare(m, [x], devices="cpu", dtypes=("float32", "float16"), rtol=1e-2, atol=1e-2)
    assert half["y"].dtypes == ("float32", "float16") and half.ok
    m16 = CMP._model_as(m, "float16")
    y16 = nee.onnx.InferenceSession(m16).run(None, {"x": x.astype(np.float16)})[0]
    assert y16.dtype == np.float16
    assert half["y"].max_abs == pytest.approx(np.abs(y16.astype(np.float64) - ref[0]).max(), rel=1e-3, abs=1e-6)
    assert 0 < half["y"].max_abs < 1e-2
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    assert nee.compare(str(p), [x], devices=("cpu", "opencl")).ok


@needs_cl
def test_cli(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    p.write_bytes(_model().SerializeToString())
    assert CMP.main([str(p), "--devices", "cpu,opencl", "--dim", "N=3"]) == 0
    out = capsys.readouterr().out
    assert "x[3, 8]" in out and "y" in out and "all outputs within tolerance" in out
    # float16 with a tolerance float16 cannot meet: exit status 1
    assert CMP.main([str(p), "--devices", "cpu", "--dtype", "float16", "--rtol", "0", "--atol", "1e-7"]) == 1
    out = capsys.readouterr().out
    assert "OUT of tolerance" in out and "float16" in out
    with pytest.raises(SystemExit):
        CMP.main([str(p), "--dim", "N"])
    assert CMP.main([str(tmp_path / "missing.onnx"), "--devices", "cpu", "--dtype", "float64"]) == 2
    # the module entry point itself (no runpy warning: the implementation is a package)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "neetorch.compare", str(p), "--devices", "cpu,opencl"],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "within tolerance" in r.stdout and "RuntimeWarning" not in r.stderr
