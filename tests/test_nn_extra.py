"""The 3-D layers (conv, transposed conv, pooling, instance norm, pads), grid_sample/affine_grid, embedding_bag,
unpooling, LRN, pdist and the margin / likelihood losses, differentially against torch."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")
tnn = torch.nn
TF = torch.nn.functional


def _np(x):
    if isinstance(x, nee.Tensor):
        return np.array(x.numpy(), copy=True)
    return x.detach().numpy().copy()


def N(t):
    return nee.tensor(t.detach().numpy())


def close(a, b, rtol=1e-5, atol=1e-5):
    if isinstance(b, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y, rtol, atol)
        return
    assert tuple(a.shape) == tuple(b.shape), (tuple(a.shape), tuple(b.shape))
    assert a.dtype.name == str(b.dtype).replace("torch.", ""), (a.dtype, b.dtype)
    if b.dtype in (torch.int64, torch.bool):
        np.testing.assert_array_equal(_np(a), _np(b))
    else:
        np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)


def pair(kind, *args, **kw):
    torch.manual_seed(0)
    tm = getattr(tnn, kind)(*args, **kw)
    nm = getattr(nn, kind)(*args, **kw)
    nm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    assert repr(nm) == repr(tm)
    return tm, nm


# ---------------------------------------------------------------- 3-D convolution
CONV3D = [dict(), dict(stride=(2, 1, 2), padding=1, dilation=(2, 1, 1), groups=2),
          dict(padding="same", groups=2, dilation=(1, 2, 1)), dict(padding="same"),  # asymmetric 'same' in H
          dict(stride=2, padding=(0, 1, 0))]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("kw", CONV3D, ids=[str(k) for k in CONV3D])
def test_conv3d(kw):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 5, 6, 7)
    w = torch.randn(6, 4 // kw.get("groups", 1), 3, 2, 3)
    b = torch.randn(6)
    close(F.conv3d(N(x), N(w), N(b), **kw), TF.conv3d(x, w, b, **kw), 1e-4, 1e-4)
    close(F.conv3d(N(x[0]), N(w), None, **kw), TF.conv3d(x[0], w, None, **kw), 1e-4, 1e-4)   # unbatched


def test_conv3d_module_float64_noncontiguous_padding_mode():
    tm, nm = pair("Conv3d", 3, 4, (2, 3, 1), stride=(1, 2, 1), padding=(1, 1, 0), padding_mode="reflect")
    tm, nm = tm.double(), nm.double()
    big = torch.randn(2, 6, 3, 5, 6, dtype=torch.float64)
    x = big[:, ::2].transpose(3, 4)                                    # (2, 3, 3, 6, 5), non-contiguous
    xn = N(big)[:, ::2].transpose(3, 4)
    assert not xn.is_contiguous()
    with torch.no_grad():
        close(nm(xn), tm(x), 1e-12, 1e-12)


CONVT3D = [dict(), dict(stride=(2, 1, 2), padding=1, output_padding=(1, 0, 1)),
           dict(stride=2, padding=(2, 0, 1), dilation=(2, 1, 2), output_padding=(1, 1, 1), groups=2),
           dict(stride=3, padding=1, output_padding=2)]


@pytest.mark.parametrize("kw", CONVT3D, ids=[str(k) for k in CONVT3D])
def test_conv_transpose3d(kw):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 4, 5)
    g = kw.get("groups", 1)
    w = torch.randn(4, 3, 3, 2, 3)
    b = torch.randn(3 * g)
    close(F.conv_transpose3d(N(x), N(w), N(b), **kw), TF.conv_transpose3d(x, w, b, **kw), 1e-4, 1e-4)
    close(F.conv_transpose3d(N(x[1]), N(w), None, **kw), TF.conv_transpose3d(x[1], w, None, **kw), 1e-4, 1e-4)


def test_conv_transpose3d_module_output_size():
    tm, nm = pair("ConvTranspose3d", 2, 3, 3, stride=2, padding=1)
    x = torch.randn(1, 2, 3, 4, 3)
    with torch.no_grad():
        close(nm(N(x), output_size=[6, 8, 6]), tm(x, output_size=[6, 8, 6]), 1e-4, 1e-5)


def test_conv3d_errors():
    x, w = nee.randn(1, 4, 5, 5, 5), nee.randn(6, 4, 3, 3, 3)
    with pytest.raises(RuntimeError, match=r"Expected 4D \(unbatched\) or 5D \(batched\) input to conv3d, but got "
                                           r"input of size: \[4, 5, 5\]"):
        F.conv3d(nee.randn(4, 5, 5), w)
    with pytest.raises(RuntimeError, match=r"expected input\[1, 3, 5, 5, 5\] to have 4 channels, but got 3"):
        F.conv3d(nee.randn(1, 3, 5, 5, 5), w)
    with pytest.raises(RuntimeError, match=r"Kernel size: \(3 x 3 x 3\). Kernel size can't be greater"):
        F.conv3d(nee.randn(1, 4, 2, 5, 5), w)
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        F.conv3d(x, w.double())
    with pytest.raises(RuntimeError, match="output padding must be smaller than either stride or dilation"):
        F.conv_transpose3d(x, nee.randn(4, 2, 3, 3, 3), stride=2, output_padding=2)


# ---------------------------------------------------------------- 3-D pooling
MAXPOOL = [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True),
           dict(kernel_size=2, dilation=(2, 1, 2), padding=(1, 0, 1))]


@pytest.mark.parametrize("kw", MAXPOOL, ids=[str(k) for k in MAXPOOL])
def test_max_pool3d_and_unpool(kw):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 7)
    close(F.max_pool3d(N(x), return_indices=True, **kw), TF.max_pool3d(x, return_indices=True, **kw))
    close(F.max_pool3d(N(x[0]), **kw), TF.max_pool3d(x[0], **kw))
    tm, nm = pair("MaxPool3d", return_indices=True, **kw)
    close(nm(N(x)), tm(x))
    if "dilation" not in kw and not kw.get("padding"):
        p, i = TF.max_pool3d(x, return_indices=True, **kw)
        close(F.max_unpool3d(N(p), N(i), kw["kernel_size"], output_size=x.shape[2:]),
              TF.max_unpool3d(p, i, kw["kernel_size"], output_size=x.shape[2:]))


AVGPOOL = [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True),
           dict(kernel_size=3, padding=1, count_include_pad=False, stride=2, ceil_mode=True),
           dict(kernel_size=3, padding=1, divisor_override=5)]


@pytest.mark.parametrize("kw", AVGPOOL, ids=[str(k) for k in AVGPOOL])
def test_avg_pool3d(kw):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 7)
    close(F.avg_pool3d(N(x), **kw), TF.avg_pool3d(x, **kw))
    tm, nm = pair("AvgPool3d", **kw)
    close(nm(N(x[1])), tm(x[1]))


@pytest.mark.parametrize("osz", [(2, 3, 4), 3, (None, 2, 5)])
def test_adaptive_pool3d(osz):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 7)
    close(F.adaptive_avg_pool3d(N(x), osz), TF.adaptive_avg_pool3d(x, osz))
    close(F.adaptive_max_pool3d(N(x), osz, True), TF.adaptive_max_pool3d(x, osz, True))
    close(F.adaptive_max_pool3d_with_indices(N(x), osz), TF.adaptive_max_pool3d_with_indices(x, osz))
    close(F.max_pool3d_with_indices(N(x), 2), TF.max_pool3d_with_indices(x, 2))
    x1 = x[:, :, 0]
    close(F.adaptive_max_pool2d_with_indices(N(x1), 4), TF.adaptive_max_pool2d_with_indices(x1, 4))
    close(F.adaptive_max_pool1d_with_indices(N(x1[0]), 4), TF.adaptive_max_pool1d_with_indices(x1[0], 4))
    tm, nm = pair("AdaptiveMaxPool3d", osz)
    close(nm(N(x[0])), tm(x[0]))
    tm, nm = pair("AdaptiveAvgPool3d", osz)
    close(nm(N(x)), tm(x))


def test_lp_pool_modules():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 4, 6, 5) + 0.1
    for kind, inp, args in [("LPPool3d", x, (2, 2)), ("LPPool2d", x[:, :, 0], (3, (2, 3), 1)),
                            ("LPPool1d", x[:, :, 0, 0], (1.5, 2))]:
        tm, nm = pair(kind, *args)
        close(nm(N(inp)), tm(inp), 1e-5, 1e-6)


def test_pool3d_errors():
    with pytest.raises(RuntimeError, match=r"max_pool3d: non-empty 4D or 5D \(batch mode\) tensor expected"):
        F.max_pool3d(nee.randn(3, 4, 4), 2)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size"):
        F.avg_pool3d(nee.randn(1, 1, 4, 4, 4), 2, padding=2)
    with pytest.raises(RuntimeError, match=r"Calculated output size: \(1x0x1x1\). Output size is too small"):
        F.max_pool3d(nee.randn(1, 1, 1, 4, 4), (2, 3, 3))


def test_jit_conv3d_pool3d():
    torch.manual_seed(0)
    tm, nm = pair("Conv3d", 2, 3, 3, padding=1)

    @nee.jit
    def f(x):
        y = nm(x)
        return F.max_pool3d(y, 2), F.avg_pool3d(y, 2)

    for _ in range(2):
        x = torch.randn(1, 2, 4, 6, 6)
        with torch.no_grad():
            y = tm(x)
            close(f(N(x)), (TF.max_pool3d(y, 2), TF.avg_pool3d(y, 2)), 1e-4, 1e-5)
    assert f.stats["traces"] == 1


# ---------------------------------------------------------------- norm / pads
def test_instance_norm3d_and_pads3d():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    tm, nm = pair("InstanceNorm3d", 3, affine=True)
    with torch.no_grad():
        tm.weight.uniform_()
        tm.bias.uniform_()
    nm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    close(nm(N(x)), tm(x), 1e-5, 1e-5)
    close(nm(N(x[0])), tm(x[0]), 1e-5, 1e-5)
    pad = (1, 2, 0, 1, 2, 1)
    for kind, args in [("ConstantPad3d", (pad, 1.5)), ("ZeroPad3d", (pad,)), ("ReflectionPad3d", (pad,)),
                       ("ReplicationPad3d", (pad,)), ("CircularPad3d", (pad,)), ("ZeroPad3d", (1,))]:
        tm, nm = pair(kind, *args)
        close(nm(N(x)), tm(x), 0, 0)


def test_local_response_norm():
    torch.manual_seed(0)
    x5, x3 = torch.randn(2, 6, 3, 4, 5), torch.randn(2, 5, 7)
    close(F.local_response_norm(N(x5), 3), TF.local_response_norm(x5, 3))
    tm, nm = pair("LocalResponseNorm", 4, 1e-2, 0.5, 2.0)
    close(nm(N(x3)), tm(x3))
    with pytest.raises(ValueError, match=r"Expected 3D or higher dimensionality input \(got 2 dimensions\)"):
        F.local_response_norm(nee.randn(3, 4), 2)


# ---------------------------------------------------------------- unpooling / fold
def test_max_unpool_1d_2d():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    p, i = TF.max_pool2d(x, 2, return_indices=True)
    tm, nm = pair("MaxUnpool2d", 2)
    close(nm(N(p), N(i)), tm(p, i))
    close(nm(N(p[0]), N(i[0])), tm(p[0], i[0]))                          # unbatched
    x9 = torch.randn(2, 3, 9, 9)
    p, i = TF.max_pool2d(x9, 2, return_indices=True)
    close(nm(N(p), N(i), output_size=(9, 9)), tm(p, i, output_size=(9, 9)))
    x1 = torch.randn(2, 3, 9)
    p, i = TF.max_pool1d(x1, 3, 2, 1, return_indices=True)
    tm, nm = pair("MaxUnpool1d", 3, 2, 1)
    close(nm(N(p), N(i)), tm(p, i))
    with pytest.raises(ValueError, match=r"max_unpool2d: invalid output_size \"\[12, 8\]\" \(dim 0 must be between "
                                         r"8 and 12\)"):
        F.max_unpool2d(N(p).unsqueeze(-1), N(i).unsqueeze(-1), 2, output_size=(12, 8))
    with pytest.raises(RuntimeError, match="Expected shape of indices to be same as that of the input"):
        F.max_unpool1d(N(p), N(i)[:, :1], 3, 2, 1)


def test_fold_unfold_modules():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 7)
    tm, nm = pair("Unfold", (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    cols = tm(x)
    close(nm(N(x)), cols)
    tm, nm = pair("Fold", (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    close(nm(N(cols)), tm(cols))


# ---------------------------------------------------------------- grid_sample / affine_grid
@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")
@pytest.mark.parametrize("align_corners", [True, False])
def test_affine_grid(align_corners):
    torch.manual_seed(0)
    th, th3 = torch.randn(2, 2, 3), torch.randn(2, 3, 4)
    for t, size in [(th, (2, 3, 5, 7)), (th3, (2, 3, 4, 5, 6)), (th, (2, 1, 5, 1))]:
        close(F.affine_grid(N(t), size, align_corners), TF.affine_grid(t, size, align_corners), 1e-5, 1e-6)
    with pytest.raises(ValueError, match=r"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                                         r"\[2, 3, 5, 7\]. Got \[2, 3, 4\]."):
        F.affine_grid(N(th3), (2, 3, 5, 7))


@pytest.mark.parametrize("mode,padding_mode,align_corners",
                         list(itertools.product(["bilinear", "nearest"], ["zeros", "border", "reflection"],
                                                [True, False])))
def test_grid_sample(mode, padding_mode, align_corners):
    torch.manual_seed(0)
    inp = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 3 - 1.5                                # in and out of [-1, 1]
    close(F.grid_sample(N(inp), N(grid), mode, padding_mode, align_corners),
          TF.grid_sample(inp, grid, mode, padding_mode, align_corners), 1e-5, 1e-6)
    inp3, grid3 = torch.randn(1, 2, 4, 5, 6), torch.rand(1, 3, 2, 4, 3) * 3 - 1.5    # volumetric (trilinear)
    close(F.grid_sample(N(inp3), N(grid3), mode, padding_mode, align_corners),
          TF.grid_sample(inp3, grid3, mode, padding_mode, align_corners), 1e-5, 1e-6)


def test_grid_sample_jit_and_errors():
    torch.manual_seed(0)
    inp = torch.randn(1, 2, 4, 6)
    f = nee.jit(lambda x, th: F.grid_sample(x, F.affine_grid(th, (1, 2, 5, 5), False), align_corners=False))
    for theta in (torch.tensor([[[0.9, 0.2, 0.1], [-0.3, 1.1, 0.05]]]), torch.tensor([[[1.2, 0.0, -0.4],
                                                                                       [0.1, 0.7, 0.3]]])):
        grid = TF.affine_grid(theta, (1, 2, 5, 5), align_corners=False)
        close(f(N(inp), N(theta)), TF.grid_sample(inp, grid, align_corners=False), 1e-5, 1e-6)
    assert f.stats["traces"] == 1
    with pytest.raises(ValueError, match="expected padding_mode to be 'zeros', 'border', or 'reflection'"):
        F.grid_sample(N(inp), N(grid), padding_mode="wrap")
    with pytest.raises(RuntimeError, match=r"expected grid of shape \[1, D_out, H_out, W_out, 3\]"):
        F.grid_sample(N(inp).unsqueeze(2), N(grid).unsqueeze(1))
    with pytest.raises(RuntimeError, match=r"expected grid of shape \[1, H_out, W_out, 2\]"):
        F.grid_sample(N(inp), N(grid)[..., :1])


# ---------------------------------------------------------------- embedding_bag
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    ids = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    for pi in (None, 2):
        for offs, last in [(torch.tensor([0, 3, 3, 6]), False), (torch.tensor([0, 3, 3, 6, 10]), True)]:
            close(F.embedding_bag(N(ids), N(w), N(offs), mode=mode, padding_idx=pi, include_last_offset=last),
                  TF.embedding_bag(ids, w, offs, mode=mode, padding_idx=pi, include_last_offset=last))
        close(F.embedding_bag(N(ids.reshape(2, 5)), N(w), mode=mode, padding_idx=pi),
              TF.embedding_bag(ids.reshape(2, 5), w, mode=mode, padding_idx=pi))
    tm, nm = pair("EmbeddingBag", 10, 4, mode=mode, padding_idx=0)
    offs = torch.tensor([0, 4, 4])
    close(nm(N(ids), N(offs)), tm(ids, offs))


def test_embedding_bag_per_sample_weights_jit_errors():
    torch.manual_seed(0)
    tm, nm = pair("EmbeddingBag", 10, 3, mode="sum")
    ids, offs, psw = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2]), torch.randn(6)
    close(nm(N(ids), N(offs), N(psw)), tm(ids, offs, psw))
    f = nee.jit(lambda i, o: nm(i, o))
    for o in ([0, 2], [0, 5], [0, 0]):                                    # offsets are data, not constants
        close(f(N(ids), nee.tensor(o)), tm(ids, torch.tensor(o)))
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for mode='sum'"):
        F.embedding_bag(N(ids), N(tm.weight), N(offs), mode="mean", per_sample_weights=N(psw))
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(N(ids.reshape(2, 3)), N(tm.weight), N(offs))


# ---------------------------------------------------------------- distances
def test_pdist_cosine_pairwise_modules():
    torch.manual_seed(0)
    a = torch.randn(6, 5)
    for p in (2, 1, 0, 3.5, float("inf")):
        close(F.pdist(N(a), p), TF.pdist(a, p))
    close(F.pdist(N(a[:1])), TF.pdist(a[:1]))
    b = torch.randn(6, 5)
    tm, nm = pair("CosineSimilarity", 0, 1e-6)
    close(nm(N(a), N(b)), tm(a, b))
    tm, nm = pair("PairwiseDistance", 1.5, 1e-6, True)
    close(nm(N(a), N(b)), tm(a, b))


# ---------------------------------------------------------------- losses
REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_losses(reduction):
    torch.manual_seed(0)
    x, t, wt = torch.randn(4, 5), torch.tensor([1, 0, 4, 2]), torch.rand(5)
    for p, margin, w in itertools.product([1, 2], [1.0, 0.5], [None, wt]):
        close(F.multi_margin_loss(N(x), N(t), p, margin, None if w is None else N(w), reduction=reduction),
              TF.multi_margin_loss(x, t, p, margin, w, reduction=reduction))
    tm, nm = tnn.MultiMarginLoss(2, 0.7, wt, reduction=reduction), nn.MultiMarginLoss(2, 0.7, N(wt),
                                                                                      reduction=reduction)
    close(nm(N(x), N(t)), tm(x, t))
    tl = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    close(nn.MultiLabelMarginLoss(reduction=reduction)(N(x), N(tl)),
          tnn.MultiLabelMarginLoss(reduction=reduction)(x, tl))
    y = (torch.rand(4, 5) > 0.5).float()
    close(nn.MultiLabelSoftMarginLoss(N(wt), reduction=reduction)(N(x), N(y)),
          tnn.MultiLabelSoftMarginLoss(wt, reduction=reduction)(x, y))
    y1, y2, tt = torch.randn(6), torch.randn(6), torch.tensor([1., -1, 1, -1, 1, 1])
    close(nn.MarginRankingLoss(0.3, reduction=reduction)(N(y1), N(y2), N(tt)),
          tnn.MarginRankingLoss(0.3, reduction=reduction)(y1, y2, tt))
    close(nn.HingeEmbeddingLoss(0.5, reduction=reduction)(N(y1), N(tt)),
          tnn.HingeEmbeddingLoss(0.5, reduction=reduction)(y1, tt))
    close(nn.SoftMarginLoss(reduction=reduction)(N(y1), N(tt)), tnn.SoftMarginLoss(reduction=reduction)(y1, tt))
    a, p_, n_ = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    close(nn.CosineEmbeddingLoss(0.2, reduction=reduction)(N(a), N(p_), N(tt[:3])),
          tnn.CosineEmbeddingLoss(0.2, reduction=reduction)(a, p_, tt[:3]))
    close(nn.TripletMarginLoss(0.7, 1.5, swap=True, reduction=reduction)(N(a), N(p_), N(n_)),
          tnn.TripletMarginLoss(0.7, 1.5, swap=True, reduction=reduction)(a, p_, n_))
    close(nn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: 1.0 - F.cosine_similarity(u, v),
                                           margin=0.3, swap=True, reduction=reduction)(N(a), N(p_), N(n_)),
          tnn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: 1.0 - TF.cosine_similarity(u, v),
                                            margin=0.3, swap=True, reduction=reduction)(a, p_, n_))
    close(nn.TripletMarginWithDistanceLoss(reduction=reduction)(N(a), N(p_), N(n_)),
          tnn.TripletMarginWithDistanceLoss(reduction=reduction)(a, p_, n_))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_likelihood_losses(reduction):
    torch.manual_seed(0)
    y1, y2, pos, v = torch.randn(6), torch.randn(6), torch.rand(6) * 3, torch.rand(6) + 0.1
    for log_input, full in itertools.product([True, False], [True, False]):
        inp = y1 if log_input else y1.abs()
        close(nn.PoissonNLLLoss(log_input, full, reduction=reduction)(N(inp), N(pos)),
              tnn.PoissonNLLLoss(log_input, full, reduction=reduction)(inp, pos))
    for full in (True, False):
        close(nn.GaussianNLLLoss(full=full, reduction=reduction)(N(y1), N(y2), N(v)),
              tnn.GaussianNLLLoss(full=full, reduction=reduction)(y1, y2, v))
    a, b, v2 = torch.randn(3, 4), torch.randn(3, 4), torch.rand(3, 1) + 0.1
    close(nn.GaussianNLLLoss(reduction=reduction)(N(a), N(b), N(v2)),
          tnn.GaussianNLLLoss(reduction=reduction)(a, b, v2))


def test_loss_errors_and_single_sample():
    torch.manual_seed(0)
    x, t = torch.randn(5), torch.tensor([3, 0, -1, 1, 2])
    close(F.multilabel_margin_loss(N(x), N(t)), TF.multilabel_margin_loss(x, t))
    close(F.multi_margin_loss(N(x), N(t[:1])), TF.multi_margin_loss(x, t[:1]))
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(RuntimeError, match=r"multilabel_margin_loss: inconsistent target size: \[4\] for input of "
                                           r"size: \[5\]"):
        F.multilabel_margin_loss(N(x), N(t[:4]))
    with pytest.raises(ValueError, match="expected margin to be greater than 0"):
        nn.TripletMarginWithDistanceLoss(margin=0.0)


def test_rrelu():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    tm, nm = pair("RReLU", 0.1, 0.3)
    tm.eval()
    nm.eval()
    close(nm(N(x)), tm(x))                                                # eval: slope (lower + upper) / 2
    nm.train()
    y = _np(nm(N(x)))
    xn = x.numpy()
    neg = xn < 0
    slope = y[neg] / xn[neg]
    assert np.all((slope >= 0.1 - 1e-6) & (slope <= 0.3 + 1e-6)) and np.ptp(slope) > 0
    np.testing.assert_array_equal(y[~neg], xn[~neg])


@pytest.mark.parametrize("vshape", [(3,), (3, 1), (3, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gaussian_nll_loss_var_shapes_like_torch(vshape, reduction):
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    v = (rng.random(vshape) + 0.1).astype(np.float32)
    got = nee.nn.functional.gaussian_nll_loss(nee.tensor(x), nee.tensor(t), nee.tensor(v), full=True,
                                              reduction=reduction)
    want = torch.nn.functional.gaussian_nll_loss(torch.tensor(x), torch.tensor(t), torch.tensor(v), full=True,
                                                 reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_gaussian_nll_loss_errors():
    x = nee.randn(3, 4)
    with pytest.raises(ValueError, match="incorrect size"):
        nee.nn.functional.gaussian_nll_loss(x, x, nee.ones(4))
    with pytest.raises(ValueError, match="negative"):
        nee.nn.functional.gaussian_nll_loss(x, x, -nee.ones(3, 4))
