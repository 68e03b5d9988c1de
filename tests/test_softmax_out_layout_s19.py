"""kernels/nn.py softmax_launch into an output whose dims around ``dim`` do not merge into one stride each (a
slice of a wider buffer): it used to raise TypeError unpacking the output's groups; now through a copy, the
rest of the buffer untouched.  Checked against numpy."""
import numpy as np
import pytest

from neetorch.devices.cpu.kernels.nn import softmax_launch


@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_softmax_into_unmergeable_output(dim, log, dt):
    rng = np.random.default_rng(dim % 4 + 4 * log)
    x = rng.standard_normal((3, 4, 5, 3)).astype(dt)
    big = np.full((3, 4, 5, 6), 7.0, dt)
    out = big[:, :, :, 1:4]
    softmax_launch(x, out, dim, log)
    e = np.exp(x - x.max(dim, keepdims=True))
    ref = e / e.sum(dim, keepdims=True)
    if log:
        ref = np.log(ref)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    assert (big[..., 0] == 7).all() and (big[..., 4:] == 7).all()


@pytest.mark.parametrize("dim", [-1, -2, -4])
def test_negative_dim_is_its_positive_one(dim):
    # (a negative dim used to read the groups' strides past the shape: a wrong answer and a corrupted heap)
    x = np.random.default_rng(1).standard_normal((3, 4, 5, 3)).astype(np.float32)
    out = np.empty_like(x)
    softmax_launch(x, out, dim, False)
    e = np.exp(x - x.max(dim, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(dim, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [4, -5])
def test_dim_out_of_range_raises(dim):
    x = np.zeros((3, 4, 5, 3), np.float32)
    with pytest.raises(ValueError, match="dim"):
        softmax_launch(x, np.empty_like(x), dim, True)
