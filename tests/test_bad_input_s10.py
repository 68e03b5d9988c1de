"""Adversarial bad input, round s10: out-of-range / wrapping / wrongly typed indices, bad view geometry, kernels
larger than their input, empty tensors, NaN in the order statistics, impossible sizes — eagerly on the CPU and on
the OpenCL device (PoCL), inside ``nee.jit`` and through ONNX sessions.

Every probe runs in ONE child process per device (a segfault or a hang there fails the test naming the probe
that was running instead of killing pytest), with torch 2.13 as the reference in the same child: where torch
raises, neetorch must raise an instance of torch's exception type (``IndexOutOfRangeError`` is both an IndexError
and a RuntimeError, for the ops where torch itself raises either), with a message naming the op; where torch
returns, the results must be equal.  The ONNX probes compare with onnxruntime the same way (error vs result).

Findings fixed in this round (each probe below is the regression): ``index_select`` / ``index_add`` /
``embedding_bag`` out of range raised IndexError where torch raises RuntimeError (and torch's ``index_select``
raises IndexError on other paths); ``index_reduce`` raised RuntimeError naming scatter_reduce; ``narrow`` with a
length past the end or negative raised IndexError (torch: RuntimeError; a start out of range stays IndexError);
``unfold`` with a negative size gave numpy's ValueError; ``histc`` of an integer tensor TypeError (torch:
NotImplementedError); ``as_strided`` past the storage was not refused on OpenCL (it read the buffer's neighbours);
``embedding_bag`` accepted offsets not starting at 0 or past the input (torch refuses them); ``cross_entropy`` with
class probabilities of the wrong batch size raised RuntimeError (torch: ValueError); ``interpolate`` of an input
with an empty spatial dim returned zeros on OpenCL (CPU: numpy's IndexError) instead of
torch's RuntimeError; ``conv`` with a weight of 0 output channels returned an empty result; sizes whose byte count
overflows int64 gave numpy's "Maximum allowed dimension exceeded" ValueError (``zeros``, ``empty``, ``arange``) and
allocations that fail a bare MemoryError naming no op; ``eye(-1)`` numpy's ValueError; ``tensor([2**70])``
"could not infer dtype" TypeError and ``tensor([1, 2**63])`` a float64 tensor (torch: ValueError, overflow);
ONNX ``GatherND`` / ``ScatterND`` with an index past its own dim (e.g. ``[1, 4]`` on a (3, 4) input) read / wrote
the next row's element instead of failing as onnxruntime does.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neetorch as nee

# ---------------------------------------------------------------------------------------------------- probes
# name -> (expression in L (torch or neetorch), T (numpy -> tensor on the device), np; substring the neetorch
# message must contain when it raises (the op's name), or None)
_F = "np.arange(12, dtype=np.float32).reshape(3, 4)"
PROBES = {
    # index ops out of range: the exception types torch raises (fixed: index_select / index_add / embedding_bag /
    # index_reduce / narrow / unfold / histc)
    "index_select_oob": (f"L.index_select(T({_F}), 1, T(np.array([0, 4])))", "index_select"),
    "index_select_neg": (f"L.index_select(T({_F}), 1, T(np.array([0, -1])))", "index_select"),
    "index_select_d0": (f"L.index_select(T({_F}), 0, T(np.array([3])))", "index_select"),
    "index_add_oob": (f"T({_F}).index_add(1, T(np.array([0, 4])), T(np.ones((3, 2), np.float32)))", "index_add"),
    "index_copy_oob": (f"T({_F}).index_copy(1, T(np.array([0, 4])), T(np.ones((3, 2), np.float32)))", "index_copy"),
    "index_fill_oob": (f"T({_F}).index_fill(1, T(np.array([0, -5])), 7.0)", "index_fill"),
    "index_fill_neg": (f"T({_F}).index_fill(1, T(np.array([0, -1])), 7.0)", None),
    "index_reduce_oob": (f"T({_F}).index_reduce(1, T(np.array([0, 4])), T(np.ones((3, 2), np.float32)), 'prod')",
                         "index_reduce"),
    "embedding_bag_oob": (f"L.nn.functional.embedding_bag(T(np.array([0, 5])), T({_F}.T.copy()), T(np.array([0])))",
                          "embedding_bag"),
    "embedding_bag_neg": (f"L.nn.functional.embedding_bag(T(np.array([[0, -1]])), T({_F}.T.copy()))",
                          "embedding"),
    "embedding_oob": (f"L.nn.functional.embedding(T(np.array([0, 4])), T({_F}.T.copy()))", "embedding"),
    "gather_oob": (f"L.gather(T({_F}), 1, T(np.array([[0, 4]] * 3)))", "gather"),
    "scatter_add_neg": (f"T({_F}).scatter_add(1, T(np.array([[0, -1]] * 3)), T(np.ones((3, 2), np.float32)))",
                        "scatter"),
    "take_oob": (f"L.take(T({_F}), T(np.array([0, 12])))", "take"),
    "take_neg": (f"L.take(T({_F}), T(np.array([0, -12])))", None),
    "put_oob": (f"T({_F}).put_(T(np.array([12])), T(np.ones(1, np.float32)))", "put"),
    "getitem_oob": (f"T({_F})[:, T(np.array([0, 4]))]", "index"),
    "setitem_oob": (f"T({_F}).__setitem__((slice(None), T(np.array([0, -5]))), 5.0)", "index"),
    "index_put_acc_oob": (f"T({_F}).index_put_((T(np.array([3])),), T(np.float32(1.0)), accumulate=True)", "index"),
    "mask_wrong_shape": (f"T({_F})[T(np.ones(4, bool))]", "mask"),
    "one_hot_oob": ("L.nn.functional.one_hot(T(np.array([0, 4])), 4)", None),
    "nll_oob": ("L.nn.functional.nll_loss(T(np.zeros((2, 4), np.float32)), T(np.array([0, 4])))", None),
    "ce_ignore_index_ok": ("L.nn.functional.cross_entropy(T(np.zeros((2, 4), np.float32)), T(np.array([-100, 1])))",
                           None),
    "bincount_neg": ("L.bincount(T(np.array([1, -2])))", "bincount"),
    "embedding_bag_offset0": (f"L.nn.functional.embedding_bag(T(np.array([0, 1, 2])), T({_F}), T(np.array([1, 2])))",
                              "offsets"),
    "embedding_bag_offset_past_end": ((f"L.nn.functional.embedding_bag(T(np.array([0, 1])), T({_F}), "
                                       f"T(np.array([0, 5])))"), "offsets"),
    "embedding_bag_offset_empty_bag": ((f"L.nn.functional.embedding_bag(T(np.array([0, 1, 2])), T({_F}), "
                                        f"T(np.array([0, 1, 1])))"), None),
    "cross_entropy_probs_batch": (("L.nn.functional.cross_entropy(T(np.zeros((2, 3), np.float32)), "
                                   "T(np.full((1, 3), 0.5, np.float32)))"), "batch_size"),
    "repeat_interleave_neg": (f"L.repeat_interleave(T({_F}), T(np.array([1, -1, 1])), dim=0)", None),
    "max_unpool_oob": (("L.nn.functional.max_unpool2d(T(np.ones((1, 1, 2, 2), np.float32)), "
                        "T(np.array([0, 3, 9, 16]).reshape(1, 1, 2, 2)), 2)"), None),
    "narrow_past_end": (f"T({_F}).narrow(1, 2, 3)", "narrow"),
    "narrow_neg_length": (f"T({_F}).narrow(1, 0, -1)", "narrow"),
    "narrow_start_oob": (f"T({_F}).narrow(1, -5, 1)", "narrow"),
    "narrow_neg_start": (f"T({_F}).narrow(1, -2, 2)", None),
    "unfold_neg_size": (f"T({_F}).unfold(1, -1, 1)", "unfold"),
    "unfold_too_big": (f"T({_F}).unfold(1, 5, 1)", "unfold"),
    "histc_int": ("L.histc(T(np.array([1, 2])), bins=3)", "histc"),
    "select_oob": (f"T({_F}).select(1, -5)", None),
    # views past the storage (fixed on OpenCL)
    "as_strided_oob": (f"T({_F}).as_strided((3, 4), (4, 2))", "storage"),
    "as_strided_offset_oob": (f"T({_F}).as_strided((2,), (1,), 11)", "storage"),
    "as_strided_view_oob": (f"T({_F})[1:].as_strided((12,), (1,))", "storage"),
    "as_strided_ok": (f"T({_F})[1:].as_strided((2, 2), (1, 2), 3)", None),
    "view_bad": (f"T({_F}).view(5, -1)", "view"),
    # kernels larger than the input, empty tensors
    "conv_kernel_gt_input": (("L.nn.functional.conv2d(T(np.ones((1, 2, 3, 3), np.float32)), "
                              "T(np.ones((2, 2, 5, 5), np.float32)))"), None),
    "conv_zero_out_channels": (("L.nn.functional.conv2d(T(np.ones((1, 2, 3, 3), np.float32)), "
                                "T(np.zeros((0, 2, 2, 2), np.float32)))"), "weight"),
    "conv_zero_batch": (("L.nn.functional.conv2d(T(np.zeros((0, 2, 3, 3), np.float32)), "
                         "T(np.ones((2, 2, 2, 2), np.float32)))"), None),
    "max_pool_kernel_gt_input": ("L.nn.functional.max_pool2d(T(np.ones((1, 2, 3, 3), np.float32)), 4)", None),
    "avg_pool_pad_gt_half": ("L.nn.functional.avg_pool2d(T(np.ones((1, 2, 3, 3), np.float32)), 2, padding=2)",
                             None),
    "interpolate_empty_input": ("L.nn.functional.interpolate(T(np.zeros((1, 1, 0, 3), np.float32)), size=(2, 2))",
                                "size"),
    "interpolate_empty_area": (("L.nn.functional.interpolate(T(np.zeros((1, 1, 0, 3), np.float32)), "
                                "size=(0, 2), mode='area')"), None),
    "argmax_empty": ("L.argmax(T(np.zeros(0, np.float32)))", None),
    "max_empty_dim": ("L.max(T(np.zeros((2, 0), np.float32)), 1)", None),
    "sort_nan": ("L.sort(T(np.array([3.0, np.nan, -np.inf, 1.0, np.inf, np.nan], np.float32)), stable=True)", None),
    "topk_nan": ("L.topk(T(np.array([3.0, np.nan, -np.inf, 1.0, np.inf, np.nan], np.float32)), 3)", None),
    "unique_nan": ("L.unique(T(np.array([np.nan, 1.0, np.nan, 1.0], np.float32)), return_counts=True)", None),
    "argmax_nan": ("L.argmax(T(np.array([1.0, np.nan, 5.0], np.float32)))", None),
    # impossible sizes and values (fixed: clear RuntimeErrors naming the sizes)
    "zeros_overflow": ("L.zeros(2 ** 40, 2 ** 30)", "overflow"),
    "empty_overflow": ("L.empty(2 ** 62)", "overflow"),
    "arange_overflow": ("L.arange(0, 1e20)", "overflow"),
    "ones_oom": ("L.ones((10 ** 7, 10 ** 7))", "allocate"),
    "contiguous_oom": ("T(np.ones(1, np.float32)).expand(2 ** 40).contiguous()", "allocate"),
    "repeat_oom": ("T(np.ones(4, np.float32)).repeat(2 ** 40)", "allocate"),
    "eye_negative": ("L.eye(-1)", "eye"),
    "tensor_int_overflow": ("L.tensor([2 ** 70])", "Overflow"),
    "tensor_mixed_overflow": ("L.tensor([1, 2 ** 63])", "Overflow"),
    "tensor_int64_min": ("L.tensor([-2 ** 63])", None),
}
# torch returns garbage here (its take_along_dim skips the bounds check): neetorch must raise instead
TORCH_WRONG = {
    "take_along_dim_oob": (f"L.take_along_dim(T({_F}), T(np.array([[0, 4]] * 3)), dim=1)", RuntimeError, "gather"),
}
# under nee.jit: compiled with valid indices, then called with bad ones (the replay validates as eager does)
JIT_PROBES = {
    "gather": ("lambda x, i: L.gather(x, 1, i) * 2", "np.array([[0, 2]] * 3)", "np.array([[0, 4]] * 3)"),
    "index_select": ("lambda x, i: L.index_select(x, 1, i) + 1", "np.array([0, 2])", "np.array([0, -5])"),
    "take": ("lambda x, i: L.take(x, i) + 1", "np.array([0, 2])", "np.array([0, 12])"),
    "getitem": ("lambda x, i: x[:, i] + 1", "np.array([0, 2])", "np.array([0, 4])"),
    "index_add": ("lambda x, i: x.index_add(1, i, L.ones(3, 2)) + 1", "np.array([0, 2])", "np.array([0, 4])"),
    "scatter_add": ("lambda x, i: x.scatter_add(1, i, L.ones(3, 2)) + 1", "np.array([[0, 2]] * 3)",
                    "np.array([[0, -1]] * 3)"),
    "embedding": ("lambda x, i: L.nn.functional.embedding(i, x.t().contiguous()) + 1", "np.array([0, 2])",
                  "np.array([0, 4])"),
    "cross_entropy": ("lambda x, i: L.nn.functional.cross_entropy(x[:2] * 0.1, i)", "np.array([0, 2])",
                      "np.array([0, 4])"),
}

_CHILD = r'''
import builtins, json, sys, time, warnings, numpy as np
warnings.simplefilter("ignore")
import torch, neetorch as nee
dev, probes, torch_wrong, jit_probes = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
F = np.arange(12, dtype=np.float32).reshape(3, 4)

def mk(L):
    def T(a):
        a = np.asarray(a)
        if L is torch:
            return torch.from_numpy(a.copy())
        t = nee.tensor(a.copy())
        return t if dev == "cpu" else t.to(dev)
    return T

def val(r):
    if isinstance(r, (tuple, list)):
        return [val(x) for x in r]
    if isinstance(r, torch.Tensor):
        return [str(r.dtype).split(".")[-1], list(r.shape), r.numpy().tolist()]
    if isinstance(r, nee.Tensor):
        return [r.dtype.name, list(r.shape), np.asarray(r.cpu().numpy()).tolist()]
    return repr(r)

def attempt(f):
    try:
        return True, f()
    except Exception as e:
        return False, e

T0 = [time.perf_counter()]

def emit(name, **kw):
    print(json.dumps({"name": name, "seconds": round(time.perf_counter() - T0[0], 3), **kw}, default=str), flush=True)
    T0[0] = time.perf_counter()

def outcome(name, ok_t, t, ok_n, n):
    if ok_t and ok_n:
        emit(name, kind="values", torch=val(t), nee=val(n))
    elif not ok_t and not ok_n:
        emit(name, kind="errors", torch=type(t).__name__, nee=type(n).__name__, same=isinstance(n, type(t)),
             msg=str(n))
    else:
        emit(name, kind="differ", torch=repr(t)[:300], nee=repr(n)[:300])

for name, (src, _) in probes.items():
    print(json.dumps({"begin": name}), flush=True)
    ok_t, t = attempt(lambda: eval(src, {"L": torch, "T": mk(torch), "np": np}))
    ok_n, n = attempt(lambda: eval(src, {"L": nee, "T": mk(nee), "np": np}))
    outcome(name, ok_t, t, ok_n, n)
for name, (src, exc, _) in torch_wrong.items():
    print(json.dumps({"begin": name}), flush=True)
    ok_n, n = attempt(lambda: eval(src, {"L": nee, "T": mk(nee), "np": np}))
    emit(name, kind="must_raise", ok=ok_n, nee=type(n).__name__, msg=str(n), is_exc=isinstance(n, getattr(builtins, exc)))
if dev == "cpu":
    for name, (src, good, bad) in jit_probes.items():
        print(json.dumps({"begin": "jit_" + name}), flush=True)
        res = []
        for L in (torch, nee):
            T = mk(L)
            f = eval(src, {"L": L, "np": np})
            if L is nee:
                f = nee.jit(f)
            r1 = f(T(F), T(eval(good, {"np": np})))
            res.append((val(r1),) + attempt(lambda: f(T(F), T(eval(bad, {"np": np})))))
        (v1t, ok_t, t), (v1n, ok_n, n) = res
        emit("jit_first_" + name, kind="values", torch=v1t, nee=v1n)
        outcome("jit_" + name, ok_t, t, ok_n, n)
'''


def _start_child(dev):
    args = [json.dumps(PROBES), json.dumps({k: (s, e.__name__, m) for k, (s, e, m) in TORCH_WRONG.items()}),
            json.dumps(JIT_PROBES)]
    env = dict(os.environ, NEE_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CHILD), dev, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finish_child(dev, p):
    """{probe name: outcome} from one child process; a crash or hang is reported with the probe running then."""
    try:
        out, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err = "TIMEOUT " + err
    rc = p.returncode
    res, running = {}, None
    for line in out.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "begin" in d:
            running = d["begin"]
        else:
            res[d["name"]] = d
            running = None
    if rc != 0 or running is not None:
        raise AssertionError(f"the probe child ({dev}) died (rc {rc}) while running {running!r}: {err[-2000:]}")
    return res


_CACHE: dict = {}


def _results(dev):
    if not _CACHE:  # the children of every device run at once
        procs = {d: _start_child(d) for d in _devices()}
        for d, p in procs.items():
            try:
                _CACHE[d] = _finish_child(d, p)
            except AssertionError as e:
                _CACHE[d] = e
    if isinstance(_CACHE[dev], AssertionError):
        raise _CACHE[dev]
    return _CACHE[dev]


def _devices():
    return ["cpu"] + [i.type for i in nee.devices() if i.type == "opencl" and i.available]


def _close(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= 1e-5 * max(1.0, abs(a))
    return a == b


@pytest.mark.parametrize("dev", _devices())
def test_probes_match_torch(dev):
    res = _results(dev)
    bad = []
    for name, (_, needle) in PROBES.items():
        d = res[name]
        if d["kind"] == "differ":
            bad.append(f"{name}: torch {d['torch']} / neetorch {d['nee']}")
        elif d["kind"] == "errors":
            if not d["same"]:
                bad.append(f"{name}: torch raises {d['torch']}, neetorch {d['nee']}: {d['msg']}")
            elif needle and needle.lower() not in d["msg"].lower():
                bad.append(f"{name}: the message does not name {needle!r}: {d['msg']}")
        elif not _close(d["torch"], d["nee"]):
            bad.append(f"{name}: torch {d['torch']} != neetorch {d['nee']}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dev", _devices())
def test_torch_bugs_raise_in_neetorch(dev):
    res = _results(dev)
    for name, (_, exc, needle) in TORCH_WRONG.items():
        d = res[name]
        assert not d["ok"] and d["is_exc"] and needle in d["msg"], (name, d)


def test_jit_replays_validate_indices():
    res = _results("cpu")
    bad = []
    for name in JIT_PROBES:
        d0 = res["jit_first_" + name]
        if not _close(d0["torch"], d0["nee"]):
            bad.append(f"jit_{name} (valid indices): torch {d0['torch']} != neetorch {d0['nee']}")
        d = res["jit_" + name]
        if d["kind"] != "errors" or not d["same"]:
            bad.append(f"jit_{name}: {d}")
    assert not bad, "\n".join(bad)


def test_exception_classes():
    from neetorch.ops.indexing import IndexOutOfRangeError
    from neetorch.tensor.creation import OutOfMemoryError
    assert issubclass(IndexOutOfRangeError, IndexError) and issubclass(IndexOutOfRangeError, RuntimeError)
    assert issubclass(OutOfMemoryError, MemoryError) and issubclass(OutOfMemoryError, RuntimeError)
    with pytest.raises(IndexError, match="index_copy"):  # torch: IndexError only, and neetorch's is exactly that
        nee.arange(4.0).index_copy(0, nee.tensor([4]), nee.ones(1))
    try:
        nee.arange(4.0).index_copy(0, nee.tensor([4]), nee.ones(1))
    except IndexError as e:
        assert type(e) is IndexError


# ---------------------------------------------------------------------------------------------------- ONNX
def _onnx_model(op, attrs, data, idx, extra, const_idx):
    from onnx import TensorProto, helper, numpy_helper
    elem = helper.np_dtype_to_tensor_dtype
    inputs = [helper.make_tensor_value_info("x", elem(data.dtype), data.shape)]
    inits, names = [], ["x", "i"]
    if const_idx:
        inits.append(numpy_helper.from_array(idx, "i"))
    else:
        inputs.append(helper.make_tensor_value_info("i", elem(idx.dtype), idx.shape))
    for k, e in enumerate(extra):
        inits.append(numpy_helper.from_array(e, f"e{k}"))
        names.append(f"e{k}")
    rank = 1 if op == "GatherND" else 2
    g = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{k}" for k in range(rank)])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _onnx_cases():
    D = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = np.array([0, 1])
    for bad in ([0, 4], [0, -1], [0, -5]):
        b = np.array(bad, np.int64)
        nd = np.stack([rows, b], 1)
        yield f"Gather{bad}", "Gather", {"axis": 1}, D, b, ()
        yield f"GatherElements{bad}", "GatherElements", {"axis": 1}, D, np.tile(b, (3, 1)), ()
        yield f"GatherND{bad}", "GatherND", {}, D, nd, ()
        yield f"GatherND_batch{bad}", "GatherND", {"batch_dims": 1}, D, np.array([[0], [1], [bad[1]]]), ()
        yield f"ScatterND{bad}", "ScatterND", {}, D, nd, (np.ones(2, np.float32),)
        yield f"ScatterND_add{bad}", "ScatterND", {"reduction": "add"}, D, nd, (np.ones(2, np.float32),)
        yield f"ScatterElements{bad}", "ScatterElements", {"axis": 1}, D, np.tile(b, (3, 1)), \
            (np.ones((3, 2), np.float32),)
        yield f"OneHot{bad}", "OneHot", {}, b, np.array(4, np.int64), (np.array([0.0, 1.0], np.float32),)


def test_onnx_out_of_range_indices_match_onnxruntime():
    """Fixed: GatherND / ScatterND linearized the index tuple without checking each index against its own dim."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    bad = []
    for name, op, attrs, data, idx, extra in _onnx_cases():
        for const in (False, True):
            m = _onnx_model(op, attrs, data, idx, extra, const)
            feed = {"x": data} if const else {"x": data, "i": idx}
            try:
                ro = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)[0]
            except Exception:  # noqa: BLE001 - onnxruntime refuses: neetorch must refuse too
                ro = None
            try:
                rn = np.asarray(nee.onnx.InferenceSession(m).run(None, feed)[0])
            except Exception as e:  # noqa: BLE001
                rn = e
            tag = f"{name}{'_const' if const else ''}"
            if ro is None:
                if not isinstance(rn, Exception):
                    bad.append(f"{tag}: onnxruntime refuses, neetorch returns {rn.tolist()}")
                elif "out of bounds" not in str(rn) and "out of range" not in str(rn):
                    bad.append(f"{tag}: unclear message {rn}")
            elif isinstance(rn, Exception):
                bad.append(f"{tag}: onnxruntime returns, neetorch raises {rn!r}")
            elif not np.array_equal(ro, rn):
                bad.append(f"{tag}: onnxruntime {ro.tolist()} != neetorch {rn.tolist()}")
    assert not bad, "\n".join(bad)
