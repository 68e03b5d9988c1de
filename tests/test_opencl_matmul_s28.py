"""Session 28: the OpenCL matmul's column tail.

The 8-wide tile kernel took products whose column count N is a multiple of 8; any other N ran wholly on the
scalar kernel (one work-item per output): im2col convs on 55x55 / 13x13 planes (N = 3025 / 169) ran at 1.6-5 GF/s
and light_squeezenet through an OpenCL session took ~200 ms (25 ms now).  The first N // 8 * 8 columns now go to
the tile kernel and the rest to the scalar kernel in a second launch.  Both sum over k in order with plain
multiplies and adds (no contraction), so every column has the bits the scalar kernel alone gives (a b read
through a transposed copy takes the scalar kernel for all columns)."""
import numpy as np
import pytest

import neetorch as nee

HAVE = any(d.type == "opencl" and d.available for d in nee.devices())
pytestmark = pytest.mark.skipif(not HAVE, reason="no OpenCL device (pip install 'neetorch[opencl]')")
RNG = np.random.default_rng(28)


def _scalar_path(b):
    """b with the same values but a column stride other than 1 (the scalar kernel for every column)."""
    return b.transpose(-1, -2).contiguous().transpose(-1, -2)


@pytest.mark.parametrize("M,K,N", [(3, 5, 9), (4, 7, 15), (33, 16, 17), (64, 144, 3025), (5, 3, 1000), (40, 9, 8),
                                   (7, 4, 7), (1, 12, 23)])
def test_column_tail_bitwise_the_scalar_kernel(M, K, N):
    an = RNG.standard_normal((M, K)).astype(np.float32)
    bn = RNG.standard_normal((K, N)).astype(np.float32)
    a, b = nee.tensor(an).to("opencl"), nee.tensor(bn).to("opencl")
    got = (a @ b).cpu().numpy()
    assert got.shape == (M, N)
    np.testing.assert_array_equal(got, (a @ _scalar_path(b)).cpu().numpy())
    np.testing.assert_allclose(got, an.astype(np.float64) @ bn.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_batched_broadcast_and_views():
    an = RNG.standard_normal((2, 1, 6, 10)).astype(np.float32)
    bn = RNG.standard_normal((3, 10, 21)).astype(np.float32)
    a, b = nee.tensor(an).to("opencl"), nee.tensor(bn).to("opencl")
    got = (a @ b).cpu().numpy()
    np.testing.assert_allclose(got, an.astype(np.float64) @ bn.astype(np.float64), rtol=1e-5, atol=1e-5)
    # a column slice of b (offset view, row stride != N) and a transposed a
    bs = nee.tensor(RNG.standard_normal((10, 40)).astype(np.float32)).to("opencl")[:, 3:22]
    at = nee.tensor(RNG.standard_normal((10, 6)).astype(np.float32)).to("opencl").t()
    got = (at @ bs).cpu().numpy()
    np.testing.assert_allclose(got, at.cpu().numpy().astype(np.float64) @ bs.cpu().numpy().astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def test_float16_column_tail():
    dev = [d for d in nee.devices() if d.type == "opencl"][0]
    an = RNG.standard_normal((9, 12)).astype(np.float16)
    bn = RNG.standard_normal((12, 19)).astype(np.float16)
    try:
        a, b = nee.tensor(an).to("opencl"), nee.tensor(bn).to("opencl")
    except TypeError:
        pytest.skip(f"the OpenCL device stores no float16 ({dev})")
    got = (a @ b).cpu().numpy()
    np.testing.assert_array_equal(got, (a @ _scalar_path(b)).cpu().numpy())
    np.testing.assert_allclose(got.astype(np.float64), an.astype(np.float64) @ bn.astype(np.float64), rtol=2e-2,
                               atol=2e-2)


def test_im2col_conv_against_the_cpu():
    import neetorch.nn.functional as F
    x = nee.tensor(RNG.standard_normal((1, 16, 55, 55)).astype(np.float32))
    w = nee.tensor(RNG.standard_normal((64, 16, 3, 3)).astype(np.float32) * 0.2)
    got = F.conv2d(x.to("opencl"), w.to("opencl"), padding=1).cpu().numpy()
    np.testing.assert_allclose(got, F.conv2d(x, w, padding=1).numpy(), rtol=1e-4, atol=1e-4)
