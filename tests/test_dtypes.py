"""Dtypes and type promotion vs torch (promote_types, result_type, op output dtypes)."""
import itertools
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import neetorch as nee
from neetorch.ops import OPS, Meta
from conftest import DTYPE_NAMES

torch = pytest.importorskip("torch")

PAIRS = list(itertools.product(DTYPE_NAMES, DTYPE_NAMES))


def N(name):
    return getattr(nee, name)


def T(name):
    return getattr(torch, name)


def tname(d):
    return str(d).replace("torch.", "")


def test_dtype_identity_and_names():
    for name in DTYPE_NAMES:
        d = N(name)
        assert d is nee.dtype.__class__ and False or d.name == name
        assert repr(d) == f"neetorch.{name}" == repr(T(name)).replace("torch", "neetorch")
        assert d.itemsize == T(name).itemsize
        assert d.is_floating_point == T(name).is_floating_point
        assert d.is_signed == T(name).is_signed
        assert pickle.loads(pickle.dumps(d)) is d
    assert nee.float is nee.float32 and nee.double is nee.float64 and nee.half is nee.float16
    assert nee.long is nee.int64 and nee.int is nee.int32 and nee.short is nee.int16
    assert nee.bool is not bool and nee.bool.name == "bool"


def test_to_dtype_conversions():
    from neetorch.tensor.dtypes import to_dtype
    assert to_dtype(float) is nee.float32
    assert to_dtype(int) is nee.int64
    assert to_dtype(bool) is nee.bool
    assert to_dtype(np.float64) is nee.float64
    assert to_dtype(np.dtype("int16")) is nee.int16
    assert to_dtype("double") is nee.float64
    assert to_dtype(np.complex64) is nee.complex64 and to_dtype("cdouble") is nee.complex128
    with pytest.raises(TypeError):
        to_dtype("complex32")
    with pytest.raises(TypeError):
        to_dtype(np.uint16)


@pytest.mark.parametrize("a,b", PAIRS)
def test_promote_types_all_pairs(a, b):
    assert nee.promote_types(N(a), N(b)).name == tname(torch.promote_types(T(a), T(b)))


def _nee_operand(kind, dname):
    if kind == "dim":
        return nee.zeros(2, dtype=N(dname))
    if kind == "zero":
        return nee.zeros((), dtype=N(dname))
    raise AssertionError(kind)


def _torch_operand(kind, dname):
    if kind == "dim":
        return torch.zeros(2, dtype=T(dname))
    return torch.zeros((), dtype=T(dname))


@pytest.mark.parametrize("ka,kb", [("dim", "dim"), ("dim", "zero"), ("zero", "dim"), ("zero", "zero")])
def test_result_type_tensor_pairs(ka, kb):
    bad = []
    for a, b in PAIRS:
        r = nee.result_type(_nee_operand(ka, a), _nee_operand(kb, b)).name
        e = tname(torch.result_type(_torch_operand(ka, a), _torch_operand(kb, b)))
        if r != e:
            bad.append((a, b, r, e))
    assert not bad


SCALARS = [True, False, 0, 3, -2, 2.5, 0.0, float("inf")]


@pytest.mark.parametrize("kind", ["dim", "zero"])
def test_result_type_tensor_scalar(kind):
    bad = []
    for d in DTYPE_NAMES:
        for s in SCALARS:
            for order in (0, 1):
                na, ta = _nee_operand(kind, d), _torch_operand(kind, d)
                r = nee.result_type(*((na, s) if order == 0 else (s, na))).name
                e = tname(torch.result_type(*((ta, s) if order == 0 else (s, ta))))
                if r != e:
                    bad.append((kind, d, s, order, r, e))
    assert not bad


def test_result_type_scalars_only():
    assert nee.result_type(1, 2) is nee.int64
    assert nee.result_type(1, 2.0) is nee.float32
    assert nee.result_type(True, False) is nee.bool
    assert nee.result_type(True, 2) is nee.int64
    nee.set_default_dtype(nee.float64)
    try:
        assert nee.result_type(1, 2.0) is nee.float64
        assert nee.result_type(nee.zeros(2, dtype=nee.int32), 2.0) is nee.float64
        assert nee.result_type(nee.zeros(2, dtype=nee.float16), 2.0) is nee.float16
    finally:
        nee.set_default_dtype(nee.float32)


def test_default_dtype_changes_float_inference():
    nee.set_default_dtype(nee.float64)
    try:
        assert nee.tensor([1.5]).dtype is nee.float64
        assert nee.zeros(2).dtype is nee.float64
        assert nee.arange(0, 1, 0.5).dtype is nee.float64
        assert (nee.tensor([1, 2]) / 2).dtype is nee.float64
    finally:
        nee.set_default_dtype(nee.float32)
    with pytest.raises(TypeError):
        nee.set_default_dtype(nee.int32)


_kinds = st.sampled_from(["dim", "zero", "scalar"])
_dnames = st.sampled_from(DTYPE_NAMES)
_scal = st.sampled_from(SCALARS)


def _mk(kind, d, s):
    if kind == "scalar":
        return s, s
    return _nee_operand(kind, d), _torch_operand(kind, d)


@settings(max_examples=200, deadline=None)
@given(_kinds, _dnames, _scal, _kinds, _dnames, _scal, st.sampled_from(["float32", "float64"]))
def test_result_type_hypothesis(k1, d1, s1, k2, d2, s2, default):
    n1, t1 = _mk(k1, d1, s1)
    n2, t2 = _mk(k2, d2, s2)
    nee.set_default_dtype(N(default))
    old = torch.get_default_dtype()
    torch.set_default_dtype(T(default))
    try:
        assert nee.result_type(n1, n2).name == tname(torch.result_type(t1, t2))
    finally:
        torch.set_default_dtype(old)
        nee.set_default_dtype(nee.float32)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["dim", "zero"]), _dnames), min_size=3, max_size=3))
def test_result_type_three_tensors(ops):
    # torch.addcmul promotes its three tensor operands together (TensorIterator), like nee.result_type
    ns = [_nee_operand(k, d) for k, d in ops]
    ts = [_torch_operand(k, d).abs() if T(d) not in (torch.bool, torch.uint8) else _torch_operand(k, d)
          for k, d in ops]
    try:
        e = torch.addcmul(*ts).dtype
    except (RuntimeError, NotImplementedError):
        return
    assert nee.result_type(*ns).name == tname(e)


# ------------------------------------------------------------ op output dtypes (no execution)
BIN_OPS = ["add", "sub", "mul", "true_divide", "floor_divide", "remainder", "fmod", "pow", "atan2", "maximum",
           "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
           "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "copysign", "xlogy"]
TORCH_FN = {"true_divide": "div"}


def _torch_out_dtype(op, a, b):
    fn = getattr(torch, TORCH_FN.get(op, op))
    try:
        return tname(fn(torch.ones(1, dtype=T(a)), torch.ones(1, dtype=T(b))).dtype)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


@pytest.mark.parametrize("op", BIN_OPS)
def test_binary_infer_dtypes_match_torch(op):
    opdef = OPS[op]
    bad = []
    for a, b in PAIRS:
        e = _torch_out_dtype(op, a, b)
        if e is None:
            continue
        try:
            r = opdef.infer([Meta((1,), N(a)), Meta((1,), N(b))], {})[0].dtype.name
        except Exception as ex:  # noqa: BLE001
            r = f"raised {ex!r}"
        if r != e:
            bad.append((a, b, r, e))
    assert not bad


UN_OPS = ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "erf", "reciprocal", "abs", "neg", "floor", "ceil",
          "round", "trunc", "sign", "isnan", "isinf", "isfinite", "signbit", "logical_not", "bitwise_not",
          "square", "relu"]


@pytest.mark.parametrize("op", UN_OPS)
def test_unary_infer_dtypes_match_torch(op):
    opdef = OPS[op]
    bad = []
    for a in DTYPE_NAMES:
        try:
            e = tname(getattr(torch, op)(torch.ones(1, dtype=T(a))).dtype)
        except (RuntimeError, NotImplementedError, TypeError):
            continue
        r = opdef.infer([Meta((1,), N(a))], {})[0].dtype.name
        if r != e:
            bad.append((a, r, e))
    assert not bad


# execute a representative subset (each (op, dtypes) pair compiles a kernel)
EXEC = [("add", "uint8", "int8"), ("add", "bool", "int16"), ("add", "int32", "float16"), ("mul", "float16", "float64"),
        ("true_divide", "int64", "int64"), ("eq", "int8", "float32"), ("sub", "uint8", "uint8"),
        ("maximum", "int32", "int64"), ("add", "bool", "bool")]


@pytest.mark.parametrize("op,a,b", EXEC)
def test_binary_exec_dtypes(op, a, b):
    fn = getattr(nee, op)
    tf = getattr(torch, TORCH_FN.get(op, op))
    xa = np.array([1, 0, 3, 2]).astype(a)
    xb = np.array([2, 1, 1, 3]).astype(b)
    r = fn(nee.tensor(xa), nee.tensor(xb))
    e = tf(torch.tensor(xa), torch.tensor(xb))
    assert r.dtype.name == tname(e.dtype)
    np.testing.assert_allclose(r.numpy().astype(np.float64), e.numpy().astype(np.float64), rtol=1e-3)


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("d", ["uint8", "int32", "float16", "bool"])
def test_tensor_scalar_exec_dtypes(d, scalar):
    x = np.array([1, 0, 1]).astype(d)
    for order in (0, 1):
        if d == "bool" and isinstance(scalar, bool):
            r, e = nee.tensor(x) + scalar, torch.tensor(x) + scalar
        else:
            r = nee.tensor(x) * scalar if order == 0 else scalar * nee.tensor(x)
            e = torch.tensor(x) * scalar if order == 0 else scalar * torch.tensor(x)
        assert r.dtype.name == tname(e.dtype), (d, scalar, order)
        np.testing.assert_allclose(r.numpy().astype(np.float64), e.numpy().astype(np.float64))


def test_zero_dim_does_not_upcast_within_category():
    a = nee.ones(3, dtype=nee.int8)
    assert (a + nee.tensor(1000)).dtype is nee.int8
    assert (a + nee.tensor(1.5)).dtype is nee.float32
    assert (nee.ones(3, dtype=nee.float16) + nee.tensor(1.5, dtype=nee.float64)).dtype is nee.float16
    assert (nee.tensor(1, dtype=nee.int8) + nee.tensor(1, dtype=nee.int32)).dtype is nee.int32


def test_can_cast():
    for a, b in PAIRS:
        assert nee.can_cast(N(a), N(b)) == torch.can_cast(T(a), T(b)), (a, b)
