"""F.fractional_max_pool2d/3d and nn.FractionalMaxPool2d/3d with explicit _random_samples, against PyTorch."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel,kw", [
    ((3, 2), {"output_size": (5, 6)}), (2, {"output_ratio": (0.5, 0.7)}), (3, {"output_size": 1}),
    ((3, 2), {"output_size": (9, 12)})])
def test_fractional_max_pool2d_matches_torch(dtype, kernel, kw):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 11, 13)).astype(dtype)
    s = rng.random((2, 3, 2)).astype(dtype)
    a, ai = torch.nn.functional.fractional_max_pool2d(torch.tensor(x), kernel, return_indices=True,
                                                      _random_samples=torch.tensor(s), **kw)
    b, bi = F.fractional_max_pool2d(nee.tensor(x), kernel, return_indices=True, _random_samples=nee.tensor(s), **kw)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(bi.numpy(), ai.numpy())
    assert b.dtype == getattr(nee, dtype) and bi.dtype == nee.int64
    # unbatched input uses the first row of samples
    a1 = torch.nn.functional.fractional_max_pool2d(torch.tensor(x[0]), kernel, _random_samples=torch.tensor(s[:1]),
                                                   **kw)
    b1 = F.fractional_max_pool2d(nee.tensor(x[0]), kernel, _random_samples=nee.tensor(s[:1]), **kw)
    np.testing.assert_array_equal(b1.numpy(), a1.numpy())


def test_fractional_max_pool3d_and_modules_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 8, 9)).astype(np.float32)
    s = rng.random((2, 3, 3)).astype(np.float32)
    tm = torch.nn.FractionalMaxPool3d(2, output_size=(4, 5, 6), return_indices=True, _random_samples=torch.tensor(s))
    nm = nee.nn.FractionalMaxPool3d(2, output_size=(4, 5, 6), return_indices=True, _random_samples=nee.tensor(s))
    (a, ai), (b, bi) = tm(torch.tensor(x)), nm(nee.tensor(x))
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(bi.numpy(), ai.numpy())
    assert repr(nm) == repr(tm) and list(nm.state_dict()) == list(tm.state_dict())
    x2 = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    s2 = rng.random((2, 3, 2)).astype(np.float32)
    tm2 = torch.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=torch.tensor(s2))
    nm2 = nee.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=nee.tensor(s2))
    np.testing.assert_array_equal(nm2(nee.tensor(x2)).numpy(), tm2(torch.tensor(x2)).numpy())
    # without samples: random windows, still a max over kernel-sized windows of the requested output size
    y, i = F.fractional_max_pool2d(nee.tensor(x2), 2, output_size=(4, 4), return_indices=True)
    flat = x2.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, i.numpy().reshape(2, 3, -1), 2).reshape(2, 3, 4, 4),
                                  y.numpy())


def test_fractional_max_pool_bad_input():
    x = nee.randn(2, 3, 7, 9)
    s = nee.rand(2, 3, 2)
    with pytest.raises(RuntimeError, match="pool height 3 too large relative to input height 7"):
        F.fractional_max_pool2d(x, 3, output_size=(6, 6), _random_samples=s)
    with pytest.raises(ValueError, match="either an output_size or an output_ratio"):
        F.fractional_max_pool2d(x, 3, _random_samples=s)
    with pytest.raises(RuntimeError, match=r"_random_samples.size\(2\) equals to 2"):
        F.fractional_max_pool2d(x, 3, output_size=4, _random_samples=nee.rand(2, 3, 3))
    with pytest.raises(RuntimeError, match="no less then input batch size"):
        F.fractional_max_pool2d(x, 3, output_size=4, _random_samples=nee.rand(1, 3, 2))
    with pytest.raises(RuntimeError, match="same dtype as input"):
        F.fractional_max_pool2d(x, 3, output_size=4, _random_samples=s.double())
    with pytest.raises(ValueError, match=r"output_ratio must be between 0 and 1 \(got 1.5\)"):
        nee.nn.FractionalMaxPool2d(3, output_ratio=1.5)
    with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
        nee.nn.FractionalMaxPool2d(3, output_ratio=0.5, output_size=2)
    with pytest.raises(ValueError, match="requires specifying either an output size, or a pooling ratio"):
        nee.nn.FractionalMaxPool2d(3)
