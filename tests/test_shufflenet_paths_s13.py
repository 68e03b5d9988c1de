"""ShuffleNet's paths (session 13): grouped convs (1x1 and 3x3, groups 2/3/4/8, strides, odd shapes, non-contiguous
inputs such as a channel shuffle's transposed view, float32 and float64) with the conv epilogue (second bias,
residual, relu) through kernels/conv.py's ``conv2d_into`` and the public conv2d, each against torch in float64;
the epilogue pass ``_bias_act`` and the wide path's ``_compact`` (relu as a select: NaN, -0.0, inf kept as
torch's); the AVX2 "pix" pick for strided convs of few (channel, tap) pairs (``conv_direct._small_k_strided``);
the light ShuffleNet model (seeded random weights) against onnxruntime at 1 and 2 threads."""
import itertools

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import conv as CV
from neetorch.devices.cpu.kernels import conv_direct as CD

torch = pytest.importorskip("torch")
F = nee.nn.functional


@pytest.fixture
def restore():
    n, force, mode = nee.get_num_threads(), CD.FORCE[0], CD.MODE[0]
    yield
    nee.set_num_threads(n)
    CD.FORCE[0], CD.MODE[0] = force, mode


def _torch_ref(x, w, b, b2, e, relu, G, s, p):
    t = torch.nn.functional.conv2d(torch.from_numpy(np.ascontiguousarray(x, np.float64)),
                                   torch.from_numpy(w.astype(np.float64)),
                                   None if b is None else torch.from_numpy(b.astype(np.float64)), s, p, 1, G)
    r = t.numpy()
    if b2 is not None:
        r = r + b2.astype(np.float64)[None, :, None, None]
    if e is not None:
        r = r + e
    return np.maximum(r, 0) if relu else r


def _shuffled(rng, N, C, H, W, dt, G=4):
    """A channel shuffle's result as a non-contiguous view (reshape, transpose; the final reshape left out):
    the (N, C, H, W) array conv2d_into receives when the JIT hands it the transposed view."""
    y = rng.standard_normal((N, G, C // G, H, W)).astype(dt)
    return y.transpose(0, 2, 1, 3, 4).reshape(N, C, H, W) if C % G == 0 else y.reshape(N, C, H, W)


# (N, C, O, H, W, groups, kernel, stride, pad): ShuffleNet's grouped 1x1s and depthwise 3x3s, odd shapes and groups
_SHAPES = [(1, 24, 112, 15, 13, 4, 1, 1, 0), (1, 136, 136, 9, 11, 4, 1, 1, 0), (1, 68, 68, 7, 7, 4, 1, 1, 0),
           (2, 30, 45, 11, 9, 3, 1, 1, 0), (1, 16, 24, 13, 17, 2, 1, 2, 0), (1, 64, 32, 6, 9, 8, 1, 1, 0),
           (1, 24, 48, 12, 11, 8, 3, 2, 1), (1, 18, 27, 10, 9, 3, 3, 1, 1), (1, 40, 40, 9, 9, 40, 3, 1, 1),
           (1, 36, 36, 14, 13, 36, 3, 2, 1), (2, 12, 20, 8, 7, 4, 3, 1, 1)]


# (contiguous input, conv bias, residual, relu): each part on and off, each with a shuffled (non-contiguous) input
_COMBOS = [(True, 0, 0, 0), (True, 1, 1, 1), (False, 0, 0, 1), (False, 1, 0, 1), (True, 0, 1, 0), (False, 0, 1, 1)]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_grouped_conv_epilogue_vs_torch(shape, dt, restore):
    N, C, O, H, W, G, k, s, p = shape
    rng = np.random.default_rng(sum(shape))
    OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    w = rng.standard_normal((O, C // G, k, k)).astype(dt)
    b2 = rng.standard_normal(O).astype(dt)
    e = rng.standard_normal((N, O, OH, OW)).astype(dt)
    tol = 3e-5 if dt == np.float32 else 1e-11
    attrs = dict(stride=(s, s), padding=(p,) * 4, dilation=(1, 1), groups=G)
    for nt in (1, 2):
        nee.set_num_threads(nt)
        for contig, hb, he, relu in _COMBOS:
            x = (rng.standard_normal((N, C, H, W)).astype(dt) if contig else
                 _shuffled(rng, N, C, H, W, dt, 4 if C % 4 == 0 else 2))
            b = rng.standard_normal(O).astype(dt) if hb else None
            out = np.full((N, O, OH, OW), np.nan, dt)
            CV.conv2d_into(out, [x, w] + ([b] if hb else []), attrs, b2, e if he else None, bool(relu))
            ref = _torch_ref(x, w, b, b2, e if he else None, relu, G, s, p)
            err = np.abs(out - ref).max()
            assert err <= tol * (np.abs(ref).max() + 1), (shape, dt, nt, contig, hb, he, relu, err)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_public_conv2d_on_shuffled_view(dt, restore):
    """nee's conv2d on a channel-shuffled (transposed, non-contiguous) tensor, grouped 1x1 then depthwise."""
    rng = np.random.default_rng(7)
    y = rng.standard_normal((1, 4, 17, 9, 10)).astype(dt)
    w1 = rng.standard_normal((68, 17, 1, 1)).astype(dt)
    w2 = rng.standard_normal((68, 1, 3, 3)).astype(dt)
    for nt in (1, 2):
        nee.set_num_threads(nt)
        xs = nee.from_numpy(y).permute(0, 2, 1, 3, 4).reshape(1, 68, 9, 10)
        got1 = F.conv2d(xs, nee.from_numpy(w1), None, 1, 0, 1, 4).numpy()
        got2 = F.conv2d(xs, nee.from_numpy(w2), None, 2, 1, 1, 68).numpy()
        xt = torch.from_numpy(y.astype(np.float64)).permute(0, 2, 1, 3, 4).reshape(1, 68, 9, 10)
        r1 = torch.nn.functional.conv2d(xt, torch.from_numpy(w1.astype(np.float64)), None, 1, 0, 1, 4).numpy()
        r2 = torch.nn.functional.conv2d(xt, torch.from_numpy(w2.astype(np.float64)), None, 2, 1, 1, 68).numpy()
        tol = 3e-5 if dt == np.float32 else 1e-11
        assert got1.dtype == dt and got2.dtype == dt
        assert np.abs(got1 - r1).max() <= tol * (np.abs(r1).max() + 1)
        assert np.abs(got2 - r2).max() <= tol * (np.abs(r2).max() + 1)


def _special(rng, shape, dt):
    r = rng.standard_normal(shape).astype(dt)
    flat = r.reshape(-1)
    flat[:7] = [np.nan, -0.0, 0.0, -np.inf, np.inf, -1e-30, -5.0]
    flat[-3:] = [-0.0, np.nan, -2.0]
    return r


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_bias_act_select_matches_torch_relu(dt):
    """_finish_epilogue (_bias_act): (acc + bias) + residual, then torch's relu (x < 0 -> 0; NaN and -0.0 kept),
    exactly, signs of zeros included, for every combination of the parts; planes long enough for the vector loops."""
    rng = np.random.default_rng(11)
    for shape in [(2, 5, 3, 7), (1, 6, 17, 19)]:
        for hb, he, relu in itertools.product((0, 1), (0, 1), (0, 1)):
            r = _special(rng, shape, dt)
            b = rng.standard_normal(shape[1]).astype(dt) if hb else None
            e = _special(rng, shape, dt) if he else None
            want = r.copy()
            bias = b if b is not None else np.zeros(1, dt)       # the pass adds its zeros(1) when a residual comes
            if he:
                want = (want + (bias[None, :, None, None] if hb else bias[0])) + e
            elif hb:
                want = want + bias[None, :, None, None]
            want = want.astype(dt)
            if relu:
                want = torch.relu(torch.from_numpy(want)).numpy()
            got = r.copy()
            CV._finish_epilogue(got, b, e, bool(relu))
            assert got.dtype == dt
            assert np.array_equal(got, want, equal_nan=True), (shape, hb, he, relu)
            assert np.array_equal(np.signbit(got), np.signbit(want)), (shape, hb, he, relu)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_compact_relu_select(dt):
    """_compact (the padded-rows path's copy of the wide output): bias and torch's relu as a select, exact."""
    rng = np.random.default_rng(12)
    O, rows, Wq, OW = 5, 4, 13, 11
    wide = _special(rng, (O * rows * Wq,), dt)
    bias = rng.standard_normal(O).astype(dt)
    for hb, relu in itertools.product((0, 1), (0, 1)):
        out = np.full(O * rows * OW, 7.0, dt)
        CV._compact(wide, out, O, rows, Wq, OW, rows * OW, 0, bias if hb else np.zeros(1, dt), bool(hb), bool(relu))
        want = wide.reshape(O, rows, Wq)[:, :, :OW]
        if hb:
            want = want + bias[:, None, None]
        want = want.astype(dt)
        if relu:
            want = torch.relu(torch.from_numpy(np.ascontiguousarray(want))).numpy()
        got = out.reshape(O, rows, OW)
        assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("Ci,O,k,s,p,H", [(3, 24, 3, 2, 1, 37), (3, 64, 3, 2, 0, 41), (2, 10, 3, 3, 1, 20),
                                          (8, 16, 3, 2, 1, 15)])
def test_small_k_strided_convs(Ci, O, k, s, p, H, restore):
    """Strided convs of few (channel, tap) pairs (ShuffleNet's and SqueezeNet's 3-channel stems): on the AVX2
    kernels the cost rule picks "pix" (on 1 and 2 threads; the K >= 32 ones keep "chan"); either way the
    values match torch and the pick of the other kernel (FORCE) to float32 rounding."""
    if not CD.available():
        pytest.skip("no direct-conv kernels on this host")
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, Ci, H, H + 3)).astype(np.float32)
    w = rng.standard_normal((O, Ci, k, k)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH, OW = (H + 2 * p - k) // s + 1, (H + 3 + 2 * p - k) // s + 1
    attrs = dict(stride=(s, s), padding=(p,) * 4, dilation=(1, 1), groups=1)
    ref = _torch_ref(x, w, b, None, None, True, 1, s, p)
    K = Ci * k * k
    CD.MODE[0] = "1"
    for nt in (1, 2):
        nee.set_num_threads(nt)
        outs = {}
        for force in (None, "chan", "pix"):
            CD.FORCE[0] = force
            out = np.full((1, O, OH, OW), np.nan, np.float32)
            CV.conv2d_into(out, [x, w, b], attrs, None, None, True)
            outs[force] = out
            assert np.abs(out - ref).max() <= 3e-5 * (np.abs(ref).max() + 1), (nt, force)
        CD.FORCE[0] = None
        assert CD._small_k_strided(s, s, Ci, k, k) == (CD.VEC == 8 and K < CD._SHORT_K)
        lay = [v for key, v in CD._layouts.items() if key[0] == x.shape and key[1] == w.shape and key[-1] is None]
        if CD.VEC == 8 and K < CD._SHORT_K:
            assert lay and lay[-1].kind == "pix"
    assert not CD._small_k_strided(2, 2, 3, 7, 7) and not CD._small_k_strided(1, 1, 3, 3, 3)
    assert not CD._small_k_strided(2, 2, 12, 1, 1)           # strided 1x1s: unchanged


def test_light_shufflenet_vs_onnxruntime(restore):
    """The light ShuffleNet (grouped 1x1s, channel shuffles, depthwise 3x3s, BN folded; seeded random weights so
    the logits mean something) against onnxruntime, 1 and 2 threads."""
    M = pytest.importorskip("asv_benchmarks._onnx_models")
    pytest.importorskip("onnxruntime")
    try:
        spec = M.spec("light_shufflenet", random_weights=True)
    except NotImplementedError as e:
        pytest.skip(str(e))
    ref = M.ort_session(spec.model, 1).run(None, spec.feed)
    for nt in (1, 2):
        got = M.nee_session(spec.model, nt).run(None, spec.feed)
        assert spec.close(got, ref), nt
        for a, r in zip(got, ref):
            assert a.shape == r.shape and np.isfinite(a).all()
