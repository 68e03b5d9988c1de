"""Session 15 sweep of real PyTorch exports through ``neetorch.onnx.InferenceSession`` vs onnxruntime: the
regressions it found (kept small: tiny widths, short signals).

* ``torch.stft`` exported by the TorchScript exporter (opset 17+) feeds ONNX STFT a rank-2 ``(batch, length)``
  signal; onnxruntime reads that as a real signal, the lowering used to refuse anything but rank 3.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import neetorch as nee
import neetorch.onnx as nx
from tests.test_onnx_torch_models import _export, _ort

nn = torch.nn


def _stft_graph(sig_shape, onesided=1, with_window=True, frame_length=None):
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, sig_shape)]
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [3])]
    names = ["x", "step", "win" if with_window else ""]
    if with_window:
        inits.append(helper.make_tensor("win", TensorProto.FLOAT, [8], np.hanning(8).astype(np.float32).tolist()))
    if frame_length is not None:
        inits.append(helper.make_tensor("flen", TensorProto.INT64, [], [frame_length]))
        names.append("flen")
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    g = helper.make_graph([node], "stft", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "f", "k", 2])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("onesided,with_window,frame_length", [(1, True, None), (0, True, None), (1, False, 8)])
def test_stft_rank2_real_signal_matches_onnxruntime(onesided, with_window, frame_length):
    b = _stft_graph(["B", "L"], onesided, with_window, frame_length)
    sess, ref = nx.InferenceSession(b), _ort(b)
    rng = np.random.default_rng(0)
    for shape in ((2, 29), (3, 40), (2, 29)):  # symbolic batch and length: two shape buckets in one session
        x = rng.standard_normal(shape).astype(np.float32)
        got, = sess.run(None, {"x": x})
        want, = ref.run(None, {"x": x})
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        # the same signal as rank 3 (batch, length, 1) gives the same answer
        got3, = nx.InferenceSession(_stft_graph(["B", "L", 1], onesided, with_window, frame_length)).run(
            None, {"x": x[..., None]})
        np.testing.assert_allclose(got, got3, rtol=1e-6, atol=1e-6)


def test_stft_bad_rank_names_the_shape():
    b = _stft_graph(["A", "B", "C", "D"])
    with pytest.raises(Exception, match=r"STFT.*\(2, 20, 1, 1\)"):
        nx.InferenceSession(b).run(None, {"x": np.zeros((2, 20, 1, 1), np.float32)})


class _Spectrogram(nn.Module):
    def forward(self, x):
        z = torch.stft(x, 16, 4, window=torch.hann_window(16), return_complex=False, center=False)
        return torch.log1p((z ** 2).sum(-1))


@pytest.mark.parametrize("opset", [17, 20])
def test_torch_stft_spectrogram_legacy_export(opset):
    m = _Spectrogram().eval()
    b = _export(m, [torch.randn(2, 60)], ["x"], ["y"], {"x": {0: "b", 1: "t"}, "y": {0: "b", 2: "f"}}, opset=opset)
    ref = _ort(b)
    n0 = nee.get_num_threads()
    for nt in (1, 2):
        nee.set_num_threads(nt)
        try:
            sess = nx.InferenceSession(b)
            for shape in ((2, 60), (3, 77)):
                x = torch.randn(*shape)
                got, = sess.run(None, {"x": x.numpy()})
                want, = ref.run(None, {"x": x.numpy()})
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(got, m(x).numpy(), rtol=1e-4, atol=1e-4)
        finally:
            nee.set_num_threads(n0)
