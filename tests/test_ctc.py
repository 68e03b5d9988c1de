"""F.ctc_loss / nn.CTCLoss against PyTorch."""
import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")


def _case(dtype, T=12, N=4, C=6, S=5, blank=0, seed=0):
    rng = np.random.default_rng(seed)
    lp = torch.tensor(rng.standard_normal((T, N, C))).to(getattr(torch, dtype)).log_softmax(2)
    labels = [c for c in range(C) if c != blank]
    tg = torch.tensor(rng.choice(labels, (N, S)))
    tg[-1, 1] = tg[-1, 0]  # a repeated label needs a blank between the two
    return lp, tg


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("blank", [0, 5])
def test_ctc_padded_targets_match_torch(dtype, reduction, blank):
    lp, tg = _case(dtype, blank=blank)
    il, tl = (12, 9, 3, 10), (5, 3, 0, 4)
    want = torch.nn.functional.ctc_loss(lp, tg, il, tl, blank=blank, reduction=reduction)
    got = F.ctc_loss(nee.tensor(lp.numpy()), nee.tensor(tg.numpy()), il, tl, blank=blank, reduction=reduction)
    assert got.dtype == getattr(nee, dtype) and list(got.shape) == list(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5 if dtype == "float32" else 1e-12)


def test_ctc_concatenated_targets_and_tensor_lengths_match_torch():
    lp, tg = _case("float64")
    il, tl = torch.tensor([12, 11, 7, 12]), torch.tensor([5, 2, 3, 1])
    flat = torch.cat([tg[i, :n] for i, n in enumerate(tl.tolist())])
    for reduction in ("none", "mean"):
        want = torch.nn.functional.ctc_loss(lp, flat, il, tl, reduction=reduction)
        got = F.ctc_loss(nee.tensor(lp.numpy()), nee.tensor(flat.numpy()), nee.tensor(il.numpy()),
                         nee.tensor(tl.numpy()), reduction=reduction)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_ctc_impossible_alignment_zero_infinity_and_zero_input_length():
    lp, tg = _case("float64")
    il, tl = (12, 2, 0, 0), (5, 4, 3, 0)  # element 1 is too short for its 4 labels; 2 and 3 have no frames
    for zi in (False, True):
        want = torch.nn.functional.ctc_loss(lp, tg, il, tl, reduction="none", zero_infinity=zi)
        got = F.ctc_loss(nee.tensor(lp.numpy()), nee.tensor(tg.numpy()), il, tl, reduction="none",
                         zero_infinity=zi)
        np.testing.assert_array_equal(np.isinf(got.numpy()), np.isinf(want.numpy()))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    assert np.isinf(got.numpy()).sum() == 0 and np.isinf(want.numpy()).sum() == 0


def test_ctc_unbatched_and_module_and_jit():
    lp, tg = _case("float32", N=1)
    want = torch.nn.CTCLoss(reduction="none")(lp[:, 0], tg[0], (12,), (5,))
    got = nee.nn.CTCLoss(reduction="none")(nee.tensor(lp[:, 0].numpy()), nee.tensor(tg[0].numpy()), (12,), (5,))
    assert got.ndim == 0
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    assert repr(nee.nn.CTCLoss()) == "CTCLoss()"
    lp, tg = _case("float32")
    want = torch.nn.CTCLoss(blank=0)(lp, tg, (12, 9, 3, 10), (5, 3, 2, 4))
    m = nee.nn.CTCLoss()
    tgn = nee.tensor(tg.numpy())
    f = nee.jit(lambda x: m(x, tgn, (12, 9, 3, 10), (5, 3, 2, 4)))
    for _ in range(2):
        np.testing.assert_allclose(f(nee.tensor(lp.numpy())).numpy(), want.numpy(), rtol=1e-5)


def test_ctc_bad_input():
    lp = nee.tensor(np.zeros((5, 2, 4), np.float32))
    tg = nee.tensor([[1, 2], [1, 1]])
    with pytest.raises(RuntimeError, match=r"input_lengths.*got value 6"):
        F.ctc_loss(lp, tg, (6, 4), (2, 2))
    with pytest.raises(RuntimeError, match="target_lengths.*at least 0"):
        F.ctc_loss(lp, tg, (5, 4), (2, -1))
    with pytest.raises(RuntimeError, match="input_lengths must be of size batch_size"):
        F.ctc_loss(lp, tg, (5, 4, 3), (2, 2))
    with pytest.raises(RuntimeError, match="at least max\\(target_lengths\\) = 3"):
        F.ctc_loss(lp, tg, (5, 4), (2, 3))
    with pytest.raises(RuntimeError, match=r"target labels must lie in \[0, 4\)"):
        F.ctc_loss(lp, nee.tensor([[1, 7], [1, 1]]), (5, 4), (2, 2))
    with pytest.raises(RuntimeError, match="sum to 4"):
        F.ctc_loss(lp, nee.tensor([1, 2, 1]), (5, 4), (2, 2))
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, tg, (5, 4), (2, 2), blank=4)
    with pytest.raises(ValueError, match="x is not a valid value for reduction"):
        F.ctc_loss(lp, tg, (5, 4), (2, 2), reduction="x")
    with pytest.raises(NotImplementedError, match="int64"):
        F.ctc_loss(lp.to(nee.int64), tg, (5, 4), (2, 2))
    with pytest.raises(TypeError, match="integer tensor"):
        F.ctc_loss(lp, tg, nee.tensor([5.0, 4.0]), (2, 2))
