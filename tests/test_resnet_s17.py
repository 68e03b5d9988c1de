"""Session 17 (helper "resnet"): the Winograd rule's F(4) -> F(2) move on few tile columns (conv._WINO_FEW_COLS).

F(4)'s 36 products on 12x12 .. 14x14 planes have 9-16 tile columns each; against conv_direct's kernel the rule now
takes F(2) there (ResNet-50's 256 -> 256 on 14x14, Inception v2's 192 -> 256, ZFNet-512's 12x12 layers), F(4) kept on
28x28 and larger planes.  Checked: the picks, and the convolutions the move touches against a float64 reference
(1 and 2 threads, bias / residual / relu, frozen weights as in an ONNX session) with the path they took recorded.
"""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv_direct as CD
from neetorch.devices.cpu.kernels import winograd as WG


@pytest.fixture(autouse=True)
def _rule_as_fitted(monkeypatch):
    # the Winograd rule as fitted on the AVX2 box (8-lane direct kernel); the 16-lane direct kernel's rate (session
    # 20, conv._DIRECT16_RATE) moves these 14x14 / 12x12 convs to it: tests/test_cnn_speed_paths_pool_wino.py
    monkeypatch.setattr(CV, "_DIRECT16_RATE", 1.0)


@pytest.fixture
def settings_restored():
    n = nee.get_num_threads()
    mode, force = CD.MODE[0], CV._WINO_FORCE[0]
    yield
    CD.MODE[0], CV._WINO_FORCE[0] = mode, force
    nee.set_num_threads(n)


def test_rule_moves_f4_to_f2_on_few_tile_columns():
    # against the direct kernel (float32 where it runs): F(2) where F(4)'s products have few tile columns
    for args in ((1, 256, 256, 14, 14), (1, 192, 256, 14, 14), (1, 512, 512, 12, 12), (1, 256, 512, 12, 12),
                 (1, 512, 512, 14, 14)):
        assert CV._winograd_rule(*args, direct=True) == 2, args
    # F(4) kept on 28x28 and larger planes (49+ columns) and on batches whose tiles add up (2 x 16 columns)
    for args in ((1, 128, 128, 28, 28), (1, 64, 64, 56, 56), (1, 64, 192, 56, 56), (1, 96, 96, 28, 28),
                 (2, 256, 256, 14, 14), (8, 512, 512, 7, 7)):
        assert CV._winograd_rule(*args, direct=True) == 4, args
    # 7x7 planes of few-hundred channels stay direct; the GEMM paths' rule (float64, no direct kernel) unchanged
    assert CV._winograd_rule(1, 512, 512, 7, 7, direct=True) == 0
    for args in ((1, 256, 256, 14, 14), (1, 192, 256, 14, 14), (1, 512, 512, 12, 12)):
        assert CV._winograd_rule(*args) == 4, args


def test_column_penalty_shape():
    p = [CV._wino_col_penalty(n) for n in (1, 4, 9, 16, 32, 48)]
    assert all(a > b for a, b in zip(p, p[1:]))             # fewer columns, larger penalty
    assert p[-1] > 1.0
    for n in (CV._WINO_FEW_COLS, CV._WINO_FEW_COLS + 1, 10 ** 6):
        assert CV._wino_col_penalty(n) == 1.0
    assert 1.5 < CV._wino_col_penalty(16) < 1.7              # the fit (see conv.py)


def _ref(x, w, b, e, relu):
    N, C, H, W = x.shape
    O = w.shape[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    r = np.zeros((N, O, H, W))
    w64 = w.astype(np.float64)
    for kh in range(3):
        for kw in range(3):
            r += np.einsum("nchw,oc->nohw", xp[:, :, kh:kh + H, kw:kw + W], w64[:, :, kh, kw])
    if b is not None:
        r += b[None, :, None, None]
    if e is not None:
        r += e
    return np.maximum(r, 0) if relu else r


@pytest.mark.parametrize("nt", [1, 2])
@pytest.mark.parametrize("shape,has_b,has_e,relu", [
    ((1, 256, 256, 14, 14), True, False, True),     # ResNet-50's layer3 3x3
    ((1, 192, 256, 14, 14), True, True, True),      # Inception v2's, with a residual
    ((1, 256, 512, 12, 12), False, False, False),   # ZFNet-512's, no bias
])
def test_moved_convs_take_f2_and_match_float64(shape, has_b, has_e, relu, nt, settings_restored, monkeypatch):
    CD.MODE[0] = ""
    CV._WINO_FORCE[0] = ""
    nee.set_num_threads(nt)
    if not CD.available():
        pytest.skip("no direct kernel on this CPU (the rule without it is unchanged)")
    N, C, O, H, W = shape
    rng = np.random.default_rng(17)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((O, C, 3, 3)) / (3 * C ** 0.5)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32) if has_b else None
    e = rng.standard_normal((N, O, H, W)).astype(np.float32) if has_e else None
    assert WG.freeze(w)                                   # as an ONNX initializer
    seen = []
    real = CV._conv_winograd

    def spy(x, U, b, res, m, *a, **k):
        seen.append(m)
        return real(x, U, b, res, m, *a, **k)
    monkeypatch.setattr(CV, "_conv_winograd", spy)
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    ins = [x, w] + ([b] if b is not None else [])
    want = _ref(x, w, b, e, relu)
    for _ in range(2):                                    # the cached U on the second call
        out = np.full((N, O, H, W), np.nan, np.float32)
        CV.conv2d_into(out, ins, attrs, e=e, relu=relu)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        if relu:
            assert (out >= 0).all()
    # the rule weighs Winograd against the direct kernel at one thread, and on 2+ threads where _direct_term_mt
    # (every host by default since session 20): F(2) there; else (NEE_CONV_WINO_DIRECT_MT=0, 2 threads) the rule
    # without the direct term (F(4) on these shapes)
    want_m = 2 if nt == 1 or CV._direct_term_mt() else CV._winograd_rule(N, C, O, H, W, 4, False)
    assert want_m in (2, 4) and seen == [want_m, want_m]


def test_moved_conv_in_a_session_matches_torch(settings_restored):
    # through the public API: functional conv2d + relu on ResNet-50's 14x14 shape, 2 threads, against torch
    torch = pytest.importorskip("torch")
    CD.MODE[0] = ""
    nee.set_num_threads(2)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 256, 14, 14)).astype(np.float32)
    w = (rng.standard_normal((256, 256, 3, 3)) / 48).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    got = nee.nn.functional.relu(nee.nn.functional.conv2d(nee.tensor(x), nee.tensor(w), nee.tensor(b), padding=1))
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                                 torch.from_numpy(b).double(), padding=1)).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
