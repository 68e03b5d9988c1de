"""repr(tensor) vs torch's (with 'torch' spelled 'neetorch')."""
import re

import numpy as np
import pytest

import neetorch as nee
from neetorch.tensor import _repr

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(0)


def _unwrap(s):
    # "neetorch" is 3 characters longer than "torch": a suffix may wrap onto a new line in one repr only
    return re.sub(r",\n\s+(dtype|size|requires_grad|device)=", r", \1=", s)


def same_repr(n, t):
    return _unwrap(repr(n)) == _unwrap(repr(t).replace("torch", "neetorch"))
INF, NAN = float("inf"), float("nan")

LITERALS = [
    [1, 2, 3], 5, 2.5, True, [], [[1.5, 2.25], [3, 4]], [1e-5, 1.0], [1e10, 1.0], [123456789.0], [1.0, 2.0, 3.0],
    [0.1, 0.25], [NAN, 1.0, INF, -INF], [NAN], [INF, -INF], [[True, False], [False, True]], [-1, 100, -1000],
    [0.0, -0.0], [1e-10], [1e100], [1e-3, 1e3], [1.0, 1e-4], [0.0001, 0.001], [123.456, 0.001], [1.5e8], [0.5],
    -0.0, NAN, 1e-8, [2.0, NAN], [1e9, NAN], [[]], [[[1]]], [[-1.5, 0.0], [NAN, 7.25]], [[0, 0], [0, 0]],
    [0.0], [-INF], 1e20, -3, [False], [[1, -2], [-30, 4]], [1.0, -1.0], [1.0e-4, 1.0], [999.9999, 1.0],
    [2**40, -5], [0.3333333, 100.5], [1e-4 * 0.99, 0.1]]


@pytest.mark.parametrize("data", LITERALS, ids=[str(i) for i in range(len(LITERALS))])
def test_repr_literals(data):
    assert same_repr(nee.tensor(data), torch.tensor(data))


ARRAYS = [
    (np.arange(2000).reshape(40, 50), "int64"), (_rng.standard_normal(1001), "float32"),
    (_rng.standard_normal((3, 4, 5)), "float32"), (_rng.standard_normal((20, 30)), "float64"),
    (np.arange(12).reshape(3, 4), "int32"), (np.array([1.5, 2.5]), "float16"), (np.array([1, 2]), "uint8"),
    (np.array([1, 2]), "int8"), (np.array([True]), "bool"), (np.array([1.5, 2.5]), "float64"),
    (np.array(3.25), "float64"), (np.array(3), "int16"), (np.zeros((0, 3)), "float32"), (np.zeros((0,)), "int32"),
    (np.zeros((2, 0)), "int64"), (np.zeros((0,)), "float64"), (np.zeros((0,)), "bool"), (np.zeros((0,)), "int64"),
    (np.zeros((1, 0, 2)), "float32"), (_rng.standard_normal((30,)) * 1e5, "float32"), (np.arange(100.0), "float32"),
    (np.arange(30.0) * 1e-5, "float64"), (_rng.standard_normal((2, 3, 1000)), "float32"),
    (_rng.integers(-10**12, 10**12, 40), "int64"), (_rng.standard_normal((12,)) * 1000, "float32"),
    (np.array([65504.0, 0.0001]), "float16"), (np.array([1 / 3, 2 / 3]), "float16"), (np.arange(1001), "int64"),
    (np.arange(1001) % 2 == 0, "bool"), (_rng.standard_normal((5, 300)), "float64"),
    (np.arange(6).reshape(1, 2, 3), "int16"), (np.array([NAN, INF]), "float64"), (np.ones((7, 7, 7, 7)), "float32"),
    (_rng.standard_normal((4, 3)) * 1e-6, "float32"), (np.array([0.0, 0.0]), "float16"),
]


@pytest.mark.parametrize("arr,dt", ARRAYS, ids=[str(i) for i in range(len(ARRAYS))])
def test_repr_arrays(arr, dt):
    a = arr.astype(dt)
    assert same_repr(nee.tensor(a), torch.tensor(a))
    assert str(nee.tensor(a)) == repr(nee.tensor(a))


def test_repr_noncontiguous_views():
    a = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    n, t = nee.tensor(a), torch.tensor(a)
    for f in (lambda x: x.t(), lambda x: x[:, ::2], lambda x: x.flip(0), lambda x: x[1], lambda x: x[0, 0]):
        assert same_repr(f(n), f(t))


def test_repr_default_dtype_float64():
    nee.set_default_dtype(nee.float64)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for data, dt in [([1.5, 2.0], None), ([1.5], "float32"), ([], None), ([], "float32"), ([1, 2], None)]:
            n = nee.tensor(data, dtype=getattr(nee, dt) if dt else None)
            t = torch.tensor(data, dtype=getattr(torch, dt) if dt else None)
            assert same_repr(n, t)
    finally:
        torch.set_default_dtype(old)
        nee.set_default_dtype(nee.float32)


def test_repr_requires_grad_and_suffix_wrap():
    n = nee.tensor([1.0, 2.0]).requires_grad_()
    t = torch.tensor([1.0, 2.0]).requires_grad_()
    assert same_repr(n, t)
    a = np.arange(24.0).reshape(2, 12) / 3
    n = nee.tensor(a).requires_grad_()
    t = torch.tensor(a).requires_grad_()
    assert same_repr(n, t)


def test_set_printoptions():
    a = np.array([1.123456789, 22.5, 1e-2])
    try:
        for kw in [dict(precision=2), dict(sci_mode=True), dict(sci_mode=False), dict(linewidth=20),
                   dict(threshold=3, edgeitems=1), dict(profile="short")]:
            _repr.set_printoptions(**kw)
            torch.set_printoptions(**kw)
            for arr in (a, np.arange(10.0), np.arange(8).reshape(2, 4)):
                assert same_repr(nee.tensor(arr), torch.tensor(arr)), kw
            _repr.set_printoptions(profile="default")
            torch.set_printoptions(profile="default")
    finally:
        _repr.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_dtype_device_size_reprs():
    assert repr(nee.float16) == "neetorch.float16"
    assert same_repr(nee.Size([2, 3]), torch.Size([2, 3]))
    assert repr(nee.device("cpu")) == repr(torch.device("cpu"))
    assert str(nee.device("cpu")) == "cpu"
    assert repr(nee.tensor([1, 2]).shape) == "neetorch.Size([2])"
