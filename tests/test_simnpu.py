"""The reference NPU plugin (plugins/neetorch-simnpu), through the real entry point.

Every claimed op x dtype against a numpy reference of the device's arithmetic model
(int8: exact products wrapped to int8; float16: float32 accumulation rounded once), the
tile padding and the on-chip memory bound, refusals with their reasons, visible eager
fallback and strict mode.  Skipped unless the plugin is installed
(``python3 -m pip install -e plugins/neetorch-simnpu``).
"""
from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch.devices import FallbackError, get_backend

if "simnpu" not in {ep.name for ep in entry_points(group="neetorch.devices")}:
    pytest.skip("the simnpu plugin is not installed (python3 -m pip install -e plugins/neetorch-simnpu)",
                allow_module_level=True)

from neetorch_simnpu import CLAIMS, TILE, NPUArray, SimNPUBackend

DEV = nee.device("simnpu")
BK = get_backend(DEV)
F16, I8 = np.float16, np.int8


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


def rand(shape, dtype, rng, lo=-127, hi=128):
    if np.dtype(dtype) == np.int8:
        return rng.integers(lo, hi, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(dtype)


def ref_matmul(a, b):
    """The device's model: int8 -> exact products, wrapped to int8; float16 -> float32 sums, one rounding."""
    if a.dtype == np.int8:
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int8)
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)


def ref_conv2d(x, w, b, stride, pad):
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    pt, pb, pl, pr = pad
    xp = np.zeros((N, C, H + pt + pb, W + pl + pr), np.float64)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    OH = (H + pt + pb - KH) // stride[0] + 1
    OW = (W + pl + pr - KW) // stride[1] + 1
    out = np.zeros((N, O, OH, OW), np.float64)
    for i in range(OH):
        for j in range(OW):
            patch = xp[:, :, i * stride[0]:i * stride[0] + KH, j * stride[1]:j * stride[1] + KW]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w.astype(np.float64))
    if b is not None:
        out += b.astype(np.float64).reshape(1, O, 1, 1)
    return out.astype(np.float16)


def assert_f16(got, want, ulps=1):
    """float16 results within ``ulps`` units in the last place (float32 sums in another order may differ
    by one rounding); most elements must be identical."""
    assert got.dtype == np.float16 and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    assert np.all(np.abs(g - w) <= ulps * ulp + 1e-7), np.max(np.abs(g - w) / ulp)
    assert np.mean(got == want) > 0.95


# ---------------------------------------------------------------- the plugin as neetorch sees it
def test_listed_through_the_entry_point():
    info = {i.type: i for i in nee.devices()}["simnpu"]
    assert info.available and info.count == 1 and info.plugin == "neetorch_simnpu:SimNPUBackend"
    assert isinstance(BK, SimNPUBackend) and BK.device == DEV
    assert SimNPUBackend.static_claims() == CLAIMS
    assert {d for ds in CLAIMS.values() for d in ds} == {"int8", "float16"}


def test_storage_is_device_memory_not_shared():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = BK.memory_stats()["allocated_bytes"]
    t = npu(a)
    assert isinstance(t._data, NPUArray) and BK.memory_stats()["allocated_bytes"] >= before + a.nbytes
    a[0, 0] = 99                                  # the device holds its own copy
    assert host(t)[0, 0] == 0
    with pytest.raises(TypeError, match="simnpu"):
        t.numpy()
    for dt in ("bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64"):
        v = (np.arange(6) % 2).astype(dt).reshape(2, 3)
        np.testing.assert_array_equal(host(npu(v)), v)
    np.testing.assert_array_equal(host(nee.zeros(2, 3, device=DEV, dtype=nee.float16)), np.zeros((2, 3), F16))
    np.testing.assert_array_equal(host(nee.full((2,), 7, device=DEV, dtype=nee.int8)), [7, 7])
    # views share device storage
    np.testing.assert_array_equal(host(t.t()), np.arange(12, dtype=np.float32).reshape(3, 4).T)
    np.testing.assert_array_equal(host(t[1:, ::2]), np.arange(12, dtype=np.float32).reshape(3, 4)[1:, ::2])


# ---------------------------------------------------------------- every claimed op x dtype
@pytest.mark.parametrize("dt", [I8, F16], ids=["int8", "float16"])
@pytest.mark.parametrize("shapes", [((5, 20), (20, 7)), ((3, 17, 33), (33, 16)), ((2, 1, 4, 9), (3, 9, 18)),
                                    ((16, 32), (32, 16))])
def test_matmul(dt, shapes):
    rng = np.random.default_rng(1)
    a, b = rand(shapes[0], dt, rng), rand(shapes[1], dt, rng)
    r = npu(a) @ npu(b)
    got, want = host(r), ref_matmul(a, b)
    if dt is I8:
        np.testing.assert_array_equal(got, want)   # wraps exactly like the CPU's int8 matmul
        np.testing.assert_array_equal(got, (nee.tensor(a) @ nee.tensor(b)).numpy())
    else:
        assert_f16(got, want)
    assert len(nee.fallback_report()) == 0


def test_matmul_pads_to_tiles_and_accumulates_int8_in_int32():
    rng = np.random.default_rng(2)
    a, b = rand((5, 20), I8, rng), rand((20, 7), I8, rng)
    macs = BK.macs
    host(npu(a) @ npu(b))
    assert BK.macs - macs == 16 * 32 * 16                      # M, K, N padded to multiples of TILE=16
    assert TILE == 16
    # int8 sums that overflow int8 (and int16) but not int32: the wrapped result is exact
    a = np.full((4, 64), 127, I8)
    b = np.full((64, 4), 127, I8)
    np.testing.assert_array_equal(host(npu(a) @ npu(b)), np.full((4, 4), (127 * 127 * 64) % 256, np.int64)
                                  .astype(np.uint8).view(I8))


def test_float16_matmul_rounds_once():
    # 1 + 2^-11 is not a float16: summing four times in float16 would lose it; float32 keeps it until the end
    a = np.array([[1.0, 2 ** -11, 2 ** -11, 2 ** -11]], F16)
    b = np.ones((4, 1), F16)
    assert host(npu(a) @ npu(b))[0, 0] == np.float16(1.0 + 3 * 2 ** -11)
    assert np.float16(1.0) + np.float16(2 ** -11) == np.float16(1.0)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), (1, "same")])
def test_conv2d_float16(bias, stride, padding):
    rng = np.random.default_rng(3)
    x = rand((2, 3, 9, 10), F16, rng)
    w = (rand((5, 3, 3, 2), F16, rng) * 0.5).astype(F16)
    b = rand((5,), F16, rng) if bias else None
    r = F.conv2d(npu(x), npu(w), npu(b) if bias else None, stride=stride, padding=padding)
    if padding == "same":
        pad = (1, 1, 0, 1)
    else:
        pad = (padding,) * 4
    assert_f16(host(r), ref_conv2d(x, w, b, (stride, stride), pad))
    assert BK.memory_stats()["launches"].get("conv2d", 0) > 0
    assert len(nee.fallback_report()) == 0


@pytest.mark.parametrize("dt", [I8, F16], ids=["int8", "float16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "relu"])
def test_vector_ops(op, dt):
    rng = np.random.default_rng(4)
    a, b = rand((6, 17), dt, rng), rand((17,), dt, rng)        # broadcast, and int8 values that wrap
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}.get(op)
    with np.errstate(over="ignore"):
        if op == "relu":
            got, want = host(nee.relu(npu(a))), np.maximum(a, np.zeros((), dt))
        else:
            got, want = host(getattr(nee, op)(npu(a), npu(b))), fn(a, b)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dt
    # non-contiguous operands
    at = npu(a.T.copy()).t()
    got2 = host(nee.relu(at)) if op == "relu" else host(getattr(nee, op)(at, npu(b)))
    np.testing.assert_array_equal(got2, want)
    assert len(nee.fallback_report()) == 0


def test_in_place_and_out():
    rng = np.random.default_rng(5)
    a, b = rand((4, 8), F16, rng), rand((4, 8), F16, rng)
    x = npu(a)
    x.add_(npu(b))
    np.testing.assert_array_equal(host(x), a + b)
    out = nee.empty(4, 8, dtype=nee.float16, device=DEV)
    nee.mul(npu(a), npu(b), out=out)
    np.testing.assert_array_equal(host(out), a * b)
    assert len(nee.fallback_report()) == 0


# ---------------------------------------------------------------- refusals, with reasons
def test_refusals_name_the_reason():
    f16, f32, i8 = nee.float16, nee.float32, nee.int8
    assert "no gelu engine" in BK.supports("gelu", (f16, f16))
    assert "not float32" in BK.supports("matmul", (f32, f32, f32))
    assert "mixed" in BK.supports("add", (f16, i8, f16))
    assert "not int8" in BK.supports("conv2d", (i8, i8, i8))
    assert BK.supports("matmul", (i8, i8, i8)) is None
    from neetorch.ops.registry import Meta
    big = BK.supports_call("matmul", [Meta((1024, 1024), f16), Meta((1024, 1024), f16)],
                           [Meta((1024, 1024), f16)], {})
    assert "exceeds the 4194304 B on-chip memory" in big and "1024x1024" in big
    assert BK.supports_call("matmul", [Meta((256, 256), f16), Meta((256, 256), f16)], [Meta((256, 256), f16)],
                            {}) is None
    conv = [Meta((1, 4, 8, 8), f16), Meta((4, 2, 3, 3), f16)], [Meta((1, 4, 6, 6), f16)]
    assert "groups=2" in BK.supports_call("conv2d", *conv, {"groups": 2, "dilation": (1, 1)})
    assert "dilation" in BK.supports_call("conv2d", *conv, {"groups": 1, "dilation": (2, 2)})


def test_on_chip_memory_bound_falls_back_eagerly_with_the_reason():
    rng = np.random.default_rng(6)
    a, b = rand((64, 64), F16, rng), rand((64, 64), F16, rng)
    need = BK.working_set(64, 64, 64, "float16")
    assert need == (64 * 64 * 2) * 2 + 64 * 64 * 4
    BK.sram_bytes = need - 1                      # a shape-dependent refusal (asked on every call)
    r = npu(a) @ npu(b)
    assert r.device == DEV
    assert_f16(host(r), ref_matmul(a, b))
    (rec,) = nee.fallback_report().records.values()
    assert rec.op == "matmul" and "on-chip memory" in rec.reason and rec.count == 1
    assert rec.bytes_moved == 3 * 64 * 64 * 2
    small = npu(a[:16, :16]) @ npu(b[:16, :16])  # fits: runs on the device
    assert_f16(host(small), ref_matmul(a[:16, :16], b[:16, :16]))
    assert len(nee.fallback_report()) == 1
    BK.sram_bytes = need
    host(npu(a) @ npu(b))
    assert len(nee.fallback_report()) == 1


def test_grouped_conv_falls_back():
    rng = np.random.default_rng(7)
    x, w = rand((1, 4, 6, 6), F16, rng), rand((4, 1, 3, 3), F16, rng)
    r = F.conv2d(npu(x), npu(w), groups=4)
    want = F.conv2d(nee.tensor(x), nee.tensor(w), groups=4).numpy()
    np.testing.assert_array_equal(host(r), want)
    (rec,) = nee.fallback_report().records.values()
    assert rec.op == "conv2d" and "groups=4" in rec.reason


def test_eager_fallback_is_reported():
    rng = np.random.default_rng(8)
    a = rand((4, 8), F16, rng)
    x = npu(a)
    for _ in range(2):
        g = nee.nn.functional.gelu(x)
        assert g.device == DEV
    np.testing.assert_array_equal(host(g), nee.nn.functional.gelu(nee.tensor(a)).numpy())
    y = npu(a.astype(np.float32)) @ npu(a.T.astype(np.float32))     # float32 is not claimed at all
    np.testing.assert_allclose(host(y), a.astype(np.float32) @ a.T.astype(np.float32), rtol=1e-6)
    recs = {r.op: r for r in nee.fallback_report().records.values()}
    assert recs["gelu"].count == 2 and recs["gelu"].bytes_moved == 2 * 2 * a.nbytes
    assert recs["gelu"].dtypes == ("float16", "float16") and recs["gelu"].device == "simnpu:0"
    assert "not float32" in recs["matmul"].reason
    assert "gelu" in str(nee.fallback_report())


def test_strict_mode():
    x = npu(np.ones((4, 4), F16))
    nee.set_strict(True)
    with pytest.raises(FallbackError, match=r"gelu on simnpu:0 .*no gelu engine"):
        nee.nn.functional.gelu(x)
    BK.sram_bytes = 16
    with pytest.raises(FallbackError, match="matmul.*on-chip memory"):
        x @ x
    BK.sram_bytes = 4 << 20
    np.testing.assert_array_equal(host(nee.relu(x @ x + x)), np.full((4, 4), 5, F16))   # claimed: runs
    assert len(nee.fallback_report()) == 0
