"""Session 18 torch parity (helper 'parity'): a seeded differential fuzz of eager ops against torch (pointwise,
binary with Python scalars / 0-d tensors, reductions, nn.functional, indexing) over dtypes, 0-size / 0-d shapes
and transposed / strided views, plus a direct regression test of each bug the fuzz found."""
import math
import warnings

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

ALL = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
       "complex64", "complex128"]
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 3e-5, "float64": 1e-9, "complex64": 3e-5,
       "complex128": 1e-9}


def _name(dt):
    return str(dt).split(".")[-1]


def _np(t):
    if _name(t.dtype) in ("float16", "bfloat16"):
        t = t.float()
    if isinstance(t, torch.Tensor):
        t = t.resolve_conj().resolve_neg()
    return np.array(t.numpy())


def _build(L, a, dt, view):
    """the same tensor in torch or neetorch: ``view`` "c" (contiguous), "T" (a transposed view of the last two
    dims), "s" (every other element of the last dim)."""
    if view == "T" and a.ndim >= 2:
        base = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    elif view == "s" and a.ndim >= 1:
        base = np.repeat(a, 2, axis=-1)
    else:
        base, view = np.array(a, order="C"), "c"   # (np.ascontiguousarray makes a 0-d array 1-d)
    t = torch.tensor(base) if L is torch else nee.tensor(base)
    t = t.to(getattr(L, dt))
    return t.transpose(-1, -2) if view == "T" else t[..., ::2] if view == "s" else t


def _values(rng, shape, dt):
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt in ("uint8", "int8", "int16", "int32", "int64"):
        return rng.integers(0 if dt == "uint8" else -6, 10, shape).astype(dt)
    a = rng.standard_normal(shape) * 3
    if rng.random() < 0.3:
        a = np.round(a * 2) / 2
    if dt.startswith("complex"):
        a = a + 1j * rng.standard_normal(shape)
    if rng.random() < 0.2 and a.size:
        a.flat[rng.integers(0, a.size)] = [np.nan, np.inf, -np.inf, 0.0][rng.integers(0, 4)]
    return a


def _compare(t, n, path="out"):
    """None when neetorch's ``n`` matches torch's ``t`` (both raised, or type / dtype / shape / values equal);
    a description of the first difference otherwise."""
    if isinstance(t, Exception) or isinstance(n, Exception):
        if isinstance(t, Exception) and isinstance(n, Exception):
            return None
        return f"{path}: torch {'raised ' + repr(t) if isinstance(t, Exception) else 'returned'}, neetorch " \
               f"{'raised ' + repr(n) if isinstance(n, Exception) else 'returned'}"
    if isinstance(t, (tuple, list)):
        if not isinstance(n, (tuple, list)) or len(n) != len(t):
            return f"{path}: torch {type(t).__name__} of {len(t)}, neetorch {n!r:.80}"
        for i, (a, b) in enumerate(zip(t, n)):
            m = _compare(a, b, f"{path}[{i}]")
            if m:
                return m
        return None
    if not isinstance(t, torch.Tensor):
        if isinstance(t, float) and isinstance(n, float) and (math.isclose(t, n, rel_tol=1e-6) or t != t and n != n):
            return None
        return None if (t == n and type(t) is type(n)) else f"{path}: torch {t!r} neetorch {n!r}"
    if not isinstance(n, nee.Tensor):
        return f"{path}: neetorch gives {type(n).__name__}"
    if _name(t.dtype) != n.dtype.name:
        return f"{path}: dtype torch {_name(t.dtype)} neetorch {n.dtype.name}"
    if tuple(t.shape) != tuple(n.shape):
        return f"{path}: shape torch {tuple(t.shape)} neetorch {tuple(n.shape)}"
    a, b = _np(t), _np(n)
    if a.dtype.kind in "fc":
        tol = TOL[_name(t.dtype)]
        ok = np.isclose(b.real, a.real, rtol=tol, atol=tol, equal_nan=True) & \
            np.isclose(b.imag, a.imag, rtol=tol, atol=tol, equal_nan=True)
    else:
        ok = a == b
    return None if ok.all() else f"{path}: values torch {a[~ok][:4]} neetorch {b[~ok][:4]}"


def _run(L, f, args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = f(L, *[_build(L, *a) if isinstance(a, tuple) and len(a) == 3 and isinstance(a[0], np.ndarray)
                       else a for a in args])
        return r
    except Exception as e:  # noqa: BLE001 - whether both raise is part of the comparison
        return e


def _diff(f, *args):
    return _compare(_run(torch, f, args), _run(nee, f, args))


# ------------------------------------------------------------------ the seeded fuzz
UNARY = ["abs", "neg", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "floor",
         "ceil", "round", "trunc", "frac", "sign", "sgn", "reciprocal", "square", "isnan", "isinf", "isfinite",
         "signbit", "logical_not", "bitwise_not", "nan_to_num", "erf", "erfinv", "lgamma", "digamma", "exp2",
         "log2", "log10", "deg2rad", "angle", "sinc", "i0", "logit", "relu", "positive", "asinh", "atan"]
BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "maximum", "minimum", "fmax",
          "fmin", "eq", "ne", "lt", "ge", "logical_and", "logical_xor", "bitwise_and", "bitwise_or", "atan2",
          "hypot", "copysign", "xlogy", "heaviside", "logaddexp", "float_power", "nextafter", "ldexp"]
REDUCE = ["sum", "mean", "nansum", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "std",
          "var", "logsumexp", "count_nonzero", "median", "cumsum", "cumprod", "cummax", "logcumsumexp", "norm"]
NNF = ["relu6", "elu", "selu", "celu", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "hardtanh",
       "leaky_relu", "softplus", "softsign", "tanhshrink", "softshrink", "hardshrink", "logsigmoid", "softmax",
       "log_softmax", "threshold"]


def _case(seed):
    rng = np.random.default_rng(seed)
    ch = lambda xs: xs[int(rng.integers(0, len(xs)))]   # noqa: E731
    nd = int(rng.integers(0, 4))
    shape = tuple(0 if rng.random() < 0.1 else int(rng.integers(1, 5)) for _ in range(nd))
    dt = ch(ALL)
    x = (_values(rng, shape, dt), dt, ch(["c", "c", "T", "s"]))
    kind = ch(["unary", "unary", "binary", "binary", "binary", "reduce", "reduce", "nnf"])
    if kind == "unary":
        op = ch(UNARY)
        form = ch(["f", "m", "out", "inplace"])
        if form == "f":
            return f"{op}", lambda L, x: getattr(L, op)(x), (x,)
        if form == "m":
            return f"{op}.m", lambda L, x: getattr(x, op)(), (x,)
        if form == "out":
            o = (np.zeros(ch([shape, (0,)])), ch([dt, "float32", "int64", "complex64", "bool"]), "c")
            return f"{op}.out", lambda L, x, o: (getattr(L, op)(x, out=o), o)[1], (x, o)
        return f"{op}_", lambda L, x: (getattr(x, op + "_")(), x)[1], (x,)
    if kind == "binary":
        op = ch(BINARY)
        r = rng.random()
        if r < 0.5:
            s2 = tuple(d if rng.random() < 0.7 else 1 for d in shape)[int(rng.integers(0, nd + 1)) if nd else 0:]
            dt2 = ch(ALL)
            y = (_values(rng, s2, dt2), dt2, ch(["c", "T", "s"]))
        elif r < 0.8:
            y = ch([0, 2, -3, True, 0.5, -1.5, float("nan"), float("inf"), 1 + 2j])
        else:
            dt2 = ch(ALL)
            y = (_values(rng, (), dt2), dt2, "c")
        form = ch(["f", "f", "m", "inplace", "swap"])
        if form == "f":
            return f"{op}", lambda L, x, y: getattr(L, op)(x, y), (x, y)
        if form == "m":
            return f"{op}.m", lambda L, x, y: getattr(x, op)(y), (x, y)
        if form == "swap" and isinstance(y, tuple):
            return f"{op} swapped", lambda L, x, y: getattr(L, op)(y, x), (x, y)
        return f"{op}_", lambda L, x, y: (getattr(x, op + "_")(y), x)[1], (x, y)
    if kind == "reduce":
        op = ch(REDUCE)
        kw = {}
        if op in ("cumsum", "cumprod", "cummax", "logcumsumexp") or (nd and rng.random() < 0.6):
            kw["dim"] = int(rng.integers(-nd, nd)) if nd else ch([0, -1])
            if op not in ("cumsum", "cumprod", "cummax", "logcumsumexp", "count_nonzero") and rng.random() < 0.5:
                kw["keepdim"] = bool(rng.random() < 0.5)
        if op in ("sum", "prod", "cumsum", "mean") and rng.random() < 0.3:
            kw["dtype"] = ch(["float64", "int64", "float32"])
        if op in ("std", "var") and rng.random() < 0.5:
            kw["correction"] = ch([0, 1, 2])

        def f(L, x):
            k = dict(kw)
            if "dtype" in k:
                k["dtype"] = getattr(L, k["dtype"])
            return getattr(L, op)(x, **k)
        return f"{op} {kw}", f, (x,)
    op = ch(NNF)
    if dt not in ("float16", "bfloat16", "float32", "float64"):
        x = (x[0].astype(np.float64) if x[0].dtype.kind != "c" else x[0].real.copy(), "float32", x[2])
    if op in ("softmax", "log_softmax"):
        d = int(rng.integers(-nd, nd)) if nd else 0
        return f"F.{op}", lambda L, x: getattr(L.nn.functional, op)(x, d), (x,)
    if op == "threshold":
        return "F.threshold", lambda L, x: L.nn.functional.threshold(x, 0.5, 2.5), (x,)
    return f"F.{op}", lambda L, x: getattr(L.nn.functional, op)(x), (x,)


# (torch-side quirks the fuzz meets, listed in the session report: complex sub computed as a - 1 * b gives NaN
# imaginary parts next to infinities; the in-place forms torch lacks (fmax_, isnan_ ...) are neetorch extras)
def _skip(name, t, n):
    if isinstance(t, AttributeError):        # a method torch does not have (neetorch's extra in-place forms)
        return True
    if isinstance(t, TypeError) and "unexpected keyword argument 'out'" in str(t):   # (an extra out=)
        return True
    return False


@pytest.mark.parametrize("block", range(8))
def test_seeded_fuzz(block):
    bad = []
    for seed in range(block * 30, (block + 1) * 30):
        name, f, args = _case(18_000 + seed)
        t, n = _run(torch, f, args), _run(nee, f, args)
        if _skip(name, t, n):
            continue
        if isinstance(n, Exception) and "complex32" in str(n):    # (float16 x complex: no complex32)
            continue
        if isinstance(t, Exception) and isinstance(n, Exception):
            continue
        m = _compare(t, n)
        if m:
            desc = [(a[0].shape, a[1], a[2]) if isinstance(a, tuple) else a for a in args]
            bad.append(f"seed {18_000 + seed} {name} {desc}: {m}")
    assert not bad, "\n".join(bad[:10])


# ------------------------------------------------------------------ regressions: the bugs the fuzz found
def _same(f, *args):
    m = _diff(f, *args)
    assert m is None, m


def _arr(*vals, dt="float32", view="c"):
    return (np.array(vals, dtype=np.float64 if not dt.startswith(("int", "uint", "bool")) else dt), dt, view)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16"])
def test_threshold_keeps_nan(dt):
    """torch: threshold is ``x <= threshold ? value : x``, so NaN stays NaN (neetorch gave ``value``)."""
    x = _arr(np.nan, 0.2, 0.5, 1.0, -np.inf, np.inf, dt=dt)
    _same(lambda L, x: L.nn.functional.threshold(x, 0.5, 2.5), x)
    _same(lambda L, x: L.nn.Threshold(0.5, -1.0)(x), x)
    _same(lambda L, x: (L.nn.functional.threshold_(x, 0.5, 2.5), x)[1], x)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,dim", [((0, 3), None), ((0, 3), 0), ((2, 3), 1)])
def test_argmax_complex_refused_before_size_check(op, shape, dim):
    """torch checks the dtype first: an empty complex tensor is a RuntimeError ("does not support complex
    input"), not the IndexError about the empty dim (neetorch gave the IndexError)."""
    for L in (torch, nee):
        with pytest.raises(RuntimeError, match="does not support complex input"):
            getattr(L, op)(L.zeros(shape, dtype=L.complex64), dim=dim)


@pytest.mark.parametrize("shape,dim", [((0, 3), 0), ((3, 0), -1), ((2, 0, 1), 1)])
def test_aminmax_empty_dim_is_index_error(shape, dim):
    """torch: aminmax over an empty dim named by dim= raises IndexError (neetorch: RuntimeError); without dim
    an empty input stays a RuntimeError in both."""
    for L in (torch, nee):
        with pytest.raises(IndexError, match="Expected reduction dim"):
            L.aminmax(L.zeros(shape), dim=dim)
        with pytest.raises(RuntimeError):
            L.aminmax(L.zeros(shape))


@pytest.mark.parametrize("idt,odt", [("complex64", "complex64"), ("complex64", "complex128"),
                                     ("complex64", "float64"), ("complex64", "float16"), ("complex64", "int32"),
                                     ("complex128", "complex64"), ("complex128", "float32"),
                                     ("float32", "float64"), ("int32", "int64")])
@pytest.mark.parametrize("op", ["abs", "absolute"])
def test_abs_out_of_complex_input(op, idt, odt):
    """torch: abs of a complex tensor writes into a complex out= of the input's dtype (imaginary part 0) or into
    any real out= its real result casts to (neetorch refused every out= but the real result's dtype)."""
    x = (np.array([3 + 4j, -1 + 0j, 0j]) if idt.startswith("complex") else np.array([3, -1, 0]), idt, "c")
    o = (np.zeros(3), odt, "c")
    _same(lambda L, x, o: (getattr(L, op)(x, out=o), o)[1], x, o)


@pytest.mark.parametrize("idt,odt,oshape", [("float16", "float16", (0,)), ("float32", "float64", (0,)),
                                            ("float32", "complex64", (2, 3)), ("int32", "float32", (0,)),
                                            ("int32", "int64", (2, 3)), ("complex64", "float32", (7,)),
                                            ("float64", "float32", (2, 3))])
def test_angle_out_resized_and_cast(idt, odt, oshape):
    """torch: angle's out= is resized (an empty out to the result's shape) and takes any dtype the result casts
    to (float32 -> float64 / complex64); an int out= is refused (neetorch: copied into without resizing: an
    "expand" error for an empty out, and no cast check)."""
    x = ((np.array([[1, -2, 0], [-1, 3, -4]]) * (1 + 1j if idt.startswith("complex") else 1)), idt, "T")
    _same(lambda L, x, o: (L.angle(x, out=o), o)[1], x, (np.zeros(oshape), odt, "c"))


@pytest.mark.parametrize("args", [(0.5, 10), (-2, 5, 1.5), (1, 4), (-1.5, 2.5), (2, -3, -1.5), (0, 3, 0.5)])
@pytest.mark.parametrize("dt", ["int32", "int64", "uint8", "int8", "float32", "float64", None])
def test_range_reads_bounds_in_integer_dtype(args, dt):
    """torch.range with an integer dtype truncates start / end / step to it first (range(0.5, 10, dtype=int32)
    has 11 elements, range(-2, 5, 1.5, dtype=int64) is -2..5); neetorch stepped in float64 and cast after.
    (step 0.5 truncates to 0: torch crashes with SIGFPE, neetorch raises: that case is checked on neetorch
    alone.)"""
    if dt and dt.startswith(("int", "uint")) and int(args[-1]) == 0 and len(args) == 3:
        with pytest.raises(RuntimeError, match="step must be nonzero"):
            nee.range(*args, dtype=getattr(nee, dt))
        return
    _same(lambda L: L.range(*args, dtype=getattr(L, dt) if dt else None))


def test_range_needs_end():
    for L in (torch, nee):
        with pytest.raises(TypeError):
            L.range(5)


@pytest.mark.parametrize("idt", ["int64", "uint8", "int32"])
@pytest.mark.parametrize("wdt", ["float32", "float64", "int64"])
@pytest.mark.parametrize("minlength", [0, 3])
def test_bincount_empty_input_with_weights_is_int64(idt, wdt, minlength):
    """torch: bincount of an empty input returns int64 zeros(minlength) even with float weights (neetorch: the
    weights' dtype); a non-empty input keeps the weights' dtype rule."""
    _same(lambda L, x, w: L.bincount(x, w, minlength=minlength), (np.zeros(0), idt, "c"), (np.zeros(0), wdt, "c"))
    _same(lambda L, x, w: L.bincount(x, w, minlength=minlength), (np.array([1, 1, 4]), idt, "c"),
          (np.array([0.5, 1.0, 2.0]), wdt, "c"))


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(4, 3, 5), (6, 3), (2, 3, 2, 2)])
def test_batch_norm_low_float_input_running_stats_float32(dt, shape):
    """torch: batch_norm training on float16 / bfloat16 input with float32 running stats computes the batch
    statistics in float32 and updates the running stats with them unrounded (neetorch rounded the batch mean /
    var to the input's dtype first: 2e-4 relative off)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 3 + 0.7
    r0 = rng.standard_normal(3)
    res = []
    for L in (torch, nee):
        xt = L.tensor(x).to(getattr(L, dt))
        rm, rv = L.tensor(r0).float(), (L.tensor(r0).abs() + 0.5).float()
        y = L.nn.functional.batch_norm(xt, rm, rv, L.ones(3), L.zeros(3), training=True, momentum=0.3)
        res.append((rm, rv, y))
    for a, b in zip(*res):
        assert _compare(a, b) is None, _compare(a, b)
    np.testing.assert_allclose(res[1][0].numpy(), res[0][0].numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(res[1][1].numpy(), res[0][1].numpy(), rtol=1e-6, atol=1e-7)


def test_batch_norm_float16_running_stats_float16():
    """all-float16 training: the running-stat update in float32, rounded once (exact vs torch here)."""
    rng = np.random.default_rng(2)
    x, r0 = rng.standard_normal((4, 3, 5)) * 3, rng.standard_normal(3)
    res = []
    for L in (torch, nee):
        rm, rv = L.tensor(r0).to(L.float16), L.tensor(np.abs(r0) + 0.5).to(L.float16)
        L.nn.functional.batch_norm(L.tensor(x).to(L.float16), rm, rv, training=True, momentum=0.3)
        res.append((rm.float().numpy(), rv.float().numpy()))
    np.testing.assert_array_equal(res[1][0], res[0][0])
    np.testing.assert_array_equal(res[1][1], res[0][1])


@pytest.mark.parametrize("attr", ["mT", "mH", "T"])
@pytest.mark.parametrize("dt", ["float32", "int64", "complex64"])
def test_matrix_transpose_of_0d_is_identity(attr, dt):
    """torch: ``x.mT`` / ``x.mH`` of a 0-d tensor is ``x`` (deprecated, with a warning); neetorch raised."""
    _same(lambda L, x: getattr(x, attr) * 1, (np.array(3), dt, "c"))
    for L in (torch, nee):
        with pytest.raises(RuntimeError, match="only supported on matrices"):
            L.ones(3).mT


@pytest.mark.parametrize("op", ["abs_", "absolute_"])
@pytest.mark.parametrize("shape", [(3,), (0,), (2, 2)])
def test_inplace_abs_of_complex_refused(op, shape):
    """torch: in-place abs of a complex tensor raises RuntimeError (neetorch, once abs's out= took a complex out,
    wrote |x| into x); real tensors still work in place."""
    for L in (torch, nee):
        with pytest.raises(RuntimeError, match="In-place abs is not supported for complex tensors"):
            getattr(L.ones(shape, dtype=L.complex64), op)()
    _same(lambda L, x: (getattr(x, op)(), x)[1], (np.array([-1.5, 2.0, -0.0]), "float32", "s"))


_EB_W = np.arange(18.).reshape(6, 3)
_EB_W[2, 1], _EB_W[4, 0] = np.nan, np.inf


@pytest.mark.parametrize("inp,offsets,kw", [
    ([0, 1, 2, 3, 4, 5], [0, 2, 4], {"mode": "sum"}),
    ([0, 1, 2, 3, 4, 5], [0, 2, 4], {"mode": "mean"}),
    ([0, 1, 2, 3, 4, 5], [0, 2, 4], {"mode": "max"}),
    ([0, 1, 2, 3, 4, 5], [0, 2, 4], {"mode": "sum", "padding_idx": 2}),
    ([0, 1, 2, 3, 4, 5], [0, 2, 4], {"mode": "mean", "padding_idx": 4}),
    ([0, 1, 2, 3, 4, 5], [0, 2, 4, 6], {"mode": "sum", "include_last_offset": True}),
    ([5, 2, 1], [0, 0, 3], {"mode": "sum"}),
    ([[0, 1], [2, 3], [4, 5]], None, {"mode": "sum", "padding_idx": 2}),
    ([[0, 1], [2, 3], [4, 5]], None, {"mode": "mean", "padding_idx": 4}),
])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_embedding_bag_nan_row_stays_in_its_bag(inp, offsets, kw, dt):
    """torch: a NaN / inf embedding row affects only the bags holding it (neetorch summed the bags as a 0/1
    membership matrix times the rows, so 0 * NaN spread it into every bag, and a padding row was masked by a
    multiply)."""
    args = [(np.array(inp), "int64", "c"), (_EB_W, dt, "c")]
    if offsets is not None:
        args.append((np.array(offsets), "int64", "c"))
    _same(lambda L, i, w, o=None: L.nn.functional.embedding_bag(i, w, o, **kw), *args)


@pytest.mark.parametrize("dt,value", [("uint8", -2), ("uint8", 300), ("uint8", -0.5), ("int8", 200), ("int8", 1e10),
                                      ("uint8", 255), ("int8", -128), ("int32", 2.7), ("int64", -5), ("uint8", True),
                                      ("bool", 1)])
def test_pad_constant_integer_value_out_of_range(dt, value):
    """torch: F.pad of an integer tensor with a value its dtype cannot hold (uint8 -2 or 300) raises RuntimeError
    (neetorch: numpy's OverflowError from the fill, or a wrapped value)."""
    _same(lambda L, x: L.nn.functional.pad(x, (1, 0), value=value), (np.ones(2), dt, "c"))
    for L in (torch, nee):
        try:
            L.nn.functional.pad(L.ones(2, dtype=getattr(L, dt)), (1, 0), value=value)
        except Exception as e:  # noqa: BLE001 - the type is what is checked
            assert type(e) is RuntimeError, (L.__name__, e)


def test_adaptive_avg_pool_nonfinite_stays_in_its_windows():
    """One NaN / inf in the input: only the windows holding it (torch's); the kernel's sums started from
    ``x[0] * 0``, which made every output NaN."""
    import torch
    import neetorch.nn.functional as NF
    x = np.random.default_rng(5).random((2, 3, 9, 11)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 2, 4, 5] = np.nan, np.inf
    for size in [(4, 5), (1, 1), (9, 11), (3, 2)]:
        got = NF.adaptive_avg_pool2d(nee.tensor(x), size).numpy()
        want = torch.nn.functional.adaptive_avg_pool2d(torch.tensor(x), size).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        got = NF.interpolate(nee.tensor(x), size=size, mode="area").numpy()
        want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="area").numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    got = NF.adaptive_avg_pool1d(nee.tensor(x[0]), 4).numpy()
    want = torch.nn.functional.adaptive_avg_pool1d(torch.tensor(x[0]), 4).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
