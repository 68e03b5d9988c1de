"""ONNX conformance: ONNX's own node test cases and the model tests under onnx/backend/test/data
({simple, pytorch-converted, pytorch-operator, light}) run through ``neetorch.onnx.backend`` with
ONNX's comparison rule (same shapes and dtypes, ``assert_allclose`` with the case's rtol/atol,
default 1e-3 / 1e-7), node cases eagerly (no jit: one trace would cost more than the case),
model tests through ``nee.jit``.  Every case not listed in ``tests/onnx_expected_failures.py``
(each entry has a reason) must pass.

By default (CI time budget: every distinct kernel costs ~0.5 s of Numba compile on a cold
cache) a fixed, representative subset runs: one node case per op type (the first, by name, not
expected to fail) and a handful of model tests.  ``NEE_ONNX_FULL=1`` runs every case, measures
onnxruntime with the same harness, and prints pass counts per category and per op type for both
(``pytest -s tests/test_onnx_conformance.py``).

Devices: every test runs on the CPU and on each other device here: ``opencl`` (PoCL in CI) by
default, ``cuda`` where a GPU exists (or emulated on the CPU with ``NEE_CUDA_EMULATE=1``: g++,
minutes on a cold cache); ``NEE_ONNX_DEVICES=cpu,opencl,simnpu`` picks the list.  A device runs
the same cases with the same comparison (inputs placed on the device, ops it does not claim
falling back to the CPU visibly); its pass counts print next to the CPU's, with the cases that
fail there but pass on the CPU and the fallbacks it made.  Device-only expected failures live in
``DEVICE_EXPECTED_FAILURES`` (with the device limitation as the reason).
"""
from __future__ import annotations

import os
import sys
import time

import pytest

pytest.importorskip("onnx")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx_conformance_harness as H  # noqa: E402
from onnx_expected_failures import all_expected_failures, expected_failures  # noqa: E402

FULL = os.environ.get("NEE_ONNX_FULL", "") not in ("", "0")
DEVICES = tuple(d.strip().lower() for d in os.environ.get("NEE_ONNX_DEVICES", "cpu,opencl,cuda").split(",")
                if d.strip())
_RESULTS: dict = {}   # (test key, device) -> {case name: None or error}: the CPU's, printed next to a device's

# model tests run by default (on every device): small, and together they cover conv/pool/norm/gemm/sequence paths
DEFAULT_MODELS = ("test_AvgPool2D", "test_BatchNorm2d_eval", "test_Conv2d_groups", "test_ConvTranspose2d",
                  "test_Embedding", "test_PReLU_2d_multiparam", "test_MaxPool3d", "test_Conv3d",
                  "test_operator_maxpool", "test_operator_pad", "test_operator_reduced_mean_keepdim",
                  "test_operator_symbolic_override_nested", "test_sequence_model1", "test_expand_shape_model1",
                  "test_shrink", "light_squeezenet",
                  # light models that stay at ~1-2 s each on the cpu and on opencl (cold): channel shuffle,
                  # concat-heavy inception blocks, LRN + large Gemm; NEE_ONNX_FULL=1 runs all nine
                  "light_shufflenet", "light_inception_v1", "light_inception_v2", "light_zfnet512")


def _select(cases):
    if FULL:
        return cases
    out, seen, xfail = [], set(), all_expected_failures()
    for c in sorted(cases, key=lambda c: c.name):
        if c.category == "node":
            if c.op_type in seen or c.name in xfail:
                continue
            seen.add(c.op_type)
            out.append(c)
        elif c.name in DEFAULT_MODELS:
            out.append(c)
    return out


def _check(cases, res, label, device):
    xf = expected_failures(device)
    regressed = {c.name: res[c.name] for c in cases if res[c.name] is not None and c.name not in xf}
    assert not regressed, f"{label} on {device}: {len(regressed)} case(s) not on the expected-failure list " \
        f"fail:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(regressed.items()))


@pytest.fixture(params=DEVICES)
def device(request):
    why = H.device_unavailable(request.param)
    if why:
        pytest.skip(f"{request.param}: {why}")
    with H.use_device(request.param):
        yield request.param


def _run(key, cases, device, jit):
    """Run ``cases`` on ``device``; returns (results, text: timing, counts next to the CPU's, differences)."""
    import neetorch as nee
    nee.reset_fallbacks()
    t0 = time.time()
    res = H.evaluate(cases, H.run_nee, jit=jit, device=device)
    dt = time.time() - t0
    _RESULTS[(key, device)] = res
    others, notes = {}, []
    if device != "cpu":
        cpu = _RESULTS.get((key, "cpu"))
        if cpu is None and not os.environ.get("PYTEST_XDIST_WORKER"):
            # the CPU's run was deselected: run it for the comparison (under xdist it ran, or runs, on
            # another worker: not repeated here, to keep CI time)
            with H.use_device("cpu"):
                cpu = _RESULTS[(key, "cpu")] = H.evaluate(cases, H.run_nee, jit=jit, device="cpu")
        if cpu is None:
            notes.append("cpu column: the cpu run is on another pytest-xdist worker")
            cpu = {}
        else:
            others["cpu"] = cpu
        worse = sorted(c.name for c in cases if res[c.name] is not None and cpu.get(c.name, "x") is None)
        better = sorted(c.name for c in cases if res[c.name] is None and cpu.get(c.name) is not None)
        if worse:
            notes.append(f"fail on {device} but pass on cpu ({len(worse)}): " +
                         "; ".join(f"{k}: {res[k]}" for k in worse))
        if better:
            notes.append(f"pass on {device} but fail on cpu ({len(better)}): {', '.join(better)}")
        fb = nee.fallback_report()
        ops = sorted({r.op for r in fb.records.values()})
        notes.append(f"fallbacks to cpu (ops {device} does not claim, nee.fallback_report()): {len(fb)} call(s) "
                     f"of {len(ops)} op(s)" + (f": {', '.join(ops)}" if ops else ""))
    ort = H.evaluate(cases, H.run_ort) if FULL and device == "cpu" else None
    text = H.summarize(cases, res, ort, by_op=(key == "node"), label=f"neetorch[{device}]", others=others)
    return res, f"({dt:.1f}s)\n{text}" + "".join(f"\n{n}" for n in notes)


def test_node_cases(device):
    cases = _select(H.node_cases())
    res, text = _run("node", cases, device, jit=False)
    print(f"\nONNX node cases on {device} ({'full' if FULL else 'subset: one per op type'}) {text}")
    if FULL:
        xf = expected_failures(device)
        fixed = sorted(c.name for c in cases if c.name in xf and res[c.name] is None)
        if fixed:
            print(f"expected failures that now pass on {device} ({len(fixed)}): {', '.join(fixed)}")
    _check(cases, res, "node cases", device)


@pytest.mark.parametrize("category", H.CATEGORIES)
def test_model_cases(category, device):
    cases = _select(H.model_cases(category))
    if not cases:
        pytest.skip(f"no {category} model tests selected")
    missing = [c.name for c in cases if c.model is None or c.data_sets is None]
    cases = [c for c in cases if c.name not in missing]
    res, text = _run(category, cases, device, jit=True)
    print(f"\nONNX {category} model tests on {device} {text}")
    if missing:
        print(f"skipped (model or data not available locally: downloads are not attempted): {', '.join(missing)}")
    _check(cases, res, f"{category} models", device)


@pytest.mark.parametrize("dev", [d for d in DEVICES if d != "cpu"] or ["opencl"])
def test_device_views_the_lowering_needs(dev):
    """The view forms ONNX lowerings use (BitCast, float8/bfloat16 rounding, scalar Gather) on a device:
    ``view(dtype)`` reinterprets the device storage (a view: same buffer, offset kept), a 0-d tensor
    views as (1,) / (1, 1); and tensors an op function creates land on the session's device."""
    import numpy as np

    import neetorch as nee
    why = H.device_unavailable(dev)
    if why:
        pytest.skip(f"{dev}: {why}")
    with H.use_device(dev):
        a = np.array([1.0, -2.5, 3.0, 0.0], np.float32)
        x = nee.tensor(a).to(dev)
        v = x[1:].view(nee.int32)
        assert v.device == x.device and v.dtype == nee.int32
        np.testing.assert_array_equal(v.cpu().numpy(), a[1:].view(np.int32))
        assert v.data_ptr() == x[1:].data_ptr()
        np.testing.assert_array_equal(v.view(nee.float32).cpu().numpy(), a[1:])
        with pytest.raises(RuntimeError, match="equal element sizes"):
            x.view(nee.int64)
        s = nee.tensor(np.float32(4.0)).to(dev)
        assert tuple(s.view(1).shape) == (1,) and tuple(s.view(1, 1).shape) == (1, 1)
        np.testing.assert_array_equal(s.view(1).cpu().numpy(), [4.0])
        # an op function creating a constant (ThresholdedRelu: nee.zeros(())) on an opencl session
        from onnx import TensorProto, helper

        from neetorch.onnx import backend
        node = helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=0.5)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        rep = backend.prepare(m, dev, jit=False)
        assert str(rep.session.device).split(":")[0] == dev
        np.testing.assert_array_equal(rep.run([a])[0], np.where(a > 0.5, a, 0).astype(np.float32))
