"""Shape / data-movement ops: cat/stack family, flip/roll/rot90, repeat/tile/repeat_interleave, tril/triu,
diag/diag_embed/diagflat, meshgrid, narrow_copy and nn-style pad.  Differential against torch."""
import numpy as np
import pytest
from conftest import assert_close, noncontig, to_np

import neetorch as nee

torch = pytest.importorskip("torch")
F = torch.nn.functional
R = np.random.default_rng(1)
DTYPES = ["bool", "int32", "int64", "float16", "float32", "float64"]


def rnd(shape, dt="float32"):
    a = np.asarray(R.standard_normal(shape) * 3)
    return np.asarray(a > 0) if dt == "bool" else a.astype(dt)


def pair(shape, dt="float32"):
    a = rnd(shape, dt)
    return nee.from_numpy(a), torch.from_numpy(a.copy())


# ---------------------------------------------------------------- cat / stack
@pytest.mark.parametrize("dt", DTYPES)
def test_cat_dtypes_and_layouts(dt):
    x, t = pair((3, 4, 2), dt)
    y, u = pair((3, 1, 2), dt)
    for name, xv in noncontig(x):
        assert_close(nee.cat([xv, y, xv], 1), torch.cat([t, u, t], 1), msg=name)
    assert_close(nee.cat((x, x), -1), torch.cat((t, t), -1))
    assert_close(nee.concat([x.transpose(0, 2), x.transpose(0, 2)], 0),
                 torch.concat([t.transpose(0, 2), t.transpose(0, 2)], 0))


def test_cat_promotion_and_legacy_empty():
    a = nee.ones(2, 3, dtype=nee.int32)
    b = nee.ones(2, 3, dtype=nee.bool)
    c = nee.ones(2, 3, dtype=nee.float16)
    assert nee.cat([a, b, c]).dtype == nee.float16
    assert nee.cat([a, nee.ones(1, 3, dtype=nee.int64)]).dtype == nee.int64
    e = nee.tensor([])
    r = nee.cat([e, nee.ones(2, 3), e], 1)
    assert r.shape == (2, 3) and r.dtype == nee.float32
    assert nee.cat([e, e]).shape == (0,)
    assert nee.cat([nee.zeros(0, 3), nee.ones(2, 3)]).shape == (2, 3)
    assert nee.concatenate([nee.ones(1, 0), nee.ones(1, 0)], 1).shape == (1, 0)
    out = nee.empty(4, 3)
    nee.cat([nee.ones(2, 3), nee.zeros(2, 3)], out=out)
    assert to_np(out).sum() == 6


def test_cat_errors():
    with pytest.raises(ValueError, match="expected a non-empty list of Tensors"):
        nee.cat([])
    with pytest.raises(RuntimeError, match=r"Sizes of tensors must match except in dimension 0. Expected size 3 but "
                                            r"got size 4 for tensor number 1 in the list."):
        nee.cat([nee.zeros(2, 3), nee.zeros(2, 4)])
    with pytest.raises(RuntimeError, match="same number of dimensions: got 2 and 1"):
        nee.cat([nee.zeros(2, 3), nee.zeros(2)])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        nee.cat([nee.tensor(1.0), nee.zeros(2)])
    with pytest.raises(IndexError, match="Dimension out of range"):
        nee.cat([nee.zeros(2), nee.zeros(2)], 1)
    with pytest.raises(TypeError):
        nee.cat(nee.zeros(2))


def test_stack_family():
    x, t = pair((3, 4))
    y, u = pair((3, 4))
    for d in (0, 1, 2, -1, -3):
        assert_close(nee.stack([x, y.t().t()], d), torch.stack([t, u], d))
    assert_close(nee.stack([nee.tensor(1.0), nee.tensor(2.0)]), torch.stack([torch.tensor(1.0), torch.tensor(2.0)]))
    for fn in ("hstack", "vstack", "dstack", "column_stack", "row_stack"):
        for shapes in [((3,), (3,)), ((2, 3), (2, 3)), ((), ())]:
            arrs = [rnd(s) for s in shapes]
            assert_close(getattr(nee, fn)([nee.from_numpy(a) for a in arrs]),
                         getattr(torch, fn)([torch.from_numpy(a) for a in arrs]), msg=f"{fn} {shapes}")
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got \[3, 4\] at entry 0 "
                                            r"and \[4\] at entry 1"):
        nee.stack([x, x[0]])
    with pytest.raises(RuntimeError, match="non-empty"):
        nee.stack([])


# ---------------------------------------------------------------- flip / roll / rot90
@pytest.mark.parametrize("dt", ["bool", "int64", "float16", "float32"])
def test_flip(dt):
    x, t = pair((3, 4, 5), dt)
    for dims in [(0,), (1, 2), (-1, 0), (0, 1, 2), 2]:
        for name, xv in noncontig(x):
            assert_close(nee.flip(xv, dims), torch.flip(t, dims if isinstance(dims, tuple) else (dims,)), msg=name)
    assert_close(x.flip(0, 2), t.flip(0, 2))
    assert_close(x.fliplr(), t.fliplr())
    assert_close(x.flipud(), t.flipud())
    r = x.flip(0)
    r[0] = r[1]  # a copy, not a view
    assert_close(x, t)
    assert nee.flip(nee.tensor(2.0), ()).item() == 2.0
    assert nee.zeros(0, 3).flip(0).shape == (0, 3)
    assert reversed(nee.tensor([1, 2, 3])).tolist() == [3, 2, 1]
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.flip((0, 0))
    with pytest.raises(RuntimeError, match=">= 2-d"):
        nee.fliplr(nee.zeros(3))
    with pytest.raises(IndexError):
        x.flip(3)


def test_roll_rot90():
    x, t = pair((3, 4, 5), "int64")
    for shifts, dims in [(1, 0), (-2, 2), ((1, 7), (0, 2)), ((2, -1, 5), (0, 1, 2)), (3, None), (0, 1), (14, -1)]:
        for name, xv in noncontig(x):
            assert_close(nee.roll(xv, shifts, dims), torch.roll(t, shifts, dims), msg=f"{name} {shifts} {dims}")
    assert_close(x.roll(1, 1), t.roll(1, 1))
    assert nee.roll(nee.zeros(0, 2), 1, 0).shape == (0, 2)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        nee.roll(x, (1, 2), (0,))
    for k in (-1, 0, 1, 2, 3, 5):
        for dims in [(0, 1), (2, 0), (-1, -2)]:
            assert_close(nee.rot90(x, k, dims), torch.rot90(t, k, dims))
    with pytest.raises(RuntimeError, match="rotation dims"):
        nee.rot90(x, 1, (0, 0))


# ---------------------------------------------------------------- repeat / tile / repeat_interleave
@pytest.mark.parametrize("dt", ["bool", "int32", "float16", "float64"])
def test_repeat_tile(dt):
    x, t = pair((2, 3), dt)
    for reps in [(1, 1), (2, 3), (3, 1, 2), (2, 0), (1, 2, 1, 3)]:
        for name, xv in noncontig(x):
            assert_close(xv.repeat(*reps), t.repeat(*reps), msg=f"{name} {reps}")
        assert_close(nee.tile(x, reps), torch.tile(t, reps))
    assert_close(x.repeat((2, 2)), t.repeat((2, 2)))
    assert_close(nee.tile(x, (2,)), torch.tile(t, (2,)))
    assert_close(x.tile(2, 1, 2), t.tile(2, 1, 2))
    assert_close(nee.tensor(5.0).repeat(3), torch.tensor(5.0).repeat(3))
    e = nee.arange(3).expand(2, 3)
    assert_close(e.repeat(2, 1), torch.arange(3).expand(2, 3).repeat(2, 1))
    with pytest.raises(RuntimeError, match="can not be smaller than number of dimensions"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.repeat(2, -1)


def test_repeat_interleave():
    x, t = pair((2, 3), "int64")
    assert_close(nee.repeat_interleave(x, 2), torch.repeat_interleave(t, 2))
    assert_close(x.repeat_interleave(2, dim=1), t.repeat_interleave(2, dim=1))
    assert_close(x.t().repeat_interleave(nee.tensor([1, 0, 3]), dim=0),
                 t.t().repeat_interleave(torch.tensor([1, 0, 3]), dim=0))
    assert_close(x.repeat_interleave(nee.tensor([2]), dim=-2), t.repeat_interleave(torch.tensor([2]), dim=-2))
    assert_close(nee.repeat_interleave(nee.tensor([1, 2, 0, 3])), torch.repeat_interleave(torch.tensor([1, 2, 0, 3])))
    assert_close(nee.repeat_interleave(nee.tensor(3.0), 2), torch.repeat_interleave(torch.tensor(3.0), 2))
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        nee.repeat_interleave(nee.tensor([1, 2]), nee.tensor([1, -1]))
    with pytest.raises(RuntimeError, match="same size as input along dim"):
        x.repeat_interleave(nee.tensor([1, 2]), dim=1)


def test_narrow_copy():
    x, t = pair((4, 5))
    r = nee.narrow_copy(x, 1, 1, 3)
    assert_close(r, torch.narrow_copy(t, 1, 1, 3))
    r.fill_(0)
    assert_close(x, t)
    assert_close(x.narrow_copy(0, -2, 2), t.narrow_copy(0, 2, 2))


# ---------------------------------------------------------------- tril / triu / diag
@pytest.mark.parametrize("dt", ["bool", "int32", "float32"])
def test_tril_triu(dt):
    x, t = pair((2, 4, 5), dt)
    for k in (-5, -1, 0, 2, 7):
        for name, xv in noncontig(x):
            assert_close(nee.tril(xv, k), torch.tril(t, k), msg=f"{name} {k}")
            assert_close(xv.triu(k), t.triu(k), msg=f"{name} {k}")
    y = x[0].clone()
    y.tril_()
    assert_close(y, t[0].tril())
    assert nee.tril(nee.zeros(0, 3)).shape == (0, 3)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        nee.tril(nee.zeros(3))


def test_diag_family():
    v, tv = pair((4,))
    m, tm = pair((3, 5))
    for k in (-2, 0, 1, 3):
        assert_close(nee.diag(v, k), torch.diag(tv, k))
        assert_close(nee.diag(m, k), torch.diag(tm, k))
        assert_close(m.t().diag(k), tm.t().diag(k))
        assert_close(nee.diagflat(m, k), torch.diagflat(tm, k))
    b, tb = pair((2, 3, 4), "int64")
    for off, d1, d2 in [(0, -2, -1), (1, 0, 2), (-1, 3, 1), (2, 1, 0)]:
        assert_close(nee.diag_embed(b, off, d1, d2), torch.diag_embed(tb, off, d1, d2))
    assert_close(nee.diag(nee.tensor([], dtype=nee.float32)), torch.diag(torch.tensor([])))
    with pytest.raises(RuntimeError, match="Supports 1D or 2D tensors. Got 3D"):
        nee.diag(b)
    with pytest.raises(RuntimeError, match="cannot be identical"):
        nee.diag_embed(b, 0, 1, 1)


def test_meshgrid():
    a, b, c = nee.arange(3), nee.arange(4), nee.tensor(7)
    ta, tb, tc = torch.arange(3), torch.arange(4), torch.tensor(7)
    for ind in ("ij", "xy"):
        for r, e in zip(nee.meshgrid(a, b, c, indexing=ind), torch.meshgrid(ta, tb, tc, indexing=ind)):
            assert_close(r, e)
        for r, e in zip(nee.meshgrid([a, b], indexing=ind), torch.meshgrid([ta, tb], indexing=ind)):
            assert_close(r, e)
    g = nee.meshgrid(a, b, indexing="ij")[0]
    assert 0 in g.stride()  # expanded views, no copy
    with pytest.raises(RuntimeError, match="0D or 1D"):
        nee.meshgrid(nee.zeros(2, 2))


# ---------------------------------------------------------------- pad
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes(mode):
    cases = [((2, 5), (1, 2)), ((2, 3, 5), (2, 1)), ((2, 3, 5), (1, 2, 2, 0)), ((1, 2, 4, 5), (1, 1, 0, 3)),
             ((1, 2, 3, 4, 5), (1, 2, 0, 1, 2, 1)), ((2, 3, 5), (-1, 2)), ((1, 2, 4, 5), (0, 0, 0, 0))]
    for shape, p in cases:
        x, t = pair(shape)
        try:
            ref = F.pad(t, p, mode=mode)
        except (RuntimeError, NotImplementedError) as e:
            with pytest.raises(type(e)):  # rejected the same way
                nee.pad(x, p, mode=mode)
            continue
        for name, xv in noncontig(x):
            assert_close(nee.pad(xv, p, mode=mode), ref, msg=f"{name} {shape} {p}")


def test_pad_constant_more():
    x, t = pair((2, 3, 4), "int32")
    for p in [(1,), (1, 1, 2, 2, 0, 1), (-1, -1), (-1, 2, 1, -2), (0, 0)]:
        if len(p) % 2:
            with pytest.raises(RuntimeError, match="divisible by 2"):
                nee.pad(x, p)
            continue
        assert_close(nee.pad(x, p, value=7), F.pad(t, p, value=7))
    h, th = pair((2, 3), "float16")
    assert_close(nee.pad(h, (1, 1), value=0.5), F.pad(th, (1, 1), value=0.5))
    b, tb = pair((2, 3), "bool")
    assert_close(nee.pad(b, (1, 1), value=True), F.pad(tb, (1, 1), value=True))
    assert_close(nee.pad(nee.zeros(0, 2), (1, 1)), F.pad(torch.zeros(0, 2), (1, 1)))


def test_pad_errors():
    with pytest.raises(RuntimeError, match=r"Padding size should be less than the corresponding input dimension, but "
                                            r"got: padding \(3, 3\) at dimension 1 of input \[1, 3\]"):
        nee.pad(nee.zeros(1, 3), (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        nee.pad(nee.zeros(1, 3), (4, 0), mode="circular")
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 1D input tensor"):
        nee.pad(nee.zeros(3), (1, 1), mode="reflect")
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo"):
        nee.pad(nee.zeros(2, 3), (1, 1), mode="foo")
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
        nee.pad(nee.zeros(2, 3), (1, 1), mode="reflect", value=1)
    with pytest.raises(RuntimeError, match="less than or equal to two times the input dimension"):
        nee.pad(nee.zeros(2), (1, 1, 1, 1))
    with pytest.raises(RuntimeError, match="negative output size"):
        nee.pad(nee.zeros(2, 3), (-2, -2))
