"""Tensor creation and interop vs torch: dtype inference, factories, ranges, random, numpy/dlpack, pickling."""
import copy
import pickle

import numpy as np
import pytest

import neetorch as nee
from conftest import assert_close

torch = pytest.importorskip("torch")


def tname(d):
    return str(d).replace("torch.", "")


@pytest.mark.parametrize("data", [
    1, 2.5, True, [1, 2, 3], [1.0, 2], [True, False], [[1, 2], [3, 4]], [1, 2.5], [True, 2], [True, 2.5],
    [], [[]], [[1.5], [2.5]], (1, 2), [np.float64(1.5)], [np.int32(3), np.int32(4)], [np.float16(1.0)],
    np.array([1, 2], np.int16), np.array(3.5), np.float32(2.0), [[True]], [-0.0], [float("inf"), float("nan")],
    2**40, [2**62, -2**62]])
def test_tensor_dtype_inference(data):
    r = nee.tensor(data)
    e = torch.tensor(data)
    assert_close(r, e)


def test_tensor_from_tensors_and_copy():
    a = nee.tensor([1.0, 2.0])
    b = nee.tensor(a)
    assert b.dtype is nee.float32 and b.tolist() == [1.0, 2.0]
    b.numpy()[0] = 5
    assert a.tolist() == [1.0, 2.0]  # tensor() copies
    assert nee.tensor(a, dtype=nee.int64).dtype is nee.int64
    assert nee.tensor([1, 2], dtype=nee.float16).dtype is nee.float16
    assert nee.tensor(3.7, dtype=nee.int32).item() == int(torch.tensor(3.7, dtype=torch.int32).item())
    assert nee.tensor([1, 2], dtype=float).dtype is nee.float32
    assert nee.tensor([1.0], dtype=np.float64).dtype is nee.float64


def test_tensor_errors():
    with pytest.raises((ValueError, TypeError)):
        nee.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        nee.tensor(["a"])
    assert nee.tensor([1 + 2j]).dtype is nee.complex64   # (complex support: tests/test_complex_fft.py)
    with pytest.raises(TypeError):
        nee.tensor(np.array([1, 2], np.uint16))
    with pytest.raises(TypeError):
        nee.tensor(object())


def test_as_tensor_and_from_numpy_share_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nee.from_numpy(a)
    a[0, 0] = 100
    assert t[0, 0].item() == 100
    t.numpy()[1, 2] = -1
    assert a[1, 2] == -1
    assert nee.as_tensor(a).numpy() is a or np.shares_memory(nee.as_tensor(a).numpy(), a)
    assert not np.shares_memory(nee.as_tensor(a, dtype=nee.float64).numpy(), a)
    assert not np.shares_memory(nee.tensor(a).numpy(), a)
    x = nee.tensor([1, 2])
    assert nee.as_tensor(x) is x
    assert nee.asarray(x) is x
    assert np.shares_memory(nee.asarray(a).numpy(), a)
    assert not np.shares_memory(nee.asarray(a, copy=True).numpy(), a)


def test_from_numpy_negative_strides_and_views():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    for v in (a[::-1], a[:, ::-2], a.T, a[1:, 2:]):
        t = nee.from_numpy(v)
        assert np.shares_memory(t.numpy(), a)
        np.testing.assert_array_equal(t.numpy(), v)
        assert_close(t * 2, torch.tensor(v.copy()) * 2)
        assert_close(t.contiguous(), torch.tensor(v.copy()))
    # torch refuses negative strides; neetorch accepts them and reports them
    t = nee.from_numpy(a[::-1])
    assert t.stride() == (-4, 1)


def test_from_numpy_readonly_and_unsupported():
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    t = nee.from_numpy(a)
    assert_close(t + 1, torch.tensor(a.copy()) + 1)
    assert_close(t.clone(), torch.tensor(a.copy()))
    for bad in (np.zeros(2, np.uint16), np.zeros(2, np.clongdouble), np.zeros(2, np.uint32), np.array(["x"]),
                np.zeros(2, object)):
        with pytest.raises(TypeError):
            nee.from_numpy(bad)
    with pytest.raises(TypeError):
        nee.from_numpy([1, 2])
    be = np.arange(3, dtype=">f4")
    with pytest.raises((ValueError, TypeError)):
        nee.from_numpy(be)
    assert nee.tensor(be).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("fn", ["zeros", "ones", "empty"])
def test_factories(fn):
    for args, kw in [(((2, 3),), {}), ((2, 3), {}), (((),), {}), ((0,), {}), ((4,), {"dtype": nee.int16}),
                     (([2, 2],), {"dtype": nee.bool})]:
        tkw = {k: (getattr(torch, v.name) if k == "dtype" else v) for k, v in kw.items()}
        r, e = getattr(nee, fn)(*args, **kw), getattr(torch, fn)(*args, **tkw)
        assert tuple(r.shape) == tuple(e.shape) and r.dtype.name == tname(e.dtype), (fn, args, kw)
        if fn != "empty":
            assert_close(r, e)
        like = getattr(nee, fn + "_like")(r)
        assert tuple(like.shape) == tuple(r.shape) and like.dtype is r.dtype
    assert nee.zeros_like(nee.ones(2), dtype=nee.int8).dtype is nee.int8
    with pytest.raises(RuntimeError):
        nee.zeros(-1)
    with pytest.raises(TypeError):
        nee.zeros(2.5)
    assert tuple(nee.zeros(nee.Size([2, 3])).shape) == (2, 3)


def test_full():
    for size, v in [((2, 3), 1.5), ((2,), 7), ((3,), True), ((), 2.0), (4, -1)]:
        assert_close(nee.full(size if isinstance(size, tuple) else (size,), v),
                     torch.full(size if isinstance(size, tuple) else (size,), v))
    assert_close(nee.full((2,), 3, dtype=nee.float64), torch.full((2,), 3, dtype=torch.float64))
    assert_close(nee.full_like(nee.zeros(2, dtype=nee.int32), 5), torch.full_like(torch.zeros(2, dtype=torch.int32), 5))
    assert_close(nee.full_like(nee.zeros(2), 5), torch.full_like(torch.zeros(2), 5))
    assert_close(nee.full((2,), nee.tensor(2.5)), torch.full((2,), 2.5))
    assert_close(nee.scalar_tensor(3), torch.scalar_tensor(3))


@pytest.mark.parametrize("args", [
    (5,), (2, 7), (0, 1, 0.1), (0, 10, 3), (1, 2.5, 0.5), (-1, 1, 0.25), (0.0, 1.0, 1 / 3), (10, 0, -3),
    (0, 0.3, 0.1), (1.0, 1.3, 0.1), (0, 1e-3, 1e-4), (5, 5), (-3.5,  3.5, 0.7), (0, 2**40, 2**38),
    (0, 100, 7.3)])
def test_arange_matches_torch(args):
    tol = 1e-15 * max(map(abs, args))  # torch's SIMD chunks compute base + i*step: last-ulp differences
    assert_close(nee.arange(*args), torch.arange(*args), rtol=1e-7, atol=tol)
    for dt in ("float64", "int32"):
        try:
            e = torch.arange(*args, dtype=getattr(torch, dt))
        except RuntimeError:
            continue
        # float64: torch's vectorized kernel computes base + i*step per SIMD chunk (last-ulp differences)
        assert_close(nee.arange(*args, dtype=getattr(nee, dt)), e, rtol=0, atol=tol)


def test_arange_errors_and_tensor_args():
    with pytest.raises(RuntimeError):
        nee.arange(0, 10, 0)
    with pytest.raises(RuntimeError):
        nee.arange(10, 0, 1)
    assert_close(nee.arange(nee.tensor(4)), torch.arange(torch.tensor(4)))
    assert nee.arange(3, dtype=nee.float16).dtype is nee.float16


@pytest.mark.parametrize("args", [(0, 1, 5), (-2, 3, 11), (0, 1, 1), (0, 1, 0), (1, 0, 4), (0, 10, 7),
                                  (-1.5, 2.25, 100), (3, 3, 4), (0, 1, 2), (1e-3, 1e3, 33)])
def test_linspace_matches_torch(args):
    assert_close(nee.linspace(*args), torch.linspace(*args), rtol=1e-6, atol=1e-6)
    assert_close(nee.linspace(*args, dtype=nee.float64), torch.linspace(*args, dtype=torch.float64), rtol=1e-14,
                 atol=1e-14)
    assert_close(nee.linspace(*args, dtype=nee.int64), torch.linspace(*args, dtype=torch.int64))


def test_logspace_and_eye():
    assert_close(nee.logspace(0, 2, 5), torch.logspace(0, 2, 5), rtol=1e-6)
    assert_close(nee.logspace(0, 3, 4, base=2.0), torch.logspace(0, 3, 4, base=2.0), rtol=1e-6)
    for args in [(3,), (2, 4), (4, 2), (0,), (1, 0)]:
        assert_close(nee.eye(*args), torch.eye(*args))
    assert_close(nee.eye(3, dtype=nee.int64), torch.eye(3, dtype=torch.int64))
    assert_close(nee.eye(2, dtype=nee.bool), torch.eye(2, dtype=torch.bool))


def test_random_reproducible():
    nee.manual_seed(123)
    a, b, c, p = nee.rand(3, 4), nee.randn(5), nee.randint(0, 10, (6,)), nee.randperm(7)
    nee.manual_seed(123)
    a2, b2, c2, p2 = nee.rand(3, 4), nee.randn(5), nee.randint(0, 10, (6,)), nee.randperm(7)
    for x, y in ((a, a2), (b, b2), (c, c2), (p, p2)):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert a.dtype is nee.float32 and b.dtype is nee.float32 and c.dtype is nee.int64 and p.dtype is nee.int64
    assert ((a.numpy() >= 0) & (a.numpy() < 1)).all()
    assert ((c.numpy() >= 0) & (c.numpy() < 10)).all()
    assert sorted(p.tolist()) == list(range(7))
    assert nee.initial_seed() == 123
    assert nee.rand(2, dtype=nee.float64).dtype is nee.float64
    assert nee.randint(5, (3,)).numpy().max() < 5
    assert nee.randint(3, 5, (100,)).numpy().min() >= 3
    assert tuple(nee.rand_like(a).shape) == (3, 4) and tuple(nee.randn_like(b).shape) == (5,)
    assert tuple(nee.randint_like(c, 3).shape) == (6,)
    g = nee.Generator().manual_seed(7)
    g2 = nee.Generator().manual_seed(7)
    np.testing.assert_array_equal(nee.rand(4, generator=g).numpy(), nee.rand(4, generator=g2).numpy())
    with pytest.raises((TypeError, RuntimeError)):
        nee.rand(2, dtype=nee.int32)
    with pytest.raises(RuntimeError):
        nee.randint(5, 5, (2,))
    big = nee.randn(20000).numpy()
    assert abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05


def test_numpy_zero_copy_and_array_protocol():
    t = nee.arange(6.0).reshape(2, 3)
    a = t.numpy()
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    b = np.asarray(t)
    assert np.shares_memory(a, b)
    assert np.array(t, dtype=np.float64).dtype == np.float64
    assert np.add(t.numpy(), 1).shape == (2, 3)
    v = t.t()
    assert np.shares_memory(v.numpy(), a) and v.numpy().shape == (3, 2)


def test_item_tolist_conversions():
    assert nee.tensor(2.5).item() == 2.5 and isinstance(nee.tensor(2.5).item(), float)
    assert isinstance(nee.tensor(3).item(), int) and isinstance(nee.tensor(True).item(), bool)
    assert nee.tensor([[7]]).item() == 7
    with pytest.raises(RuntimeError):
        nee.tensor([1, 2]).item()
    for data in ([[1, 2], [3, 4]], [1.5, -2.0], [True, False], [], 5, [[[]]]):
        assert nee.tensor(data).tolist() == torch.tensor(data).tolist()
    assert nee.tensor([1.5]).t().tolist() == [1.5]
    assert int(nee.tensor(3.9)) == 3 and float(nee.tensor(2)) == 2.0
    assert bool(nee.tensor([0.0])) is False
    with pytest.raises(RuntimeError):
        bool(nee.tensor([1, 2]))
    assert [10, 20, 30][nee.tensor(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][nee.tensor(1.0)]
    assert len(nee.zeros(4, 2)) == 4
    with pytest.raises(TypeError):
        len(nee.tensor(1.0))
    assert f"{nee.tensor(1.23456):.2f}" == "1.23"


def test_to_dtype_and_device():
    t = nee.tensor([1.7, -2.7, 3.0])
    for dt in ("int32", "int64", "int8", "uint8", "bool", "float16", "float64"):
        e = torch.tensor([1.7, -2.7, 3.0]).to(getattr(torch, dt))
        assert_close(t.to(getattr(nee, dt)), e, rtol=1e-3)
    assert t.to("cpu") is t
    assert t.to(nee.float32) is t
    c = t.to(nee.float32, copy=True)
    assert c is not t and not np.shares_memory(c.numpy(), t.numpy())
    assert t.to(dtype=nee.float64).dtype is nee.float64
    assert t.to("cpu", nee.float64).dtype is nee.float64
    assert t.to(nee.tensor([1], dtype=nee.int16)).dtype is nee.int16
    assert t.double().dtype is nee.float64 and t.half().dtype is nee.float16 and t.long().dtype is nee.int64
    assert t.int().dtype is nee.int32 and t.bool().dtype is nee.bool and t.byte().dtype is nee.uint8
    assert t.short().dtype is nee.int16 and t.char().dtype is nee.int8 and t.float() is t
    assert t.cpu() is t
    assert t.type(nee.float64).dtype is nee.float64
    assert t.type() == "neetorch.FloatTensor"
    assert nee.tensor([1]).type() == "neetorch.LongTensor"
    assert nee.tensor([True]).type() == "neetorch.BoolTensor"
    assert nee.tensor([1.0], dtype=nee.float64).type() == "neetorch.DoubleTensor"
    assert nee.tensor([1], dtype=nee.uint8).type() == "neetorch.ByteTensor"
    # float -> int truncates toward zero, like torch; a view converts too
    assert t.t().to(nee.int64).tolist() == [1, -2, 3] if t.ndim == 2 else t.to(nee.int64).tolist() == [1, -2, 3]


def test_contiguous_clone_copy_fill():
    t = nee.arange(6.0).reshape(2, 3)
    c = t.clone()
    c.numpy()[0, 0] = 9
    assert t[0, 0].item() == 0
    tt = t.t()
    cc = tt.contiguous()
    assert cc.is_contiguous() and cc.tolist() == tt.tolist()
    assert t.contiguous() is t
    d = nee.zeros(2, 3)
    d.copy_(t)
    assert d.tolist() == t.tolist()
    d.copy_(nee.tensor([1, 2, 3]))  # broadcast + cast
    assert d.tolist() == [[1.0, 2.0, 3.0]] * 2
    d.fill_(2.5)
    assert d.tolist() == [[2.5] * 3] * 2
    d.zero_()
    assert d.tolist() == [[0.0] * 3] * 2
    d.t().copy_(nee.ones(3, 2))
    assert d.tolist() == [[1.0] * 3] * 2
    x = t.detach()
    assert np.shares_memory(x.numpy(), t.numpy())
    assert t.new_zeros(2).dtype is nee.float32 and t.new_ones((2, 2)).shape == (2, 2)
    assert t.new_full((2,), 3).tolist() == [3.0, 3.0]
    assert t.new_tensor([1, 2]).dtype is nee.float32
    assert tuple(t.new_empty(3).shape) == (3,)


def test_dlpack_roundtrip_numpy():
    t = nee.arange(6, dtype=nee.int32).reshape(2, 3)
    a = np.from_dlpack(t)
    a[0, 0] = 77
    assert t[0, 0].item() == 77
    src = np.arange(5, dtype=np.float64)
    u = nee.from_dlpack(src)
    src[1] = -3
    assert u[1].item() == -3 and u.dtype is nee.float64


def test_dlpack_roundtrip_torch():
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    n = nee.from_dlpack(tt)
    tt[1, 1] = 99
    assert n[1, 1].item() == 99
    n.numpy()[0, 2] = -5
    assert tt[0, 2].item() == -5
    back = torch.from_dlpack(n)
    back[0, 0] = 11
    assert n[0, 0].item() == 11
    # a transposed torch tensor keeps its strides
    nt = nee.from_dlpack(tt.t())
    assert nt.stride() == tt.t().stride() and nt.tolist() == tt.t().tolist()
    # bool and int64
    nb = nee.from_dlpack(torch.tensor([True, False]))
    assert nb.dtype is nee.bool and nb.tolist() == [True, False]


def test_pickle_and_deepcopy():
    for t in (nee.tensor([[1.5, 2.0]]), nee.tensor([1, 2], dtype=nee.int8), nee.tensor(True),
              nee.arange(6.0).reshape(2, 3).t()):
        u = pickle.loads(pickle.dumps(t))
        assert u.dtype is t.dtype and u.tolist() == t.tolist() and tuple(u.shape) == tuple(t.shape)
        d = copy.deepcopy(t)
        assert d.tolist() == t.tolist() and not np.shares_memory(d.numpy(), t.numpy())
    s = nee.Size([2, 3])
    assert pickle.loads(pickle.dumps(s)) == s
    assert repr(s) == "neetorch.Size([2, 3])" and s.numel() == 6


def test_tensor_constructor_forms():
    assert nee.Tensor([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert tuple(nee.Tensor(2, 3).shape) == (2, 3)
    assert nee.is_tensor(nee.zeros(1)) and not nee.is_tensor([1])
    assert nee.numel(nee.zeros(2, 3)) == 6
    assert nee.is_floating_point(nee.zeros(1)) and not nee.is_floating_point(nee.zeros(1, dtype=nee.int64))
