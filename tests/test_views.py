"""Views vs torch: shapes, strides, contiguity, storage sharing and errors.

No kernels are compiled here except the few copies ``reshape``/``contiguous`` need.
"""
import numpy as np
import pytest

import neetorch as nee
from conftest import assert_close

torch = pytest.importorskip("torch")


def pair(*shape, dtype="float32"):
    a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    return nee.tensor(a), torch.tensor(a)


def same(n, t, msg=""):
    """Values, shape, strides and contiguity equal to torch's."""
    assert tuple(n.shape) == tuple(t.shape), msg
    assert n.stride() == t.stride(), f"{msg}: strides {n.stride()} != {t.stride()}"
    assert n.is_contiguous() == t.is_contiguous(), msg
    assert n.storage_offset() == t.storage_offset(), f"{msg}: offset {n.storage_offset()} != {t.storage_offset()}"
    np.testing.assert_array_equal(n.numpy(), t.numpy(), err_msg=msg)


def shares(view, base):
    """Writing through ``view`` is visible in ``base``."""
    if view.numel() == 0:
        return True
    before = base.numpy().copy()
    v = view.numpy()
    v[...] = -7 if view.dtype.is_floating_point else 99
    changed = not np.array_equal(before, base.numpy())
    base.numpy()[...] = before
    return changed


def test_view_and_reshape():
    n, t = pair(2, 3, 4)
    for shape in [(6, 4), (-1,), (4, -1, 2), (24,), (2, 12), (1, 2, 1, 12, 1)]:
        v = n.view(*shape)
        same(v, t.view(*shape), f"view{shape}")
        assert shares(v, n)
        same(n.view(shape), t.view(shape))
        same(n.reshape(*shape), t.reshape(*shape))
    with pytest.raises(RuntimeError):
        n.view(5, -1)
    with pytest.raises(RuntimeError):
        n.view(-1, -1)
    with pytest.raises(RuntimeError):
        n.reshape(7)


def test_view_on_noncontiguous():
    n, t = pair(4, 6)
    nt, tt = n.t(), t.t()
    with pytest.raises(RuntimeError):
        tt.view(24)
    with pytest.raises(RuntimeError, match="view"):
        nt.view(24)
    # splitting a dim is possible on strided tensors
    same(nt.view(3, 2, 4), tt.view(3, 2, 4))
    assert shares(nt.view(3, 2, 4), n)
    # stepped slices: merges impossible, splits fine
    ns, ts = n[:, ::2], t[:, ::2]
    same(ns.view(4, 3, 1), ts.view(4, 3, 1))
    same(ns.view(2, 2, 3), ts.view(2, 2, 3))
    same(ns.view(12), ts.view(12))  # (6, 2) strides with size 3: mergeable
    with pytest.raises(RuntimeError):
        n[:, :3].view(12)


def test_reshape_copies_only_when_needed():
    n, t = pair(4, 6)
    r = n.reshape(2, 12)
    assert shares(r, n)
    r2 = n.t().reshape(24)  # needs a copy
    same(r2, t.t().reshape(24))
    assert not shares(r2, n)
    r3 = n.t().reshape(3, 2, 4)  # possible as a view
    same(r3, t.t().reshape(3, 2, 4))
    assert shares(r3, n)
    r4 = n[:, ::2].reshape(2, 2, 3)
    same(r4, t[:, ::2].reshape(2, 2, 3))
    assert shares(r4, n)
    # size-0 and 0-d
    z, tz = pair(0, 3)
    same(z.reshape(3, 0), tz.reshape(3, 0))
    same(z.reshape(-1, 5), tz.reshape(-1, 5)) if False else None
    s, ts_ = nee.tensor(5.0), torch.tensor(5.0)
    same(s.reshape(1, 1), ts_.reshape(1, 1))
    same(s.view(-1), ts_.view(-1))
    same(nee.ones(1, 1).view(()), torch.ones(1, 1).view(()))


def test_view_dtype():
    n = nee.tensor([1.0, -2.0])
    v = n.view(nee.int32)
    assert v.dtype is nee.int32
    np.testing.assert_array_equal(v.numpy(), torch.tensor([1.0, -2.0]).view(torch.int32).numpy())
    # another element size rescales the last dim, like torch; an odd last dim cannot be viewed as 8-byte items
    np.testing.assert_array_equal(n.view(nee.int64).numpy(), torch.tensor([1.0, -2.0]).view(torch.int64).numpy())
    with pytest.raises(RuntimeError):
        nee.tensor([1.0, -2.0, 3.0]).view(nee.int64)


def test_permute_transpose_T_mT():
    n, t = pair(2, 3, 4)
    for p in [(2, 0, 1), (0, 2, 1), (-1, -3, -2), (0, 1, 2)]:
        v = n.permute(*p)
        same(v, t.permute(*p), f"permute{p}")
        assert shares(v, n)
    same(n.permute([1, 0, 2]), t.permute([1, 0, 2]))
    same(n.transpose(0, 2), t.transpose(0, 2))
    same(n.transpose(-1, 1), t.transpose(-1, 1))
    same(n.swapaxes(0, 1), t.swapaxes(0, 1))
    same(n.mT, t.mT)
    same(n.movedim(0, -1), t.movedim(0, -1))
    same(n.movedim((0, 1), (2, 0)), t.movedim((0, 1), (2, 0)))
    m, tm = pair(3, 5)
    same(m.T, tm.T)
    same(m.t(), tm.t())
    same(nee.tensor([1.0, 2.0]).t(), torch.tensor([1.0, 2.0]).t())
    with pytest.raises(RuntimeError):
        n.permute(0, 1)
    with pytest.raises(RuntimeError):
        n.permute(0, 1, 1)
    with pytest.raises(IndexError):
        n.permute(0, 1, 3)
    with pytest.raises(RuntimeError):
        n.t()
    with pytest.raises(RuntimeError):
        nee.tensor([1.0]).mT


def test_squeeze_unsqueeze():
    n, t = pair(1, 3, 1, 2)
    same(n.squeeze(), t.squeeze())
    same(n.squeeze(0), t.squeeze(0))
    same(n.squeeze(1), t.squeeze(1))
    same(n.squeeze(-2), t.squeeze(-2))
    same(n.squeeze((0, 2)), t.squeeze((0, 2)))
    for d in range(-5, 5):
        same(n.unsqueeze(d), t.unsqueeze(d), f"unsqueeze({d})")
    nt, tt = pair(3, 4)
    for d in (0, 1, 2, -1):
        same(nt.t().unsqueeze(d), tt.t().unsqueeze(d), f"t().unsqueeze({d})")
        same(nt[:, ::2].unsqueeze(d), tt[:, ::2].unsqueeze(d), f"sliced.unsqueeze({d})")
    assert shares(n.squeeze(), n) and shares(n.unsqueeze(0), n)
    with pytest.raises(IndexError):
        n.unsqueeze(5)
    s = nee.tensor(1.0)
    same(s.unsqueeze(0), torch.tensor(1.0).unsqueeze(0))
    same(s.squeeze(), torch.tensor(1.0).squeeze())


def test_expand_shares_storage_and_is_writable():
    n, t = pair(3, 1)
    e = n.expand(2, 3, 4)
    same(e, t.expand(2, 3, 4))
    same(n.expand(-1, 5), t.expand(-1, 5))
    same(n.expand_as(nee.zeros(3, 2)), t.expand_as(torch.zeros(3, 2)))
    same(nee.tensor(2.0).expand(3), torch.tensor(2.0).expand(3))
    with pytest.raises(RuntimeError):
        n.expand(3, 2, 2).expand(4, 2, 2) if False else n.expand(4, 4)
    with pytest.raises(RuntimeError):
        n.expand(4)
    with pytest.raises(RuntimeError):
        n.expand(-1, 3, 1)
    same(nee.broadcast_to(n, (2, 3, 2)), torch.broadcast_to(t, (2, 3, 2)))
    # the expanded view aliases the base: a write through it changes the base
    e.numpy()[0, 1, 2] = 42.0
    assert n.numpy()[1, 0] == 42.0
    # in place on an expanded view would update each element once per alias: refused, like torch
    with pytest.raises(RuntimeError, match="more than one element"):
        e.add_(1)
    with pytest.raises(RuntimeError, match="more than one element"):
        t.expand(2, 3, 4).add_(1)


def test_narrow_select_unbind():
    n, t = pair(4, 5)
    same(n.narrow(0, 1, 2), t.narrow(0, 1, 2))
    same(n.narrow(1, 2, 3), t.narrow(1, 2, 3))
    same(n.narrow(-1, -2, 2), t.narrow(-1, -2, 2))
    same(n.narrow(0, 4, 0), t.narrow(0, 4, 0))
    assert shares(n.narrow(1, 1, 2), n)
    with pytest.raises((IndexError, RuntimeError)):
        n.narrow(0, 3, 2)
    for d, i in [(0, 0), (0, -1), (1, 3), (-1, -5)]:
        same(n.select(d, i), t.select(d, i), f"select({d},{i})")
    assert shares(n.select(1, 2), n)
    with pytest.raises(IndexError):
        n.select(0, 4)
    with pytest.raises(IndexError):
        nee.tensor(1.0).select(0, 0)
    for a, b in zip(n.unbind(1), t.unbind(1)):
        same(a, b)
    same(n.t().select(0, 1), t.t().select(0, 1))


def test_flatten_unflatten_ravel():
    n, t = pair(2, 3, 4)
    for s, e in [(0, -1), (1, 2), (0, 1), (2, 2), (-2, -1)]:
        same(n.flatten(s, e), t.flatten(s, e), f"flatten({s},{e})")
    same(nee.tensor(3.0).flatten(), torch.tensor(3.0).flatten())
    same(n.t().flatten() if False else n.permute(2, 1, 0).flatten(), t.permute(2, 1, 0).flatten())
    assert shares(n.flatten(), n)
    same(n.unflatten(2, (2, 2)), t.unflatten(2, (2, 2)))
    same(n.unflatten(-1, (-1, 2)), t.unflatten(-1, (-1, 2)))
    same(n.permute(2, 0, 1).unflatten(0, (2, 2)), t.permute(2, 0, 1).unflatten(0, (2, 2)))
    with pytest.raises(RuntimeError):
        n.unflatten(2, (3, 2))
    same(n.ravel(), t.ravel())
    with pytest.raises(RuntimeError):
        n.flatten(2, 1)


def test_unfold():
    n, t = pair(2, 7)
    for d, size, step in [(1, 3, 1), (1, 3, 2), (1, 7, 1), (0, 1, 1), (1, 2, 5), (-1, 1, 3)]:
        same(n.unfold(d, size, step), t.unfold(d, size, step), f"unfold({d},{size},{step})")
    assert shares(n.unfold(1, 2, 2), n)
    same(n.t().unfold(0, 3, 2), t.t().unfold(0, 3, 2))
    same(nee.tensor(5.0).unfold(0, 1, 1), torch.tensor(5.0).unfold(0, 1, 1))
    with pytest.raises(RuntimeError):
        n.unfold(1, 8, 1)
    with pytest.raises(RuntimeError):
        n.unfold(1, 2, 0)


def test_diagonal():
    n, t = pair(3, 4, 5)
    for off, d1, d2 in [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (-2, 2, 0), (10, 0, 1), (-10, 1, 2),
                        (0, -1, -2)]:
        same(n.diagonal(off, d1, d2), t.diagonal(off, d1, d2), f"diagonal({off},{d1},{d2})")
    assert shares(n.diagonal(), n)
    with pytest.raises(RuntimeError):
        n.diagonal(0, 1, 1)


def test_split_chunk_tensor_split():
    n, t = pair(7, 3)
    for arg in (2, 3, 7, 10, [1, 2, 4], [0, 7]):
        a, b = n.split(arg), t.split(arg)
        assert len(a) == len(b), arg
        for x, y in zip(a, b):
            same(x, y, f"split({arg})")
    for c in (1, 2, 3, 4, 6, 7, 9):
        a, b = n.chunk(c), t.chunk(c)
        assert len(a) == len(b), c
        for x, y in zip(a, b):
            same(x, y, f"chunk({c})")
    for arg in (3, 1, 8, [1, 5], [2, 2, 6], [-1, 3]):
        a, b = n.tensor_split(arg), t.tensor_split(arg)
        assert len(a) == len(b), arg
        for x, y in zip(a, b):
            same(x, y, f"tensor_split({arg})")
    for x, y in zip(n.split(2, dim=1), t.split(2, dim=1)):
        same(x, y)
    assert all(shares(x, n) for x in n.split(3))
    with pytest.raises(RuntimeError):
        n.split([1, 2])
    z, tz = pair(0, 2)
    assert len(z.chunk(3)) == len(tz.chunk(3))
    assert len(z.split(2)) == len(tz.split(2))


def test_as_strided():
    n, t = pair(12)
    for size, stride, off in [((3, 4), (4, 1), 0), ((4, 3), (1, 4), 0), ((2, 2), (3, 1), 5), ((3,), (0,), 2),
                              ((2, 3), (2, 3), None)]:
        same(n.as_strided(size, stride, off), t.as_strided(size, stride, off), f"as_strided{size}{stride}{off}")
    v = n[2:].as_strided((2,), (1,), 3)
    same(v, t[2:].as_strided((2,), (1,), 3))
    assert shares(v, n)


def test_views_of_views_offsets():
    n, t = pair(5, 6)
    same(n[1:].t()[2:], t[1:].t()[2:])
    same(n.narrow(1, 2, 3).select(0, 3), t.narrow(1, 2, 3).select(0, 3))
    same(n.narrow(0, 1, 3).diagonal(1), t.narrow(0, 1, 3).diagonal(1))
    same(n.narrow(1, 1, 4).unfold(1, 2, 2), t.narrow(1, 1, 4).unfold(1, 2, 2))
    same(n[1:].flip(0) if hasattr(n, "flip") and False else n[1:][::2], t[1:][::2])


def test_contiguous_and_strides():
    n, t = pair(3, 4)
    assert n.is_contiguous() and not n.t().is_contiguous()
    c = n.t().contiguous()
    same(c, t.t().contiguous())
    assert c.is_contiguous() and not shares(c, n)
    assert n.contiguous() is n
    # size-1 dims don't break contiguity, like torch
    for shape, perm in [((1, 4), (1, 0)), ((4, 1), (1, 0)), ((1, 1), (1, 0)), ((2, 1, 3), (1, 0, 2))]:
        a, b = pair(*shape)
        assert a.permute(*perm).is_contiguous() == b.permute(*perm).is_contiguous(), (shape, perm)
    # (empty tensors: numpy reports 0 strides where torch reports contiguous ones; not compared)
    assert tuple(nee.zeros(0, 3).t().shape) == (3, 0)
    assert n.stride(0) == 4 and n.stride(-1) == 1
    assert n.size(1) == 4 and n.size(-2) == 3
    with pytest.raises(IndexError):
        n.size(2)


def test_views_keep_dtype_device_and_metadata():
    n = nee.ones(2, 3, dtype=nee.int16)
    for v in (n.t(), n.view(6), n.unsqueeze(0), n.expand(4, 2, 3), n.narrow(1, 0, 2), n[0], n.diagonal()):
        assert v.dtype is nee.int16 and v.device == n.device
