"""float16 / bfloat16 elementwise kernels that load and store the low floats themselves.

The CPU's LLVM elementwise kernels take float16/bfloat16 operands as they are: widened to float32 in
registers, the float32 kernel's arithmetic, each result rounded once to nearest even on store
(devices/cpu/llvm_render.py).  The reference is the path they replace (:func:`slow_path`: operands
copied to float32, the float32 kernel, the result rounded by numpy / ml_dtypes): bit for bit, NaNs
included, for every elementwise op on odd sizes, broadcasts, strided views, special values, mixed
dtypes and scalars, on 1 and 2 threads.  Against torch: the same bits for the ops computed the same
way (torch's own approximations of transcendental functions differ; tests/test_bfloat16.py covers
those with tolerances).  jit: fused low-float chains round after every member, so a compiled
function gives eager's bits.
"""
from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import elementwise as ew
from neetorch.devices.cpu import llvm_render, threads
from neetorch.ops import elementwise as ops_ew

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

LOW = [(nee.float16, torch.float16), (nee.bfloat16, torch.bfloat16)]
IDS = ["float16", "bfloat16"]
RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _seed_per_test(request):
    """Each test's values from its own seed (its id): with one module generator the data a test drew depended
    on which tests ran before it in its worker (xdist's order), and rare draws (a -0.0 / +0.0 tie, a softmax
    row at a rounding boundary) came and went between runs of the same code."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
    yield

# ties at both mantissa widths, subnormals of both, overflow of float16, specials
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1.00048828125, 1.00146484375, 1.00390625, 1.01171875, 0.5, 2.5, -7.75,
                    100.3, 1e-3, 6e-8, -3e-8, 5.96e-8, 6.1e-5, 1e-39, -1e-40, 3.3895e38, -3.3e38, 1e30, 65504.0,
                    65520.0, 70000.0, -65519.0, np.inf, -np.inf, np.nan, -np.nan, 0.1, -0.7, 12345.678, 3.14159,
                    -2.0, 4.0, 0.25, 1.5, -1.5, 7.0], np.float32)


def values(n, scale=3.0):
    v = RNG.standard_normal(n).astype(np.float32) * scale
    k = min(n, SPECIAL.size)
    v[RNG.choice(n, k, replace=False)] = SPECIAL[:k]
    return v


@contextlib.contextmanager
def slow_path():
    """The path the native kernels replace: float16/bfloat16 operands copied to float32, the float32
    kernel, the result rounded by numpy / ml_dtypes (get_kernel refuses low floats: launch() and
    prepare() then widen)."""
    real = ew.get_kernel
    low = ew._LOW_NAMES

    def refuse(op, in_np, out_np, low_steps=None):
        if np.dtype(out_np).name in low or any(np.dtype(d).name in low for d in in_np):
            return None
        return real(op, in_np, out_np, low_steps)
    ops_ew._plans.clear()
    ew.get_kernel = refuse
    try:
        yield
    finally:
        ew.get_kernel = real
        ops_ew._plans.clear()


def bits(t) -> np.ndarray:
    a = t.numpy()
    return a.view(f"u{a.dtype.itemsize}") if t.dtype.is_floating_point else a


def assert_bits(a, b, what="", nan_bits=False):
    """``a`` and ``b`` hold the same bits; a NaN matches any NaN unless ``nan_bits`` (the sign and payload of
    a NaN an op computes depend on the order LLVM gives the operands of the instruction that made it,
    which the vector width can change: silu(NaN) is +NaN in one kernel and -NaN in another)."""
    assert a.dtype == b.dtype, f"{what}: {a.dtype} vs {b.dtype}"
    assert tuple(a.shape) == tuple(b.shape), what
    x, y = bits(a), bits(b)
    bad = x != y
    if not nan_bits and a.dtype.is_floating_point:
        bad &= ~(np.isnan(a.float().numpy()) & np.isnan(b.float().numpy()))
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} differ, first at {np.argwhere(bad)[0]}: " \
                          f"{a.numpy()[bad][:4]} vs {b.numpy()[bad][:4]}"


def assert_torch(n, t, what="", zero_ties=False):
    """neetorch ``n`` equals torch ``t`` bit for bit except NaN payloads (torch's vectorized bfloat16
    rounding gives 0xffff for every NaN, its scalar one 0x7fc0; neetorch ml_dtypes' sign | 0x7fc0).
    ``zero_ties``: a zero of either sign matches a zero (the result of a max / min of -0.0 and +0.0: torch's
    vector body returns the second operand, its scalar tail the first; see the notes before the fuzz test)."""
    assert n.dtype.name == str(t.dtype).split(".")[-1], f"{what}: {n.dtype} vs {t.dtype}"
    a = n.float().numpy() if n.dtype.is_floating_point else n.numpy()
    b = t.float().numpy() if t.is_floating_point() else t.numpy()
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=what)
        m = ~np.isnan(a)
        if zero_ties:
            m &= ~((a == 0) & (b == 0))
            np.testing.assert_array_equal(a == 0, b == 0, err_msg=what)
        np.testing.assert_array_equal(a[m].view(np.uint32), b[m].view(np.uint32), err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


# every elementwise op the CPU kernels claim on float inputs (nee and torch spell them alike unless noted)
UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
         "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "reciprocal",
         "lgamma", "abs", "neg", "floor", "ceil", "trunc", "round", "frac", "sign", "relu", "isnan", "isinf",
         "isfinite", "isposinf", "isneginf", "signbit", "square", "logical_not"]
ACT = ["silu", "gelu", "mish", "logsigmoid", "softsign", "tanhshrink", "selu", "hardsigmoid", "hardswish",
       "relu6", "leaky_relu", "softplus", "elu"]
BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "atan2", "hypot", "copysign",
          "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
          "logical_xor", "xlogy"]
# ops also run on strided / broadcast / scalar layouts (each layout is a kernel to compile: a subset keeps the
# cold-cache time of this file down; the layouts are the loop nest's, the same for every op)
LAYOUTS = {"abs", "neg", "sqrt", "exp", "tanh", "gelu", "sigmoid", "isnan", "round", "relu", "add", "sub", "mul",
           "div", "pow", "remainder", "maximum", "eq", "lt", "atan2", "copysign", "logical_and", "xlogy"}
NO_SCALAR = {"atan2", "hypot", "maximum", "minimum", "fmax", "fmin", "logical_and", "logical_or", "logical_xor"}
# computed like torch's CPU kernels (no approximation of a transcendental function): bit-exact vs torch
TORCH_EXACT = {"abs", "neg", "floor", "ceil", "trunc", "round", "sign", "relu", "isnan", "isinf", "isfinite",
               "isposinf", "isneginf", "signbit", "square", "logical_not", "sqrt", "reciprocal", "add", "sub", "mul",
               "div", "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
               "logical_or", "logical_xor", "copysign", "relu6", "hardsigmoid"}
# (fmod / remainder by a subnormal divisor differ from torch's vectorized kernel: see the fuzz test's notes)
# the sign of a zero these return on a -0.0 / +0.0 tie is torch's by position (see the fuzz test's notes): the
# random values meet such ties now and then (session 23: 1 run in ~4 under xdist's test order)
ZERO_TIES = {"maximum", "minimum", "fmax", "fmin"}


def _unary(m, name):
    if name in ACT:
        f = getattr(m.nn.functional, name)
        return f
    return getattr(m, name)


def tt(t):
    """The torch tensor holding ``t``'s bits (a float32 round trip would turn a bfloat16 NaN into torch's
    0xffff)."""
    a = t.numpy()
    if t.dtype in (nee.float16, nee.bfloat16):
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.float16 if t.dtype is nee.float16
                                                                else torch.bfloat16)
    return torch.from_numpy(a.copy())


def run_both(fn):
    """(native result, slow-path result) of ``fn()``."""
    a = fn()
    with slow_path():
        b = fn()
    return a, b


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
@pytest.mark.parametrize("name", UNARY + ACT)
def test_unary_native_vs_slow_and_torch(dt, tdt, name):
    v = values(301)
    if name in ("acosh",):
        v = np.abs(v) + 1
    x = nee.tensor(v).to(dt)
    a, b = run_both(lambda: _unary(nee, name)(x))
    assert_bits(a, b, name)
    if name not in LAYOUTS:
        return
    # strided input, odd length
    xs = nee.tensor(values(2 * 77)).to(dt)[::2]
    a, b = run_both(lambda: _unary(nee, name)(xs))
    assert_bits(a, b, name + " strided")
    if name in TORCH_EXACT:
        assert_torch(a, _unary(torch, name)(tt(xs)), name)


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
@pytest.mark.parametrize("name", BINARY)
def test_binary_native_vs_slow_and_torch(dt, tdt, name):
    u, v = values(257), values(257)[::-1].copy()
    x, y = nee.tensor(u).to(dt), nee.tensor(v).to(dt)
    f = getattr(nee, name)
    a, b = run_both(lambda: f(x, y))
    assert_bits(a, b, name)
    tx, ty = tt(x), tt(y)
    ties = name in ZERO_TIES
    if name in TORCH_EXACT:
        assert_torch(a, getattr(torch, name)(tx, ty), name, zero_ties=ties)
    if name not in LAYOUTS:
        return
    # broadcast: a column against a row, a transposed (non-contiguous) operand, a Python scalar
    xc = nee.tensor(values(13).reshape(13, 1)).to(dt)
    yr = nee.tensor(values(9 * 13).reshape(9, 13)).to(dt).t()
    forms = [("bcast", lambda: f(xc, yr)), ("row", lambda: f(yr, xc[:9, 0]))]
    if name not in NO_SCALAR:
        forms += [("scalar", lambda: f(x, 2.5)), ("scalar-int", lambda: f(x, 3))]
    for what, fn in forms:
        a, b = run_both(fn)
        assert_bits(a, b, f"{name} {what}")
    if name in TORCH_EXACT:
        a = f(xc, yr)
        t = getattr(torch, name)(tt(xc), tt(yr))
        assert_torch(a, t, name + " bcast", zero_ties=ties)


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_ternary_and_alpha_forms(dt, tdt):
    x, y, z = (nee.tensor(values(101)).to(dt) for _ in range(3))
    c = x > 0
    tx, ty, tz = (tt(t) for t in (x, y, z))
    cases = {
        "where": (lambda: nee.where(c, x, y), lambda: torch.where(tx > 0, tx, ty)),
        "clamp": (lambda: nee.clamp(x, -1.5, 2.0), lambda: torch.clamp(tx, -1.5, 2.0)),
        "clamp_t": (lambda: nee.clamp(x, y, z), lambda: torch.clamp(tx, ty, tz)),
        "lerp": (lambda: nee.lerp(x, y, 0.3), None),
        "addcmul": (lambda: nee.addcmul(x, y, z, value=0.5), None),
        "addcdiv": (lambda: nee.addcdiv(x, y, z, value=2.0), None),
        "add_alpha": (lambda: nee.add(x, y, alpha=3), None),
    }
    for name, (fn, tf) in cases.items():
        a, b = run_both(fn)
        assert_bits(a, b, name)
        if tf is not None:
            # clamp with tensor bounds: a max then a min of the operands, whose ±0.0 ties torch resolves by
            # position (vector body / scalar tail); the random values meet them at random (session 23: 1 run in ~8)
            assert_torch(a, tf(), name, zero_ties=name == "clamp_t")


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_mixed_dtypes_promotion(dt, tdt):
    v = values(63)
    x = nee.tensor(v).to(dt)
    tx = tt(x)
    f32 = nee.tensor(values(63))
    # integers that float16 / bfloat16 round (torch casts an integer operand to the low float first)
    i32 = nee.tensor(RNG.integers(-3000, 3000, 63).astype(np.int32))
    s32 = nee.tensor(np.float32(1.1))            # 0-dim float32: the result stays low
    other = nee.float16 if dt is nee.bfloat16 else nee.bfloat16
    o = nee.tensor(values(63)).to(other)          # float16 + bfloat16: float32
    cases = [("f32", lambda: x * f32, lambda: tx * torch.from_numpy(f32.numpy())),
             ("int", lambda: x + i32, lambda: tx + torch.from_numpy(i32.numpy())),
             ("int-first", lambda: i32 - x, lambda: torch.from_numpy(i32.numpy()) - tx),
             ("int-big", lambda: x * i32 + 2049, lambda: tx * torch.from_numpy(i32.numpy()) + 2049),
             # (torch reads a 0-d float32 tensor at float32 in mul, like a Python float)
             ("0d-f32", lambda: x * s32, lambda: tx * torch.from_numpy(s32.numpy())),
             ("other-low", lambda: x + o, None),
             ("bool", lambda: x * (x > 0), lambda: tx * (tx > 0))]
    for name, fn, tf in cases:
        a, b = run_both(fn)
        assert_bits(a, b, name)
        if tf is not None:
            assert_torch(a, tf(), name)
    assert (x + o).dtype is nee.float32 and (x * s32).dtype is dt and (x + i32).dtype is dt


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_casts_every_dtype(dt, tdt):
    """Casts to and from the low floats: rounding of float32/float64/int64 (double rounding through float32,
    as torch), the specials, float -> int truncation, between the two low floats."""
    v = values(515, scale=1000.0)
    srcs = {"float32": v, "float64": v.astype(np.float64) * (1 + 2.0 ** -30),
            "int64": RNG.integers(-(1 << 40), 1 << 40, 515), "int32": RNG.integers(-70000, 70000, 515).astype(np.int32),
            "uint8": RNG.integers(0, 255, 515).astype(np.uint8), "bool": RNG.random(515) > 0.5}
    for name, arr in srcs.items():
        src = nee.tensor(arr)
        a, b = run_both(lambda: src.to(dt))
        assert_bits(a, b, f"{name} -> {dt}", nan_bits=True)
        assert_torch(a, torch.from_numpy(np.asarray(arr)).to(tdt), f"{name} -> {dt}")
    x = nee.tensor(values(515, scale=100.0)).to(dt)
    fin = nee.tensor(np.nan_to_num(x.float().numpy(), nan=0.0, posinf=7.0, neginf=-7.0)).to(dt)
    for to, tto in ((nee.float32, torch.float32), (nee.float64, torch.float64), (nee.int64, torch.int64),
                    (nee.int16, torch.int16), (nee.bool, torch.bool), (nee.float16, torch.float16),
                    (nee.bfloat16, torch.bfloat16)):
        src = fin if not to.is_floating_point else x
        a, b = run_both(lambda: src.to(to))
        assert_bits(a, b, f"{dt} -> {to}", nan_bits=to is not nee.float16 or dt is not nee.float16)
        tsrc = tt(src)
        assert_torch(a, tsrc.to(tto), f"{dt} -> {to}")


def test_bfloat16_rounding_ties_and_nans_exhaustive_high_bits():
    """The kernels' float32 -> bfloat16 / float16 rounding against ml_dtypes / numpy for every upper bit
    pattern with the low bits at ties, just above/below them, and zero (NaN: ml_dtypes' quiet sign|0x7fc0
    for bfloat16; float16: the F16C conversion, which quiets a signaling NaN that numpy keeps)."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x18000 & 0xFFFF], np.uint32)
    x = (hi[:, None] | lows[None, :]).ravel().view(np.float32)
    got = nee.tensor(x).to(nee.bfloat16).numpy()
    with np.errstate(invalid="ignore"):
        ref = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    hi = np.arange(1 << 19, dtype=np.uint32) << 13
    lows = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF], np.uint32)
    x = (hi[:, None] | lows[None, :]).ravel().view(np.float32)
    got = nee.tensor(x).to(nee.float16).numpy().view(np.uint16)
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    quiet = ~np.isnan(x) | ((x.view(np.uint32) & 0x00400000) != 0)
    np.testing.assert_array_equal(got[quiet], ref[quiet])
    # signaling NaN: quieted with the payload's upper 9 bits kept (vcvtps2ph, torch), where numpy keeps it
    # signaling (and makes a payload that would shift out nonzero)
    b = x.view(np.uint32)[~quiet]
    np.testing.assert_array_equal(got[~quiet], ((b >> 16) & 0x8000) | 0x7E00 | ((b & 0x7FFFFF) >> 13))


def test_software_rounding_helpers_match():
    """scalar.f_round_f16 / f_round_bf16 (the Numba renderer's per-member rounding) against numpy /
    ml_dtypes, and the LLVM kernels' (a fused kernel's) rounding through the IR renderer."""
    from numba import njit

    from neetorch.devices.cpu.scalar import f_round_bf16, f_round_f16

    @njit
    def app(x, o, h):
        for i in range(x.size):
            o[i] = f_round_f16(x[i]) if h else f_round_bf16(x[i])
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    x = (hi[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x2000, 0x1000], np.uint32)).ravel()
    x = x.view(np.float32)
    o = np.empty_like(x)
    app(x, o, False)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(o.view(np.uint32), x.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32))
        app(x, o, True)
        ref = x.astype(np.float16).astype(np.float32)
    m = ~np.isnan(x)
    np.testing.assert_array_equal(o[m].view(np.uint32), ref[m].view(np.uint32))
    assert np.isnan(o[~m]).all()


def test_native_kernels_are_used_and_fast_paths_cover_layouts():
    """The LLVM renderer takes low floats (no float32 copies): the kernel's pieces name them."""
    x = nee.tensor(values(100)).to(nee.bfloat16)
    from neetorch.ops.registry import OPS
    k = ew.get_kernel(OPS["add"], [x.numpy().dtype] * 2, x.numpy().dtype)
    assert isinstance(k, llvm_render.LLVMKernel) and k.pieces[0] == ["bfloat16", "bfloat16"]
    k = ew.get_kernel(OPS["cast"], [np.dtype(np.float32)], np.dtype(np.float16))
    assert isinstance(k, llvm_render.LLVMKernel) and k.pieces[1] == ["float16"]


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_threads_and_inplace(dt, tdt, nt, monkeypatch):
    """Launches split across threads (threshold lowered), in-place and aliasing forms."""
    monkeypatch.setattr(threads, "PARALLEL_THRESHOLD", 1000)
    old = threads.get_num_threads()
    threads.set_num_threads(nt)
    ops_ew._plans.clear()
    ew._launch_cache.clear()
    try:
        u = values(4099)
        x, y = nee.tensor(u).to(dt), nee.tensor(u[::-1].copy()).to(dt)

        def chain():
            z = x * y + x
            w = x.clone()
            w += y
            w.mul_(2.0)
            v = x.reshape(1, -1)[:, :4000].reshape(40, 100)
            v2 = v.clone()
            v2 += v2.t().contiguous().t()
            return [z, w, nee.nn.functional.gelu(z), v2, x.float(), z.to(nee.float64)]
        for a, b in zip(*run_both(chain)):
            assert_bits(a, b, f"threads={nt}")
        f = nee.jit(lambda x, y: nee.tanh(x * y + x) * 0.25 - y)
        assert_bits(f(x, y), nee.tanh(x * y + x) * 0.25 - y, f"jit threads={nt}")
    finally:
        threads.set_num_threads(old)
        ops_ew._plans.clear()
        ew._launch_cache.clear()


# ------------------------------------------------------------------ jit
def _fused_names(f, *args):
    return [n.name for n in f.graph(*args).nodes]


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_jit_fuses_low_float_chains_bit_exact(dt, tdt):
    def fn(x, y, b):
        h = x * y + b
        g = nee.nn.functional.gelu(h)
        t = nee.tanh(g) * 0.5 - y / 3.0
        return nee.where(t > 0, t, h * 1e4), t.float() * 2
    u = values(1001)
    x, y = nee.tensor(u).to(dt), nee.tensor(values(1001)).to(dt)
    b = nee.tensor(values(1001)[:1]).to(dt)      # broadcast
    f = nee.jit(fn)
    names = _fused_names(f, x, y, b)
    # as many groups as the float32 graph, every node in one (float32's lone mul is cast+mul here)
    x32, y32, b32 = x.float(), y.float(), b.float()
    assert len(names) == len(_fused_names(nee.jit(fn), x32, y32, b32)), names
    assert all(n.startswith("fused[") for n in names), names
    got, ref = f(x, y, b), fn(x, y, b)
    for a, r in zip(got, ref):
        assert_bits(a, r, "jit vs eager")
    # strided inputs (the executable's strided launch)
    xs = nee.tensor(values(2002)).to(dt)[::2]
    for a, r in zip(f(xs, y, b), fn(xs, y, b)):
        assert_bits(a, r, "jit vs eager, strided")


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_jit_internal_low_values_and_mixed(dt, tdt):
    """A float32 graph with a low-float stage inside (x.half() * 3 then .float()): the member rounds; a
    float32 input mixed into a low chain; integer inputs."""
    def fn(x, i):
        h = x.to(dt) * 3.0
        h = h + i
        return (h.float() + x) * 0.5, h.exp()
    x = nee.tensor(values(333))
    i = nee.tensor(RNG.integers(-50, 50, 333).astype(np.int64))
    f = nee.jit(fn)
    for a, r in zip(f(x, i), fn(x, i)):
        assert_bits(a, r, "jit vs eager")
    assert any(n.startswith("fused[") and "+" in n for n in _fused_names(f, x, i))


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_jit_binds_native_low_float_steps(dt, tdt, monkeypatch):
    """A compiled graph's float16/bfloat16 steps whose kernel is native (single elementwise ops, fused groups)
    are bound after their first run like float32 ones (no elementwise.run_strided per call), with eager's bits."""
    x = nee.tensor(values(33 * 65).reshape(33, 65)).to(dt)
    y = nee.tensor(values(65)).to(dt)
    i = nee.tensor(RNG.integers(-9, 9, (33, 65)))
    fns = {"single": lambda x, y, i: nee.exp(x), "chain": lambda x, y, i: nee.tanh(x * y + x) * 0.25 - y,
           "mixed": lambda x, y, i: (x * i + 1).float() * 2, "strided": lambda x, y, i: x.t() * 2 + 1,
           "cmp": lambda x, y, i: x > y}
    real, calls = ew.run_strided, [0]

    def spy(*a, **k):
        calls[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(ew, "run_strided", spy)
    for name, fn in fns.items():
        f = nee.jit(fn)
        calls[0] = 0
        first = f(x, y, i)
        assert calls[0] > 0, name
        calls[0] = 0
        for _ in range(2):
            got = f(x, y, i)
        assert calls[0] == 0, f"{name}: {calls[0]} unbound launches"
        assert_bits(got, fn(x, y, i), f"{name} bound", nan_bits=True)
        assert_bits(first, got, f"{name} first call", nan_bits=True)


def test_jit_numba_renderer_rounds_members(monkeypatch):
    """The Numba renderer (NEE_CPU_RENDERER=numba) takes float32 copies and rounds members with
    scalar.f_round_f16 / f_round_bf16: the same bits."""
    monkeypatch.setattr(ew, "RENDERER", "numba")
    for dt in (nee.float16, nee.bfloat16):
        def fn(x, y):
            return x * y + x
        x, y = nee.tensor(values(41)).to(dt), nee.tensor(values(41)).to(dt)
        f = nee.jit(fn)
        names = _fused_names(f, x, y)
        assert len(names) == 1 and names[0].startswith("fused["), names
        assert_bits(f(x, y), fn(x, y), f"numba renderer {dt}")


# ------------------------------------------------------------------ reductions / softmax / norms
@contextlib.contextmanager
def numpy_conversions():
    """Reductions, softmax and norms as before the cast-kernel conversions (devices/cpu: _fast_low): the
    kernels' own float16/bfloat16 paths (numpy astype / copyto)."""
    from neetorch.devices import device, get_backend
    from neetorch.ops import registry
    be = get_backend(device("cpu"))
    saved = dict(be.kernels)
    n = 0
    for k, f in saved.items():
        if hasattr(f, "__wrapped__") and f.__code__.co_name == "fast":
            be.kernels[k] = f.__wrapped__
            n += 1
    assert n >= 7, n
    registry._claims.clear()
    try:
        yield
    finally:
        be.kernels.clear()
        be.kernels.update(saved)
        registry._claims.clear()


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_reductions_softmax_norms_fast_conversions(dt, tdt):
    x = nee.tensor(values(37 * 129).reshape(37, 129)).to(dt)
    xt = x.t()                                        # non-contiguous: reduced in astype's layout either way
    w, b = nee.tensor(values(129)).to(dt), nee.tensor(values(129)).to(dt)
    F = nee.nn.functional

    def run():
        return [x.sum(), x.sum(0), xt.sum(1), xt.mean(0), x.amax(1), F.softmax(x, -1), F.softmax(xt, 0),
                F.layer_norm(x, (129,), w, b), F.rms_norm(x, (129,), w), x.float().softmax(-1).to(dt)]
    fast = run()
    with numpy_conversions():
        slow = run()
    for i, (a, r) in enumerate(zip(fast, slow)):
        assert_bits(a, r, f"case {i}")
    # (values within +-60: fastmath's exp gives 0 where torch's gives a subnormal, exp(-88) and below)
    fx = nee.tensor(np.clip(np.nan_to_num(x.float().numpy(), nan=0.0), -60, 60)).to(dt)
    # within one unit in the last place of the low float: torch's float32 sum of the exps is a vectorized
    # reduction in its ISA's lane order (its AVX2 and AVX-512 builds differ from each other), so a sum's last bit,
    # and rarely the rounded result, differs (~2e-5 of random softmax outputs against either: session 21, Zen 5)
    a = F.softmax(fx, -1).float().numpy().view(np.int32)
    b = torch.softmax(tt(fx), -1).float().numpy().view(np.int32)
    ulp = 1 << (23 - (7 if dt == nee.bfloat16 else 10))
    assert np.abs(a - b).max() <= ulp, "softmax vs torch"
    assert (a != b).mean() < 1e-3, "softmax vs torch"


def test_jit_low_float_members_unfused_where_backend_does_not_round():
    """A backend without ``rounds_low_float_members`` (the reference NPU plugin; CUDA, OpenCL) keeps every
    float16 result its own node, as before: its fused kernels compute a group in float32 throughout."""
    try:
        dev = nee.device("simnpu")
        x = nee.tensor(values(8)).to(nee.float16).to(dev)
    except Exception as e:   # pragma: no cover - the plugin is installed with the test extras
        pytest.skip(f"simnpu unavailable: {e}")
    from neetorch.jit import fusion
    assert fusion._rounds_low("cpu") and not fusion._rounds_low(str(dev))
    f = nee.jit(lambda a: a * 2 + a)
    names = _fused_names(f, x)
    assert names == ["mul", "add"], names
    assert_bits(f(x).to("cpu"), (x * 2 + x).to("cpu"), "simnpu")


# ================================================================ narrowing wider values: through float32, as torch
@pytest.mark.parametrize("n", [2, 5000])
@pytest.mark.parametrize("low", [0, 1], ids=IDS)
def test_wider_values_narrow_through_float32_like_torch(low, n):
    """torch stores a float64 (or int64) value into float16/bfloat16 as ``Half(float(x))``: two roundings, so
    1 + 2**-11 + 2**-40 becomes 1.0 in float16 where numpy's single rounding gives 1 + 2**-10.  Every way a wider
    value reaches low-float storage (in-place ops, out=, copy_, setitem, fill, creation, casts) gives torch's
    bits, on the small (numpy) and large (kernel) copy paths."""
    w = (1 + 2 ** -11 + 2 ** -40) if low == 0 else (1 + 2 ** -8 + 2 ** -40)
    vals = np.array([w, w - 1, -w, 3 * w] * (n // 4 + 1))[:n]

    def run(L):
        dt = getattr(L, IDS[low])
        x = L.tensor(vals, dtype=L.float64)
        out = []
        y = L.ones(n, dtype=dt); y.add_(x - 1); out.append(y)
        y = L.ones(n, dtype=dt); y.mul_(x); out.append(y)
        y = L.ones(n, dtype=dt); y.copy_(x); out.append(y)
        y = L.ones(n, dtype=dt); y[:] = x; out.append(y)
        y = L.ones(n, dtype=dt); y[1:] = x[1:]; out.append(y)
        y = L.ones(n, dtype=dt); y[:] = w; out.append(y)
        y = L.ones(n, dtype=dt); y.fill_(w); out.append(y)
        out += [L.full((n,), w, dtype=dt), L.tensor(vals.tolist(), dtype=dt), L.tensor(vals, dtype=dt),
                x.to(dt), L.add(L.ones(n, dtype=dt), x - 1, out=L.empty(n, dtype=dt)),
                L.ones(n, dtype=dt) + (w - 1), L.ones(n, dtype=dt) * w]
        y = L.ones(n, dtype=dt); y.masked_fill_(x > 1, w); out.append(y)
        return [t.float().numpy() for t in out]

    for k, (want, got) in enumerate(zip(run(torch), run(nee))):
        np.testing.assert_array_equal(got, want, err_msg=f"case {k}")


# ================================================================ kernels of non-elementwise ops: cast-kernel conversions
@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_nn_reduction_kernels_convert_with_cast_kernel_same_bits(dt, tdt):
    """kernels/nn.py and kernels/reduction.py widen float16/bfloat16 through dtypes.widen and round through
    dtypes.copy_into (the generated cast kernel from 4096 elements): the same bits as numpy's conversions
    (dtypes._CONVERT off), NaNs and overflow to inf included, on contiguous and transposed layouts."""
    from neetorch.tensor import dtypes as D
    F = nee.nn.functional
    v = values(40 * 211, scale=30.0).reshape(40, 211)
    v[3, 5] = 70000.0
    x = nee.tensor(v).to(dt)
    xt = x.t()
    tgt = nee.tensor(RNG.integers(0, 211, 40))

    def run():
        return [F.log_softmax(x, -1), F.log_softmax(x, 0), F.log_softmax(xt, -1), F.softmax(xt, 1),
                F.group_norm(x.reshape(4, 10, 211), 2), x.cumsum(-1), xt.cumsum(0), (x * 0.01 + 1).cumprod(1),
                x.max(-1)[0], x.amax(0), x.sum(1), xt.mean(1), x.argmax(-1), x.logsumexp(-1),
                F.nll_loss(F.log_softmax(x, -1), tgt, reduction="none"), F.cross_entropy(x, tgt)]
    fast = run()
    conv = D._CONVERT[0]
    assert conv is not None
    D._CONVERT[0] = None
    try:
        slow = run()
    finally:
        D._CONVERT[0] = conv
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert_bits(a, b, f"case {i}", nan_bits=True)


# ================================================================ op semantics vs torch
def _t(a):
    return tt(a) if isinstance(a, nee.Tensor) else a


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_zero_dim_operand_read_at_float32_like_torch(dt, tdt):
    """torch's mul / div / floor_divide read a 0-d CPU tensor divisor / factor at float32 ("opmath", as a
    Python scalar): float16 x * tensor(70000.) is finite, x * tensor(1.1) rounds once; in the first position,
    and in add / sub / maximum / ..., the 0-d tensor is cast to the low float first.  jit == eager."""
    x = nee.tensor(values(257)).to(dt)
    zs = [nee.tensor(np.float32(1.1)), nee.tensor(1.1, dtype=nee.float64), nee.tensor(70000.0),
          nee.tensor(2049), nee.tensor(np.float32(-3e-3)), nee.tensor(1.1).to(dt),
          nee.tensor(1.5).to(nee.bfloat16 if dt is nee.float16 else nee.float16)]
    for z in zs:
        for name in ("mul", "div", "floor_divide", "add", "sub", "copysign", "lt"):
            f = getattr(nee, name)
            for a, b in ((x, z), (z, x)):
                got = f(a, b)
                assert_torch(got, getattr(torch, name)(_t(a), _t(b)), f"{name}({a.dtype}, {b.dtype})")
        assert_torch(nee.div(x, z, rounding_mode="trunc"), torch.div(tt(x), tt(z), rounding_mode="trunc"), "trunc")
        assert_torch(nee.lerp(x, x * 2, z.to(dt) if z.dtype is nee.int64 else z),
                     torch.lerp(tt(x), tt(x) * 2, tt(z.to(dt) if z.dtype is nee.int64 else z)), "lerp (weight cast)")
        assert_bits(nee.jit(lambda a, b: a * b + 1)(x, z), x * z + 1, f"jit {z.dtype}")
        assert_bits(nee.jit(lambda a, b: nee.floor_divide(a, b) * 2)(x, z), nee.floor_divide(x, z) * 2, "jit //")
    y = nee.ones(3, dtype=dt)
    y.mul_(nee.tensor(70000.0))
    assert_torch(y, torch.ones(3, dtype=tdt).mul_(torch.tensor(70000.0)), "mul_")


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_floor_divide_and_xlogy_in_storage_arithmetic_like_torch(dt, tdt):
    """torch computes float16/bfloat16 floor_divide (c10::div_floor_floating) and xlogy (x * log(y), the log
    rounded) in the storage dtype's arithmetic, each step rounded (scalar.f_floordiv_f16 / _bf16 ...): bit
    for bit vs torch with integer / bool operands, Python scalars, strided views; jit (fused) == eager; the
    float32-copy path (no native kernel) gives the same bits."""
    u = values(2 * 301, scale=300.0)
    w = values(2 * 301, scale=3.0)
    x, y = nee.tensor(u).to(dt)[::2], nee.tensor(w).to(dt)[1::2]
    i8 = nee.tensor(RNG.integers(-128, 128, 301).astype(np.int8))
    u8 = nee.tensor(RNG.integers(0, 256, 301).astype(np.uint8))
    b = nee.tensor(RNG.random(301) > 0.5)
    forms = [(x, y), (y, x), (x, i8), (u8, x), (x, b), (x, 2.5), (x, -3), (7.0, y)]
    for name in ("floor_divide", "xlogy"):
        f = getattr(nee, name)
        for k, (a, c) in enumerate(forms):
            if name == "xlogy" and k == 7:
                continue
            got = f(a, c)
            assert_torch(got, getattr(torch, name)(_t(a), _t(c)), f"{name} form {k}")
            with slow_path():
                assert_bits(f(a, c), got, f"{name} form {k} float32 copies", nan_bits=False)
        g = nee.jit(lambda a, c, f=f: f(a * 1, c) - c)
        assert_bits(g(x, y), f(x * 1, y) - y, f"{name} jit")


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_pow_scalar_exponents_and_overflowing_scalars_like_torch(dt, tdt):
    """bfloat16 x ** 3 and x ** -2 are x * x * x and 1 / (x * x) with rounded products (torch's kernel);
    a scalar exponent or alpha beyond the dtype's range is refused as in torch."""
    x = nee.tensor(values(301)).to(dt)
    for e in (2, 3, -2, -1, 0.5, 3.0, -2.0, 4, 1.5, float("inf")):
        assert_torch(x ** e, tt(x) ** e, f"pow {e}")
    y = x.clone()
    y.pow_(3)
    assert_torch(y, tt(x).pow(3), "pow_")
    big = 70000 if dt is nee.float16 else 1e39
    with pytest.raises(RuntimeError, match="pow.*overflow"):
        x ** big
    with pytest.raises(RuntimeError, match="add.*overflow"):
        nee.add(x, x, alpha=big)
    with pytest.raises(RuntimeError):
        torch.add(tt(x), tt(x), alpha=big)


@pytest.mark.parametrize("td,nd", [(torch.float32, nee.float32), (torch.float64, nee.float64)] +
                         [(t, n) for n, t in LOW], ids=["float32", "float64"] + IDS)
def test_hardswish_overflows_like_torch(td, nd):
    """torch computes hardswish as x * clamp(x + 3, 0, 6) / 6: 3e38 overflows to inf (every float dtype)."""
    v = np.concatenate([values(200), np.array([3e38, -3e38, 1e38, 3.0, -3.0, 6.0], np.float32)])
    t = torch.from_numpy(v).to(td)
    n = nee.tensor(t.float().numpy()).to(nd) if nd in (nee.float16, nee.bfloat16) else nee.tensor(t.numpy())
    assert_torch(nee.nn.functional.hardswish(n), torch.nn.functional.hardswish(t), "hardswish")
    f = nee.jit(lambda a: nee.nn.functional.hardswish(a) * 2)
    assert_bits(f(n), nee.nn.functional.hardswish(n) * 2, "jit")


# Left out of the fuzz below (torch's own inconsistencies or approximations, not fixed here):
# - fmod / remainder by a subnormal divisor: torch's vectorized (Sleef) float kernel gives NaN, its scalar loop
#   (strided, short tails) the exact remainder; neetorch is exact (also float32).
# - the sign of a zero from maximum / minimum / fmax / fmin(-0.0, +0.0) and from clamp with tensor bounds at a
#   ±0.0 tie: torch's vector body (the second operand) and scalar tail (the first) disagree, every float dtype
#   (neetorch: the first operand, as torch's scalar loop).
# - rsqrt: torch's strided (scalar) low-float loop rounds sqrt to the storage dtype first; its contiguous one
#   differs from 1/sqrt in ~3e-5 of inputs.  erf / sin / atan2 / pow / mish / silu / gelu: 1-ulp libm-level.
# - sigmoid / silu of x < -88 (and softmax outputs below float32's smallest normal): torch gives 0 / a subnormal,
#   neetorch a subnormal / 0 (the softmax row kernels flush on purpose: kernels/nn.py _exp_ftz).


@pytest.mark.parametrize("dt,tdt", LOW, ids=IDS)
def test_fuzz_mixed_dtypes_layouts_vs_torch(dt, tdt):
    """Ops computed without a transcendental function, low floats against every dtype (float64, int64, int8,
    uint8, bool, the other low float), odd sizes, strided views, 0-d tensors, Python scalars, specials."""
    rng = np.random.default_rng(11)
    others = [nee.float16, nee.bfloat16, nee.float32, nee.float64, nee.int64, nee.int8, nee.uint8, nee.bool]
    ops = ["add", "sub", "mul", "div", "floor_divide", "copysign", "eq", "lt", "ge", "logical_or", "where"]
    for n in (1, 7, 4099):
        x = nee.tensor(values(2 * n, scale=100.0)).to(dt)[::2]
        for od in others:
            if od.is_floating_point:
                o = nee.tensor(values(2 * n, scale=7.0)).to(od)
            elif od is nee.bool:
                o = nee.tensor(rng.random(2 * n) > 0.5)
            else:
                lo, hi = (0, 256) if od is nee.uint8 else ((-128, 128) if od is nee.int8 else (-5000, 5000))
                o = nee.tensor(rng.integers(lo, hi, 2 * n)).to(od)
            o = o[1::2]
            for form, b in (("tensor", o), ("0d", o[0].clone()), ("scalar", o[0].item())):
                for name in ops:
                    if name == "where":
                        if form == "scalar":
                            continue
                        got, ref = nee.where(x > 0, x, b), torch.where(tt(x) > 0, tt(x), _t(b))
                    else:
                        if od is nee.bool and name in ("sub",) or (form != "tensor" and name == "logical_or"):
                            continue
                        got, ref = getattr(nee, name)(x, b), getattr(torch, name)(tt(x), _t(b))
                    assert_torch(got, ref, f"{name}({dt}, {od} {form}) n={n}")
