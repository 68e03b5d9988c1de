"""nn.utils.rnn (PackedSequence, pack/pad helpers) and the recurrent modules on packed input, against PyTorch."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.nn.utils import rnn as nr

torch = pytest.importorskip("torch")
tr = torch.nn.utils.rnn


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def _same_packed(tp, npk, atol=1e-5):
    np.testing.assert_allclose(_np(npk.data), _np(tp.data), atol=atol, rtol=1e-5)
    assert npk.batch_sizes.tolist() == tp.batch_sizes.tolist()
    assert npk.batch_sizes.dtype == nee.int64 and npk.batch_sizes.device.type == "cpu"
    for a, b in ((npk.sorted_indices, tp.sorted_indices), (npk.unsorted_indices, tp.unsorted_indices)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tolist() == b.tolist()


@pytest.mark.parametrize("lengths,enforce_sorted,batch_first", [
    ([5, 3, 3, 1], True, False), ([5, 3, 3, 1], True, True), ([2, 5, 1, 3], False, False),
    ([2, 5, 1, 3], False, True), ([4], True, False), ([1, 1, 1], True, True)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pack_pad_roundtrip_matches_torch(lengths, enforce_sorted, batch_first, dtype):
    rng = np.random.default_rng(0)
    T, B = max(lengths) + 1, len(lengths)
    x = rng.standard_normal((B, T, 2, 3) if batch_first else (T, B, 2, 3)).astype(dtype)
    tp = tr.pack_padded_sequence(torch.tensor(x), torch.tensor(lengths), batch_first=batch_first,
                                 enforce_sorted=enforce_sorted)
    npk = nr.pack_padded_sequence(nee.tensor(x), nee.tensor(lengths), batch_first=batch_first,
                                  enforce_sorted=enforce_sorted)
    assert isinstance(npk, nr.PackedSequence) and isinstance(npk, tuple)
    _same_packed(tp, npk)
    for kw in ({}, {"padding_value": -2.5}, {"total_length": T + 2}):
        a, la = tr.pad_packed_sequence(tp, batch_first=batch_first, **kw)
        b, lb = nr.pad_packed_sequence(npk, batch_first=batch_first, **kw)
        np.testing.assert_array_equal(_np(b), _np(a))
        assert b.dtype == getattr(nee, dtype) and lb.tolist() == la.tolist() and lb.dtype == nee.int64


def test_pack_sequence_unpack_and_unpad():
    seqs = [np.arange(n * 2, dtype=np.float32).reshape(n, 2) + 10 * n for n in (2, 4, 1)]
    tp = tr.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    npk = nr.pack_sequence([nee.tensor(s) for s in seqs], enforce_sorted=False)
    _same_packed(tp, npk)
    for got, want in zip(nr.unpack_sequence(npk), seqs):
        np.testing.assert_array_equal(got.numpy(), want)
    padded = nr.pad_sequence([nee.tensor(s) for s in seqs])
    before = padded.numpy().copy()
    for got, want in zip(nr.unpad_sequence(padded, nee.tensor([2, 4, 1])), seqs):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(padded.numpy(), before)  # the input is left untouched
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        nr.pack_sequence([nee.tensor(s) for s in seqs])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    seqs = [np.random.default_rng(i).standard_normal((n, 3)).astype(np.float32) for i, n in enumerate((3, 5, 1, 0))]
    want = tr.pad_sequence([torch.tensor(s) for s in seqs], batch_first=batch_first, padding_value=7.0,
                           padding_side=padding_side)
    got = nr.pad_sequence([nee.tensor(s) for s in seqs], batch_first=batch_first, padding_value=7.0,
                          padding_side=padding_side)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # integer sequences keep their dtype; the padding value is cast like PyTorch does
    ti = tr.pad_sequence([torch.tensor([1, 2]), torch.tensor([3])], padding_value=-1)
    ni = nr.pad_sequence([nee.tensor([1, 2]), nee.tensor([3])], padding_value=-1)
    assert ni.dtype == nee.int64 and ni.tolist() == ti.tolist()


def test_invert_permutation_and_packed_sequence_methods():
    p = nee.tensor([2, 0, 3, 1])
    assert nr.invert_permutation(p).tolist() == tr.invert_permutation(torch.tensor([2, 0, 3, 1])).tolist()
    assert nr.invert_permutation(None) is None
    npk = nr.pack_sequence([nee.ones(3, 2), nee.ones(1, 2)], enforce_sorted=False)
    d = npk.double()
    assert d.data.dtype == nee.float64 and d.batch_sizes is npk.batch_sizes and npk.to(nee.float32) is npk
    built = nr.PackedSequence(npk.data, npk.batch_sizes, nee.tensor([1, 0]))
    assert built.unsorted_indices.tolist() == [1, 0]
    _data, bs, si, ui = nr.PackedSequence((npk.data, npk.batch_sizes))
    assert si is None and ui is None and bs.tolist() == [2, 1, 1]


def test_bad_lengths_raise_clear_errors():
    x = nee.zeros(4, 3, 2)
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        nr.pack_padded_sequence(x, [2, 3, 1])
    with pytest.raises(RuntimeError, match="greater than 0"):
        nr.pack_padded_sequence(x, [3, 0, 0], enforce_sorted=False)
    with pytest.raises(RuntimeError, match="exceeds the sequence length"):
        nr.pack_padded_sequence(x, [5, 3, 1])
    with pytest.raises(RuntimeError, match="equal to batch_size"):
        nr.pack_padded_sequence(x, [3, 2])
    with pytest.raises(TypeError, match="integer"):
        nr.pack_padded_sequence(x, nee.tensor([3.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="total_length"):
        nr.pad_packed_sequence(nr.pack_padded_sequence(x, [3, 2, 1]), total_length=2)
    with pytest.raises(RuntimeError, match="empty list"):
        nr.pad_sequence([])
    with pytest.raises(RuntimeError, match="padding_side"):
        nr.pad_sequence([nee.ones(2)], padding_side="middle")
    with pytest.raises(RuntimeError, match=r"trailing shape.*\[2, 4\]"):
        nr.pad_sequence([nee.ones(2, 3), nee.ones(2, 4)])


def _copy_weights(tm, nm):
    nm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


@pytest.mark.parametrize("kind,kw", [
    ("LSTM", {"num_layers": 2, "bidirectional": True}), ("LSTM", {"proj_size": 2}),
    ("GRU", {"num_layers": 2, "bidirectional": True}), ("RNN", {"nonlinearity": "relu", "bias": False}),
    ("GRU", {"batch_first": True})])
@pytest.mark.parametrize("with_hx", [False, True])
def test_rnn_modules_on_packed_input_match_torch(kind, kw, with_hx):
    torch.manual_seed(0)
    lengths = [2, 5, 1, 3]  # unsorted: exercises sorted_indices / unsorted_indices
    tm = getattr(torch.nn, kind)(3, 4, **kw).double()
    nm = getattr(nee.nn, kind)(3, 4, dtype=nee.float64, **kw)
    _copy_weights(tm, nm)
    bf = kw.get("batch_first", False)
    x = np.random.default_rng(1).standard_normal((4, 5, 3) if bf else (5, 4, 3))
    tp = tr.pack_padded_sequence(torch.tensor(x), lengths, batch_first=bf, enforce_sorted=False)
    npk = nr.pack_padded_sequence(nee.tensor(x), lengths, batch_first=bf, enforce_sorted=False)
    D = 2 if kw.get("bidirectional") else 1
    L = kw.get("num_layers", 1)
    H_out = kw.get("proj_size", 4) or 4
    th = tn = None
    if with_hx:
        rng = np.random.default_rng(2)
        h0 = rng.standard_normal((L * D, 4, H_out))
        if kind == "LSTM":
            c0 = rng.standard_normal((L * D, 4, 4))
            th, tn = (torch.tensor(h0), torch.tensor(c0)), (nee.tensor(h0), nee.tensor(c0))
        else:
            th, tn = torch.tensor(h0), nee.tensor(h0)
    to, ts = tm(tp, th)
    no, ns = nm(npk, tn)
    assert isinstance(no, nr.PackedSequence)
    _same_packed(to, no, atol=1e-10)
    for a, b in zip(ts if kind == "LSTM" else (ts,), ns if kind == "LSTM" else (ns,)):
        np.testing.assert_allclose(b.numpy(), _np(a), atol=1e-10)
    # the packed run equals running each sequence alone on its true length
    if not with_hx and not bf:
        for i, n in enumerate(lengths):
            _, si = nm(nee.tensor(x[:n, i:i + 1]))
            last = si[0] if kind == "LSTM" else si
            full = ns[0] if kind == "LSTM" else ns
            np.testing.assert_allclose(full.numpy()[:, i], last.numpy()[:, 0], atol=1e-10)


def test_rnn_packed_float32_sorted_and_jit():
    torch.manual_seed(0)
    tm = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    nm = nee.nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    _copy_weights(tm, nm)
    x = np.random.default_rng(3).standard_normal((4, 3, 3)).astype(np.float32)
    to, (th, tc) = tm(tr.pack_padded_sequence(torch.tensor(x), [4, 2, 1]))
    want = tr.pad_packed_sequence(to)[0].detach().numpy()

    @nee.jit
    def f(inp):
        out, (h, c) = nm(nr.pack_padded_sequence(inp, [4, 2, 1]))
        return nr.pad_packed_sequence(out)[0], h, c

    for _ in range(2):  # the second call runs the compiled graph
        o, h, c = f(nee.tensor(x))
        np.testing.assert_allclose(o.numpy(), want, atol=1e-5)
        np.testing.assert_allclose(h.numpy(), th.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(c.numpy(), tc.detach().numpy(), atol=1e-5)


def test_rnn_packed_bad_input():
    m = nee.nn.GRU(3, 4)
    npk = nr.pack_sequence([nee.ones(2, 3), nee.ones(1, 3)])
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\)"):
        m(npk, nee.zeros(1, 3, 4))
    with pytest.raises(RuntimeError, match="input_size"):
        m(nr.pack_sequence([nee.ones(2, 5)]))
    with pytest.raises(ValueError, match="does not match weight dtype"):
        m(nr.pack_sequence([nee.ones(2, 3, dtype=nee.float64)]))
