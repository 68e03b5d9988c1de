"""OpenBLAS kernel-set choice for products (gemm_driver.choose_blas_core / set_blas_core).

On AMD Zen 4 numpy's DYNAMIC_ARCH OpenBLAS picks its SkylakeX (AVX-512) kernels; neetorch switches it to
its Haswell (AVX2) ones when the CPU backend's matmul kernels load (faster float32 products there, see
gemm_driver).  On Zen 5 (full-width AVX-512) OpenBLAS picks Haswell; neetorch switches it to SkylakeX.  These tests pin that the switch happens where it should (and nowhere else), that the
opt-outs work, that a bad core name is refused clearly, and that products after a switch are right
(against a reference that does not go through BLAS: np.einsum without optimize, in float64), on one and
two threads (the driver's split products), odd shapes, transposed / strided operands and broadcast
batches.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import gemm_driver as gd
from neetorch.devices.cpu.kernels import linalg as L
from neetorch.devices.cpu.kernels import winograd

needs_core = pytest.mark.skipif(gd.blas_core() is None, reason="numpy's OpenBLAS is not a DYNAMIC_ARCH build")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, **env) -> str:
    e = dict(os.environ)
    for k in ("NEE_OPENBLAS_CORE", "OPENBLAS_CORETYPE"):
        e.pop(k, None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=e, cwd=_ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


_PROBE = """
from neetorch.devices.cpu import gemm_driver as gd
before = gd.blas_core()
import neetorch as nee
x = nee.ones(8, 8)
(x @ x).numpy()
print(before, gd.blas_core(), gd._amd_avx512_family())
"""


@needs_core
def test_switch_taken_on_zen4_and_zen5_only():
    before, after, fam = _run(_PROBE).split()
    fam = int(fam)
    if fam == 25 and before.lower() in gd._AVX512_CORES:
        assert after == "Haswell"
    elif fam >= 26 and before.lower() in ("haswell", "zen"):
        assert after == "SkylakeX"
    else:
        assert after == before
    # the rule itself, for every host
    assert gd.preferred_core("SkylakeX") == ("Haswell" if fam == 25 else None)
    assert gd.preferred_core("Haswell") == ("SkylakeX" if fam >= 26 else None)
    # a user's OPENBLAS_CORETYPE is kept
    before, after, _ = _run(_PROBE, OPENBLAS_CORETYPE="Sandybridge").split()
    assert after == before == "Sandybridge"


@pytest.fixture
def fresh_choice(monkeypatch):
    """choose_blas_core as in a new process (its once-per-process flag cleared), the core restored after."""
    start = gd.blas_core()
    for k in ("NEE_OPENBLAS_CORE", "OPENBLAS_CORETYPE"):
        monkeypatch.delenv(k, raising=False)
    done = gd._core_done[0]
    gd._core_done[0] = False
    yield start
    gd._core_done[0] = done
    gd.set_blas_core(start)


@needs_core
def test_opt_outs_and_forced_core(fresh_choice, monkeypatch):
    # NEE_OPENBLAS_CORE=keep, a user's OPENBLAS_CORETYPE: left alone; NEE_OPENBLAS_CORE=<core>: forced
    gd.set_blas_core("SkylakeX" if gd._zen4() else ("Haswell" if gd._amd_avx512_family() >= 26 else fresh_choice))
    before = gd.blas_core()
    monkeypatch.setenv("NEE_OPENBLAS_CORE", "keep")
    assert gd.choose_blas_core() is None and gd.blas_core() == before
    monkeypatch.delenv("NEE_OPENBLAS_CORE")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "SkylakeX")
    gd._core_done[0] = False
    assert gd.choose_blas_core() is None and gd.blas_core() == before
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.setenv("NEE_OPENBLAS_CORE", "sandybridge")
    gd._core_done[0] = False
    assert gd.choose_blas_core() == "Sandybridge" == gd.blas_core()
    assert gd.choose_blas_core() is None       # once per process
    assert os.environ.get("OPENBLAS_CORETYPE") is None    # (the switch leaves the environment as it was)


@needs_core
def test_bad_core_name_refused(fresh_choice, monkeypatch):
    with pytest.raises(ValueError, match="unknown OpenBLAS core 'nosuchcore'"):
        gd.set_blas_core("nosuchcore")
    monkeypatch.setenv("NEE_OPENBLAS_CORE", "nosuchcore")
    with pytest.raises(ValueError, match="unknown OpenBLAS core 'nosuchcore'"):
        gd.choose_blas_core()
    assert gd.blas_core() == fresh_choice


def _ref(a, b):
    return np.einsum("...ij,...jk->...ik", a.astype(np.float64), b.astype(np.float64), optimize=False)


def _cases(rng, dt):
    def r(*s):
        return rng.standard_normal(s).astype(dt)
    yield r(37, 111), r(111, 203)                         # odd sizes, not multiples of any block
    yield r(128, 256), r(256, 128).T.copy().T[:, :128]     # transposed weight (a Linear's w.T)
    yield r(64, 300)[:, ::2], r(150, 97)                   # stepped (non-contiguous) rows
    yield r(1, 384), r(384, 257)                           # one row
    yield r(129, 33), r(33, 1)                             # one column
    yield r(3, 5, 17, 40), r(40, 23)                       # batch @ shared matrix
    yield r(4, 1, 33, 20), r(1, 3, 20, 31)                 # broadcast batches
    yield r(12, 128, 32), r(12, 32, 128).transpose(0, 2, 1).copy().transpose(0, 2, 1)  # attention-shaped
    yield r(130, 260), r(260, 200)                         # large enough for the driver's split (2 threads)


@needs_core
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_products_after_switch(dt, nthreads):
    # whatever core runs now (Haswell on Zen 4 after the switch), then the other of Haswell / SkylakeX where
    # the CPU has it: every product right, against a reference that does not use BLAS
    rng = np.random.default_rng(7)
    cases = list(_cases(rng, dt))
    start = gd.blas_core()
    cores = [start]
    if gd._zen4():
        cores += ["SkylakeX" if start == "Haswell" else "Haswell"]
    tol = {"rtol": 2e-4, "atol": 2e-4} if dt == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    try:
        for core in cores:
            assert gd.set_blas_core(core) == core
            for a, b in cases:
                got = (nee.tensor(a) @ nee.tensor(b)).numpy()
                ref = _ref(a, b)
                assert got.dtype == dt and got.shape == ref.shape, (core, a.shape, b.shape)
                np.testing.assert_allclose(got, ref, err_msg=f"{core} {a.shape} @ {b.shape}", **tol)
    finally:
        gd.set_blas_core(start)
    assert gd.blas_core() == start


@needs_core
def test_set_blas_core_round_trip():
    start = gd.blas_core()
    try:
        assert gd.set_blas_core("SandyBridge") == "Sandybridge"
        a = np.random.default_rng(1).standard_normal((70, 90)).astype(np.float32)
        np.testing.assert_allclose(a @ a.T, _ref(a, a.T), rtol=1e-4, atol=1e-4)
        # Zen is OpenBLAS's name for the Haswell kernels in these builds
        assert gd.set_blas_core("zen") == "Haswell"
    finally:
        gd.set_blas_core(start)
    assert gd.blas_core() == start


# ---- a copying reshape in a shape-polymorphic executable (ONNX sessions' merged attention heads)
def _flatten_copiers(sess, shape):
    # the executable traced at ``shape`` (another size may have made another)
    (exe,), = {id(e[0]): (e[0],) for e in sess._jit._fast.values()
               if e[0].dynamic and tuple(e[0]._in_shapes[0]) == shape}.values()
    runs = [r for r in exe._local.fast[2] if r.step[0] == "view" and r.step[1].op.name == "flatten"]
    assert runs
    return [dict(zip(r.__code__.co_freevars, r.__closure__))["copier"].cell_contents for r in runs]


def test_dynamic_copying_reshape_reuses_its_buffer(monkeypatch):
    # a BERT-like ONNX encoder (symbolic batch / seq): its attention heads merged back (Transpose then a
    # Reshape, which copies) go into one buffer reused every call (executable.py's copier), not a fresh array
    # per call, in the dynamic executable's fast path at its traced shape; other sizes take the generic
    # path; every result as onnxruntime's.  (Session 17: by default the copy is a kernel of the graph into the
    # memory plan, jit/passes.py materialize_copying_reshapes; the copier is what runs with that pass off.)
    from neetorch.jit import passes
    monkeypatch.setattr(passes, "_COPY_RESHAPES", [False])
    sys.path.insert(0, _ROOT)
    from asv_benchmarks import _onnx_models as M
    from neetorch.onnx import InferenceSession
    spec = M.spec("bert_b1", tiny=True)
    sess = InferenceSession(spec.model)
    ort = M.ort_session(spec.model, 1)
    (name, x), = spec.feed.items()
    rng = np.random.default_rng(5)
    feeds = [x] + [rng.standard_normal(x.shape).astype(np.float32) for _ in range(2)]
    for f in feeds:
        np.testing.assert_allclose(sess.run(None, {name: f})[0], ort.run(None, {name: f})[0], rtol=1e-4, atol=1e-5)
    cops = _flatten_copiers(sess, x.shape)
    assert all(c is not None for c in cops)
    bufs = [c[3] for c in cops]
    other = rng.standard_normal((x.shape[0], x.shape[1] + 3, x.shape[2])).astype(np.float32)
    for f in feeds + [other] + feeds[:1]:
        np.testing.assert_allclose(sess.run(None, {name: f})[0], ort.run(None, {name: f})[0], rtol=1e-4, atol=1e-5)
    assert all(c[3] is b for c, b in zip(_flatten_copiers(sess, x.shape), bufs))


# ---- products with a frozen float32 weight: packed panels + the LLVM tile kernel (linalg._pk_caller)


needs_pk = pytest.mark.skipif(not L._pk_host_ok(), reason="the packed kernel needs AVX-512F or AVX2 + FMA")


def _frozen(w):
    assert winograd.freeze(w)
    return w


@needs_pk
@pytest.mark.parametrize("M,K,N,wlayout", [
    (37, 100, 64, "C"),          # rows not a multiple of the 12-row tile, K not of anything
    (7, 200, 32, "C"),           # fewer rows than a tile
    (16, 1024, 32, "C"),         # rows 4 KiB apart: the padded copy of a
    (130, 1100, 96, "F"),        # K in 3 blocks (the later ones add), a transposed (column-major) weight
    (64, 256, 1024, "C"),
    (520, 300, 64, "C"),         # rows in chunks of 256 (3 chunks; on 2 threads each cut in 2 column halves)
])
def test_packed_product_right(M, K, N, wlayout, nthreads, monkeypatch):
    monkeypatch.setattr(L, "PK_AVX2_RULE", [False])     # AVX2 hosts: (520, 300, 64) too
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    w = _frozen(np.asfortranarray(w) if wlayout == "F" else w)
    out = np.full((M, N), np.nan, np.float32)
    g = L._pk_caller(out, a, w)
    big = nthreads > 1 and M * K * N >= L.DRV_MNK
    chunks = 1 if M < 2 * L.PK_MC else -(-M // L.PK_MC)
    assert g is not None and g.tasks == (chunks * min(nthreads, N // L.PK_NR) if big else 1)
    for _ in range(2):
        g(out, a, w)
        np.testing.assert_allclose(out, _ref(a, w), rtol=2e-4, atol=2e-4)
    # a 3-D activation (batch merged into rows) and an output with a row stride (a slice of a wider buffer)
    a3 = rng.standard_normal((2, M, K)).astype(np.float32)
    wide = np.full((2 * M, N + 32), np.nan, np.float32)
    o2 = wide[:, :N]
    g2 = L._pk_caller(o2, a3.reshape(2 * M, K), w)
    assert g2 is not None
    g2(o2, a3.reshape(2 * M, K), w)
    np.testing.assert_allclose(o2, _ref(a3, w).reshape(2 * M, N), rtol=2e-4, atol=2e-4)
    assert np.isnan(wide[:, N:]).all()
    # another weight of the same layout through the same caller: not the packed one (matmul_into)
    w2 = (rng.standard_normal((K, N)).astype(np.float32))
    w2 = np.asfortranarray(w2) if wlayout == "F" else w2
    g(out, a, w2)
    np.testing.assert_allclose(out, _ref(a, w2), rtol=2e-4, atol=2e-4)


@needs_pk
def test_packed_product_not_taken():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128)).astype(np.float32)
    free = rng.standard_normal((128, 64)).astype(np.float32)         # not frozen: could change under the cache
    assert L._pk_caller(np.empty((64, 64), np.float32), a, free) is None
    w = _frozen(rng.standard_normal((128, 64)).astype(np.float32))
    assert L._pk_caller(np.empty((64, 64), np.float32), a, w) is not None
    assert L._pk_caller(np.empty((4, 64), np.float32), a[:4], w) is None            # few rows: other kernels
    assert L._pk_caller(np.empty((5, 64), np.float32), a[:5], w) is not None
    n = L.PK_NR * 3 // 2
    w48 = _frozen(rng.standard_normal((128, n)).astype(np.float32))
    assert L._pk_caller(np.empty((64, n), np.float32), a, w48) is not None  # N not a multiple of the panel (s29)
    w64 = _frozen(rng.standard_normal((128, 64)))
    assert L._pk_caller(np.empty((64, 64)), a.astype(np.float64), w64) is None      # float64: BLAS
    assert L._pk_caller(np.empty((64, 64), np.float32), a[:, ::2][:, :64], w[:64]) is None   # strided rows of a
    o = np.empty((64, 64), np.float32)
    assert L._pk_caller(o, o[:, :64], _frozen(rng.standard_normal((64, 64)).astype(np.float32))) is None  # aliasing
    L.PK_ON[0] = False
    try:
        assert L._pk_caller(np.empty((64, 64), np.float32), a, w) is None
    finally:
        L.PK_ON[0] = True
    # past PK_MAX_BYTES of packed weights a new weight is not packed (BLAS), a packed one still runs packed
    old = L.PK_MAX_BYTES
    L.PK_MAX_BYTES = L._pk_live[0]
    try:
        fresh = _frozen(rng.standard_normal((128, 64)).astype(np.float32))
        assert L._pk_caller(np.empty((64, 64), np.float32), a, fresh) is None
        assert L._pk_caller(np.empty((64, 64), np.float32), a, w) is not None
    finally:
        L.PK_MAX_BYTES = old


@needs_pk
def test_frozen_jit_linears_take_the_packed_path(nthreads, monkeypatch):
    # nee.jit(freeze=True): a Linear + bias + GELU and a Linear + residual (matmul epilogues) and a plain
    # product run through the packed kernel (its callers made when the steps are bound), right vs numpy
    made = []
    orig = L._pk_caller

    def spy(out, a, b, *rest):
        g = orig(out, a, b, *rest)
        made.append(g is not None)
        return g
    monkeypatch.setattr(L, "_pk_caller", spy)
    rng = np.random.default_rng(11)
    d, h = 64, 160
    w1 = rng.standard_normal((h, d)).astype(np.float32) * 0.1
    b1 = rng.standard_normal(h).astype(np.float32)
    w2 = rng.standard_normal((d, h)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((d, 96)).astype(np.float32) * 0.1
    W1, B1, W2, W3 = (nee.tensor(x) for x in (w1, b1, w2, w3))
    F = nee.nn.functional

    def fn(x):
        y = x + F.linear(F.gelu(F.linear(x, W1, B1)), W2)
        return y, y @ W3

    def ref(x):
        import math
        u = x.astype(np.float64) @ w1.T + b1
        g = 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))
        y = x + g @ w2.T
        return y, y @ w3
    jf = nee.jit(fn, freeze=True)
    for _ in range(4):
        x = rng.standard_normal((2, 40, d)).astype(np.float32)
        for got, want in zip(jf(nee.tensor(x)), ref(x)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-3)
    assert sum(made) >= 3, made


# ---- the packed product's elementwise epilogue run in each task on its block (linalg.pk_with_epilogue)

def _gelu_ref(u, erf):
    import math
    return 0.5 * u * (1 + erf(u / math.sqrt(2)))


def _two(y, r, sig):
    return sig(y), y * 2.0 + r


def _epi_cases():
    import math
    erf = np.vectorize(math.erf)
    F = nee.nn.functional
    return {
        # Linear + bias + GELU (erf)
        "bias_gelu": (lambda x, r, c, W, B: F.gelu(F.linear(x, W, B)),
                      lambda x, r, c, w, b: _gelu_ref(x @ w.T + b, erf)),
        # residual add (the epilogue's other operand a full (R, N) array)
        "residual": (lambda x, r, c, W, B: r + F.linear(x, W),
                     lambda x, r, c, w, b: r + x @ w.T),
        # bias + relu, then a per-row scale (a broadcast (R, 1) operand: column stride 0)
        "relu_rowscale": (lambda x, r, c, W, B: F.relu(F.linear(x, W, B)) * c,
                          lambda x, r, c, w, b: np.maximum(x @ w.T + b, 0) * c),
        # a transposed residual (column stride != 1: the kernel's general variant) and tanh
        "tanh_transposed": (lambda x, r, c, W, B: nee.tanh(x @ W.t() + r.t()),
                            lambda x, r, c, w, b: np.tanh(x @ w.T + r)),
        # two outputs from one epilogue
        "two_outputs": (lambda x, r, c, W, B: _two(F.linear(x, W, B), r, nee.sigmoid),
                        lambda x, r, c, w, b: _two(x @ w.T + b, r, lambda y: 1 / (1 + np.exp(-y)))),
    }


def _spy_made(monkeypatch, name):
    """[whether each call of linalg's ``name`` (pk_with_epilogue / pk_with_row_epilogue) made a fused caller]."""
    made = []
    orig = getattr(L, name)

    def spy(*args):
        h = orig(*args)
        made.append(h is not None)
        return h
    monkeypatch.setattr(L, name, spy)
    return made


def _in_task_vs_launch(monkeypatch, R, K, N, jit_fn, call, tol):
    """The frozen ``jit_fn()`` on 3 inputs (x (R, K), r (R, N)) with the epilogue in the packed product's tasks and
    with it launched after the product (fused.PACKED_IN_TASK off): ``call(jf, x, r)`` -> (outputs, numpy float64
    reference); each within ``tol`` of the reference, the two ways bit-exact."""
    from neetorch.devices.cpu.kernels import fused
    results = {}
    for flag in (True, False):
        monkeypatch.setattr(fused, "PACKED_IN_TASK", [flag])
        jf = nee.jit(jit_fn, freeze=True)
        got = []
        for i in range(3):
            x = np.random.default_rng(i).standard_normal((R, K)).astype(np.float32)
            r = np.random.default_rng(10 + i).standard_normal((R, N)).astype(np.float32)
            outs, want = call(jf, x, r)
            outs = [o.numpy() for o in (outs if isinstance(outs, (tuple, list)) else (outs,))]
            for o, e in zip(outs, want if isinstance(want, tuple) else (want,)):
                np.testing.assert_allclose(o, e, rtol=tol, atol=tol)
            got.append(outs)
        results[flag] = got
    for g1, g0 in zip(results[True], results[False]):
        for o1, o0 in zip(g1, g0):
            np.testing.assert_array_equal(o1, o0)


@needs_pk
@pytest.mark.parametrize("kind", sorted(_epi_cases()))
@pytest.mark.parametrize("R,K,N", [
    (37, 1100, 96),      # rows not a multiple of the tile, K in 3 blocks, 3 panels cut 1 + 2 on 2 threads
    (520, 128, 64),      # row chunks of 256 (3 chunks, each cut in 2 column halves on 2 threads)
])
def test_packed_epilogue_in_task(kind, R, K, N, nthreads, monkeypatch):
    # on 2 threads the epilogue runs in each task (pk_with_epilogue taken), bit-exact vs the packed product
    # followed by the epilogue's own launch (NEE_PACKED_EPILOGUE_IN_TASK=0), right vs numpy float64
    made = _spy_made(monkeypatch, "pk_with_epilogue")
    fn, ref = _epi_cases()[kind]
    rng = np.random.default_rng(R + K + N)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    b = rng.standard_normal(N).astype(np.float32)
    c = rng.standard_normal((R, 1)).astype(np.float32)
    W, B = nee.tensor(w), nee.tensor(b)

    def call(jf, x, r):
        rt = r if kind != "tanh_transposed" else np.ascontiguousarray(r.T)     # passed (N, R), used .t()
        return (jf(nee.tensor(x), nee.tensor(rt), nee.tensor(c)),
                ref(x.astype(np.float64), r, c, w.astype(np.float64), b))
    _in_task_vs_launch(monkeypatch, R, K, N, lambda x, r, c: fn(x, r, c, W, B), call, 1e-4)
    assert any(made) == (nthreads > 1), made


@needs_pk
@pytest.mark.parametrize("kind", ["residual_layer_norm", "bias_softmax", "layer_norm_no_affine"])
@pytest.mark.parametrize("R,K,N", [
    (37, 1100, 96),      # 2 row blocks of 24 + 13 rows (multiples of the tile), K in 3 blocks
    (520, 128, 64),      # 3 row chunks of 256
])
def test_packed_row_epilogue_in_task(kind, R, K, N, nthreads, monkeypatch):
    # a row kernel after the packed product (Linear + residual + layer_norm, Linear + bias + softmax): on 2
    # threads the tasks are blocks of whole rows and each normalizes its rows (pk_with_row_epilogue),
    # bit-exact vs the product then the row kernel's own launch, right vs numpy float64
    made = _spy_made(monkeypatch, "pk_with_row_epilogue")
    F = nee.nn.functional
    rng = np.random.default_rng(R + K + N)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    b = rng.standard_normal(N).astype(np.float32)
    g = rng.standard_normal(N).astype(np.float32)
    be = rng.standard_normal(N).astype(np.float32)
    W, B, G, BE = (nee.tensor(v) for v in (w, b, g, be))

    def ln(y, affine=True):
        m = y.mean(-1, keepdims=True)
        z = (y - m) / np.sqrt(((y - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        return z * g + be if affine else z
    if kind == "residual_layer_norm":
        def fn(x, r):
            y = r + F.linear(x, W, B)
            return y, F.layer_norm(y, (N,), G, BE)

        def ref(x, r):
            y = r + x @ w.T + b
            return y, ln(y)
    elif kind == "bias_softmax":
        def fn(x, r):
            return F.softmax(F.linear(x, W, B) * 2.0, dim=-1)

        def ref(x, r):
            y = (x @ w.T + b) * 2.0
            e = np.exp(y - y.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
    else:
        def fn(x, r):
            return F.layer_norm(F.linear(x, W) - r, (N,))

        def ref(x, r):
            return ln(x @ w.T - r, False)

    def call(jf, x, r):
        return jf(nee.tensor(x), nee.tensor(r)), ref(x.astype(np.float64), r.astype(np.float64))
    _in_task_vs_launch(monkeypatch, R, K, N, fn, call, 2e-4)
    assert any(made) == (nthreads > 1), made
