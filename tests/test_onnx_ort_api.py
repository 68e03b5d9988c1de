"""``import neetorch.onnx as ort`` as a drop-in for ``import onnxruntime as ort``: each test body runs against
both modules (the ``ort`` fixture) and the two runs' results, types and error classes are compared."""
import contextlib
import importlib
import io
import json
import os
import threading
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as T
from onnx import helper

import neetorch.onnx as nx

MODULES = ["onnxruntime", "neetorch.onnx"]
vi = helper.make_tensor_value_info


@pytest.fixture(params=MODULES)
def ort(request):
    return importlib.import_module(request.param)


def _errors(mod):
    """The module's ``capi.onnxruntime_pybind11_state`` (where onnxruntime keeps its error classes)."""
    return importlib.import_module(mod.__name__ + ".capi.onnxruntime_pybind11_state")


def _model(nodes, ins, outs, inits=(), opset=17, **kw):
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)], **kw)
    return m.SerializeToString()


def _add_neg():
    """y = x + w (w = [1, 2, 3]), z = -x; x: float [N, 3]."""
    return _model([helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
                  [vi("x", T.FLOAT, ["N", 3])], [vi("y", T.FLOAT, ["N", 3]), vi("z", T.FLOAT, ["N", 3])],
                  [helper.make_tensor("w", T.FLOAT, [3], [1, 2, 3])])


X = np.arange(6, dtype=np.float32).reshape(2, 3)
WANT = [X + np.array([1, 2, 3], np.float32), -X]


def both(fn):
    """fn(module) for onnxruntime and neetorch.onnx: (onnxruntime's result, neetorch's)."""
    return tuple(fn(importlib.import_module(m)) for m in MODULES)


# ---------------------------------------------------------------- run
def test_run_results_and_types(ort):
    s = ort.InferenceSession(_add_neg(), providers=["CPUExecutionProvider"])
    outs = s.run(None, {"x": X})
    assert type(outs) is list and all(type(o) is np.ndarray and o.dtype == np.float32 for o in outs)
    for got, want in zip(outs, WANT):
        np.testing.assert_array_equal(got, want)
    (z,) = s.run(["z"], {"x": X})
    np.testing.assert_array_equal(z, -X)
    assert len(s.run([], {"x": X})) == 2                                    # [] means every output
    np.testing.assert_array_equal(s.run(["y"], {"x": [[1, 2, 3]]})[0], [[2, 4, 6]])   # a list: the input's dtype
    np.testing.assert_array_equal(s.run(["z"], {"x": ort.OrtValue.ortvalue_from_numpy(X)})[0], -X)


def test_node_args_match_onnxruntime():
    seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, None)
    b = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["u"], ["v"]),
                helper.make_node("SequenceLength", ["s"], ["n"])],
               [vi("x", T.FLOAT, ["batch", None, 4]), vi("u", T.INT64, None), seq],
               [vi("y", T.FLOAT, ["batch", None, 4]), vi("v", T.INT64, None), vi("n", T.INT64, [])])

    def args(ort):
        # the ONNX checker (neetorch runs it) refuses inputs without a shape, onnxruntime accepts them
        s = ort.InferenceSession(b) if ort is not nx else nx.InferenceSession(b, check=False)
        return [(a.name, a.shape, a.type) for a in s.get_inputs() + s.get_outputs()]
    want, got = both(args)
    assert got == want
    assert got[0] == ("x", ["batch", None, 4], "tensor(float)")
    assert got[1][1] == [] and got[2][2] == "seq(tensor(float))"
    opt = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2])))
    b = _model([helper.make_node("OptionalHasElement", ["o"], ["y"])], [opt], [vi("y", T.BOOL, [])], opset=18)

    def optional(ort):
        s = ort.InferenceSession(b)
        a = s.get_inputs()[0]
        return (a.name, a.shape, a.type), s.run(None, {})[0].tolist(), s.run(None, {"o": np.ones(2, np.float32)})[0]
    want, got = both(optional)
    assert got == want == (("o", [2], "optional(tensor(float))"), False, True)


def test_modelmeta_and_session_options():
    m = onnx.load_from_string(_add_neg())
    m.producer_name, m.doc_string, m.domain, m.model_version = "prod", "desc", "dom", 7
    helper.set_model_props(m, {"k": "v"})
    b = m.SerializeToString()

    def meta(ort):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(b, so)
        mm = s.get_modelmeta()
        o = s.get_session_options()
        return ([mm.producer_name, mm.graph_name, mm.domain, mm.description, mm.version, mm.custom_metadata_map],
                [o.intra_op_num_threads, o.graph_optimization_level.name, o.enable_profiling])
    want, got = both(meta)
    assert got == want
    b2 = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])])
    assert both(lambda ort: ort.InferenceSession(b2).get_modelmeta().version) == (2 ** 63 - 1,) * 2


# ---------------------------------------------------------------- errors
BAD_FEEDS = [
    ("missing", None, {}, ValueError),
    ("typo", None, {"X": X}, ValueError),                       # onnxruntime checks missing inputs first
    ("unknown", None, {"x": X, "q": X}, "InvalidArgument"),
    ("dtype", None, {"x": X.astype(np.float64)}, "InvalidArgument"),
    ("int dtype", None, {"x": X.astype(np.int64)}, "InvalidArgument"),
    ("rank", None, {"x": X[0]}, "InvalidArgument"),
    ("dim", None, {"x": np.ones((2, 4), np.float32)}, "InvalidArgument"),
    ("output", ["nope"], {"x": X}, "InvalidArgument"),
]


@pytest.mark.parametrize("case", BAD_FEEDS, ids=[c[0] for c in BAD_FEEDS])
def test_run_error_classes(ort, case):
    _, names, feed, cls = case
    s = ort.InferenceSession(_add_neg())
    cls = getattr(_errors(ort), cls) if isinstance(cls, str) else cls
    with pytest.raises(cls) as ei:
        s.run(names, feed)
    if ort is nx:   # neetorch's classes also belong to its own family, and say what was expected and got
        assert isinstance(ei.value, nx.InvalidInputError)
        msg = str(ei.value)
        assert {"missing": "['x']", "typo": "'X'", "unknown": "'q'", "dtype": "float64", "int dtype": "int64",
                "rank": "rank 1", "dim": "dim 1 must be 3", "output": "'nope'"}[case[0]] in msg


def test_load_error_classes(ort, tmp_path):
    E = _errors(ort)
    with pytest.raises(E.NoSuchFile):
        ort.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(E.InvalidProtobuf):
        ort.InferenceSession(b"\x08\x07garbage\xff\xff\xff")
    with pytest.raises(TypeError):
        ort.InferenceSession(12)
    unknown_op = _model([helper.make_node("FooBar", ["x"], ["y"])], [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])])
    with pytest.raises(E.InvalidGraph):
        ort.InferenceSession(unknown_op)
    if ort is nx:
        with pytest.raises(nx.ModelLoadError):   # neetorch's family still catches them
            ort.InferenceSession(str(tmp_path / "missing.onnx"))
        with pytest.raises(nx.UnsupportedModelError):  # an ONNX op neetorch lacks: NotImplemented
            m = helper.make_model(helper.make_graph([helper.make_node("BeamSearch", ["x"], ["y"], domain="com.microsoft")],
                                                    "g", [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])]),
                                  opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
            nx.InferenceSession(m)
        assert issubclass(nx.NotImplemented, nx.UnsupportedModelError)
        assert nx.NotImplemented.__name__ == "NotImplemented"


# ---------------------------------------------------------------- options
def test_session_options_defaults_and_config(ort):
    so = ort.SessionOptions()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL == 99
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert (so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level, so.log_verbosity_level) == \
        (0, 0, -1, 0)
    assert (so.enable_profiling, so.profile_file_prefix, so.optimized_model_filepath) == \
        (False, "onnxruntime_profile_", "")
    assert so.enable_mem_pattern and so.enable_cpu_mem_arena and not so.use_deterministic_compute
    assert [(k, int(v)) for k, v in ort.GraphOptimizationLevel.__members__.items()] == \
        [("ORT_DISABLE_ALL", 0), ("ORT_ENABLE_BASIC", 1), ("ORT_ENABLE_EXTENDED", 2), ("ORT_ENABLE_LAYOUT", 3),
         ("ORT_ENABLE_ALL", 99)]
    assert str(ort.ExecutionMode.ORT_PARALLEL) == "ExecutionMode.ORT_PARALLEL"
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 2
    so.enable_mem_pattern = False
    so.add_session_config_entry("session.x", "1")
    assert so.get_session_config_entry("session.x") == "1"
    with pytest.raises(RuntimeError, match="does not have configuration with key: nope"):
        so.get_session_config_entry("nope")
    with pytest.raises(TypeError):
        so.add_session_config_entry("session.y", 1)
    with pytest.raises(AttributeError):          # a typo is an error, not a silently ignored option
        so.intra_op_num_thread = 2
    with pytest.raises(TypeError):
        so.intra_op_num_threads = "2"
    with pytest.raises(TypeError):
        so.graph_optimization_level = "all"
    s = ort.InferenceSession(_add_neg(), so)
    np.testing.assert_array_equal(s.run(["y"], {"x": X})[0], WANT[0])


def test_free_dimension_override(ort):
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("N", 2)
    s = ort.InferenceSession(_add_neg(), so)
    assert s.get_inputs()[0].shape == [2, 3] and s.get_outputs()[0].shape == [2, 3]
    np.testing.assert_array_equal(s.run(["z"], {"x": X})[0], -X)
    with pytest.raises(_errors(ort).InvalidArgument):
        s.run(None, {"x": np.ones((3, 3), np.float32)})


def test_run_options(ort):
    s = ort.InferenceSession(_add_neg())
    ro = ort.RunOptions()
    assert (ro.log_severity_level, ro.logid, ro.terminate, ro.only_execute_path_to_fetches) == (-1, "", False, False)
    ro.logid = "tag"
    np.testing.assert_array_equal(s.run(["y"], {"x": X}, ro)[0], WANT[0])
    ro.add_run_config_entry("k", "v")
    assert ro.get_run_config_entry("k") == "v"
    with pytest.raises(RuntimeError):
        ro.get_run_config_entry("missing")
    with pytest.raises(AttributeError):
        ro.terminated = True
    ro.terminate = True
    with pytest.raises(_errors(ort).Fail, match="terminate flag"):
        s.run(None, {"x": X}, ro)


def test_providers(ort):
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert "CPUExecutionProvider" in ort.get_all_providers()
    assert ort.get_device() in ("CPU", "GPU")
    assert isinstance(ort.get_version_string(), str) and ort.get_version_string() == ort.__version__
    b = _add_neg()
    s = ort.InferenceSession(b, providers=["CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert s.get_provider_options() == {"CPUExecutionProvider": {}}
    s = ort.InferenceSession(b, providers=[("CPUExecutionProvider", {})])
    assert s.get_providers() == ["CPUExecutionProvider"]
    # a provider name nobody knows: a warning, an "EP Error" banner on stdout and a CPU session
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as w, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        s = ort.InferenceSession(b, providers=["FooExecutionProvider"])
    assert any("FooExecutionProvider" in str(x.message) for x in w)
    assert "Falling back to ['CPUExecutionProvider']" in out.getvalue()
    assert s.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(s.run(["z"], {"x": X})[0], -X)
    # without fallback it is an error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Unknown Provider Type: FooExecutionProvider"):
            ort.InferenceSession(b, providers=["FooExecutionProvider"], enable_fallback=0)
    with pytest.raises(ValueError, match="same length"):
        ort.InferenceSession(b, providers=["CPUExecutionProvider"], provider_options=[{}, {}], enable_fallback=0)
    s.set_providers(["CPUExecutionProvider"])
    s.disable_fallback()
    s.enable_fallback()
    assert s.get_providers() == ["CPUExecutionProvider"]


def test_overridable_initializers(ort):
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [vi("x", T.FLOAT, [2]), vi("w", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])],
                          [helper.make_tensor("w", T.FLOAT, [2], [1, 2])])
    b = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    s = ort.InferenceSession(b)
    assert [a.name for a in s.get_inputs()] == ["x"]
    assert [(a.name, a.shape, a.type) for a in s.get_overridable_initializers()] == [("w", [2], "tensor(float)")]
    x = np.zeros(2, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], [1, 2])
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": np.full(2, 5, np.float32)})[0], [5, 5])
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], [1, 2])
    with pytest.raises(_errors(ort).InvalidArgument):
        s.run(None, {"x": x, "w": np.ones(3, np.float32)})


# ---------------------------------------------------------------- OrtValue
def test_ortvalue(ort):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = ort.OrtValue.ortvalue_from_numpy(a)
    assert (v.shape(), v.data_type(), v.element_type(), v.device_name()) == ([2, 3], "tensor(float)", T.FLOAT, "cpu")
    assert v.is_tensor() and v.has_value() and not v.is_tensor_sequence() and not v.is_sparse_tensor()
    assert v.tensor_size_in_bytes() == 24 and v.data_ptr() == a.ctypes.data
    assert np.shares_memory(v.numpy(), a)                      # the caller's array, not a copy
    a[0, 0] = 100
    assert v.numpy()[0, 0] == 100 and np.asarray(v).dtype == np.float32
    v.update_inplace(np.ones((2, 3), np.float32))
    assert a.sum() == 6
    nc = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    vn = ort.OrtValue.ortvalue_from_numpy(nc)
    np.testing.assert_array_equal(vn.numpy(), nc)
    v2 = ort.OrtValue.ortvalue_from_shape_and_type([2, 5], np.int64)
    v3 = ort.OrtValue.ortvalue_from_shape_and_type([4], T.DOUBLE)
    assert (v2.shape(), v2.data_type(), v2.numpy().dtype) == ([2, 5], "tensor(int64)", np.int64)
    assert (v3.data_type(), v3.element_type(), v3.numpy().shape) == ("tensor(double)", T.DOUBLE, (4,))
    with pytest.raises(RuntimeError, match="non-string numpy arrays"):
        ort.OrtValue.ortvalue_from_numpy(np.array(["a", "b"], dtype=object))
    with pytest.raises(RuntimeError):
        ort.OrtValue.ortvalue_from_numpy([1.0, 2.0])


def test_run_with_ort_values(ort):
    s = ort.InferenceSession(_add_neg())
    v = ort.OrtValue.ortvalue_from_numpy(X)
    r = s.run_with_ort_values(None, {"x": v})
    assert type(r) is list and len(r) == 2 and all(isinstance(o, ort.OrtValue) for o in r)
    for o, want in zip(r, WANT):
        assert o.device_name() == "cpu" and o.data_type() == "tensor(float)"
        np.testing.assert_array_equal(o.numpy(), want)
    (z,) = s.run_with_ort_values(["z"], {"x": v})
    np.testing.assert_array_equal(z.numpy(), -X)
    with pytest.raises(ValueError, match="missing"):
        s.run_with_ort_values(None, {"q": v})
    with pytest.raises(_errors(ort).InvalidArgument):
        s.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(X.astype(np.float64))})


# ---------------------------------------------------------------- IOBinding
def test_iobinding(ort):
    s = ort.InferenceSession(_add_neg())
    io_ = s.io_binding()
    io_.bind_cpu_input("x", X)
    io_.bind_output("y")
    s.run_with_iobinding(io_)
    outs = io_.get_outputs()
    assert len(outs) == 1 and isinstance(outs[0], ort.OrtValue) and outs[0].device_name() == "cpu"
    (y,) = io_.copy_outputs_to_cpu()
    assert type(y) is np.ndarray
    np.testing.assert_array_equal(y, WANT[0])
    # a preallocated output is written in place; binding order is output order
    yv = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    io_.bind_ortvalue_output("y", yv)
    io_.bind_output("z")
    s.run_with_iobinding(io_)
    np.testing.assert_array_equal(yv.numpy(), WANT[0])
    np.testing.assert_array_equal(io_.copy_outputs_to_cpu()[1], -X)
    # raw host pointers, in and out
    xb, zb = (X * 2).copy(), np.zeros((2, 3), np.float32)
    io_.clear_binding_outputs()
    io_.bind_input("x", "cpu", 0, np.float32, [2, 3], xb.ctypes.data)
    io_.bind_output("z", "cpu", 0, np.float32, [2, 3], zb.ctypes.data)
    s.run_with_iobinding(io_)
    np.testing.assert_array_equal(zb, -2 * X)
    io_.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(X))
    io_.synchronize_inputs()
    s.run_with_iobinding(io_)
    io_.synchronize_outputs()
    np.testing.assert_array_equal(zb, -X)
    # errors: a wrongly shaped / typed preallocated output, a wrong input dtype, no outputs, a foreign binding
    io_.bind_ortvalue_output("z", ort.OrtValue.ortvalue_from_shape_and_type([4], np.float32))
    with pytest.raises(RuntimeError, match="rank"):
        s.run_with_iobinding(io_)
    io_.bind_ortvalue_output("z", ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float64))
    with pytest.raises(RuntimeError, match="data type"):
        s.run_with_iobinding(io_)
    io_.bind_output("z")
    io_.bind_cpu_input("x", X.astype(np.float64))
    with pytest.raises(RuntimeError, match="data type|float64"):
        s.run_with_iobinding(io_)
    with pytest.raises(RuntimeError, match="bad"):
        io_.bind_cpu_input("bad", X)
    io_.bind_cpu_input("x", X)
    io_.clear_binding_outputs()
    with pytest.raises(RuntimeError, match="At least one output"):
        s.run_with_iobinding(io_)
    with pytest.raises(ValueError, match="session that created it"):
        ort.InferenceSession(_add_neg()).run_with_iobinding(io_)


# ---------------------------------------------------------------- profiling, run_async
def test_profiling(ort, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    s = ort.InferenceSession(_add_neg(), so)
    assert s.get_profiling_start_time_ns() > 0
    s.run(None, {"x": X})
    path = s.end_profiling()
    assert os.path.basename(path).startswith("prof_") and path.endswith(".json") and os.path.isfile(path)
    with open(path) as f:
        evs = json.load(f)
    assert isinstance(evs, list) and evs
    assert all({"cat", "name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e) for e in evs)
    names = [e["name"] for e in evs]
    assert "session_initialization" in names and "model_run" in names
    assert s.end_profiling() == ""
    assert ort.InferenceSession(_add_neg()).get_profiling_start_time_ns() == 0
    assert ort.InferenceSession(_add_neg()).end_profiling() == ""


def test_neetorch_profile_has_kernels(tmp_path):
    so = nx.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    s = nx.InferenceSession(_add_neg(), so, jit=False)
    s.run(None, {"x": X})
    with open(s.end_profiling()) as f:
        evs = json.load(f)
    assert any(e["cat"] == "Node" and e["args"]["device"] == "cpu" for e in evs)


def test_run_async(ort):
    s = ort.InferenceSession(_add_neg())
    done, got = threading.Event(), {}

    def cb(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err)
        done.set()
    assert s.run_async(None, {"x": X}, cb, "ud") is None
    assert done.wait(10)
    assert got["user_data"] == "ud" and got["err"] == "" and isinstance(got["results"], list)
    np.testing.assert_array_equal(got["results"][1], -X)
    done.clear()
    s.run_async(None, {"x": X.astype(np.float64)}, cb, None)
    assert done.wait(10)
    assert got["results"] == [] and "float" in got["err"]
    with pytest.raises(ValueError, match="missing"):
        s.run_async(None, {"q": X}, cb, None)


# ---------------------------------------------------------------- neetorch-specific edges
def test_optimized_model_filepath(tmp_path):
    so = nx.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    nx.InferenceSession(_add_neg(), so)
    import onnxruntime
    ref = onnxruntime.InferenceSession(str(tmp_path / "opt.onnx")).run(None, {"x": X})
    for got, want in zip(ref, WANT):
        np.testing.assert_array_equal(got, want)
    so.optimized_model_filepath = str(tmp_path / "opt.ort")
    with pytest.raises(nx.NotImplemented, match=".ort"):
        nx.InferenceSession(_add_neg(), so)


def test_onnxruntime_session_options_accepted():
    import onnxruntime
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = nx.InferenceSession(_add_neg(), so)
    assert s.get_session_options().graph_optimization_level == nx.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert s.info["folded"] is None


def test_add_initializer_and_device_keyword():
    so = nx.SessionOptions()
    so.add_initializer("w", nx.OrtValue.ortvalue_from_numpy(np.full(3, 10, np.float32)))
    s = nx.InferenceSession(_add_neg(), so, device="cpu")
    np.testing.assert_array_equal(s.run(["y"], {"x": X})[0], X + 10)
    so.add_initializer("w", nx.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32)))
    with pytest.raises(nx.InvalidArgument, match="'w'.*\\[3\\]"):
        nx.InferenceSession(_add_neg(), so)
    with pytest.raises(TypeError, match="unexpected keyword"):
        nx.InferenceSession(_add_neg(), nope=1)


def _has_device(typ):
    import neetorch as nee
    return any(d.type == typ and d.available for d in nee.devices())


@pytest.mark.skipif(not _has_device("opencl"), reason="no OpenCL device")
def test_device_ortvalues_stay_on_device():
    """An OpenCL session: OrtValues made on the device go in without a host copy and come out on the device;
    results equal onnxruntime's (CPU)."""
    import onnxruntime
    want = onnxruntime.InferenceSession(_add_neg()).run(None, {"x": X})
    s = nx.InferenceSession(_add_neg(), providers=["OpenCLExecutionProvider"])
    assert s.get_providers() == ["OpenCLExecutionProvider", "CPUExecutionProvider"] and s.device.type == "opencl"
    v = nx.OrtValue.ortvalue_from_numpy(X, "opencl")
    assert v.device_name() == "opencl" and v.shape() == [2, 3]
    r = s.run_with_ort_values(None, {"x": v})
    assert [o.device_name() for o in r] == ["opencl", "opencl"]
    for o, w in zip(r, want):
        np.testing.assert_array_equal(o.numpy(), w)
    io_ = s.io_binding()
    io_.bind_ortvalue_input("x", v)
    io_.bind_output("y", "opencl")
    io_.bind_output("z")            # cpu
    s.run_with_iobinding(io_)
    assert [o.device_name() for o in io_.get_outputs()] == ["opencl", "cpu"]
    for o, w in zip(io_.copy_outputs_to_cpu(), want):
        np.testing.assert_array_equal(o, w)
    with pytest.raises(nx.InvalidArgument, match="float64"):
        s.run_with_ort_values(None, {"x": nx.OrtValue.ortvalue_from_numpy(X.astype(np.float64), "opencl")})
