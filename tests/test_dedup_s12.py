"""Session 12 duplicate mends: the package ``neetorch.devices`` callable as ``nee.devices()`` (so that ``import
neetorch.devices.cpu.kernels.conv as m`` works), conv_direct's two transpose ladders on one shuffle helper (their
lane mapping checked by interpreting the emitted shuffles), and the executor's KV-cache append detection shared by
the fast path (_fuse_kv_products) and the generic loop (_generic_kv)."""
import re
import subprocess
import sys

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv_direct as CD
from neetorch.jit import executable as E


# ------------------------------------------------------------------ nee.devices: the package, callable
def test_import_submodule_as_name():
    import neetorch.devices.cpu.kernels.conv as m
    assert m is sys.modules["neetorch.devices.cpu.kernels.conv"] and hasattr(m, "conv2d_kernel")
    import neetorch.devices.cpu.threads as t
    assert t.get_num_threads() >= 1
    # a fresh interpreter, the statement first (before anything imported the subpackages by name)
    r = subprocess.run([sys.executable, "-c", "import neetorch.devices.cpu.kernels.conv as m; print(m.__name__)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "neetorch.devices.cpu.kernels.conv", r.stderr[-2000:]


def test_devices_call_unchanged():
    from neetorch.devices import DeviceInfo, devices
    pkg = sys.modules["neetorch.devices"]
    assert nee.devices is pkg and callable(nee.devices)
    assert devices is pkg.devices and devices is not pkg          # the function, as before
    got = nee.devices()
    assert type(got) is list and got and all(type(d) is DeviceInfo for d in got)
    assert got == devices()
    assert got[0].type == "cpu" and got[0].available and got[0].count >= 1
    with pytest.raises(TypeError):
        nee.devices("cpu")          # takes no arguments, as the function
    # the package's other names through the same attribute
    assert nee.devices.device is nee.device and nee.devices.FallbackError is nee.FallbackError


@pytest.mark.parametrize("stmt, name", [
    ("import neetorch.jit.passes as m", "neetorch.jit.passes"),
    ("import neetorch.tensor.dtypes as m", "neetorch.tensor.dtypes"),
    ("import neetorch.devices.cpu.threads as m", "neetorch.devices.cpu.threads"),
])
def test_callable_packages_import_statement(stmt, name):
    # nee.jit and nee.tensor are packages callable as the functions (neetorch/_callable_package.py), like nee.devices
    r = subprocess.run([sys.executable, "-c", stmt + "; print(m.__name__)"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == name, r.stderr[-2000:]


def test_jit_and_tensor_calls_unchanged():
    import inspect
    from neetorch.jit.api import jit as jit_fn
    assert nee.jit is sys.modules["neetorch.jit"] and nee.tensor is sys.modules["neetorch.tensor"]
    assert inspect.signature(nee.jit) == inspect.signature(jit_fn)
    assert "requires_grad" in inspect.signature(nee.tensor).parameters
    t = nee.tensor([[1, 2], [3, 4]], dtype=nee.float64)
    assert t.dtype == nee.float64 and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]

    @nee.jit
    def f(x):
        return x * 2 + 1

    @nee.jit(freeze=True)
    def g(x):
        return x.exp()
    x = nee.tensor([0.5, -1.0, 2.0])
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2 + 1)
    np.testing.assert_allclose(g(x).numpy(), np.exp(x.numpy()), rtol=1e-6)
    assert f.eager(x).tolist() == f(x).tolist()
    with pytest.raises(TypeError):
        nee.tensor()                 # data is required, as torch.tensor


def test_devices_monkeypatchable(monkeypatch):
    # tests replace nee.devices (test_bench_opencl_smoke): the package comes back afterwards
    pkg = sys.modules["neetorch.devices"]
    with monkeypatch.context() as m:
        m.setattr(nee, "devices", lambda: ["x"])
        assert nee.devices() == ["x"]
    assert nee.devices is pkg and nee.devices()[0].type == "cpu"


# ------------------------------------------------------------------ conv_direct transposes
def _run_shuffles(lines, env):
    """Interpret ``%a = shufflevector <N x float> %b, <N x float> %c, <M x i32> <i32 ...>`` lines on lists of
    symbolic lanes ("undef" an all-None vector)."""
    pat = re.compile(r"\s*(%\S+) = shufflevector <(\d+) x float> (\S+), <\d+ x float> (\S+), <\d+ x i32> <(.*)>$")
    for ln in lines:
        m = pat.match(ln)
        assert m, ln
        dst, n, s1, s2, idx = m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5)
        src = [env.get(s, [None] * n) if s != "undef" else [None] * n for s in (s1, s2)]
        assert all(len(v) == n for v in src), ln
        both = src[0] + src[1]
        env[dst] = [both[int(i.split()[1])] for i in idx.split(", ")]
    return env


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("R", range(1, 9))
def test_transpose_ladders_lane_mapping(width, R):
    """Row c of the ladder's result holds (pixel 0's lane c, ..., pixel R-1's lane c) in its first R lanes: the
    16-lane ladder (24 two-source shuffles + 16 halves) and the 8-lane one (24 shuffles) on the shared helper."""
    lines = []
    vals = [f"%p{r}" for r in range(R)]
    old = CD.VEC
    CD.VEC = width          # (the renderers read the module's width; no kernel is compiled here)
    try:
        rows = (CD._transpose_ir if width == 16 else CD._transpose8_ir)(lines.append, "t", vals)
    finally:
        CD.VEC = old
    assert len(lines) == (24 + 16 if width == 16 else 24) and len(rows) == width
    assert all(ln.count("shufflevector") == 1 for ln in lines)
    names = [ln.split(" = ")[0].strip() for ln in lines]
    assert len(set(names)) == len(names)            # SSA: every result named once
    env = _run_shuffles(lines, {f"%p{r}": [(r, c) for c in range(width)] for r in range(R)})
    for c, rn in enumerate(rows):
        got = env[rn]
        assert len(got) == 8 and got[:R] == [(r, c) for r in range(R)], (c, got)


# ------------------------------------------------------------------ KV append detection, both paths
F = nee.nn.functional


def _step(q, k, v, past_k, past_v):
    pk = nee.cat([past_k, k], 2)
    pv = nee.cat([past_v, v], 2)
    p = F.softmax(q @ pk.transpose(2, 3) * 0.25, -1)
    return p @ pv, pk, pv


def _shared(q, k, past):
    pk = nee.cat([past, k], 2)          # present read twice: not an append either fusion takes
    p = F.softmax(q @ pk.transpose(2, 3), -1)
    return p @ pk, pk


def _exe(f):
    (exe, _), = {id(e[0]): e for e in f._fast.values()}.values()
    return exe


def _args(rng, shapes):
    return [nee.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]


@pytest.mark.parametrize("fn,n_in,want", [(_step, 5, {"dot", "mm"}), (_shared, 3, set())])
def test_kv_append_both_paths_agree(fn, n_in, want):
    """The same graph through the fast path (static shapes: fused runners) and the generic loop (dynamic past:
    _generic_kv's plan) finds the same appends: both caches of a decoder step ("dot" through present^T, "mm"),
    none where present has two readers; the results equal numpy's either way."""
    rng = np.random.default_rng(12)
    H, P, D = 2, 5, 8
    shapes = [(1, H, 1, D)] * (n_in - 2 if n_in == 5 else 2) + [(1, H, P, D)] * (2 if n_in == 5 else 1)
    f = nee.jit(fn)
    args = _args(rng, shapes)
    got = f(*args)
    exe = _exe(f)
    names = [r.__qualname__ for r in exe._local.fast[2]]
    fast = {k for k, tag in (("dot", "_fuse_kv_scores"), ("mm", "_kv_product_part")) if any(tag in n for n in names)}
    if any("_kv_attention_part" in n for n in names):
        fast |= {"dot", "mm"}       # (session 15: both appends and the attention between them as one step)
    assert fast == want, names
    # the generic loop's plan for the same function at a dynamic past length
    g = nee.jit(fn, dynamic={n_in - 1: 2} if n_in == 3 else {3: 2, 4: 2}, buckets=[8, 16])
    got2 = g(*args)
    plan = _exe(g)._generic_kv()
    kinds = sorted(h[0] for h in plan.values())
    assert kinds == sorted(["cat"] * len(want) + list(want)), kinds
    # every reader entry names a cat node the plan also holds
    cats = {k for k, h in plan.items() if h[0] == "cat"}
    assert {id(h[1]) for h in plan.values() if h[0] != "cat"} == cats
    for a, b in zip(got, got2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    a = [x.numpy().astype(np.float64) for x in args]
    K = np.concatenate([a[-2 if n_in == 5 else -1], a[1]], 2)
    np.testing.assert_array_equal(got[1].numpy(), K.astype(np.float32))
    s = a[0] @ np.swapaxes(K, 2, 3) * (0.25 if n_in == 5 else 1.0)
    e = np.exp(s - s.max(-1, keepdims=True))
    V = np.concatenate([a[-1], a[2]], 2) if n_in == 5 else K
    np.testing.assert_allclose(got[0].numpy(), (e / e.sum(-1, keepdims=True)) @ V, rtol=1e-4, atol=1e-5)
