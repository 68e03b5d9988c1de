"""Eager ops against PyTorch where a differential sweep (torch's OpInfo samples, hand-written edge cases) found
another answer: grid_sample's gather index in a low-float dtype, diff(n=0), index_reduce / index_add edge cases,
cov's dtype, add / sub alpha conversion, masked_scatter's broadcasting, gradient(spacing=None), matrix_norm of
float16."""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_grid_sample_low_float_samples_the_right_pixels(dt, mode):
    """A 40 x 60 image has flat indices past 2048 (float16's last exact integer; bfloat16's is 256): the gather
    index is built in int64, so the pixels are torch's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 40, 60)).astype(np.float32)
    g = (rng.random((1, 6, 7, 2)) * 2 - 1).astype(np.float32)
    tx, tg = torch.tensor(x).to(getattr(torch, dt)), torch.tensor(g).to(getattr(torch, dt))
    ref = torch.nn.functional.grid_sample(tx, tg, mode=mode, align_corners=False).float().numpy()
    got = nee.nn.functional.grid_sample(nee.tensor(x).to(getattr(nee, dt)), nee.tensor(g).to(getattr(nee, dt)),
                                        mode=mode, align_corners=False)
    assert got.dtype is getattr(nee, dt)
    tol = 2e-2 if dt == "float16" else 1.5e-1
    np.testing.assert_allclose(got.float().numpy(), ref, rtol=tol, atol=tol)


def test_grid_sample_float16_volume_past_2048_elements():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 22, 23, 24)).astype(np.float16)       # 12144 voxels
    g = np.full((1, 2, 2, 2, 3), 0.999, np.float16)
    ref = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), align_corners=True).float().numpy()
    got = nee.nn.functional.grid_sample(nee.tensor(x), nee.tensor(g), align_corners=True).float().numpy()
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)


def test_diff_n0_is_the_input():
    for lib in (torch, nee):
        r = lib.diff(lib.tensor([1., 2., 4.]), n=0, prepend=lib.tensor([9.]), append=lib.tensor([7.]))
        assert r.tolist() == [1., 2., 4.]
    with pytest.raises(RuntimeError, match="same dimension"):
        nee.diff(nee.tensor([[1., 2.], [3., 4.]]), n=0, dim=0, append=nee.tensor([9., 9.]))   # still checked


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_of_a_0d_tensor(reduce, include_self):
    t = torch.tensor(2.).index_reduce(0, torch.tensor([0]), torch.tensor(5.), reduce, include_self=include_self)
    n = nee.tensor(2.).index_reduce(0, nee.tensor([0]), nee.tensor(5.), reduce, include_self=include_self)
    assert n.shape == () and float(n) == float(t)


def test_cov_promotes_observations_with_their_weights():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7)).astype(np.float16)
    w = rng.random(7).astype(np.float32)
    ref = torch.cov(torch.tensor(x), aweights=torch.tensor(w))
    got = nee.cov(nee.tensor(x), aweights=nee.tensor(w))
    assert got.dtype is nee.float32 and str(ref.dtype) == "torch.float32"
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt", ["uint8", "int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("alpha", [-1, -3, 2])
def test_index_add_integer_alpha_wraps_as_torch(dt, alpha):
    t = torch.tensor([5, 5], dtype=getattr(torch, dt)).index_add(0, torch.tensor([0, 0]),
                                                                 torch.tensor([1, 2], dtype=getattr(torch, dt)),
                                                                 alpha=alpha)
    n = nee.tensor([5, 5], dtype=getattr(nee, dt)).index_add(0, nee.tensor([0, 0]),
                                                             nee.tensor([1, 2], dtype=getattr(nee, dt)), alpha=alpha)
    assert n.tolist() == t.tolist()


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("dt", ["uint8", "int8", "int16", "int32", "int64", "float16", "float32"])
@pytest.mark.parametrize("alpha", [-1, 2, -3, 127, -128, 128, 255, 256, -255, -256, 300, 70000, -2**31, 2**31,
                                   2**15])
def test_add_sub_alpha_converts_to_the_result_dtype(op, dt, alpha):
    """torch converts alpha to the result dtype: out of range raises (int8 alpha=1000), an unsigned result wraps a
    negative alpha that fits (uint8 -1); sub converts -alpha."""
    def run(lib):
        a = lib.tensor([5, 7], dtype=getattr(lib, dt))
        b = lib.tensor([1, 3], dtype=getattr(lib, dt))
        try:
            return getattr(lib, op)(a, b, alpha=alpha).tolist()
        except RuntimeError:
            return "raises"
    assert run(nee) == run(torch)


def test_masked_scatter_broadcasts_input_and_mask():
    m = [[True, False, True], [False, True, False]]
    ref = torch.masked_scatter(torch.zeros(3), torch.tensor(m), torch.arange(1., 7.).reshape(2, 3))
    got = nee.masked_scatter(nee.zeros(3), nee.tensor(m), nee.arange(1., 7.).reshape(2, 3))
    assert got.shape == (2, 3) and got.tolist() == ref.tolist()
    t = nee.zeros(3)
    with pytest.raises(RuntimeError):
        t.masked_scatter_(nee.tensor(m), nee.arange(1., 7.).reshape(2, 3))    # in place: input's shape only
    assert t.tolist() == [0., 0., 0.]


def test_gradient_spacing_none_is_unit():
    (t,) = torch.gradient(torch.tensor([1., 2., 4., 8.]), spacing=None, dim=None, edge_order=1)
    (n,) = nee.gradient(nee.tensor([1., 2., 4., 8.]), spacing=None, dim=None, edge_order=1)
    assert n.tolist() == t.tolist()


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, float("inf"), float("-inf")])
def test_matrix_norm_low_float(dt, ord):
    x = [[1., -2.], [3., 4.]]

    def run(lib):
        try:
            r = lib.linalg.matrix_norm(lib.tensor(x, dtype=getattr(lib, dt)), ord)
        except RuntimeError as e:
            return "raises: " + str(e).split(":")[0]
        return float(r), str(r.dtype).split(".")[-1]
    assert run(nee) == run(torch)
