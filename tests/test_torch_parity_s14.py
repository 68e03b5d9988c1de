"""Torch parity, session 14: the mismatches a differential sweep (reductions, indexing, shape ops, creation,
promotion, nn.functional, every Tensor method on float / int inputs) found, each checked against torch 2.13
through the shared harness (``tests/torch_check.py``: the same numpy inputs each side; where torch raises
neetorch must raise an instance of torch's exception type, where it returns the results must match in type,
dtype, shape and values)."""
import math

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

from torch_check import make_check  # noqa: E402

check = make_check(torch, {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "other": 1e-12},
                   same_error="subclass")
RNG = np.random.default_rng(14)


def _r(*shape, dt=np.float32):
    return RNG.standard_normal(shape).astype(dt)


def _name(d):
    """A dtype (or a tuple of them) by its name, comparable across torch and neetorch."""
    if isinstance(d, tuple):
        return tuple(_name(x) for x in d)
    return str(d).split(".")[-1]


# ------------------------------------------------------------------ hsplit / vsplit
@pytest.mark.parametrize("fn, shape, arg", [
    ("hsplit", (3, 4), 3), ("hsplit", (3, 4), 2), ("hsplit", (3, 4), 0), ("hsplit", (4,), 3), ("hsplit", (4,), 2),
    ("hsplit", (), 2), ("hsplit", (3, 4), [1, 3]), ("hsplit", (4,), [5]),
    ("vsplit", (3, 4), 2), ("vsplit", (4, 4), 2), ("vsplit", (4,), 2), ("vsplit", (3, 4), [1]),
    ("vsplit", (6, 2, 2), 3), ("dsplit", (2, 2, 6), 4), ("dsplit", (2, 6), 2),
])
def test_hsplit_vsplit_need_divisible_sections_and_enough_dims(fn, shape, arg):
    # torch: an int section count must divide the split dim; vsplit needs 2 dims, hsplit 1 (a list splits freely)
    check(lambda L, a: getattr(L, fn)(a, arg), _r(*shape))
    check(lambda L, a: getattr(a, fn)(arg), _r(*shape))


# ------------------------------------------------------------------ exception types torch documents
def test_div_unknown_rounding_mode_is_runtime_error():
    check(lambda L, a: L.div(a, 2, rounding_mode="round"), _r(3))
    with pytest.raises(RuntimeError, match="rounding_mode"):
        nee.div(nee.ones(3), 2, rounding_mode="round")
    with pytest.raises(ValueError):   # (what neetorch raised before: still caught)
        nee.div(nee.ones(3), 2, rounding_mode="round")


@pytest.mark.parametrize("conv", [float, int, complex])
@pytest.mark.parametrize("shape", [(3,), (0,), (2, 2)])
def test_python_scalar_of_many_elements_is_value_error(conv, shape):
    check(lambda L, a: conv(a), _r(*shape))
    check(lambda L, a: a.item(), _r(*shape))          # (item() stays torch's RuntimeError)
    check(lambda L, a: conv(a), _r(1, 1))             # one element converts


@pytest.mark.parametrize("args, kw", [
    ((0, math.nan), {}), ((0, math.inf), {}), ((-math.inf, 3), {}), ((0, np.float32("nan")), {}),
    ((0, 2, 0.5), {"dtype": "int64"}), ((0, 2, 0), {}), ((0, 2, 0.0), {"dtype": "float32"}),
    ((0, 2, 0.5), {"dtype": "int32"}), ((0, 2, 1.5), {"dtype": "int64"}), ((0.5, 3), {}),
])
def test_arange_nonfinite_range_and_zero_step(args, kw):
    # torch: a NaN / infinite bound is RuntimeError("unsupported range"); a float step the int64 cast makes 0 is a
    # ValueError; a 0 step a RuntimeError; int32 keeps the float step's length
    def f(L):
        k = {n: getattr(L, v) for n, v in kw.items()}
        return L.arange(*args, **k)
    check(f)


# ------------------------------------------------------------------ dtypes
def test_finfo_of_complex_describes_its_components():
    for name in ("complex64", "complex128"):
        t, n = torch.finfo(getattr(torch, name)), nee.finfo(getattr(nee, name))
        assert (n.eps, n.max, n.min, n.tiny, n.bits, n.resolution, n.dtype) == \
            (t.eps, t.max, t.min, t.tiny, t.bits, t.resolution, t.dtype)
    with pytest.raises(TypeError):
        nee.finfo(nee.int32)


@pytest.mark.parametrize("name", ["float32", "float64", "bfloat16", "complex64", "complex128", "int32", "bool",
                                  "uint8", "float16"])
def test_dtype_to_complex_and_to_real(name):
    for m in ("to_complex", "to_real"):
        if name == "float16" and m == "to_complex":   # torch: complex32, which neetorch does not have
            with pytest.raises(NotImplementedError, match="complex32"):
                nee.float16.to_complex()
            continue
        check(lambda L: _name(getattr(getattr(L, name), m)()))


# ------------------------------------------------------------------ memory formats
@pytest.mark.parametrize("shape, fmt", [((2, 3, 4, 5), "channels_last"), ((2, 3, 1, 1), "channels_last"),
                                        ((2, 1, 4, 5), "channels_last"), ((2, 3, 2, 4, 5), "channels_last_3d")])
def test_channels_last_strides_values_and_flags(shape, fmt):
    def f(L, a):
        m = getattr(L, fmt)
        y = a.contiguous(memory_format=m)
        z = a.to(memory_format=m)
        w = L.clone(a, memory_format=m)
        back = y.contiguous()
        return (y, y.stride(), y.is_contiguous(), y.is_contiguous(memory_format=m), z.stride(), w.stride(), back,
                back.stride(), back.is_contiguous(), a.is_contiguous(memory_format=m), y + 1,
                y.contiguous(memory_format=m) is y, a.contiguous(memory_format=L.contiguous_format) is a)
    check(f, _r(*shape))


def test_channels_last_of_a_view_and_wrong_rank():
    check(lambda L, a: (lambda y: (y, y.stride()))(a[:, ::2].contiguous(memory_format=L.channels_last)),
          _r(2, 6, 3, 4))
    check(lambda L, a: (lambda y: (y, y.stride()))(a.transpose(1, 3).contiguous(memory_format=L.channels_last)),
          _r(2, 6, 3, 4))
    check(lambda L, a: a.contiguous(memory_format=L.channels_last), _r(2, 3))
    check(lambda L, a: a.contiguous(memory_format=L.channels_last_3d), _r(2, 3, 4, 5))
    check(lambda L, a: a.clone(memory_format=L.channels_last), _r(2, 3, 4))
    check(lambda L, a: a.is_contiguous(memory_format=L.channels_last), _r(2, 3))
    check(lambda L, a: (a.is_contiguous(memory_format=L.channels_last_3d), a.to(memory_format=L.contiguous_format)),
          _r(2, 3, 4, 5))
    check(lambda L, a: a.contiguous(memory_format=L.preserve_format), _r(2, 3))
    assert repr(nee.channels_last) == "neetorch.channels_last" and isinstance(nee.channels_last, nee.memory_format)


# ------------------------------------------------------------------ int arguments: no silent truncation
@pytest.mark.parametrize("d", [1.0, 2.5, True, np.float64(1.0), "t1", "tf", np.int64(1), -1])
def test_dim_must_be_an_integer(d):
    def f(L, a):
        dd = L.tensor(1) if d == "t1" else L.tensor(1.0) if d == "tf" else d
        return (a.sum(dd), a.unsqueeze(dd), L.softmax(a, dd), a.transpose(dd, 0), L.cat([a, a], dd), a.flatten(dd),
                a.mean(dd), L.argmax(a, dd))
    check(f, _r(2, 3))


@pytest.mark.parametrize("call", [
    lambda L, a: L.topk(a, 2.5), lambda L, a: L.topk(a, 2.0), lambda L, a: L.kthvalue(a, 2.0),
    lambda L, a: L.diff(a, 2.5), lambda L, a: L.histc(a, 2.5), lambda L, a: L.diag_embed(a, 1.0),
    lambda L, a: L.diagflat(a, 1.5), lambda L, a: L.rot90(a, 1.0), lambda L, a: L.rot90(a, 2.5),
    lambda L, a: L.topk(a, L.tensor(2)), lambda L, a: L.kthvalue(a, np.int64(2)), lambda L, a: L.rot90(a, -3),
    lambda L, a: L.diff(a, 2), lambda L, a: L.histc(a, 3), lambda L, a: L.diag_embed(a, -1),
])
def test_integer_arguments_reject_floats(call):
    check(call, _r(3, 4))


# ------------------------------------------------------------------ rrelu bounds
@pytest.mark.parametrize("lower, upper", [(1.0, 0.5), (0.3, 0.3), (1.0, 1.0 / 3), (0.1, 0.2)])
def test_rrelu_lower_above_upper_is_an_error(lower, upper):
    import torch.nn.functional as TF
    F = lambda L: TF if L is torch else nee.nn.functional  # noqa: E731
    check(lambda L, a: F(L).rrelu(a, lower, upper), _r(3, 4))
    check(lambda L, a: L.rrelu(a, lower, upper), _r(3, 4))
    check(lambda L, a: L.nn.RReLU(lower, upper).eval()(a), _r(3, 4))


# ------------------------------------------------------------------ torch's keyword names
_KW_FUNCS = [
    ("chunk", dict(input="x", chunks=2, dim=1)), ("diagonal", dict(input="x", offset=1, dim1=0, dim2=1)),
    ("flatten", dict(input="x", start_dim=0, end_dim=-1)), ("moveaxis", dict(input="x", source=0, destination=1)),
    ("movedim", dict(input="x", source=0, destination=1)), ("narrow", dict(input="x", dim=0, start=1, length=2)),
    ("select", dict(input="x", dim=0, index=1)), ("squeeze", dict(input="x", dim=0)),
    ("unsqueeze", dict(input="x", dim=0)), ("transpose", dict(input="x", dim0=0, dim1=1)),
    ("swapaxes", dict(input="x", axis0=0, axis1=1)), ("swapdims", dict(input="x", dim0=0, dim1=1)),
    ("unbind", dict(input="x", dim=1)), ("ravel", dict(input="x")), ("t", dict(input="x")),
    ("split", dict(tensor="x", split_size_or_sections=2, dim=1)), ("broadcast_to", dict(input="y", size=(2, 6))),
    ("permute", dict(input="x", dims=(1, 0))), ("reshape", dict(input="x", shape=(24,))),
    ("unflatten", dict(input="x", dim=1, sizes=(2, 3))), ("numel", dict(input="x")),
    ("is_floating_point", dict(input="x")), ("zeros_like", dict(input="x")),
    ("ones_like", dict(input="x", dtype="int32", requires_grad=False)), ("empty_like", dict(input="x")),
    ("full_like", dict(input="x", fill_value=2.0, memory_format="preserve_format")),
    ("promote_types", dict(type1="float32", type2="int64")),
]


@pytest.mark.parametrize("name, kw", _KW_FUNCS, ids=[k[0] for k in _KW_FUNCS])
def test_functions_take_torchs_keyword_names(name, kw):
    def f(L, x, y):
        def v(a):
            if a in ("x", "y"):
                return x if a == "x" else y
            if isinstance(a, str) and hasattr(L, a):
                return getattr(L, a)
            return a
        r = getattr(L, name)(**{k: v(a) for k, a in kw.items()})
        if name == "empty_like":
            r = (tuple(r.shape), _name(r.dtype))
        return _name(r) if name == "promote_types" else r
    check(f, _r(4, 6), _r(6))


_KW_METHODS = [
    ("split", dict(split_size=2, dim=1)), ("where", dict(condition="mask", other="x")),
    ("new_zeros", dict(size=(2, 3), requires_grad=False)), ("new_ones", dict(size=(2,), dtype="int8")),
    ("float", dict(memory_format="preserve_format")), ("double", dict(memory_format="contiguous_format")),
    ("int", dict(memory_format="preserve_format")), ("cpu", dict(memory_format="preserve_format")),
    ("bool", dict(memory_format="preserve_format")), ("half", dict(memory_format="preserve_format")),
    ("transpose", dict(dim0=1, dim1=0)), ("swapaxes", dict(axis0=0, axis1=1)), ("reshape", dict(shape=(24,))),
]


@pytest.mark.parametrize("name, kw", _KW_METHODS, ids=[k[0] for k in _KW_METHODS])
def test_methods_take_torchs_keyword_names(name, kw):
    def f(L, x):
        def v(a):
            if a == "x":
                return x
            if a == "mask":
                return x > 0
            if isinstance(a, str) and hasattr(L, a):
                return getattr(L, a)
            return a
        return getattr(x, name)(**{k: v(a) for k, a in kw.items()})
    check(f, _r(4, 6))
    check(lambda L, x: x.requires_grad_(requires_grad=False).requires_grad, _r(2))


def test_dim_as_integer_0d_tensor_in_reductions():
    check(lambda L, x: (x.sum(L.tensor(1)), x.mean(L.tensor(-1)), L.amax(x, L.tensor(0))), _r(3, 4))


# ------------------------------------------------------------------ torch.vmap and torch.sym_* (were missing)
_VMAP_CASES = [
    (lambda L: L.vmap(L.dot, in_dims=(0, None)), ((3, 4), (4,))),
    (lambda L: L.vmap(lambda a: a.sum(), in_dims=1), ((3, 4),)),
    (lambda L: L.vmap(lambda a: (a, a * 2), out_dims=(0, 1)), ((3, 4),)),
    (lambda L: L.vmap(lambda a, s: a * s, in_dims=(0, None)), ((3, 4), 2.0)),
    (lambda L: L.vmap(L.dot), ((3, 4), (2, 4))),
    (lambda L: L.vmap(L.dot, in_dims=(0, None)), ((3, 4),)),
    (lambda L: L.vmap(lambda a: a.sum(), in_dims=None), ((3, 4),)),
    (lambda L: L.vmap(lambda d: d["a"] + d["b"]), ({"a": (3, 4), "b": (3, 4)},)),
    (lambda L: L.vmap(L.vmap(L.dot)), ((2, 3, 4), (2, 3, 4))),
    (lambda L: L.vmap(lambda a: a, in_dims=-1), ((3, 4),)),
    (lambda L: L.vmap(lambda a: a.sum(0), out_dims=-1), ((2, 3, 4),)),
    (lambda L: L.vmap(lambda a: a), ((),)),
    (lambda L: L.vmap(lambda a, b: L.matmul(a, b), in_dims=(1, 0)), ((4, 5, 3), (5, 3, 2))),
    (lambda L: L.vmap(lambda ab: ab[0] - ab[1], in_dims=((0, None),)), (((3, 4), (4,)),)),
    (lambda L: L.vmap(lambda a: L.softmax(a, -1) @ a.t()), ((2, 3, 4),)),
]


@pytest.mark.parametrize("i", range(len(_VMAP_CASES)))
def test_vmap_matches_torch(i):
    make, shapes = _VMAP_CASES[i]

    def arr(s):
        if isinstance(s, dict):
            return {k: arr(v) for k, v in s.items()}
        if isinstance(s, tuple) and s and isinstance(s[0], tuple):
            return tuple(arr(v) for v in s)
        return _r(*s) if isinstance(s, tuple) else s
    args = [arr(s) for s in shapes]

    def conv(L, a):
        if isinstance(a, dict):
            return {k: conv(L, v) for k, v in a.items()}
        if isinstance(a, tuple):
            return tuple(conv(L, v) for v in a)
        return (torch.from_numpy(a.copy()) if L is torch else nee.tensor(a.copy())) if isinstance(a, np.ndarray) else a

    def f(L):
        r = make(L)(*[conv(L, a) for a in args])
        return tuple(r) if isinstance(r, (tuple, list)) else r
    check(f)


def test_sym_helpers():
    for name, args in [("sym_int", (2.7,)), ("sym_int", (-2.7,)), ("sym_float", (3,)), ("sym_max", (2, 3.5)),
                       ("sym_min", (2, 3)), ("sym_not", (True,)), ("sym_ite", (False, 1, 2)), ("sym_sum", ([1, 2, 3],)),
                       ("sym_sqrt", (4,))]:
        t, n = getattr(torch, name)(*args), getattr(nee, name)(*args)
        assert (type(t), t) == (type(n), n), (name, args, t, n)


# ------------------------------------------------------------------ setitem: float16 / bfloat16 values, overlaps
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("v", [1e6, 1e40, -1e40, 65519.0, 1.3, math.nan])
def test_setitem_low_float_rounds_like_torch(dt, v):
    # torch rounds a Python float into a float16 / bfloat16 tensor through setitem (past the range: inf) where
    # fill_ / masked_fill_ / full refuse it
    def f(L, a):
        x = a.to(getattr(L, dt))
        x[0] = v
        x[1:3] = v
        x[L.tensor([4])] = v
        return x.float()
    check(f, _r(6))
    check(lambda L, a: a.to(getattr(L, dt)).fill_(v).float(), _r(6))


@pytest.mark.parametrize("stmt", [
    "b[1:] = b[:-1]", "b[:] = b", "b[::2] = b[1::2]", "b[:3] = b[3:]", "b.view(2, 3)[0] = b.view(2, 3)[1]",
    "b[1:4] = b[0:3].clone()", "b[1:] += b[:-1]", "b[[1, 2]] = b[:2]", "b[b > 2] = b[:3]", "b[[1, 2]] = b[[3, 4]]",
    "b.index_put_((L.tensor([0]),), b[5:])", "b[[0, 1, 2, 3, 4, 5]] = b", "b[[0]] = b[0]", "b[[0]] = b[0].clone()",
])
def test_setitem_overlapping_source(stmt):
    # torch refuses a source that partly overlaps the written elements (basic indexing) or overlaps them at all
    # (advanced indexing: index_put_)
    def f(L, a):
        b = a.clone()
        exec(stmt, {"L": L, "b": b})
        return b
    check(f, _r(6))


# ------------------------------------------------------------------ torch.testing.assert_close (was missing)
_AC_CASES = [
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.000001])), {}),
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.1])), {}),
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.], dtype=L.float64)), {}),
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.], dtype=L.float64)), {"check_dtype": False}),
    (lambda L: (L.tensor([1, 2]), L.tensor([1, 3])), {}),
    (lambda L: (L.tensor([1., math.nan]), L.tensor([1., math.nan])), {}),
    (lambda L: (L.tensor([1., math.nan]), L.tensor([1., math.nan])), {"equal_nan": True}),
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.1])), {"rtol": 0.1, "atol": 0.}),
    (lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.1])), {"rtol": 0.1}),
    (lambda L: (L.ones(2, 3), L.ones(3, 2)), {}),
    (lambda L: (1.0, 1.0 + 1e-9), {}), (lambda L: (1, 1.0), {}),
    (lambda L: ([L.ones(2), {"a": L.zeros(1)}], [L.ones(2), {"a": L.zeros(1)}]), {}),
    (lambda L: ([L.ones(2), {"a": L.zeros(1)}], [L.ones(2), {"a": L.ones(1)}]), {}),
    (lambda L: (L.tensor([1., 2.], dtype=L.float16), L.tensor([1., 2.001], dtype=L.float16)), {}),
    (lambda L: (L.tensor([math.inf]), L.tensor([math.inf])), {}),
    (lambda L: (L.tensor([math.inf]), L.tensor([-math.inf])), {}),
    (lambda L: (L.tensor([math.inf]), L.tensor([1e30])), {"rtol": 1.0, "atol": 1e40}),
    (lambda L: (L.tensor([1 + 1j]), L.tensor([1 + 1.000001j])), {}),
    (lambda L: (L.tensor(True), L.tensor(False)), {}),
    (lambda L: (L.arange(6.).reshape(2, 3).t(), L.arange(6.).reshape(2, 3).t().contiguous()), {}),
]


@pytest.mark.parametrize("i", range(len(_AC_CASES)))
def test_testing_assert_close_agrees_with_torch(i):
    make, kw = _AC_CASES[i]
    res = []
    for L in (torch, nee):
        a, e = make(L)
        try:
            L.testing.assert_close(a, e, **kw)
            res.append("ok")
        except (AssertionError, ValueError, TypeError) as ex:
            res.append(type(ex).__name__)
    assert res[0] == res[1], res


@pytest.mark.parametrize("dt", ["uint8", "int8", "int16", "int32", "int64"])
def test_softsign_integer_inputs_wrap_like_torch(dt):
    # torch: input / (abs(input) + 1) with the + 1 in the input's dtype (uint8 255 -> 0: inf; int8 127 -> -128)
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, 0, 1, -1 if info.min < 0 else 2, 3, info.max - 1], dtype=dt)
    got = nee.nn.functional.softsign(nee.from_numpy(a)).numpy()
    want = torch.nn.functional.softsign(torch.from_numpy(a)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
