"""The CUDA backend (neetorch/devices/cuda).

Two halves:

1. **Without a GPU** (runs wherever ``nvcc`` is on PATH, else skipped with the reason): the
   CUDA C source of every elementwise kernel the backend claims (every op x every dtype,
   every cast) and of every fused group the JIT makes of the ``tests/test_jit.py`` functions
   (plus dtype variants) is generated and compiled with ``nvcc`` — batched into a few .cu
   files, PTX at ``-O0`` so the whole set stays at seconds, plus a small file through the
   full pipeline (``-cubin``: ptxas checks the inline ``cvt`` asm of float16).  A rendering
   bug fails here, on a machine that has no GPU.  The static claims are checked against
   what an instance's ``supports`` answers.
2. **With a GPU**: storage, views and transfers; every claimed elementwise op per dtype,
   with broadcasting and non-contiguous views, against the CPU backend; torch-semantics
   edge cases; reductions, softmax, matmul against numpy; the fused JIT groups against the
   CPU JIT; fallback visibility and strict mode.  ``scripts/gpu_check.sh`` runs it on a GPU
   machine.  Without a GPU these run on :mod:`neetorch.devices.cuda.emulate` (CuPy's role
   played by host arrays, the generated CUDA C compiled as C++ by g++): the light ones by
   default, the two sweeps with ``NEE_CUDA_EMULATE=1`` (minutes of g++ on a cold cache);
   ``NEE_CUDA_EMULATE=0`` skips them all.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cuda import CUDABackend, emulate
from neetorch.devices.cuda import kernels as cuda_kernels
from neetorch.devices.cuda import render as cuda_render
from neetorch.devices.cuda import rows as cuda_rows
from neetorch.jit import FusedElementwise
from neetorch.ops.elementwise import apply, gelu
from neetorch.ops.registry import OPS, Meta
from neetorch.tensor import dtypes as _dt

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)
ARCH = os.environ.get("NEE_NVCC_ARCH", "sm_90")
F = nee.nn.functional


# ================================================================ what gets rendered
def ew_cases():
    """(op, input DTypes, output DType) for every elementwise op the backend claims, each
    storage dtype, plus every cast and the mixed-dtype forms the frontend produces."""
    out = []
    for name, op in sorted(cuda_kernels._ew_ops().items()):
        for dn in cuda_kernels.STORAGE:
            d = _dt.to_dtype(dn)
            ins = [d] * op.ew.nin
            if name == "where":
                ins[0] = _dt.bool_
            if op.ew.allow is not None and op.ew.allow(d):
                continue
            odt = op.infer([Meta((1,), x) for x in ins], {})[0].dtype
            if CUDABackend.supports(_instance(), name, ins + [odt]) is None:
                out.append((op, ins, odt))
    for a in cuda_kernels.STORAGE:
        for b in cuda_kernels.STORAGE:
            out.append((OPS["cast"], [_dt.to_dtype(a)], _dt.to_dtype(b)))
    return out


def _instance():
    """A CUDABackend without a device: enough for ``supports`` (claims need no GPU)."""
    b = _instance.cached if hasattr(_instance, "cached") else None
    if b is None:
        b = object.__new__(CUDABackend)
        b.kernels = cuda_kernels.build_table()
        _instance.cached = b
    return b


def _unary_names():
    from neetorch.ops.elementwise import UNARY_FLOAT
    return sorted(UNARY_FLOAT) + ["abs", "neg", "floor", "ceil", "trunc", "sign", "relu", "square"]


def jit_patterns():
    """(name, fn, args) for the functions of tests/test_jit.py (and test_opencl.py's), with dtype
    variants.  Built from CPU tensors (fusion decisions depend on the graph, not the device);
    constants are arguments so that the same functions run on the cuda device."""
    r = nee.randn
    w33, b16 = r(33), r(16)
    P = [
        ("gelu_affine", lambda x, w, b: gelu(x * w + b), (r(257, 33), w33, r(257, 1))),
        ("noncontig", lambda x, y: (x - y).abs().sqrt() * 0.5 + x.sigmoid(), (r(30, 40).t(), r(60, 40)[::2].t())),
        ("multi_out", lambda x: ((x * 3).tanh() + 1, (x * 3).tanh() * (x * 3).tanh(), ((x * 3).tanh() - 2).exp()),
         (r(1000),)),
        ("views_between", lambda x: ((x + 1).exp().reshape(4, 6).t() * 2).relu(), (r(24),)),
        ("flip", lambda x: (x * 2) + (x * 2).flip(0), (r(7),)),
        ("promotion", lambda i, x: (i * 3 + x).floor() + (i > 2),
         (nee.randint(0, 5, (50,)), r(50, dtype=nee.float64))),
        ("half", lambda a, b: (a * b + 1).relu(), (r(50).half(), r(50).half())),
        ("cse_fold", lambda x, c: (x.exp() + x.exp()) * 1 * (c * 3), (r(5), nee.tensor(2.0))),
        ("arena_chain", lambda x: ((x.reshape(-1).reshape(64, 64).t() + 1).exp() * 0.5), (r(64, 64),)),
        ("guards", lambda x: (x * 2).exp(), (r(8),)),
        ("guards64", lambda x: (x * 2).exp(), (r(8, dtype=nee.float64),)),
        ("bucket", lambda x, b: gelu(x * 2 + b), (r(5, 16), b16)),
        ("method", lambda x, w: (x * w).relu(), (r(10), r(10))),
        ("second_process", lambda x, w: gelu(x * w + 1.5).tanh(), (r(100), r(100))),
        ("softmax_after", lambda x, b: gelu(x * 2 + b).reshape(-1, 4).softmax(-1), (r(9, 16), b16)),
        ("tanh3", lambda x: (x * 3).tanh(), (r(9),)),
        ("threads", lambda x: ((x * 2).tanh() + 1).reshape(-1).exp(), (r(17, 8),)),
        ("epilogue", lambda x, w, b: F.gelu(x @ w + b), (r(64, 32), r(32, 48), r(48))),
        ("layer_norm", lambda x, g, b: F.layer_norm(x, (32,), g, b), (r(64, 32), r(32), r(32))),
        ("gather", lambda x, i: nee.gather(x, 1, i) * 2 + nee.index_select(x, 0, i[:, 0]).sum(),
         (r(4, 5), nee.tensor([[0, 4], [1, 2], [3, 3], [2, 0]]))),
        ("tanh_sum", lambda x: (x * 2).tanh().sum(-1), (r(3, 5),)),
        ("cl_relu_cmp", lambda x, y: ((x * y + 1.0).relu().exp() - y, (x * y + 1.0).relu() > 1.5),
         (r(33, 17), r(17))),
        ("cl_softmax", lambda x: nee.softmax(x * 2.0 - 1.0, -1).sum(-1), (r(33, 17),)),
        ("int_chain", lambda i, j: ((i * 3 + j) // 2 - (i % 3)) << 1, (nee.randint(-9, 9, (40,), dtype=nee.int32),
                                                                       nee.randint(1, 9, (40,), dtype=nee.int32))),
        ("bool_chain", lambda a, b: (a & ~b) | (a ^ b), (nee.rand(20) > 0.5, nee.rand(20) > 0.5)),
        ("int8_wrap", lambda a: (a * 3 + 100).abs(), (nee.randint(-100, 100, (30,), dtype=nee.int8),)),
        ("where_clamp", lambda x, y: nee.where(x > 0, x, y).clamp(-0.5, 0.5) * 2, (r(6, 7), r(6, 7))),
        ("half_mixed", lambda h, x: (h * 2).exp() + x, (r(12).half(), r(12))),
        ("half_to_bool", lambda h: (h.abs() > 0.5) & (h < 1), (r(12).half(),)),
        ("u8_float", lambda a, x: (a + 1) * x, (nee.randint(0, 255, (30,), dtype=nee.uint8), r(30))),
    ]
    for dt in (nee.float32, nee.float64, nee.float16):
        x = (nee.rand(3, 50) * 1.6 + 0.2).to(dt)
        for name in _unary_names():
            op = OPS[name]
            P.append((f"unary_{name}_{dt.name}", lambda t, op=op: apply(op, t * 0.5 + 0.25) - 0.125,
                      (x + 1.0 if name == "acosh" else x,)))
    return P


def fused_groups():
    """Every FusedElementwise group the JIT makes of :func:`jit_patterns` (also inside composite
    nodes: a device without a renderer for a composite runs its parts), by pattern."""
    out = []

    def walk(name, nodes):
        for n in nodes:
            if isinstance(n.op, FusedElementwise):
                out.append((name, n.op))
            walk(name, getattr(n.op, "parts", None) or ())   # composite nodes (matmul epilogue...) run
    for name, fn, args in jit_patterns():                     # their parts on devices without a renderer
        walk(name, nee.jit(fn).graph(*args).nodes)
    return out


# ================================================================ nvcc (no GPU needed)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (the CUDA toolkit's compiler)")


def nvcc_compile(tmp_path, sources: list[tuple[str, str]], parts: int = 2, full: bool = False) -> str:
    """Compile ``[(kernel name, source)]`` with the backend's preamble as ``parts`` .cu files in
    parallel; returns the PTX (or raises AssertionError with nvcc's errors)."""
    pre = cuda_render.preamble()
    procs = []
    for i in range(parts):
        chunk = sources[i::parts]
        if not chunk:
            continue
        cu = tmp_path / f"k{i}.cu"
        cu.write_text(pre + "\n" + "\n".join(s for _, s in chunk))
        if full:
            cmd = [NVCC, f"-arch={ARCH}", "-cubin", "-std=c++17", str(cu), "-o", str(tmp_path / f"k{i}.cubin")]
        else:
            cmd = [NVCC, f"-arch={ARCH}", "--ptx", "-Xcicc", "-O0", "-std=c++17", str(cu),
                   "-o", str(tmp_path / f"k{i}.ptx")]
        procs.append((cu, subprocess.Popen(cmd + ["-diag-suppress", "177,186,550"], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)))
    errors = []
    for cu, p in procs:
        log, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            errors.append(f"{cu.name}: nvcc exit {p.returncode}\n" + "\n".join(log.splitlines()[:40]))
    assert not errors, "\n\n".join(errors)
    if full:
        return ""
    return "\n".join((tmp_path / f"k{i}.ptx").read_text() for i in range(parts) if (tmp_path / f"k{i}.ptx").exists())


def _entries(ptx: str) -> set:
    return set(re.findall(r"\.entry\s+(\w+)\(", ptx))


@needs_nvcc
def test_every_claimed_elementwise_kernel_and_fused_group_compiles_with_nvcc(tmp_path):
    sources = {}
    for op, ins, odt in ew_cases():
        k = cuda_render.ew_source(op, ins, odt)
        assert k is not None, (op.name, ins, odt)
        sources[k[0]] = k[1]
    n_ew = len(sources)
    groups = fused_groups()
    for name, grp in groups:
        kname, src = cuda_render.group_source(grp)
        sources[kname] = src
    n_groups = len(sources) - n_ew
    sources.update(cuda_rows.all_sources())          # softmax / norms: one kernel per op x dtype
    from neetorch.devices.cuda import nn as cuda_nn
    sources.update(cuda_nn.all_sources())            # conv / pooling / indexing / tril (tests/test_cuda_nn.py)
    pats = {name for name, _ in groups}
    # (float16 / bfloat16 results are rounded after every op, as in eager: the fusion pass leaves them out of groups)
    assert n_ew >= 800 and n_groups >= 110 and len(pats) >= 110, (n_ew, n_groups, len(pats))
    ptx = nvcc_compile(tmp_path, list(sources.items()))
    missing = set(sources) - _entries(ptx)
    assert not missing, sorted(missing)[:10]


@needs_nvcc
def test_full_pipeline_on_a_sample_checks_the_float16_asm(tmp_path):
    # -cubin runs ptxas too (the inline cvt.f16 asm is only checked there); a sample keeps it fast
    pick = [("add", ["float16", "float16"]), ("exp", ["float16"]), ("cast", ["float16"]), ("where", None),
            ("floor_divide", ["int64", "int64"]), ("remainder", ["float64", "float64"]),
            ("floor_divide", ["float16", "float16"]), ("xlogy", ["float16", "float16"])]
    srcs = []
    for name, dts in pick:
        op = OPS[name]
        ins = [_dt.bool_, _dt.float16, _dt.float16] if dts is None else [_dt.to_dtype(d) for d in dts]
        odt = _dt.int8 if name == "cast" else op.infer([Meta((1,), d) for d in ins], {})[0].dtype
        srcs.append(cuda_render.ew_source(op, ins, odt))
    nvcc_compile(tmp_path, srcs, parts=1, full=True)


@needs_nvcc
def test_the_nvcc_check_catches_a_rendering_bug(tmp_path, monkeypatch):
    # a template naming a helper that does not exist must fail the compile check, not pass silently
    from neetorch.devices import cexpr
    monkeypatch.setitem(cexpr.EXPR, "exp", cexpr._fl("f_no_such_helper$S({0})"))
    k = cuda_render.ew_source(OPS["exp"], [_dt.float32], _dt.float32)
    with pytest.raises(AssertionError, match="f_no_such_helper32"):
        nvcc_compile(tmp_path, [k], parts=1)


def test_float16_is_loaded_and_stored_through_float():
    _, src = cuda_render.ew_source(OPS["mul"], [_dt.float16, _dt.float16], _dt.float16)
    assert "nee_f2h((float)((nee_h2f(v0) * nee_h2f(v1))))" in src
    _, src = cuda_render.ew_source(OPS["exp"], [_dt.float32], _dt.float32)
    assert "expf(v0)" in src and "exp(v0)" not in src
    _, src = cuda_render.ew_source(OPS["exp"], [_dt.float64], _dt.float64)
    assert "exp(v0)" in src
    # floor_divide / xlogy on float16 round every step to float16, as torch's CPU kernels (one helper in
    # the shared table for CUDA and OpenCL); with a float32 operand they keep float32 steps
    _, src = cuda_render.ew_source(OPS["xlogy"], [_dt.float16, _dt.float16], _dt.float16)
    assert "f_xlogy_h(nee_h2f(v0), nee_h2f(v1))" in src
    _, src = cuda_render.ew_source(OPS["floor_divide"], [_dt.float16, _dt.float32], _dt.float32)
    assert "f_floordiv32(" in src and "f_floordiv_h(" not in src
    pre = cuda_render.preamble()
    assert "f_floordiv_h(float a, float b)" in pre and "nee_h2f(nee_f2h((float)(x)))" in pre


def test_static_claims_match_supports():
    claims = CUDABackend.static_claims()
    bk = _instance()
    assert {"add", "exp", "where", "sum", "mean", "softmax", "log_softmax", "matmul"} <= set(claims)
    assert "float16" in claims["add"] and "float16" in claims["exp"] and "bool" in claims["eq"]
    assert "float32" not in claims["bitwise_and"] and claims["matmul"] == {"float16", "float32", "float64"}
    assert "linalg_det" not in claims and claims["conv2d"] == {"float16", "float32", "float64"}
    for name, dts in claims.items():
        op = OPS[name]
        for dn in dts:
            d = _dt.to_dtype(dn)
            if op.kind != "elementwise":
                ins = [d] * (2 if name == "matmul" else 1)
                odt = d if name != "sum" or d.category == 2 else _dt.int64
                assert bk.supports(name, ins + [odt]) is None, (name, dn)
                continue
            if op.ew.allow is not None and op.ew.allow(d):
                continue
            ins = [d] * op.ew.nin
            odt = op.infer([Meta((1,), x) for x in ins], {})[0].dtype
            if {x.name for x in ins + [odt]} <= dts:
                assert bk.supports(name, ins + [odt]) is None, (name, dn)
    # and what is not claimed has a reason
    assert "no cuda kernel for linalg_det" == bk.supports("linalg_det", [_dt.float32, _dt.float32])
    assert "cuBLAS" in bk.supports("matmul", [_dt.int32, _dt.int32, _dt.int32])


def test_probe_and_import_do_not_need_a_gpu():
    import subprocess as sp
    import sys
    code = ("import sys, neetorch as nee; from neetorch.devices.cuda import CUDABackend; "
            "assert 'cupy' not in sys.modules; n, why = CUDABackend.probe(); "
            "print(n, (why or '')[:40])")
    out = sp.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n = int(out.stdout.split()[0])
    assert n >= 0 and (n > 0 or out.stdout.split(maxsplit=1)[1].strip())


# ================================================================ with a GPU
# NEE_CUDA_EMULATE=1 runs this half without a GPU: CuPy replaced by neetorch.devices.cuda.emulate
# (host arrays; the generated CUDA C compiled as C++ by g++), so the backend's host code and the
# kernels' semantics are checked too (slow: one g++ build per module).
# Default without a GPU: the light tests run emulated, the two sweeps (hundreds of kernels: minutes of
# g++ on a cold cache) only with NEE_CUDA_EMULATE=1; NEE_CUDA_EMULATE=0 turns emulation off.
_N, _WHY = CUDABackend.probe()
_EMU = os.environ.get("NEE_CUDA_EMULATE", "")
EMULATE = _N == 0 and _EMU != "0" and emulate.available() is None
needs_gpu = pytest.mark.skipif(_N == 0 and not EMULATE, reason=f"no CUDA device: {_WHY}")
heavy = pytest.mark.skipif(_N == 0 and not (EMULATE and _EMU not in ("", "0")),
                           reason=f"no CUDA device ({_WHY}); NEE_CUDA_EMULATE=1 runs this emulated (g++)")
DEV = "cuda"


@pytest.fixture(scope="module")
def bk():
    import importlib

    from neetorch.devices import get_backend, register_backend
    devs = importlib.import_module("neetorch.devices")    # (= nee.devices, the package; callable)
    from neetorch.ops import registry
    devs._discover()
    before = devs._backend_classes.get("cuda")
    if EMULATE:
        emulate.install()
    register_backend(CUDABackend, "cuda")
    try:
        yield get_backend(nee.device(DEV))
    finally:
        if EMULATE:
            emulate.uninstall()
        # leave the registry as found (later tests list devices / build coverage tables)
        with devs._lock:
            devs._instances.pop(("cuda", 0), None)
            if before is None:
                devs._backend_classes.pop("cuda", None)
            else:
                devs._backend_classes["cuda"] = before
        registry._backends.clear()
        registry._claims.clear()


def cu(a, dtype=None):
    t = nee.tensor(np.asarray(a)) if dtype is None else nee.tensor(np.asarray(a), dtype=dtype)
    return t.to(DEV)


def host(t):
    assert t.device.type == "cuda", t.device
    return t.cpu().numpy()


@needs_gpu
def test_devices_roundtrip_and_views(bk):
    infos = {d.type: d for d in nee.devices()}
    assert infos["cuda"].available and infos["cuda"].count >= 1
    rng = np.random.default_rng(0)
    for name in cuda_kernels.STORAGE:
        a = (rng.standard_normal((3, 5)) * 50).astype(name)
        t = nee.tensor(a).to(DEV)
        assert t.dtype.name == name and t.stride() == (5, 1)
        np.testing.assert_array_equal(t.cpu().numpy(), a)
    with pytest.raises(TypeError, match="cuda"):
        cu(np.ones(3, np.float32)).numpy()
    assert tuple(nee.tensor(3.5).to(DEV).shape) == ()
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = cu(a)
    np.testing.assert_array_equal(host(t.t()), a.T)
    np.testing.assert_array_equal(host(t[1:, ::2]), a[1:, ::2])
    np.testing.assert_array_equal(host(t.flip(1)), a[:, ::-1])
    np.testing.assert_array_equal(host(t[0].expand(3, 6)), np.broadcast_to(a[0], (3, 6)))
    v = t[1:3, 1:4]
    assert v.storage_offset() == 7 and v.data_ptr() == t.data_ptr() + 7 * 4
    v.zero_()
    ref = a.copy()
    ref[1:3, 1:4] = 0
    np.testing.assert_array_equal(host(t), ref)
    t[:, 0].copy_(cu(np.array([9, 8, 7, 6], np.float32)))
    ref[:, 0] = [9, 8, 7, 6]
    np.testing.assert_array_equal(host(t), ref)
    np.testing.assert_array_equal(host(t.to(nee.int32)), ref.astype(np.int32))
    np.testing.assert_array_equal(host(cu([-1.0, 3.7, 300.0]).to(nee.uint8)),
                                  np.array([-1.0, 3.7, 300.0]).astype(np.int64).astype(np.uint8))
    np.testing.assert_array_equal(host(nee.full((2, 2), 7.5, device=DEV)), np.full((2, 2), 7.5, np.float32))
    assert host(nee.empty(0, 3, device=DEV)).shape == (0, 3)
    s = bk.memory_stats()
    assert s["allocated_bytes"] > 0 and "device" in s


def _data(rng, dt, name, i):
    kind = np.dtype(dt).kind
    if kind == "b" or (name == "where" and i == 0):
        return rng.random((6, 7)) < 0.5
    if kind in "iu":
        a = rng.integers(0 if kind == "u" else -40, 41, (6, 7)).astype(dt)
        if name in ("bitwise_left_shift", "bitwise_right_shift") and i == 1:
            a = rng.integers(0, 70, (6, 7)).astype(dt)
        if name == "pow" and i == 1:
            a = rng.integers(0, 5, (6, 7)).astype(dt)
        if i >= 1 and name in ("true_divide", "floor_divide", "trunc_divide", "remainder", "fmod", "addcdiv"):
            a[a == 0] = 3
        return a
    lo = 0.05 if name in ("log", "log2", "log10", "sqrt", "rsqrt", "lgamma") else (1.05 if name == "acosh" else -0.95)
    return rng.uniform(lo, 2.5 if lo > 0 else 0.95, (6, 7)).astype(dt)


@needs_gpu
@heavy
@pytest.mark.parametrize("dn", ["float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool"])
def test_elementwise_sweep_matches_cpu(bk, dn):
    """Every claimed op on dtype ``dn`` (each in ONE module: ``precompile``) equals the CPU backend
    (itself tested against numpy/torch), contiguous, broadcast and through non-contiguous views."""
    cases = [(op, ins, odt) for op, ins, odt in ew_cases() if ins[-1].name == dn and op.name != "cast"]
    assert cases
    bk.precompile([(op.name, ins, odt) for op, ins, odt in cases])
    rng = np.random.default_rng(5)
    tols = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-10}
    bad = []
    for op, ins, odt in cases:
        args = [_data(rng, d.np, op.name, i) for i, d in enumerate(ins)]
        with np.errstate(all="ignore"):
            want = apply(op, *[nee.tensor(a) for a in args]).numpy()
        variants = {
            "contig": [cu(a) for a in args],
            "views": [cu(np.ascontiguousarray(a.T)).t() for a in args],
            "bcast": [cu(a) if i == 0 else cu(a[:1]) for i, a in enumerate(args)],
        }
        for vname, targs in variants.items():
            w = want if vname != "bcast" else apply(op, *[nee.tensor(a if i == 0 else a[:1])
                                                          for i, a in enumerate(args)]).numpy()
            got = host(apply(op, *targs))
            loose = 50 if op.name in ("lgamma", "pow", "erfc", "tan", "expm1", "sinh", "cosh", "atanh", "acosh",
                                      "asinh", "exp2", "xlogy", "mish", "gelu", "selu", "elu", "hypot") else 1
            tol = tols.get(got.dtype.name, 0) * loose
            if got.dtype != w.dtype or not (np.allclose(got, w, rtol=tol, atol=tol, equal_nan=True)
                                            if got.dtype.kind == "f" else np.array_equal(got, w)):
                bad.append((op.name, vname, got.ravel()[:3], w.ravel()[:3]))
    assert not bad, bad[:10]
    assert not [r for r in nee.fallback_report().records.values() if r.device.startswith("cuda")
                and r.op in {c[0].name for c in cases}]


@needs_gpu
def test_torch_semantics_edge_cases(bk):
    mn = np.iinfo(np.int32).min
    x = cu(np.array([-7, 7, -8, 9, mn, 5], np.int32))
    y = cu(np.array([3, -3, -3, 2, -1, -1], np.int32))
    np.testing.assert_array_equal(host(x // y), [-3, -3, 2, 4, mn, -5])
    np.testing.assert_array_equal(host(x % y), [2, -2, -2, 1, 0, 0])
    np.testing.assert_array_equal(host(nee.fmod(x, y)), [-1, 1, -2, 1, 0, 0])
    np.testing.assert_array_equal(host(x.abs()), np.abs(np.array([-7, 7, -8, 9, mn, 5], np.int32)))
    p = np.array([np.nan, 1.0, -np.inf, 2.0, np.nan], np.float32)
    q = np.array([1.0, np.nan, 0.0, 3.0, np.nan], np.float32)
    for f, r in ((nee.maximum, np.maximum), (nee.minimum, np.minimum), (nee.fmax, np.fmax), (nee.fmin, np.fmin)):
        np.testing.assert_array_equal(host(f(cu(p), cu(q))), r(p, q))
    np.testing.assert_array_equal(host(nee.relu(cu(p))), [np.nan, 1.0, 0.0, 2.0, np.nan])
    np.testing.assert_array_equal(host(cu(np.array([0.5, 1.5, 2.5, -2.5])).round()), [0.0, 2.0, 2.0, -2.0])
    np.testing.assert_array_equal(host(cu(np.array([np.inf, -np.inf, 1.0], np.float32)).isposinf()),
                                  [True, False, False])
    h = np.array([65504, -1e-8, 0.1, np.inf], np.float16)
    np.testing.assert_array_equal(host(cu(h) * 1), h)


@needs_gpu
def test_inplace_and_aliasing(bk):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = cu(a)
    t.mul_(2).add_(1)
    t[:, ::2].add_(100)
    ref = a * 2 + 1
    ref[:, ::2] += 100
    np.testing.assert_array_equal(host(t), ref)
    s = cu(np.arange(16, dtype=np.float32).reshape(4, 4))
    s.add_(s.t())
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(host(s), m + m.T)
    g = np.random.default_rng(2).standard_normal((2, 3, 2, 3, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(host(cu(g).permute(5, 3, 1, 0, 2, 4) + 1), g.transpose(5, 3, 1, 0, 2, 4) + 1)
    big = cu(np.ones(100_003, np.float32))
    assert float((big * 2).sum()) == 200_006.0


@needs_gpu
def test_grid_stride_loop(bk, monkeypatch):
    monkeypatch.setattr(cuda_render, "MAX_BLOCKS", 3)      # 3 blocks of 256 threads loop over 100k elements
    a = np.arange(100_003, dtype=np.float32)
    np.testing.assert_array_equal(host(cu(a) * 2), a * 2)
    np.testing.assert_array_equal(host(cu(a).flip(0)[::3] + 1), a[::-1][::3] + 1)


@needs_gpu
def test_reductions_softmax_matmul(bk):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7, 300)).astype(np.float32)
    x = cu(a)
    np.testing.assert_allclose(host(x.sum(-1)), a.sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(x.sum((0, 2), keepdim=True)), a.sum((0, 2), keepdims=True), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(host(x.mean(1)), a.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(host(x.amax(-1)), a.max(-1))
    np.testing.assert_array_equal(host(x.transpose(0, 2).amin(0)), a.transpose(2, 1, 0).min(0))
    big = rng.standard_normal(1 << 20).astype(np.float32)
    np.testing.assert_allclose(host(cu(big).sum()), big.astype(np.float64).sum(), rtol=1e-5)
    ints = rng.integers(-100, 100, (4, 50)).astype(np.int32)
    s = cu(ints).sum(1)
    assert s.dtype == nee.int64
    np.testing.assert_array_equal(host(s), ints.sum(1))
    np.testing.assert_array_equal(host(cu(ints[:, :6]).prod(1)), ints[:, :6].astype(np.int64).prod(1))
    assert bool((x > 3).any()) == bool((a > 3).any()) and bool((x > -10).all())
    nan = cu(np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 0.5]], np.float32))
    np.testing.assert_array_equal(host(nan.amax(1)), [np.nan, 2.0])
    h = a[0].astype(np.float16)
    np.testing.assert_allclose(host(cu(h).sum(-1)).astype(np.float32), h.astype(np.float32).sum(-1), rtol=2e-3,
                               atol=0.1)

    def sm(v, d):
        e = np.exp(v - v.max(d, keepdims=True))
        return e / e.sum(d, keepdims=True)
    np.testing.assert_allclose(host(nee.softmax(x, -1)), sm(a, -1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(host(nee.softmax(x, 0)), sm(a, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(host(nee.log_softmax(x.transpose(1, 2), 1)), np.log(sm(a.transpose(0, 2, 1), 1)),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(nee.softmax(cu(h), -1)).astype(np.float32), sm(h.astype(np.float32), -1),
                               rtol=2e-3, atol=2e-3)
    m1 = rng.standard_normal((3, 33, 17)).astype(np.float32)
    m2 = rng.standard_normal((17, 9)).astype(np.float32)
    np.testing.assert_allclose(host(cu(m1) @ cu(m2)), m1 @ m2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(cu(m2).t() @ cu(m1[1]).t()), m2.T @ m1[1].T, rtol=1e-4, atol=1e-5)
    d1, d2 = m1.astype(np.float64), m2.astype(np.float64)
    np.testing.assert_allclose(host(cu(d1)[:, ::2] @ cu(d2)), d1[:, ::2] @ d2, rtol=1e-12)
    assert not [r for r in nee.fallback_report().records.values() if r.device.startswith("cuda")
                and r.op in ("sum", "mean", "prod", "amax", "amin", "any", "all", "softmax", "log_softmax", "matmul")]


@needs_gpu
def test_cat_flip_and_norms(bk):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 6, 5)).astype(np.float32)
    b = rng.integers(-9, 9, (4, 2, 5)).astype(np.int32)
    A, B = cu(a), cu(b)
    np.testing.assert_array_equal(host(nee.cat([A, B.to(nee.float32)], 1)), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(host(nee.cat([A.transpose(0, 2), A.transpose(0, 2)[:, ::2]], 1)),
                                  np.concatenate([a.transpose(2, 1, 0), a.transpose(2, 1, 0)[:, ::2]], 1))
    np.testing.assert_array_equal(host(nee.cat([B, cu(np.zeros(0, np.int32))], 0)), b)
    np.testing.assert_array_equal(host(A.flip(0, 2)), a[::-1, :, ::-1])
    np.testing.assert_array_equal(host(A.transpose(1, 2).flip(1)), a.transpose(0, 2, 1)[:, ::-1])
    w, bb = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    m = a.astype(np.float64)
    ref = (m - m.mean(-1, keepdims=True)) / np.sqrt(m.var(-1, keepdims=True) + 1e-5) * w + bb
    np.testing.assert_allclose(host(F.layer_norm(A, (5,), cu(w), cu(bb))), ref, rtol=1e-5, atol=1e-5)
    ref = m / np.sqrt((m * m).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(host(nee.rms_norm(A.transpose(0, 1), (5,), cu(w), eps=1e-6)),
                               ref.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    assert not [r for r in nee.fallback_report().records.values() if r.device.startswith("cuda")
                and r.op in ("cat", "flip", "layer_norm", "rms_norm")]


@needs_gpu
def test_prepared_eager_launches(bk):
    """The second call of an elementwise op with the same layouts takes the prepared launch
    (render.prepare: no dispatch, no layout work); results equal the CPU's for contiguous, broadcast,
    offset and transposed operands and Python scalars, and cached scalar operands stay unchanged."""
    from neetorch.ops import elementwise as ew
    rng = np.random.default_rng(9)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    i = rng.integers(-50, 50, (5, 6)).astype(np.int32)
    A, B, I = cu(a), cu(b), cu(i)
    cases = [
        (lambda X, Y, J: X + Y, (a + b)),
        (lambda X, Y, J: X[1:, ::2] * 2.5, a[1:, ::2] * np.float32(2.5)),
        (lambda X, Y, J: X.t() - Y[:5], a.T - b[:5]),
        (lambda X, Y, J: J * 3 + 1, i * 3 + 1),
        (lambda X, Y, J: (J // 7).to(nee.float32) + X, (np.floor_divide(i, 7)).astype(np.float32) + a),
        (lambda X, Y, J: nee.exp(X), np.exp(a)),
    ]
    for k, (fn, want) in enumerate(cases):
        n_plans = len(ew._plans)
        for rep in range(3):          # 1st: general path (and a plan is made), then the plan
            before = bk.launches
            got = fn(A, B, I)
            assert bk.launches > before
            np.testing.assert_allclose(host(got), want, rtol=1e-6, atol=1e-6, err_msg=f"case {k} call {rep}")
        assert len(ew._plans) > n_plans or k == 4, k
    y = A + 1.0
    y.add_(100.0)                     # writing a result never touches the cached scalar operand
    np.testing.assert_allclose(host(A + 1.0), a + 1, rtol=1e-6)


@needs_gpu
@pytest.mark.parametrize("dn", ["float32", "float16", "float64"])
def test_row_kernels_match_cpu(bk, dn):
    """softmax / log_softmax / layer_norm / rms_norm over contiguous rows run as ONE generated kernel
    each (rows.py: a block per row; rows longer than the block, shorter than a warp, a single column),
    equal to the CPU kernels; masked rows of only -inf (``safe``) give zeros, NaN rows stay NaN."""
    from neetorch.devices.cuda import rows
    from neetorch.ops.nn import _safe_softmax
    rng = np.random.default_rng(11)
    tol = {"float16": 4e-3, "float32": 2e-5, "float64": 1e-12}[dn]
    dt = getattr(nee, dn)
    before = set(bk.modules.kernels)
    for nrow, n in [(3, 1), (5, 17), (4, 300), (2, 2500), (70, 64)]:
        a = (rng.standard_normal((nrow, n)) * 3).astype(dn)
        w, b = rng.standard_normal(n).astype(dn), rng.standard_normal(n).astype(dn)
        x, xc = cu(a), nee.tensor(a)
        W, B, Wc, Bc = cu(w), cu(b), nee.tensor(w), nee.tensor(b)
        pairs = [
            (nee.softmax(x, -1), nee.softmax(xc, -1)),
            (nee.log_softmax(x, 1), nee.log_softmax(xc, 1)),
            (F.layer_norm(x, (n,), W, B), F.layer_norm(xc, (n,), Wc, Bc)),
            (F.layer_norm(x, (n,)), F.layer_norm(xc, (n,))),
            (nee.rms_norm(x, (n,), W, eps=1e-6), nee.rms_norm(xc, (n,), Wc, eps=1e-6)),
            (nee.rms_norm(x, (n,)), nee.rms_norm(xc, (n,))),
        ]
        for i, (got, want) in enumerate(pairs):
            assert got.dtype == want.dtype == dt
            np.testing.assert_allclose(host(got).astype(np.float64), want.numpy().astype(np.float64),
                                       rtol=tol, atol=tol, err_msg=f"case {i} on ({nrow}, {n}) {dn}")
    a = rng.standard_normal((4, 9)).astype(dn)
    a[1] = -np.inf
    a[2, 3] = np.nan
    got = host(_safe_softmax(cu(a), -1)).astype(np.float64)
    want = _safe_softmax(nee.tensor(a), -1).numpy().astype(np.float64)
    assert (got[1] == 0).all() and np.isnan(got[2]).all()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    built = set(bk.modules.kernels) - before
    for op in rows.ROW_OPS:     # the row kernels ran (not the CuPy composition)
        assert rows.kernel_name(op, dn) in built | before, (op, dn)
    assert not [r for r in nee.fallback_report().records.values() if r.device.startswith("cuda")
                and r.op in rows.ROW_OPS]


def _to(a, dev):
    return a.to(dev) if isinstance(a, nee.Tensor) else a


@needs_gpu
@heavy
def test_fused_jit_groups_match_eager_cpu(bk):
    """Every pattern of the nvcc test, compiled by NVRTC and run on the GPU, against the same jit
    function on the CPU (fused groups keep float16 intermediates in float32 on both devices; eager
    rounds after each op: that difference is the CPU JIT's, tested in test_jit.py)."""
    bad = []
    for name, fn, args in jit_patterns():
        want = nee.jit(fn)(*args)
        f = nee.jit(fn)
        got = f(*[_to(a, DEV) for a in args])
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert g.device.type == "cuda", name
            gw, ww = host(g), w.numpy()
            half = w.dtype == nee.float16 or any(getattr(a, "dtype", None) == nee.float16 for a in args)
            tol = 2e-3 if half else (1e-4 if "epilogue" in name or "norm" in name else 2e-5)
            if gw.dtype != ww.dtype or not (np.allclose(gw, ww, rtol=tol, atol=tol, equal_nan=True)
                                            if gw.dtype.kind == "f" else np.array_equal(gw, ww)):
                bad.append((name, gw.ravel()[:3], ww.ravel()[:3]))
    assert not bad, bad[:10]
    text = nee.jit(lambda x: (x + 1).exp()).explain(cu(np.ones(3, np.float32)))
    assert 'extern "C" __global__ void fused_' in text


@needs_gpu
def test_fallback_visible_and_strict(bk):
    nee.reset_fallbacks()
    a = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 9.0]], np.float32)
    m = a[:, :2]
    v = nee.linalg.det(cu(m))          # an op the cuda backend does not claim (LAPACK-style factorizations)
    assert v.device.type == "cuda"
    np.testing.assert_allclose(host(v), np.linalg.det(m), rtol=1e-6)
    assert any(r.op == "linalg_det" and r.device == "cuda:0" for r in nee.fallback_report().records.values())
    nee.set_strict(True)
    try:
        with pytest.raises(nee.FallbackError, match="linalg_det"):
            nee.linalg.det(cu(m))
        (cu(a) + 1).sum()
    finally:
        nee.set_strict(False)
        nee.reset_fallbacks()
