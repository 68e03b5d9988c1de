"""nn.RNN / LSTM / GRU and their cells against torch.nn: torch's weights loaded through numpy with
load_state_dict, outputs and final states compared; parameter names, shapes, init and repr; @nee.jit; errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn

torch = pytest.importorskip("torch")
tnn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")

TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-11, 1e-12)}


def _np(x):
    if isinstance(x, nee.Tensor):
        return np.array(x.numpy(), copy=True)
    return x.detach().numpy().copy()


def _nee(t):
    return nee.tensor(t.detach().numpy())


def close(a, b, dtype=torch.float32):
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y, dtype)
        return
    assert tuple(a.shape) == tuple(b.shape), (tuple(a.shape), tuple(b.shape))
    assert a.dtype.name == str(b.dtype).replace("torch.", "")
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)


def pair(kind, *args, dtype=torch.float32, **kw):
    """A torch module and a neetorch one holding torch's weights."""
    torch.manual_seed(0)
    tm = getattr(tnn, kind)(*args, **kw).to(dtype)
    nm = getattr(nn, kind)(*args, **kw)
    if dtype == torch.float64:
        nm = nm.double()
    nm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, nm


CONFIGS = [
    ("LSTM", dict(num_layers=2, bidirectional=True)),
    ("LSTM", dict(num_layers=2, batch_first=True, proj_size=3)),
    ("LSTM", dict(bidirectional=True, proj_size=2, bias=False)),
    ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("GRU", dict(bias=False)),
    ("RNN", dict(num_layers=3, nonlinearity="relu")),
    ("RNN", dict(bidirectional=True, batch_first=True)),
]


def _ids(c):
    return c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items())


@pytest.mark.parametrize("kind,kw", CONFIGS, ids=[_ids(c) for c in CONFIGS])
def test_state_dict_names_shapes_repr(kind, kw):
    tm, nm = pair(kind, 5, 7, **kw)
    assert [(k, tuple(v.shape)) for k, v in nm.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in tm.state_dict().items()]
    assert [n for n, _ in nm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert repr(nm) == repr(tm)
    # PyTorch's init: every parameter ~ U(-1/sqrt(H), 1/sqrt(H)) (seeded: a 7-element bias's sample std
    # falls under bound / 4 for a few draws in a thousand)
    nee.manual_seed(0)
    fresh = getattr(nn, kind)(5, 7, **kw)
    bound = 1 / np.sqrt(7)
    for name, p in fresh.named_parameters():
        v = _np(p)
        assert np.all(np.abs(v) <= bound) and v.std() > bound / 4, name


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("kind,kw", CONFIGS, ids=[_ids(c) for c in CONFIGS])
def test_forward_matches_torch(kind, kw, with_h0):
    tm, nm = pair(kind, 5, 7, **kw)
    T, B = 4, 3
    x = torch.randn((B, T, 5) if kw.get("batch_first") else (T, B, 5))
    args_t, args_n = (x,), (_nee(x),)
    if with_h0:
        D = 2 if kw.get("bidirectional") else 1
        L = kw.get("num_layers", 1)
        h0 = torch.randn(L * D, B, kw.get("proj_size") or 7)
        if kind == "LSTM":
            c0 = torch.randn(L * D, B, 7)
            args_t, args_n = (x, (h0, c0)), (_nee(x), (_nee(h0), _nee(c0)))
        else:
            args_t, args_n = (x, h0), (_nee(x), _nee(h0))
    with torch.no_grad():
        ref = tm(*args_t)
    got = nm(*args_n)
    close(got, ref)
    assert got[0].is_contiguous()


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_float64_unbatched_and_noncontiguous(kind):
    kw = dict(num_layers=2, bidirectional=True)
    tm, nm = pair(kind, 6, 5, dtype=torch.float64, **kw)
    x = torch.randn(7, 6, dtype=torch.float64)                       # unbatched (T, I)
    h0 = torch.randn(4, 5, dtype=torch.float64)
    hx_t = (h0, torch.randn(4, 5, dtype=torch.float64)) if kind == "LSTM" else h0
    hx_n = tuple(_nee(h) for h in hx_t) if kind == "LSTM" else _nee(hx_t)
    with torch.no_grad():
        close(nm(_nee(x), hx_n), tm(x, hx_t), torch.float64)
        close(nm(_nee(x)), tm(x), torch.float64)
        # a non-contiguous (T, B, I) input: a transposed and stepped view
        big = torch.randn(3, 9, 6, dtype=torch.float64)
        xt = big.transpose(0, 1)[::2]                                 # (5, 3, 6), strides (2*6, 9*6, 1)
        xn = _nee(big).transpose(0, 1)[::2]
        assert not xn.is_contiguous()
        close(nm(xn), tm(xt), torch.float64)


def test_dropout_only_in_training():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tm, nm = pair("LSTM", 4, 6, num_layers=3, dropout=0.5)
    x = torch.randn(5, 2, 4)
    tm.eval()
    nm.eval()
    with torch.no_grad():
        ref = tm(x)
    close(nm(_nee(x)), ref)                                           # eval: no dropout
    nm.train()
    nee.manual_seed(1)
    out, _ = nm(_nee(x))
    assert not np.allclose(_np(out), _np(ref[0]))                      # training: dropout between layers
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(4, 6, dropout=0.2)


CELLS = [("RNNCell", dict()), ("RNNCell", dict(nonlinearity="relu", bias=False)), ("LSTMCell", dict()),
         ("GRUCell", dict()), ("GRUCell", dict(bias=False))]


@pytest.mark.parametrize("kind,kw", CELLS, ids=[_ids(c) for c in CELLS])
def test_cells(kind, kw):
    tm, nm = pair(kind, 5, 4, **kw)
    assert [k for k in nm.state_dict()] == [k for k in tm.state_dict()]
    assert repr(nm) == repr(tm)
    x = torch.randn(3, 5)
    h = torch.randn(3, 4)
    hx_t = (h, torch.randn(3, 4)) if kind == "LSTMCell" else h
    hx_n = tuple(_nee(v) for v in hx_t) if kind == "LSTMCell" else _nee(hx_t)
    with torch.no_grad():
        close(nm(_nee(x), hx_n), tm(x, hx_t))
        close(nm(_nee(x)), tm(x))                                    # zero state
        close(nm(_nee(x[0])), tm(x[0]))                              # unbatched
    tm64, nm64 = pair(kind, 5, 4, dtype=torch.float64, **kw)
    x64 = torch.randn(2, 5, dtype=torch.float64)
    with torch.no_grad():
        close(nm64(_nee(x64)), tm64(x64), torch.float64)


def test_cells_unrolled_equal_lstm():
    """An LSTMCell stepped over time equals a one-layer LSTM with the same weights."""
    lstm = nn.LSTM(3, 4)
    cell = nn.LSTMCell(3, 4)
    cell.load_state_dict({k[:-3]: v for k, v in lstm.state_dict().items()})
    x = nee.randn(5, 2, 3)
    out, (_, c) = lstm(x)
    hc = None
    for t in range(5):
        hc = cell(x[t], hc)
        np.testing.assert_allclose(_np(hc[0]), _np(out[t]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(hc[1]), _np(c[0]), rtol=1e-5, atol=1e-6)


def test_jit_lstm_equals_eager_across_inputs():
    nee.manual_seed(0)
    m = nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True).eval()

    @nee.jit
    def f(x, h0, c0):
        out, (h, c) = m(x, (h0, c0))
        return out, h, c

    for _ in range(3):
        x, h0, c0 = nee.randn(2, 4, 5), nee.randn(4, 2, 6), nee.randn(4, 2, 6)
        ref_out, (ref_h, ref_c) = m(x, (h0, c0))
        for _rep in range(2):
            got = f(x, h0, c0)
            for g, r in zip(got, (ref_out, ref_h, ref_c)):
                np.testing.assert_allclose(_np(g), _np(r), rtol=1e-5, atol=1e-6)
    assert f.stats["traces"] == 1 and f.stats["calls"] == 6


def test_jit_gru_against_torch():
    tm, nm = pair("GRU", 3, 4, num_layers=2)
    f = nee.jit(lambda x: nm(x)[0])
    for T in (3, 3, 5):
        x = torch.randn(T, 2, 3)
        with torch.no_grad():
            close(f(_nee(x)), tm(x)[0])


def test_errors():
    m = nn.LSTM(5, 7, num_layers=2)
    with pytest.raises(RuntimeError, match=r"LSTM: input.size\(-1\) must be equal to input_size. Expected 5, got 4 "
                                           r"\(input of shape \[3, 2, 4\]\)"):
        m(nee.randn(3, 2, 4))
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D"):
        m(nee.randn(3, 2, 4, 5))
    with pytest.raises(RuntimeError, match=r"LSTM: Expected hidden\[0\] size \(2, 2, 7\), got \[2, 3, 7\]"):
        m(nee.randn(3, 2, 5), (nee.randn(2, 3, 7), nee.randn(2, 2, 7)))
    with pytest.raises(RuntimeError, match=r"LSTM: Expected hidden\[1\] size \(2, 2, 7\), got \[1, 2, 7\]"):
        m(nee.randn(3, 2, 5), (nee.randn(2, 2, 7), nee.randn(1, 2, 7)))
    with pytest.raises(RuntimeError, match="For batched 3-D input, hx and cx should also be 3-D but got"):
        m(nee.randn(3, 2, 5), (nee.randn(2, 7), nee.randn(2, 7)))
    with pytest.raises(ValueError, match=r"input dtype \(neetorch.float64\) does not match weight dtype"):
        m(nee.randn(3, 2, 5, dtype=nee.float64))
    g = nn.GRU(5, 7)
    with pytest.raises(RuntimeError, match="For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"):
        g(nee.randn(3, 5), nee.randn(1, 1, 7))
    with pytest.raises(RuntimeError, match=r"GRU: Expected hidden size \(1, 2, 7\), got \[1, 2, 6\]"):
        g(nee.randn(3, 2, 5), nee.randn(1, 2, 6))
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.LSTM(3, 4, dropout=1.5)
    with pytest.raises(RuntimeError, match=r"LSTM: Expected sequence length to be larger than 0 in RNN \(input of "
                                           r"shape \[0, 2, 5\]\)"):
        m(nee.randn(0, 2, 5))
    with pytest.raises(TypeError, match="GRU: expected hx to be a Tensor, got tuple"):
        g(nee.randn(3, 2, 5), (nee.randn(1, 2, 7),))
    with pytest.raises(TypeError, match="expected a Tensor or a PackedSequence input"):
        m([1, 2, 3])
    cell = nn.GRUCell(5, 4)
    with pytest.raises(RuntimeError, match=r"GRUCell: input has inconsistent input_size: got 3 expected 5 "
                                           r"\(input of shape \[2, 3\]\)"):
        cell(nee.randn(2, 3))
    with pytest.raises(RuntimeError, match=r"GRUCell: expected hidden of shape \[2, 4\] for input of shape \[2, 5\], "
                                           r"got \[2, 3\]"):
        cell(nee.randn(2, 5), nee.randn(2, 3))
    with pytest.raises(ValueError, match="LSTMCell: Expected input to be 1D or 2D, got 3D instead"):
        nn.LSTMCell(5, 4)(nee.randn(1, 2, 5))
