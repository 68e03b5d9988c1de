"""Graph breaks in ONNX sessions: nodes whose output shapes or control flow depend on values (NonZero,
NonMaxSuppression, a TopK / Range / Reshape / If on computed values) run eagerly between compiled segments, and
the rest of the graph compiles (before: one such node sent the whole model to eager execution).

Checked against onnxruntime on several inputs (sizes and data that change the data-dependent shapes), with the
session's report (``info["mode"]``, ``info["breaks"]``, ``info["break_reasons"]``, ``placement_summary``)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import neetorch as nee  # noqa: E402
from neetorch.onnx import session as S  # noqa: E402

rng = np.random.default_rng(0)


def _model(nodes, inits, inputs, outputs=("y",), opset=17):
    """outputs: names (float) or (name, elem type)."""
    outputs = [(o, T.FLOAT) if isinstance(o, str) else o for o in outputs]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(o, t, None) for o, t in outputs], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _compare(m, feeds, **kw):
    s = nee.onnx.InferenceSession(m, **kw)
    r = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    for f in feeds:
        got, want = s.run(None, f), r.run(None, f)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return s


def _const(name, v):
    return nh.from_array(np.asarray(v), name)


# a conv backbone, then NonZero on its thresholded output, a gather of the kept values and more compute
_W = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)


def _nonzero_model():
    return _model([
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("Greater", ["r", "t"], ["m"]),
        h.make_node("NonZero", ["m"], ["nz"]),
        h.make_node("Transpose", ["nz"], ["nzt"]),
        h.make_node("GatherND", ["r", "nzt"], ["v"]),
        h.make_node("Exp", ["v"], ["e"]),
        h.make_node("Mul", ["e", "v"], ["y"]),
        h.make_node("ReduceSum", ["e"], ["total"], keepdims=0),
    ], [_const("w", _W), _const("t", np.float32(0.5))], [("x", T.FLOAT, ["N", 3, 12, 12])], ("y", "total", ("nz", T.INT64)))


def test_nonzero_splits_the_graph_and_the_rest_compiles():
    feeds = [{"x": rng.standard_normal((n, 3, 12, 12)).astype(np.float32)} for n in (1, 1, 2, 3, 1)]
    s = _compare(_nonzero_model(), feeds)
    assert s.info["mode"] == "jit+eager", s.info
    assert "NonZero" in s.info["breaks"] and "nee(3) -> eager(1) -> nee(" in s.info["breaks"], s.info
    (why,) = s.info["break_reasons"].values()
    assert "NonZero" in why
    kinds = [seg.kind for seg in s._segments]
    assert kinds == ["nee", "eager", "nee"], kinds
    # the conv segment is compiled (one bucketed specialization serves batch 1, 2 and 3: batch is symbolic)
    assert s._seg_jits[0].stats["calls"] == len(feeds) and s._seg_jits[0].stats["traces"] >= 1
    assert s._seg_jits[1] is None and s._seg_jits[2] is not None
    summary = s.placement_summary()
    assert "graph break" in summary and "conv2d" in summary, summary


def test_jit_off_runs_eagerly_without_segments():
    feeds = [{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}]
    s = _compare(_nonzero_model(), feeds, jit=False)
    assert s.info["mode"] == "eager" and s._segments is None and "breaks" not in s.info


_ONE = _const("one", np.array([1], np.int64))
_Z = _const("z", np.float32(0.0))


def _topk_data_k():
    # K = the smallest count of positive values in a row: the trace reads it (TopK's K must be a number)
    return _model([
        h.make_node("Relu", ["x"], ["r"]), h.make_node("Greater", ["x", "z"], ["m"]),
        h.make_node("Cast", ["m"], ["mi"], to=T.INT64), h.make_node("ReduceSum", ["mi", "one"], ["k"], keepdims=1),
        h.make_node("ReduceMin", ["k"], ["k1"], keepdims=1), h.make_node("Reshape", ["k1", "one"], ["kk"]),
        h.make_node("TopK", ["r", "kk"], ["v", "i"]), h.make_node("Exp", ["v"], ["e"]),
        h.make_node("Add", ["e", "e"], ["y"])], [_ONE, _Z], [("x", T.FLOAT, ["N", 16])], ("y", ("i", T.INT64)))


def _if_data():
    then = h.make_graph([h.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", T.FLOAT, None)])
    other = h.make_graph([h.make_node("ReduceSum", ["x"], ["e"], keepdims=1)], "else", [],
                         [h.make_tensor_value_info("e", T.FLOAT, None)])
    return _model([
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), h.make_node("Greater", ["s", "z"], ["c"]),
        h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other),
        h.make_node("Sigmoid", ["o"], ["y"])], [_Z], [("x", T.FLOAT, ["N", 16])])


def _range_data():
    return _model([
        h.make_node("Greater", ["x", "z"], ["m"]), h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT),
        h.make_node("ReduceSum", ["mf"], ["n"], keepdims=0), h.make_node("Range", ["z", "n", "o1"], ["rg"]),
        h.make_node("Relu", ["x"], ["rx"]), h.make_node("ReduceSum", ["rx"], ["rs"], keepdims=0),
        h.make_node("Add", ["rg", "rs"], ["y"])], [_Z, _const("o1", np.float32(1.0))], [("x", T.FLOAT, ["N", 16])])


@pytest.mark.parametrize("make,op", [(_topk_data_k, "TopK"), (_if_data, "If"), (_range_data, "Range")])
def test_breaks_found_by_the_trace(make, op):
    feeds = [{"x": rng.standard_normal((n, 16)).astype(np.float32)} for n in (4, 4, 7, 3, 1)]
    feeds.append({"x": -np.abs(feeds[0]["x"])})   # (the If's other branch; no positive value: K = 0, Range empty)
    s = _compare(make(), feeds)
    assert s.info["mode"] == "jit+eager", s.info
    assert f"({op})" in s.info["breaks"], s.info
    (why,) = s.info["break_reasons"].values()
    assert why.startswith("node ") and f"({op})" in why and "reads a traced tensor" in why, why
    assert s.info["fallback_reason"] is None
    assert any(j is not None and j.stats["traces"] for j in s._seg_jits), "nothing compiled"


@pytest.mark.parametrize("polymorphic", [False, True])
def test_segment_specialized_too_often_runs_eagerly(monkeypatch, polymorphic):
    # after the NonZero every call brings another size.  A segment whose graph bakes the sizes in (a Reshape to
    # its own computed shape) is specialized per exact size: past the limit it runs eagerly.  One that shape
    # buckets cover (elementwise ops only) is specialized per bucket and stays compiled.
    monkeypatch.setattr(S, "SEGMENT_SPECIALIZATIONS", 2)
    mid = ([h.make_node("Neg", ["f"], ["f2"])] if polymorphic else
           [h.make_node("Shape", ["f"], ["sh"]), h.make_node("Reshape", ["f", "sh"], ["f2"])])
    m = _model([h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Cast", ["nz"], ["f"], to=T.FLOAT)] + mid
               + [h.make_node("Mul", ["f2", "f2"], ["y"])], [], [("x", T.FLOAT, [40])])
    feeds = []
    for k in (3, 5, 9, 17, 30, 11, 3):
        x = np.zeros(40, np.float32)
        x[rng.choice(40, k, replace=False)] = 1.0
        feeds.append({"x": x})
    s = _compare(m, feeds)
    if polymorphic:
        jf = s._seg_jits[-1]
        assert jf is not None and jf.stats["specializations"] == jf.stats["bucket_specializations"] > 2, jf.stats
        assert "eager_segments" not in s.info
    else:
        assert s._seg_jits[-1] is None, s._seg_jits
        assert any("now eager" in e for e in s.info["eager_segments"]), s.info


def test_strings_and_breaks_in_one_graph():
    # a string input mapped to ids on the host, a NonZero on them (eager), the rest compiled
    m = h.make_model(h.make_graph([
        h.make_node("LabelEncoder", ["s"], ["ids"], domain="ai.onnx.ml", keys_strings=["a", "b", "c"],
                    values_int64s=[0, 5, 7], default_int64=-1),
        h.make_node("Cast", ["ids"], ["f"], to=T.FLOAT), h.make_node("Relu", ["f"], ["r"]),
        h.make_node("NonZero", ["r"], ["nz"]), h.make_node("Squeeze", ["nz", "zero"], ["idx"]),
        h.make_node("Gather", ["r", "idx"], ["g"]), h.make_node("Sqrt", ["g"], ["y"])], "g",
        [h.make_tensor_value_info("s", T.STRING, ["N"])], [h.make_tensor_value_info("y", T.FLOAT, None)],
        [_const("zero", np.array([0], np.int64))]),
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    b = m.SerializeToString()
    feeds = [{"s": np.array(v, dtype=object)} for v in (["a", "b", "x", "c"], ["c", "c"], ["b", "a", "a"])]
    s = _compare(b, feeds)
    assert s.info["mode"] == "jit+host", s.info
    assert "LabelEncoder" not in s.info["breaks"] and "NonZero" in s.info["breaks"], s.info
    assert [seg.kind for seg in s._segments] == ["host", "nee", "eager", "nee"], s._segments


def test_first_runs_from_two_threads():
    # both threads' traces fail at the same node: one splits the graph, the other runs on the split
    m = _topk_data_k()
    r = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    s = nee.onnx.InferenceSession(m)
    xs = [rng.standard_normal((5, 16)).astype(np.float32) for _ in range(2)]
    got, errs = [None, None], []

    def go(i):
        try:
            got[i] = s.run(None, {"x": xs[i]})
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs
    for i in range(2):
        for g, w in zip(got[i], r.run(None, {"x": xs[i]})):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert s.info["mode"] == "jit+eager" and len(s.info["break_reasons"]) == 1, s.info


def test_first_run_resumes_after_each_break_found(monkeypatch):
    # an NMS (a break by op type), then a TopK whose K is computed and a Range whose limit is (breaks the trace
    # finds one after the other): the first run splits the graph twice and resumes each time with what it has
    # computed, so the NMS runs once per call
    from neetorch.onnx import host_kernels
    calls = []
    real = host_kernels.nms_greedy
    monkeypatch.setattr(host_kernels, "nms_greedy", lambda *a: calls.append(1) or real(*a))
    m = _model([
        h.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "it"], ["sel"]),
        h.make_node("Cast", ["sel"], ["self"], to=T.FLOAT), h.make_node("ReduceSum", ["self"], ["ss"], keepdims=0),
        h.make_node("Relu", ["scores"], ["r"]), h.make_node("Reshape", ["r", "flat"], ["rf"]),
        h.make_node("Greater", ["rf", "half"], ["big"]), h.make_node("Cast", ["big"], ["bigi"], to=T.INT64),
        h.make_node("ReduceSum", ["bigi"], ["nbig"], keepdims=0),
        h.make_node("Min", ["nbig", "three"], ["k0"]), h.make_node("Reshape", ["k0", "one"], ["k"]),
        h.make_node("TopK", ["rf", "k"], ["v", "i"]),
        h.make_node("ReduceSum", ["v"], ["vs"], keepdims=0), h.make_node("Cast", ["nbig"], ["nbigf"], to=T.FLOAT),
        h.make_node("Range", ["zf", "nbigf", "onef"], ["rg"]),
        h.make_node("Add", ["rg", "vs"], ["y0"]), h.make_node("Add", ["y0", "ss"], ["y"])],
        [_const("mo", np.array([4], np.int64)), _const("it", np.array([0.5], np.float32)),
         _const("half", np.float32(0.5)), _const("three", np.array(3, np.int64)), _ONE,
         _const("flat", np.array([1, -1], np.int64)), _const("zf", np.float32(0)), _const("onef", np.float32(1))],
        [("boxes", T.FLOAT, [1, 12, 4]), ("scores", T.FLOAT, [1, 2, 12])])
    feeds = []
    for seed in range(3):
        r = np.random.default_rng(seed)
        b = r.uniform(0, 10, (1, 12, 2)).astype(np.float32)
        feeds.append({"boxes": np.concatenate([b, b + r.uniform(0.5, 3, (1, 12, 2)).astype(np.float32)], -1),
                      "scores": r.random((1, 2, 12)).astype(np.float32)})
    s = _compare(m, feeds)
    assert len(calls) == len(feeds), calls
    assert s.info["mode"] == "jit+eager" and "(TopK)" in s.info["breaks"] and "(Range)" in s.info["breaks"], s.info
    assert len(s.info["break_reasons"]) == 3, s.info


def test_command_line_names_the_breaks(tmp_path, capsys):
    from neetorch.onnx.__main__ import main
    p = tmp_path / "nz.onnx"
    p.write_bytes(_nonzero_model())
    assert main([str(p), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "mode: jit+eager" in out and "graph breaks:" in out and "(NonZero)" in out, out
