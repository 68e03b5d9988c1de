"""``nee.bfloat16`` against torch.bfloat16 on the CPU.

bfloat16 is a storage dtype computed in float32 (like float16): every elementwise op widens its operands,
computes in float32 and rounds its result to bfloat16 (round to nearest even); sum/mean and products
accumulate in float32.  Results are compared bit-exactly with torch's unless a test says otherwise (float32
products summed in another order may differ by one bfloat16 ulp).
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

BF = nee.bfloat16
NPBF = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(1234)

# values that exercise rounding (ties at bfloat16's 8-bit mantissa), specials, subnormals, huge values
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 3.0039062, 0.5, 2.5, -7.75, 100.3, 1e-3,
                    1e-39, -1e-40, 3.3895e38, -3.3e38, 1e30, np.inf, -np.inf, np.nan, 65504.0, 70000.0,
                    0.1, -0.7, 12345.678, 3.14159], np.float32)


def _bf(a) -> np.ndarray:
    """float32 values rounded to bfloat16 (numpy/ml_dtypes: round to nearest even), as float32."""
    return np.asarray(a, np.float32).astype(NPBF).astype(np.float32)


def rand(*shape, scale=1.0) -> np.ndarray:
    return _bf(RNG.standard_normal(shape) * scale)


def pair(a: np.ndarray):
    """(neetorch bfloat16 tensor, torch bfloat16 tensor) holding the float32 values ``a`` (exact in bfloat16)."""
    return nee.tensor(a).to(BF), torch.from_numpy(np.array(a, np.float32)).to(torch.bfloat16)


def _np(t) -> np.ndarray:
    if isinstance(t, nee.Tensor):
        return t.float().numpy() if t.dtype.is_floating_point else t.numpy()
    return t.float().numpy() if t.is_floating_point() else t.numpy()


def same(n, t, ulp: int = 0, what: str = ""):
    """neetorch result ``n`` equals torch's ``t``: dtype, shape, values (NaNs in the same places); ``ulp``:
    units in the last place of the result's dtype allowed (float32 sums in a different order)."""
    if isinstance(t, (tuple, list)):
        assert len(n) == len(t), f"{what}: {len(n)} results vs {len(t)}"
        for i, (a, b) in enumerate(zip(n, t)):
            same(a, b, ulp, f"{what}[{i}]")
        return
    assert n.dtype.name == str(t.dtype).split(".")[-1], f"{what}: dtype {n.dtype} vs {t.dtype}"
    assert tuple(n.shape) == tuple(t.shape), f"{what}: shape {tuple(n.shape)} vs {tuple(t.shape)}"
    a, b = _np(n), _np(t)
    if ulp == 0 or a.dtype.kind != "f":
        np.testing.assert_array_equal(a, b, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=what)
    fin = np.isfinite(b)
    np.testing.assert_array_equal(a[~fin & ~np.isnan(b)], b[~fin & ~np.isnan(b)], err_msg=what)
    bits = {"bfloat16": 8, "float16": 11}.get(n.dtype.name, 24)   # significand bits: one ulp of n's dtype
    spacing = np.ldexp(1.0, np.frexp(np.abs(b[fin]).astype(np.float64))[1] - bits)
    err = np.abs(a[fin].astype(np.float64) - b[fin])
    assert np.all(err <= ulp * np.maximum(spacing, 2.0 ** -133)), f"{what}: max err {err.max()}"


# ------------------------------------------------------------------ the dtype itself
def test_dtype_attributes_and_names():
    assert BF is nee.bfloat16 and repr(BF) == "neetorch.bfloat16"
    assert BF.is_floating_point and not BF.is_complex and BF.is_signed and BF.itemsize == 2
    assert BF.np == NPBF
    from neetorch.tensor.dtypes import to_dtype
    assert to_dtype("bfloat16") is BF and to_dtype(ml_dtypes.bfloat16) is BF and to_dtype(NPBF) is BF
    import pickle
    assert pickle.loads(pickle.dumps(BF)) is BF


def test_finfo_matches_torch():
    a, b = nee.finfo(BF), torch.finfo(torch.bfloat16)
    for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-6), k
    assert a.eps == 0.0078125 and a.bits == 16
    assert BF.max == pytest.approx(3.3895313892515355e38) and BF.min == -BF.max


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int64", "int32", "int16", "int8", "uint8",
                                  "bool", "bfloat16", "complex64", "complex128"])
def test_promote_types_every_pair(name):
    d, td = getattr(nee, name), getattr(torch, name)
    for x, y, tx, ty in ((BF, d, torch.bfloat16, td), (d, BF, td, torch.bfloat16)):
        assert nee.promote_types(x, y).name == str(torch.promote_types(tx, ty)).split(".")[-1], (x, y)


def test_result_type_with_scalars_and_0d():
    x, tx = pair(rand(3))
    cases = [
        (lambda L, x: (x, 2), "int scalar"), (lambda L, x: (x, 2.5), "float scalar"),
        (lambda L, x: (x, True), "bool scalar"),
        (lambda L, x: (x, L.tensor(1.5, dtype=L.float64)), "0-d float64"),
        (lambda L, x: (x, L.tensor([1.5], dtype=L.float16)), "1-d float16"),
        (lambda L, x: (x, L.ones(3, dtype=L.int32)), "int32 tensor"),
        (lambda L, x: (L.tensor(1.5, dtype=L.bfloat16), L.ones(3, dtype=L.int32)), "0-d bf16 + int tensor"),
        (lambda L, x: (L.tensor(1.5, dtype=L.bfloat16), L.ones(3, dtype=L.float16)), "0-d bf16 + f16 tensor"),
        (lambda L, x: (L.tensor(1.5, dtype=L.bfloat16), 2.5), "0-d bf16 + float"),
        (lambda L, x: (x, L.tensor(3)), "0-d int"),
    ]
    for f, what in cases:
        a, b = f(nee, x), f(torch, tx)
        assert nee.result_type(*a).name == str(torch.result_type(*b)).split(".")[-1], what
        same(a[0] + a[1], b[0] + b[1], what=what)


# ------------------------------------------------------------------ creation, casts, numpy
def test_creation():
    same(nee.zeros(2, 3, dtype=BF), torch.zeros(2, 3, dtype=torch.bfloat16))
    same(nee.ones(4, dtype=BF), torch.ones(4, dtype=torch.bfloat16))
    same(nee.full((3,), 1.00390625, dtype=BF), torch.full((3,), 1.00390625, dtype=torch.bfloat16))
    # a Python float goes double -> float -> bfloat16 (two roundings), as in torch
    same(nee.full((3,), 1.0039062500000002, dtype=BF), torch.full((3,), 1.0039062500000002, dtype=torch.bfloat16))
    same(nee.full((2,), 1e6, dtype=BF), torch.full((2,), 1e6, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="overflow"):       # torch: "value cannot be converted ..."
        nee.full((2,), 1e39, dtype=BF)
    with pytest.raises(RuntimeError, match="overflow"):
        nee.zeros(2, dtype=BF).masked_fill(nee.tensor([True, False]), 3.4e38)
    same(nee.tensor([1.0, 2.00390625, -3.5, 1e-3], dtype=BF), torch.tensor([1.0, 2.00390625, -3.5, 1e-3],
                                                                            dtype=torch.bfloat16))
    same(nee.tensor([[1, 2], [3, 4]], dtype=BF), torch.tensor([[1, 2], [3, 4]], dtype=torch.bfloat16))
    same(nee.arange(0, 3, 0.3, dtype=BF), torch.arange(0, 3, 0.3, dtype=torch.bfloat16))
    same(nee.linspace(-2, 3, 9, dtype=BF), torch.linspace(-2, 3, 9, dtype=torch.bfloat16))
    same(nee.eye(3, dtype=BF), torch.eye(3, dtype=torch.bfloat16))
    assert nee.empty(2, dtype=BF).dtype is BF
    x, tx = pair(rand(2, 3))
    same(nee.zeros_like(x), torch.zeros_like(tx))
    same(nee.full_like(x, 7.1), torch.full_like(tx, 7.1))
    same(x.new_ones(2), tx.new_ones(2))


def test_casts_to_bfloat16_round_to_nearest_even():
    a = np.concatenate([SPECIAL, RNG.standard_normal(500).astype(np.float32) * 1e3,
                        (RNG.integers(0, 2 ** 32, 500, dtype=np.uint64).astype(np.uint32)).view(np.float32)])
    n, t = nee.tensor(a), torch.from_numpy(a)
    same(n.to(BF), t.to(torch.bfloat16))
    same(n.bfloat16(), t.bfloat16())
    same(n.to("bfloat16"), t.to(torch.bfloat16))
    same(n.type(BF), t.type(torch.bfloat16))
    # float64 goes through float32 (double rounding, as torch's static_cast)
    d = np.array([1.0039062500000002, 1.00390625, 1 + 2 ** -8 + 2 ** -30, 3.3895313892515355e38, 3.4e38,
                  1e-45, 2.0 ** -133, -2.0 ** -134], np.float64)
    same(nee.tensor(d).to(BF), torch.from_numpy(d).to(torch.bfloat16))
    for dt in ("float16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        src = (RNG.standard_normal(64) * 100).astype(getattr(np, dt if dt != "bool" else "bool_"))
        if dt == "float16":
            src = np.concatenate([src, np.array([65504, -65504, 6e-8, np.inf, np.nan], np.float16)])
        same(nee.tensor(src).to(BF), torch.from_numpy(src).to(torch.bfloat16), what=dt)
    big = np.array([2 ** 62 + 12345, -(2 ** 40) - 7, 16777217, 257], np.int64)
    same(nee.tensor(big).to(BF), torch.from_numpy(big).to(torch.bfloat16))


def test_casts_from_bfloat16():
    x, tx = pair(_bf(np.concatenate([SPECIAL[np.isfinite(SPECIAL) & (np.abs(SPECIAL) < 1e4)],
                                     RNG.standard_normal(200).astype(np.float32) * 60])))
    for name in ("float16", "float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"):
        same(x.to(getattr(nee, name)), tx.to(getattr(torch, name)), what=name)
    y, ty = pair(_bf(np.array([70000.0, -1e5, 1e-6, 6e-8, 3e-8, np.inf, np.nan], np.float32)))
    same(y.half(), ty.half())        # float16 overflow -> inf, subnormals rounded
    same(y.float(), ty.float())
    same(y.double(), ty.double())


def test_numpy_round_trip_and_from_numpy():
    a = _bf(RNG.standard_normal((3, 4))).astype(NPBF)
    t = nee.from_numpy(a)
    assert t.dtype is BF
    b = t.numpy()
    assert b.dtype == NPBF and np.array_equal(b.view(np.uint16), a.view(np.uint16))
    a[0, 0] = 5.0                      # from_numpy shares memory
    assert float(t[0, 0].item()) == 5.0
    assert nee.tensor(a).dtype is BF and nee.as_tensor(a).dtype is BF
    assert isinstance(t[1, 2].item(), float) and t.tolist()[1][2] == float(a[1, 2])
    # a non-contiguous bfloat16 view survives numpy and back
    v = t.T
    assert np.array_equal(v.numpy().astype(np.float32), a.T.astype(np.float32))
    assert v.contiguous().is_contiguous() and np.array_equal(v.contiguous().float().numpy(), a.T.astype(np.float32))


def test_repr_like_torch():
    for v in ([1.0, 2.5, 3.00390625], [1, 2, 3], [0.1234567], [1e-5, 3e38, float("nan"), -float("inf")]):
        n, t = nee.tensor(v, dtype=BF), torch.tensor(v, dtype=torch.bfloat16)
        assert " ".join(repr(n).replace("neetorch", "torch").split()) == " ".join(repr(t).split())


# ------------------------------------------------------------------ elementwise
UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
         "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "asinh", "atanh", "sigmoid", "erf", "erfc",
         "floor", "ceil", "round", "trunc", "frac", "sign", "reciprocal", "square", "relu", "isnan", "isinf",
         "isfinite", "signbit", "logical_not"]
ACT = ["gelu", "silu", "softplus", "mish", "elu", "selu", "leaky_relu", "hardswish", "hardsigmoid", "relu6",
       "logsigmoid", "softsign", "tanhshrink"]


def test_unary_ops():
    vals = np.concatenate([SPECIAL, _bf(RNG.standard_normal(300) * 3), _bf(RNG.uniform(-1, 1, 100))])
    x, tx = pair(_bf(vals))
    # torch's vectorized erf/gelu flush subnormals, overflow at 3e38 and lose the far tail (1 + erf(x) cancels):
    # those ops are compared on moderate values; its rsqrt rounds the square root first (one ulp apart)
    mod = _bf(vals[np.isfinite(vals) & (np.abs(vals) < 3.5) & ((np.abs(vals) > 1e-30) | (vals == 0))])
    xm, txm = pair(mod)
    nonan = _bf(vals[~np.isnan(vals)])
    for name in UNARY:
        if name in ("erf", "erfc"):
            same(getattr(xm, name)(), getattr(txm, name)(), ulp=1, what=name)
        elif name == "signbit":       # (torch's float -> bfloat16 cast of NaN sets its sign bit)
            same(nee.tensor(nonan).to(BF).signbit(), torch.from_numpy(nonan).bfloat16().signbit(), what=name)
        else:
            same(getattr(x, name)(), getattr(tx, name)(), ulp=1 if name == "rsqrt" else 0, what=name)
    for name in ACT:
        if name in ("gelu", "hardswish", "mish", "selu", "elu"):
            same(getattr(F, name)(xm), getattr(torch.nn.functional, name)(txm), ulp=1, what=name)
        else:
            same(getattr(F, name)(x), getattr(torch.nn.functional, name)(tx), what=name)
    same(F.gelu(xm, approximate="tanh"), torch.nn.functional.gelu(txm, approximate="tanh"), ulp=1, what="gelu tanh")


def test_binary_ops_broadcast_and_views():
    a, ta = pair(rand(6, 5, scale=4))
    b, tb = pair(rand(5, scale=4))
    c, tc = pair(rand(5, 6, scale=4))
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "atan2", "fmod", "remainder", "hypot",
                 "copysign", "floor_divide", "fmax", "fmin", "pow"):
        f, tf = getattr(nee, name), getattr(torch, name)
        lhs, tlhs = (a.abs(), ta.abs()) if name == "pow" else (a, ta)
        same(f(lhs, b), tf(tlhs, tb), what=name)                   # broadcast row
        same(f(lhs, c.T), tf(tlhs, tc.T), what=name + " view")     # non-contiguous operand
        same(f(lhs[::2], b[None]), tf(tlhs[::2], tb[None]), what=name + " strided")
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        same(getattr(a, name)(c.T), getattr(ta, name)(tc.T), what=name)
        same(getattr(a, name)(0.5), getattr(ta, name)(0.5), what=name + " scalar")
    same(nee.where(a > 0, a, c.T), torch.where(ta > 0, ta, tc.T))
    same(nee.where(a > 0, a, 2.5), torch.where(ta > 0, ta, 2.5))
    same(a.clamp(-0.5, 0.75), ta.clamp(-0.5, 0.75))
    same(nee.lerp(a, c.T, 0.3), torch.lerp(ta, tc.T, 0.3))
    same(nee.addcmul(a, b, c.T, value=0.5), torch.addcmul(ta, tb, tc.T, value=0.5))


def test_scalar_operands_follow_torch():
    # mul/div read a Python float at float32 precision (torch's opmath); add/sub round it to bfloat16 first
    x, tx = pair(_bf(np.array([3.0, 256.0, -5.5, 1.0, 0.3], np.float32)))
    s = 1.00390625
    for f in (lambda L, x: x * s, lambda L, x: s * x, lambda L, x: x / (1 / s), lambda L, x: x + s,
              lambda L, x: s + x, lambda L, x: x - s, lambda L, x: s - x, lambda L, x: x // 0.3,
              lambda L, x: x % 0.7, lambda L, x: x ** 2, lambda L, x: x * 70000.0, lambda L, x: x + 2,
              lambda L, x: x * True, lambda L, x: 2 ** x, lambda L, x: x.pow(0.5)):
        same(f(nee, x), f(torch, tx))


def test_mixed_dtypes():
    x, tx = pair(rand(4, 3))
    h = rand(3).astype(np.float16)
    same(x + nee.tensor(h), tx + torch.from_numpy(h))                          # -> float32
    same(x * nee.arange(3), tx * torch.arange(3))                              # -> bfloat16
    f = rand(3)
    same(x - nee.tensor(f), tx - torch.from_numpy(f))                          # -> float32
    same(x + nee.tensor(1.5, dtype=nee.float64), tx + torch.tensor(1.5, dtype=torch.float64))  # stays bf16
    same(nee.tensor([1, 2, 3], dtype=nee.int32) / nee.tensor(2.5, dtype=BF),
         torch.tensor([1, 2, 3], dtype=torch.int32) / torch.tensor(2.5, dtype=torch.bfloat16))
    y = x.clone()
    y += 1.00390625
    ty = tx.clone()
    ty += 1.00390625
    same(y, ty)
    y.mul_(nee.tensor(f))
    ty.mul_(torch.from_numpy(f))
    same(y, ty)


# ------------------------------------------------------------------ reductions
def test_reductions():
    x, tx = pair(rand(7, 33, scale=3))
    for f in (lambda L, x: x.sum(), lambda L, x: x.sum(1), lambda L, x: x.sum(0, keepdim=True),
              lambda L, x: x.mean(), lambda L, x: x.mean(1), lambda L, x: x.amax(1), lambda L, x: x.amin(0),
              lambda L, x: x.max(), lambda L, x: x.max(1), lambda L, x: x.min(0), lambda L, x: x.argmax(1),
              lambda L, x: x.argmin(), lambda L, x: L.logsumexp(x, 1), lambda L, x: x.norm(),
              lambda L, x: x.var(1), lambda L, x: x.std(), lambda L, x: x.cumsum(1), lambda L, x: x.cummax(0),
              lambda L, x: x.sum(dtype=L.float32), lambda L, x: x.T.sum(1), lambda L, x: x[:, ::3].mean(0),
              lambda L, x: x.sort(dim=1, stable=True), lambda L, x: x.topk(3),
              lambda L, x: x.median(1).values, lambda L, x: (x > 0).sum(), lambda L, x: x.any(), lambda L, x:
              x.count_nonzero()):
        same(f(nee, x), f(torch, tx))
    # prod: exact products only (torch multiplies in bfloat16, rounding each partial product in its vector
    # lanes' order; neetorch accumulates in float32 and rounds once)
    p, tp = pair(RNG.choice(np.array([1, -1, 2, 0.5, -0.25, 4], np.float32), (5, 12)))
    same(p.prod(1), tp.prod(1))
    same(p.prod(), tp.prod())
    same(p.cumprod(1), tp.cumprod(1))


def test_log_softmax_last_dim_rounds_like_torch():
    # torch's last-dim kernel rounds the row's sum of exponentials and its log to bfloat16
    for shape in ((64, 100), (3, 7), (5, 1), (2, 3, 300)):
        x, tx = pair(rand(*shape, scale=3))
        same(F.log_softmax(x, -1), torch.log_softmax(tx, -1))
        same(F.softmax(x, -1), torch.softmax(tx, -1), ulp=1)


def test_sum_accumulates_in_float32():
    # 4096 ones + small values: a bfloat16 accumulator would stall at 256
    x, tx = pair(np.ones(4096, np.float32))
    same(x.sum(), tx.sum())
    assert float(x.sum().item()) == 4096.0
    same(x.mean(), tx.mean())


# ------------------------------------------------------------------ products and nn
def test_matmul_family():
    a, ta = pair(rand(17, 64))
    b, tb = pair(rand(64, 9))
    bias, tbias = pair(rand(9))
    # float32 accumulation: sums in another order may round to the neighbouring bfloat16 value
    same(a @ b, ta @ tb, ulp=1)
    same(a.mm(b), ta.mm(tb), ulp=1)
    same(nee.matmul(a, b[:, 0]), torch.matmul(ta, tb[:, 0]), ulp=1)
    same(nee.bmm(a.reshape(1, 17, 64), b[None]), torch.bmm(ta.reshape(1, 17, 64), tb[None]), ulp=1)
    same(F.linear(a, b.T, bias), torch.nn.functional.linear(ta, tb.T, tbias), ulp=1)   # bias added once
    same(nee.addmm(bias, a, b), torch.addmm(tbias, ta, tb), ulp=1)
    same(nee.addmm(bias, a, b, beta=0.5, alpha=2), torch.addmm(tbias, ta, tb, beta=0.5, alpha=2), ulp=1)
    same(nee.einsum("ik,kj->ij", a, b), torch.einsum("ik,kj->ij", ta, tb), ulp=1)
    # small exact cases must match bit for bit
    s, ts = pair(_bf(np.arange(12, dtype=np.float32).reshape(3, 4) / 8))
    same(s @ s.T, ts @ ts.T)
    k, tk = pair(np.full((2, 300), 1.0 / 64, np.float32))
    same(k @ k.T, tk @ tk.T)   # 300/4096: exact in float32, rounded once


def test_softmax_layer_norm_conv_pool():
    x, tx = pair(rand(6, 40, scale=3))
    same(F.softmax(x, -1), torch.softmax(tx, -1), ulp=1)
    same(F.log_softmax(x, 0), torch.log_softmax(tx, 0), ulp=1)
    w, tw = pair(rand(40))
    b, tb = pair(rand(40))
    same(F.layer_norm(x, (40,), w, b), torch.nn.functional.layer_norm(tx, (40,), tw, tb), ulp=1)
    same(F.layer_norm(x, (40,)), torch.nn.functional.layer_norm(tx, (40,)), ulp=1)
    i4, ti4 = pair(rand(2, 3, 9, 9))
    w4, tw4 = pair(rand(4, 3, 3, 3))
    b4, tb4 = pair(rand(4))
    same(F.conv2d(i4, w4, b4, padding=1), torch.nn.functional.conv2d(ti4, tw4, tb4, padding=1), ulp=1)
    same(F.conv2d(i4, w4, stride=2), torch.nn.functional.conv2d(ti4, tw4, stride=2), ulp=1)
    same(F.max_pool2d(i4, 2), torch.nn.functional.max_pool2d(ti4, 2))
    same(F.avg_pool2d(i4, 3), torch.nn.functional.avg_pool2d(ti4, 3), ulp=1)
    same(F.adaptive_avg_pool2d(i4, 1), torch.nn.functional.adaptive_avg_pool2d(ti4, 1), ulp=1)
    m, tm = pair(rand(3))
    v, tv = pair(np.abs(rand(3)) + 0.5)
    # float32 factors and one rounding (torch's result with weights of one sign; with mixed signs its bfloat16
    # kernel lands a few ulps away from its own float32 answer)
    same(F.batch_norm(i4, m, v, w4[0, :, 0, 0].abs(), b4[:3]),
         torch.nn.functional.batch_norm(ti4, tm, tv, tw4[0, :, 0, 0].abs(), tb4[:3]))


# ------------------------------------------------------------------ data movement
def test_cat_index_views():
    a, ta = pair(rand(4, 5))
    b, tb = pair(rand(2, 5))
    same(nee.cat([a, b]), torch.cat([ta, tb]))
    same(nee.stack([a, a * 2]), torch.stack([ta, ta * 2]))
    idx = [0, 3, 1]
    same(a[nee.tensor(idx)], ta[torch.tensor(idx)])
    same(a[1:3, ::2], ta[1:3, ::2])
    same(a.T.contiguous(), ta.T.contiguous())
    same(a.reshape(5, 4), ta.reshape(5, 4))
    same(a.permute(1, 0)[2], ta.permute(1, 0)[2])
    same(a.flip(0), ta.flip(0))
    same(a[a > 0], ta[ta > 0])
    same(nee.gather(a, 1, nee.tensor([[0, 1]] * 4)), torch.gather(ta, 1, torch.tensor([[0, 1]] * 4)))
    same(a.index_select(1, nee.tensor([4, 0])), ta.index_select(1, torch.tensor([4, 0])))
    same(a.masked_fill(a < 0, 1.00390625), ta.masked_fill(ta < 0, 1.00390625))
    c, tc = a.clone(), ta.clone()
    c[1] = 2.00390625
    tc[1] = 2.00390625
    c[:, 0] = b[0, :4]
    tc[:, 0] = tb[0, :4]
    same(c, tc)
    same(F.pad(a, (1, 2)), torch.nn.functional.pad(ta, (1, 2)))
    same(a.view(nee.int16), ta.view(torch.int16))          # the bits: a bitcast, like torch
    same(a.unsqueeze(0).expand(3, 4, 5).sum(0), ta.unsqueeze(0).expand(3, 4, 5).sum(0))


def test_order_ops_with_nan():
    # (numpy's sorts compare ml_dtypes' bfloat16 NaN without a total order: these kernels run on float32 copies)
    v = np.array([[3.0, np.nan, -1.0, 2.0, np.nan, 0.5, -np.inf, 7.0], [1, 2, 3, np.inf, -2, 0, 5, 4]], np.float32)
    x, tx = pair(v)
    for f in (lambda L, x: x.sort(dim=1, stable=True), lambda L, x: x.sort(dim=1, descending=True, stable=True),
              lambda L, x: x.topk(3), lambda L, x: x.median(1), lambda L, x: x.nanmedian(1),
              lambda L, x: x.kthvalue(2, 1), lambda L, x: x.max(1), lambda L, x: L.unique(x),
              lambda L, x: x.cummax(1), lambda L, x: x.mode(1), lambda L, x: L.msort(x), lambda L, x: L.isin(x, x[0]),
              lambda L, x: x.argsort(dim=1, stable=True), lambda L, x: L.fmax(x, x.flip(1))):
        same(f(nee, x), f(torch, tx))


def test_accumulating_index_ops():
    # index_add / scatter_add / scatter_reduce accumulate in float32 and round once (torch); index_put_ with
    # accumulate=True adds in bfloat16 one element at a time, in index order (torch too)
    src, tsrc = pair(rand(50, 3))
    i = RNG.integers(0, 4, 50)
    ni, ti = nee.tensor(i), torch.from_numpy(i)
    z, tz = nee.zeros(4, 3, dtype=BF), torch.zeros(4, 3, dtype=torch.bfloat16)
    same(z.index_add(0, ni, src), tz.index_add(0, ti, tsrc))
    same(z.scatter_add(0, ni[:, None].expand(50, 3), src), tz.scatter_add(0, ti[:, None].expand(50, 3), tsrc))
    for red in ("sum", "amax", "amin"):
        same(z.scatter_reduce(0, ni[:, None].expand(50, 3), src, red),
             tz.scatter_reduce(0, ti[:, None].expand(50, 3), tsrc, red), what=red)
    same(z.scatter_reduce(0, ni[:, None].expand(50, 3), src, "mean"),
         tz.scatter_reduce(0, ti[:, None].expand(50, 3), tsrc, "mean"), ulp=1)
    same(z.clone().index_put_((ni,), src, accumulate=True), tz.clone().index_put_((ti,), tsrc, accumulate=True))


# ------------------------------------------------------------------ jit, devices, serialization
def test_jit_equals_eager():
    def fn(x, w, b):
        y = (x * 1.00390625 + 0.25).exp() - x.sin()
        z = F.softmax(y @ w, -1) + F.layer_norm(y, (8,)).sum(-1, keepdim=True)
        return (z.relu() * 3).float(), F.linear(x, w.T, b), (x + y).tanh() * x
    x, w, b = (nee.tensor(rand(*s)).to(BF) for s in ((5, 8), (8, 8), (8,)))
    f = nee.jit(fn)
    for _ in range(2):
        for r, e in zip(f(x, w, b), fn(x, w, b)):
            assert r.dtype is e.dtype
            assert np.array_equal(r.float().numpy(), e.float().numpy(), equal_nan=True)


def test_other_devices_refuse_bfloat16_storage():
    x = nee.ones(3, dtype=BF)
    for info in nee.devices():
        if info.type == "cpu" or not info.available:
            continue
        with pytest.raises(TypeError, match="bfloat16"):
            x.to(info.type)


def test_safetensors_and_save_round_trip(tmp_path):
    x = nee.tensor(rand(3, 4)).to(BF)
    nee.save({"w": x, "v": x.T}, tmp_path / "a.npz")
    d = nee.load(tmp_path / "a.npz")
    assert d["w"].dtype is BF and bool((d["w"] == x).all()) and bool((d["v"] == x.T).all())
    pytest.importorskip("safetensors")
    nee.save_safetensors({"w": x}, tmp_path / "a.safetensors")
    d = nee.load_safetensors(tmp_path / "a.safetensors")
    assert d["w"].dtype is BF and bool((d["w"] == x).all())
    from safetensors.torch import load_file
    same(x, load_file(str(tmp_path / "a.safetensors"))["w"])


def test_errors_name_the_dtype():
    x = nee.ones(2, 2, dtype=BF)
    with pytest.raises(RuntimeError, match="BFloat16"):
        nee.linalg.inv(x)
    with pytest.raises(RuntimeError):
        x @ nee.ones(2, 2)              # mixed dtypes in a product: refused like torch
    with pytest.raises(TypeError):
        nee.finfo(nee.int32)


def test_import_without_ml_dtypes_names_the_package():
    import subprocess
    import sys
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import neetorch as nee\n"
            "assert float((nee.ones(2) + 1).sum().item()) == 4.0\n"
            "assert not hasattr(nee, 'bfloat16')\n"
            "for f in (lambda: nee.bfloat16, lambda: nee.ones(1).bfloat16(), lambda: nee.zeros(1, dtype='bfloat16')):\n"
            "    try:\n"
            "        f()\n"
            "    except (AttributeError, TypeError) as e:\n"
            "        assert 'ml_dtypes' in str(e), e\n"
            "    else:\n"
            "        raise AssertionError('no error')\n")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_float16_shares_the_mechanism():
    # float16 goes through the same "computed in float32, rounded per op" paths: the places fixed for bfloat16
    # (bias added to the float32 product, last-dim log_softmax, opmath scalars, per-op compositions, jit
    # groups rounding after every op) hold for it too
    h = (RNG.standard_normal((6, 40)) * 3).astype(np.float16)
    w = RNG.standard_normal((30, 40)).astype(np.float16)
    b = RNG.standard_normal(30).astype(np.float16)
    x, tx = nee.tensor(h), torch.from_numpy(h)
    same(F.log_softmax(x, -1), torch.log_softmax(tx, -1))
    same(F.linear(x, nee.tensor(w), nee.tensor(b)), torch.nn.functional.linear(tx, torch.from_numpy(w),
                                                                                torch.from_numpy(b)), ulp=1)
    same(F.leaky_relu(x), torch.nn.functional.leaky_relu(tx))
    same(nee.lerp(x, x * 2, 0.3), torch.lerp(tx, tx * 2, 0.3))
    same(F.softsign(x), torch.nn.functional.softsign(tx))
    same(x * 1.0009765625, tx * 1.0009765625)
    f = nee.jit(lambda a: ((a * 1.00048828125 + 0.25).exp() - a.sin()).tanh() * 2.0)   # 1 + 2**-11: not a float16
    assert np.array_equal(f(x).float().numpy(), f.eager(x).float().numpy())
