"""Tensor object protocol vs torch: metadata, Python protocols, operators, numpy interplay."""
import copy

import numpy as np
import pytest

import neetorch as nee
from conftest import assert_close

torch = pytest.importorskip("torch")


def test_metadata():
    a = np.zeros((2, 3, 4), np.float64)
    n, t = nee.tensor(a), torch.tensor(a)
    assert n.shape == t.shape and isinstance(n.shape, tuple) and isinstance(n.shape, nee.Size)
    assert n.size() == t.size() and n.size(1) == t.size(1) and n.size(-1) == 4
    assert n.ndim == n.dim() == n.ndimension() == 3
    assert n.numel() == n.nelement() == 24
    assert n.element_size() == n.itemsize == 8 and n.nbytes == 192
    assert n.stride() == t.stride() and n.stride(1) == t.stride(1)
    assert n.is_floating_point() and not n.is_complex()
    assert n.dtype is nee.float64
    assert n.data_ptr() == n.numpy().__array_interface__["data"][0]
    assert n[1].data_ptr() == n.data_ptr() + 96
    assert nee.tensor(3.0).shape == () and nee.tensor(3.0).numel() == 1
    assert nee.zeros(0, 5).numel() == 0


def test_python_protocols():
    n = nee.tensor([[1, 2], [3, 4]])
    assert len(n) == 2
    rows = list(n)
    assert len(rows) == 2 and rows[1].tolist() == [3, 4]
    assert [r.tolist() for r in reversed(n)] == [[3, 4], [1, 2]]
    with pytest.raises(TypeError):
        iter(nee.tensor(1.0)).__next__()
    assert hash(n) == hash(n) and n in {n: 1}
    assert f"{nee.tensor(2.5):.1f}" == "2.5"
    assert int(nee.tensor([7])) == 7 and float(nee.tensor(1)) == 1.0
    assert nee.tensor([2]).__index__() == 2
    with pytest.raises(TypeError):
        nee.tensor([1, 2]).__index__()


def test_comparison_operators_and_none():
    a = nee.tensor([1, 2, 3])
    assert (a == 2).tolist() == [False, True, False]
    assert (a != 2).tolist() == [True, False, True]
    assert (a < 2).tolist() == [True, False, False] and (a >= 2).tolist() == [False, True, True]
    assert (2 < a).tolist() == (torch.tensor([1, 2, 3]) > 2).tolist()
    assert (a == None) is False  # noqa: E711  (NotImplemented -> identity comparison)
    assert (a != None) is True  # noqa: E711
    assert (a == [1, 5, 3]).tolist() == [True, False, True]


@pytest.mark.parametrize("expr", ["a + b", "a - b", "a * b", "a / b", "a // b", "a % b", "a ** 2", "-a", "abs(a)",
                                  "a + 1", "1 - a", "2 * a", "1 / a", "2 ** a", "a @ b.T" , "a > b", "+a"])
def test_arithmetic_operators(expr):
    x = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)
    y = np.array([[2.0, 1.5, -1.0], [3.0, -0.5, 2.0]], np.float32)
    try:
        e = eval(expr, {"a": torch.tensor(x), "b": torch.tensor(y)})
    except Exception:  # noqa: BLE001
        pytest.skip("torch refuses")
    r = eval(expr, {"a": nee.tensor(x), "b": nee.tensor(y)})
    assert_close(r, e, rtol=1e-5, atol=1e-6)


def test_bitwise_operators():
    a, b = nee.tensor([12, 10, -1]), nee.tensor([10, 6, 3])
    A, B = torch.tensor([12, 10, -1]), torch.tensor([10, 6, 3])
    for expr in ("a & b", "a | b", "a ^ b", "~a", "a << 2", "a >> 1", "3 & a", "5 | a", "1 ^ a"):
        assert_close(eval(expr, {"a": a, "b": b}), eval(expr, {"a": A, "b": B}), msg=expr)
    m, M = nee.tensor([True, False]), torch.tensor([True, False])
    for expr in ("m & True", "m | False", "~m", "m ^ m"):
        assert_close(eval(expr, {"m": m}), eval(expr, {"m": M}), msg=expr)


def test_inplace_operators_keep_identity():
    a = nee.tensor([1.0, 2.0])
    ident = id(a)
    a += 1
    a -= 0.5
    a *= 2
    a /= 3
    a **= 2
    assert id(a) == ident
    e = ((torch.tensor([1.0, 2.0]) + 1 - 0.5) * 2 / 3) ** 2
    assert_close(a, e)
    b = nee.tensor([5, 6])
    b //= 2
    b %= 2
    b <<= 1
    b >>= 1
    b &= 1
    b |= 2
    b ^= 1
    B = torch.tensor([5, 6])
    B //= 2
    B %= 2
    B <<= 1
    B >>= 1
    B &= 1
    B |= 2
    B ^= 1
    assert_close(b, B)


def test_numpy_operands():
    x = nee.tensor([1.0, 2.0])
    arr = np.array([10.0, 20.0], np.float32)
    r = x + arr
    assert isinstance(r, nee.Tensor) and r.tolist() == [11.0, 22.0]
    r2 = arr + x  # numpy defers to Tensor.__radd__ (__array_priority__)
    assert isinstance(r2, nee.Tensor) and r2.tolist() == [11.0, 22.0]
    assert (x * [2, 3]).tolist() == [2.0, 6.0]
    assert (x == arr).tolist() == [False, False]


def test_requires_grad_detach_copy():
    x = nee.tensor([1.0])
    assert x.requires_grad is False and x.grad is None
    assert x.requires_grad_() is x and x.requires_grad
    d = x.detach()
    assert not d.requires_grad and np.shares_memory(d.numpy(), x.numpy())
    c = copy.deepcopy(x)
    assert c.requires_grad and not np.shares_memory(c.numpy(), x.numpy())
    with nee.no_grad():
        y = x * 2
    assert y.tolist() == [2.0]


def test_to_cast_semantics_vs_torch():
    vals = np.array([-3.7, -0.5, 0.0, 0.5, 2.5, 255.9, 300.0, 1e10], np.float32)
    for dt in ("int8", "uint8", "int16", "int32", "int64", "bool", "float16"):
        if dt in ("int8", "uint8", "int16", "int32"):
            v = vals[np.abs(vals) < {"int8": 127, "uint8": 1, "int16": 30000, "int32": 2e9}[dt]]
            if dt == "uint8":
                v = np.array([0.0, 0.5, 2.5, 200.7], np.float32)
        else:
            v = vals
        assert_close(nee.tensor(v).to(getattr(nee, dt)), torch.tensor(v).to(getattr(torch, dt)), rtol=1e-3, msg=dt)
    ints = np.array([-300, -1, 0, 1, 255, 256, 70000])
    for dt in ("int8", "uint8", "bool", "float16"):
        assert_close(nee.tensor(ints).to(getattr(nee, dt)), torch.tensor(ints).to(getattr(torch, dt)), msg=dt)
    # non-contiguous source
    m = np.arange(12, dtype=np.float64).reshape(3, 4) / 3
    assert_close(nee.tensor(m).t().to(nee.int32), torch.tensor(m).t().to(torch.int32))
    assert_close(nee.tensor(m)[:, ::2].float(), torch.tensor(m)[:, ::2].float())


def test_bool_of_tensor():
    assert bool(nee.tensor(1.0)) and not bool(nee.tensor(0))
    with pytest.raises(RuntimeError):
        bool(nee.tensor([1, 1]))
    with pytest.raises(RuntimeError):
        if nee.zeros(0):
            pass
