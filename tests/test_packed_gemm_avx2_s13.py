"""The packed float32 GEMM for frozen weights (kernels/linalg.py ``_pk_*``) with 8-lane vectors (AVX2 + FMA: 6 x 16
tiles on 16-column panels): differential vs numpy float64 on odd shapes (rows 5..1030, not multiples of the 6-row
tile; K odd and over the K block; N multiples of the 16-column panel but not of 32), row-strided / batched /
transposed activations, C and F weights, 1 and 2 threads, fused epilogues (elementwise and row kernels in the
tasks), the shape rule, the width in the cache keys, and the AVX-512 kernel's IR text unchanged.

On an AVX-512 host the 8-lane kernel is forced (``_pk_set_width(8)``); the AVX-512 IR check runs everywhere.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import linalg as L
from neetorch.devices.cpu.kernels import winograd

# sha256 of linalg._pk_ir()'s text (the AVX-512 kernel, 12 x 32 tiles): as the 8-lane variant left it until session
# 29, whose main loop gained the partial last panel (a scratch tile on the stack; the tiles' text unchanged:
# TILES_SHA256)
AVX512_IR_SHA256 = "8a08fceeb0ce6788eeb102d3e8ccaad74ab6a68bedbb4d9be81257e7a1c1ef07"
TILES_SHA256 = "9fb5f91cdd47636f3a637e908a5a34e551d106047b6aa44cfec4057aed210d48"


def _host_avx2() -> bool:
    try:
        from neetorch.devices.cpu import llvm_render
        _, llvm = llvm_render._init()
        f = llvm.get_host_cpu_features().flatten().split(",")
        return "+avx2" in f and "+fma" in f
    except Exception:   # noqa: BLE001
        return False


needs_avx2 = pytest.mark.skipif(not _host_avx2(), reason="the 8-lane packed kernel needs AVX2 + FMA")


@pytest.fixture
def avx2(monkeypatch):
    """The 8-lane kernel (also on an AVX-512 host), the AVX2 shape rule off (every product it can take)."""
    assert L._pk_host_ok()
    old = L.PK_VEC
    L._pk_set_width(8)
    monkeypatch.setattr(L, "PK_AVX2_RULE", [False])
    yield
    L._pk_set_width(old)


def _frozen(w):
    assert winograd.freeze(w)
    return w


def _ref(a, b):
    return np.einsum("...ij,...jk->...ik", a.astype(np.float64), b.astype(np.float64), optimize=False)


def test_avx512_ir_text_unchanged():
    assert hashlib.sha256(L._pk_ir(16).encode()).hexdigest() == AVX512_IR_SHA256
    tiles = "\n".join(L._pk_tile_ir(mr, 16) for mr in range(1, 13))
    assert hashlib.sha256(tiles.encode()).hexdigest() == TILES_SHA256
    assert L._pk_ir() == L._pk_ir(16)
    t8 = L._pk_ir(8)
    assert "<16 x" not in t8 and "v16f32" not in t8 and "@llvm.fma.v8f32" in t8
    assert "@tile6(" in t8 and "@tile7(" not in t8          # 6 x 16 tiles: 12 ymm accumulators
    assert "align 64" not in t8 and "align 32" in t8        # the panel's second vector is 32 bytes in
    assert L._pk_shape(16)[:2] == (12, 32) and L._pk_shape(8)[:2] == (6, 16)


def test_width_in_compile_key(monkeypatch):
    from neetorch.devices.cpu import llvm_render
    keys = []

    class Seen(Exception):
        pass

    def rec(key, render, *rest):
        keys.append(key)
        raise Seen
    monkeypatch.setattr(L, "_pk_fns", {})
    monkeypatch.setattr(llvm_render, "compile_ir", rec)
    for w in (8, 16):
        with pytest.raises(Seen):
            L._pk_kernel(w)
    assert keys[0].startswith("gemm_packed_v8_") and keys[1].startswith("gemm_packed_v16_")
    assert keys[0].rsplit("_", 1)[1] != keys[1].rsplit("_", 1)[1]


@needs_avx2
@pytest.mark.parametrize("M,K,N,wlayout", [
    (5, 17, 16, "C"),            # the fewest rows taken, one panel
    (11, 513, 48, "F"),          # under 2 tiles, K in 2 blocks, 3 panels, a transposed weight (Gemm transB)
    (37, 1037, 80, "C"),         # K odd in 3 blocks, 5 panels (N not a multiple of 32)
    (16, 1024, 16, "C"),         # rows 4 KiB apart: the padded copy of a
    (515, 301, 64, "C"),         # 3 row chunks (256, 256, 3)
    (1030, 129, 160, "F"),       # 5 row chunks, the last 6 rows
])
def test_avx2_packed_product_right(avx2, M, K, N, wlayout, nthreads):
    rng = np.random.default_rng(M * 7 + K + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    w = _frozen(np.asfortranarray(w) if wlayout == "F" else w)
    out = np.full((M, N), np.nan, np.float32)
    g = L._pk_caller(out, a, w)
    assert g is not None
    if nthreads > 1 and M * K * N >= L.DRV_MNK and (N > 16 or M >= 2 * L.PK_MC):
        assert g.tasks > 1      # columns (or row chunks) shared out
    for _ in range(2):
        g(out, a, w)
        np.testing.assert_allclose(out, _ref(a, w), rtol=2e-4, atol=2e-4)
    # the panels of the 8-lane kernel: (N / 16, K, 16)
    assert winograd.weights(w, ("gemm_pk", 16, 8, w.strides), L.pk_pack).shape == (N // 16, K, 16)
    # a row-strided activation (a slice of a wider buffer), a batched one merged into rows, a strided output
    big = rng.standard_normal((M, K + 9)).astype(np.float32)
    a1 = big[:, 3:3 + K]
    wide = np.full((M, N + 16), np.nan, np.float32)
    o1 = wide[:, 16:]
    g1 = L._pk_caller(o1, a1, w)
    assert g1 is not None
    g1(o1, a1, w)
    np.testing.assert_allclose(o1, _ref(a1, w), rtol=2e-4, atol=2e-4)
    assert np.isnan(wide[:, :16]).all()
    if M % 2 == 0:
        a3 = rng.standard_normal((2, M // 2, K)).astype(np.float32)
        o3 = np.empty((2, M // 2, N), np.float32)
        g3 = L._pk_caller(o3, a3, w)
        assert g3 is not None
        g3(o3, a3, w)
        np.testing.assert_allclose(o3, _ref(a3, w), rtol=2e-4, atol=2e-4)
    # another weight of the same layout through the bound caller: its own product (matmul_into)
    w2 = rng.standard_normal((K, N)).astype(np.float32)
    w2 = np.asfortranarray(w2) if wlayout == "F" else w2
    g(out, a, w2)
    np.testing.assert_allclose(out, _ref(a, w2), rtol=2e-4, atol=2e-4)


@needs_avx2
def test_avx2_not_taken_and_rule(avx2):
    rng = np.random.default_rng(3)
    w = _frozen(rng.standard_normal((300, 64)).astype(np.float32))
    a = rng.standard_normal((1030, 300)).astype(np.float32)
    out = np.empty((1030, 64), np.float32)
    # a transposed activation (K not the unit-stride dim): not taken (BLAS), its product right through matmul_into
    at = np.asfortranarray(a)
    assert L._pk_caller(out, at, w) is None
    L.matmul_into(out, at, w)
    np.testing.assert_allclose(out, _ref(a, w), rtol=2e-4, atol=2e-4)
    w24 = _frozen(rng.standard_normal((300, 24)).astype(np.float32))
    g24 = L._pk_caller(np.empty((1030, 24), np.float32), a, w24)     # N not a multiple of 16: taken since s29
    assert g24 is not None
    o24 = np.empty((1030, 24), np.float32)
    g24(o24, a, w24)
    np.testing.assert_allclose(o24, _ref(a, w24), rtol=2e-4, atol=2e-4)
    assert L._pk_caller(np.empty((4, 64), np.float32), a[:4], w) is None       # few rows: other kernels
    assert L._pk_caller(out, a, w) is not None
    # the AVX2 rule: row chunks (2 PK_MC rows and up) only with K <= PK_AVX2_LONG_K
    L.PK_AVX2_RULE[0] = True
    assert L._pk_caller(out, a, w) is None
    assert L._pk_caller(out[:2 * L.PK_MC - 1], a[:2 * L.PK_MC - 1], w) is not None
    wk = _frozen(rng.standard_normal((L.PK_AVX2_LONG_K, 64)).astype(np.float32))
    ak = rng.standard_normal((1030, L.PK_AVX2_LONG_K)).astype(np.float32)
    g = L._pk_caller(out, ak, wk)
    assert g is not None
    g(out, ak, wk)
    np.testing.assert_allclose(out, _ref(ak, wk), rtol=2e-4, atol=2e-4)


@needs_avx2
def test_avx2_frozen_jit_transposed_activation(avx2, nthreads):
    # x.t() @ W in a frozen jit function: the transposed activation leaves the packed path, the results right
    rng = np.random.default_rng(5)
    w = rng.standard_normal((48, 80)).astype(np.float32)
    W = nee.tensor(w)
    jf = nee.jit(lambda x: (x.t() @ W, x.t().contiguous() @ W), freeze=True)
    for _ in range(3):
        x = rng.standard_normal((48, 37)).astype(np.float32)
        for got in jf(nee.tensor(x)):
            np.testing.assert_allclose(got.numpy(), _ref(x.T, w), rtol=2e-4, atol=2e-4)


# ---- fused epilogues in the 8-lane kernel's tasks (the helpers of test_gemm_speed_paths_s10)
from test_gemm_speed_paths_s10 import (  # noqa: E402
    test_packed_epilogue_in_task as _epi_test,
    test_packed_row_epilogue_in_task as _row_epi_test,
)


@needs_avx2
@pytest.mark.parametrize("kind", ["bias_gelu", "residual", "tanh_transposed", "two_outputs"])
def test_avx2_epilogue_in_task(avx2, kind, nthreads, monkeypatch):
    # 37 rows (not a multiple of 6), K = 1037 (3 blocks), N = 80 (5 panels of 16, cut 2 + 3 on 2 threads)
    _epi_test(kind, 37, 1037, 80, nthreads, monkeypatch)


@needs_avx2
@pytest.mark.parametrize("kind", ["residual_layer_norm", "bias_softmax"])
def test_avx2_row_epilogue_in_task(avx2, kind, nthreads, monkeypatch):
    # blocks of whole rows, multiples of the 6-row tile, on 2 threads
    _row_epi_test(kind, 41, 517, 80, nthreads, monkeypatch)
