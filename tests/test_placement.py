"""Graph placement under ``nee.jit`` (neetorch/jit/placement.py), on the simnpu plugin.

A jitted function whose inputs live on simnpu is partitioned by what simnpu claims: the
rest runs on the CPU, with transfer nodes in the graph IR, counted fallbacks, an exact
placement summary, and an error in strict mode.  Skipped unless the plugin is installed
(``python3 -m pip install -e plugins/neetorch-simnpu``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices import FallbackError, get_backend
from neetorch.jit import placement

if "simnpu" not in {ep.name for ep in entry_points(group="neetorch.devices")}:
    pytest.skip("the simnpu plugin is not installed (python3 -m pip install -e plugins/neetorch-simnpu)",
                allow_module_level=True)

DEV = nee.device("simnpu")
BK = get_backend(DEV)
F16 = np.float16


@pytest.fixture(autouse=True)
def _clean():
    nee.reset_fallbacks()
    strict = nee.is_strict()
    nee.set_strict(False)
    sram = BK.sram_bytes
    yield
    BK.sram_bytes = sram
    nee.set_strict(strict)
    nee.reset_fallbacks()


def npu(a):
    return nee.tensor(np.asarray(a)).to(DEV)


def host(t):
    assert t.device == DEV, t.device
    return t.cpu().numpy()


def _mlp_weights():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype(F16)
    w1 = (rng.standard_normal((32, 48)) * 0.2).astype(F16)
    w2 = (rng.standard_normal((48, 16)) * 0.2).astype(F16)
    return x, w1, w2


def test_matmul_gelu_matmul_partitions_with_explicit_transfers():
    x, w1, w2 = _mlp_weights()
    W1, W2 = npu(w1), npu(w2)

    @nee.jit
    def mlp(v):
        return F.gelu(v @ W1) @ W2

    X = npu(x)
    for _ in range(3):
        r = mlp(X)
    assert r.device == DEV
    # the compiled graph computes what eager computes (same placement, same kernels), and the CPU reference
    np.testing.assert_array_equal(host(r), host(mlp.eager(X)))
    cpu = (F.gelu(nee.tensor(x) @ nee.tensor(w1)) @ nee.tensor(w2)).numpy()
    np.testing.assert_allclose(host(r).astype(np.float32), cpu.astype(np.float32), rtol=2e-3, atol=2e-3)

    text = str(mlp.graph(X))
    lines = [ln.strip() for ln in text.splitlines()]
    assert "%6: float16[8, 48] = transfer(%2, args=('cpu',), kwargs=())" in lines, text
    assert "%7: float16[8, 48]@simnpu:0 = transfer(%3, args=('simnpu:0',), kwargs=())" in lines, text
    assert "%3: float16[8, 48] = gelu(%6)" in lines, text            # gelu runs on the CPU
    assert sum("= transfer(" in ln for ln in lines) == 2
    assert sum("= matmul(" in ln and "@simnpu:0 = " in ln for ln in lines) == 2

    s = mlp.placement(X)
    assert s.preferred == "simnpu:0" and s.fallback == "cpu"
    assert s.ops == {"simnpu:0": {"matmul": 2}, "cpu": {"gelu": 1}}
    assert s.ops_per_device == {"simnpu:0": 2, "cpu": 1}
    assert len(s.transfers) == 2 and s.transfer_bytes == 2 * 8 * 48 * 2
    assert [(t.src, t.dst) for t in s.transfers] == [("simnpu:0", "cpu"), ("cpu", "simnpu:0")]
    (fb,) = s.fallbacks
    assert fb.op == "gelu" and fb.dtype_names == ("float16", "float16") and "no gelu engine" in fb.reason
    assert fb.nbytes == 2 * 8 * 48 * 2
    printed = str(s)
    assert "simnpu:0      2 ops  (matmul 2)" in printed and "cpu           1 ops  (gelu 1)" in printed
    assert "transfers     2" in printed and "1536 B per run" in printed and "fallbacks     1" in printed

    # each run of the compiled graph is counted, like each eager call (the eager run above added one)
    (rec,) = nee.fallback_report().records.values()
    assert rec.op == "gelu" and rec.device == "simnpu:0" and rec.count == 4
    assert rec.bytes_moved == 4 * 1536
    assert "placement of mlp" in mlp.explain(X)
    assert placement.summarize(mlp) == [s]


def test_strict_mode_raises_naming_the_op():
    x, w1, w2 = _mlp_weights()
    W1, W2 = npu(w1), npu(w2)
    nee.set_strict(True)
    f = nee.jit(lambda v: F.gelu(v @ W1) @ W2)
    with pytest.raises(FallbackError, match=r"gelu \(node 2, float16, float16\): simnpu has no gelu engine"):
        f(npu(x))
    # a graph simnpu claims entirely runs in strict mode
    g = nee.jit(lambda v: F.relu(v @ W1 + 1.0))
    np.testing.assert_array_equal(host(g(npu(x))), host(F.relu(npu(x) @ W1 + 1.0)))
    assert len(nee.fallback_report()) == 0
    assert g.placement(npu(x)).fallbacks == [] and g.placement(npu(x)).transfers == []


def test_strict_mode_from_the_environment():
    code = ("import numpy as np, neetorch as nee\n"
            "x = nee.tensor(np.ones((4, 4), np.float16)).to('simnpu')\n"
            "f = nee.jit(lambda v: (v @ v).tanh())\n"
            "try:\n    f(x)\nexcept nee.FallbackError as e:\n    print('raised:', e)\n")
    env = dict(os.environ, NEE_STRICT="1", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "raised: graph <lambda>: 1 op(s) would fall back from simnpu:0 to cpu: tanh" in out.stdout, out.stderr


def test_small_conv_net():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 12, 12)).astype(F16)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(F16)
    b = rng.standard_normal(8).astype(F16)
    fw = (rng.standard_normal((8 * 6 * 6, 10)) * 0.1).astype(F16)

    def net(v, W, B, FW):
        h = F.relu(F.conv2d(v, W, B, padding=1))
        h = F.max_pool2d(h, 2)                       # not claimed: CPU
        return h.reshape(h.shape[0], -1) @ FW

    j = nee.jit(net)
    args = [npu(a) for a in (x, w, b, fw)]
    r = j(*args)
    np.testing.assert_array_equal(host(r), host(net(*args)))
    cpu = net(*[nee.tensor(a) for a in (x, w, b, fw)]).numpy()
    np.testing.assert_allclose(host(r).astype(np.float32), cpu.astype(np.float32), rtol=2e-3, atol=2e-3)
    s = j.placement(*args)
    assert s.ops == {"simnpu:0": {"conv2d": 1, "relu": 1, "matmul": 1}, "cpu": {"max_pool2d": 1}}
    assert s.views == 1                              # the reshape, on the CPU side
    assert len(s.transfers) == 2
    assert s.transfer_bytes == 2 * 8 * 12 * 12 * 2 + 2 * 288 * 2
    assert [f.op for f in s.fallbacks] == ["max_pool2d"]
    assert "max_pool2d" in str(j.graph(*args)) and "transfer(" in str(j.graph(*args))


def test_fully_claimed_int8_graph_has_no_transfers():
    rng = np.random.default_rng(2)
    a = rng.integers(-100, 100, (16, 24)).astype(np.int8)
    w = rng.integers(-100, 100, (24, 16)).astype(np.int8)
    f = nee.jit(lambda v, W: F.relu(v @ W + v[:, :16] * 3))
    r = f(npu(a), npu(w))
    with np.errstate(over="ignore"):
        want = np.maximum((a.astype(np.int64) @ w.astype(np.int64)).astype(np.int8) + a[:, :16] * np.int8(3), 0)
    np.testing.assert_array_equal(host(r), want.astype(np.int8))
    s = f.placement(npu(a), npu(w))
    assert s.transfers == [] and s.fallbacks == [] and set(s.ops) == {"simnpu:0", "cpu"}
    assert s.ops_per_device == {"simnpu:0": 4, "cpu": 0}
    assert "transfer" not in str(f.graph(npu(a), npu(w)))
    assert len(nee.fallback_report()) == 0


def test_shape_dependent_claim_splits_a_graph():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 64)).astype(F16)
    s_ = rng.standard_normal((16, 64)).astype(F16)
    BK.sram_bytes = BK.working_set(64, 64, 64, "float16") - 1     # the 64x64 product no longer fits on chip
    f = nee.jit(lambda big, small: (big @ big, small @ big[:, :16]))
    r1, r2 = f(npu(a), npu(s_))
    s = f.placement(npu(a), npu(s_))
    assert s.ops == {"simnpu:0": {"matmul": 1}, "cpu": {"matmul": 1}}
    (fb,) = s.fallbacks
    assert "on-chip memory" in fb.reason and "64x64" in fb.reason
    # the big product's result goes back to simnpu (graph outputs live where eager puts them)
    assert r1.device == DEV and r2.device == DEV
    a32 = a.astype(np.float32)
    np.testing.assert_allclose(host(r1).astype(np.float32), (a32 @ a32).astype(F16), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(host(r2).astype(np.float32), (s_.astype(np.float32) @ a32[:, :16]).astype(F16),
                               rtol=2e-3, atol=2e-3)
    # one transfer per (value, destination): `big` goes to the CPU once though the CPU reads it twice
    assert [(t.src, t.dst) for t in s.transfers] == [("simnpu:0", "cpu"), ("cpu", "simnpu:0")]


def test_cpu_value_read_by_two_device_nodes_moves_once():
    x, w1, _ = _mlp_weights()
    W1 = npu(w1)
    f = nee.jit(lambda v: (F.gelu(v) @ W1) + (F.gelu(v) * 2.0 @ W1))
    r = f(npu(x))
    np.testing.assert_array_equal(host(r), host((F.gelu(npu(x)) @ W1) + (F.gelu(npu(x)) * 2.0 @ W1)))
    s = f.placement(npu(x))
    assert s.ops["cpu"] == {"gelu": 1}                     # CSE merged the two gelus
    assert len(s.transfers) == 2                            # v to the CPU, gelu(v) back once for both users
    assert s.ops["simnpu:0"] == {"matmul": 2, "mul": 1, "add": 1}


def test_cpu_inputs_are_not_partitioned():
    f = nee.jit(lambda v: F.gelu(v @ v))
    x = nee.ones(4, 4)
    f(x)
    s = f.placement(x)
    assert s.preferred == "cpu" and s.transfers == [] and s.fallbacks == []
    assert s.ops == {"cpu": {"matmul": 1, "gelu": 1}}
    assert "no fallbacks" == str(nee.fallback_report())


def test_onnx_session_placement_summary():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as TP, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 32)) * 0.1).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT16, [4, 32])],
                          [helper.make_tensor_value_info("y", TP.FLOAT16, [4, 32])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((4, 32)).astype(np.float16)
    s = nee.onnx.InferenceSession(m, device="simnpu")
    assert "not run yet" in s.placement_summary()
    out = s.run(None, {"x": x})[0]
    ref = nee.onnx.InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(out, ref)
    text = s.placement_summary()
    assert "simnpu:0      2 ops  (matmul 1, relu 1)" in text
    assert "cpu           1 ops  (softmax 1)" in text
    assert "fallbacks     1" in text and "softmax" in text.split("fallbacks")[1]
