"""The one-row product kernel (kernels/gemv.py) with and without its software prefetch (NEE_GEMV_PREFETCH: off by
default since session 13, the prefetching variants still selectable): each variant compiled afresh and compared
with numpy float64 on odd sizes, both dtypes, 1 and 2 threads, the output's neighbours untouched; and an ONNX
decoder step run through the prefetching kernel against onnxruntime."""
import numpy as np
import pytest

from neetorch.devices.cpu.kernels import gemv


def _check(y, x, w, dt):
    want = x.astype(np.float64) @ w.astype(np.float64)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("pf,loc", [(0, 3), (4096, 3), (512, 0), (8192, 1)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_prefetch_variants_match_numpy(nthreads, pf, loc, dt, monkeypatch):
    monkeypatch.setattr(gemv, "PREFETCH", pf)
    monkeypatch.setattr(gemv, "PREFETCH_LOCALITY", loc)
    monkeypatch.setattr(gemv, "_fns", {})             # compiled afresh for this setting (restored after)
    monkeypatch.setattr(gemv, "PAR_BYTES", 1)         # split every product of 2+ panels across the threads
    assert ("llvm.prefetch" in gemv._ir("float", 64, pf, loc).split("declare")[0]) == bool(pf)
    rng = np.random.default_rng(pf + loc)
    for K, N in [(1, 1), (7, 5), (100, 129), (383, 1153), (1536, 97), (40, 336)]:
        for order in ("C", "F"):
            w = np.asarray(rng.standard_normal((K, N)), dt, order=order)
            x = rng.standard_normal((1, K)).astype(dt)
            g = gemv._bind(gemv.pack(w), K, N, None)
            big = np.full(N + 2, np.nan, dt)
            y = big[1:N + 1].reshape(1, N)
            g(y, x, w)
            _check(y, x, w, dt)
            assert np.isnan(big[0]) and np.isnan(big[N + 1])


def test_onnx_decoder_step_with_prefetch_matches_onnxruntime(monkeypatch):
    pf = 4096     # (the default, none, runs in tests/test_decoder_gemv_s10.py's ONNX step)
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from asv_benchmarks import _onnx_models as M
    monkeypatch.setattr(gemv, "PREFETCH", pf)
    monkeypatch.setattr(gemv, "_fns", {})
    spec = M.gpt_step(past=13, d=96, heads=3, layers=2, seed=pf)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(spec.model.SerializeToString(), so,
                               providers=["CPUExecutionProvider"]).run(None, spec.feed)
    from neetorch.onnx import InferenceSession
    before = gemv.stats["calls_bound"]
    sess = InferenceSession(spec.model)
    for _ in range(2):     # the second run takes the bound (packed) products
        got = sess.run(None, spec.feed)
    assert gemv.stats["calls_bound"] > before
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)



def test_bench_read_bandwidth_measures():
    """bench/onnx_vs_ort.py's read bandwidth (its reference line beside the issue's floor; the line itself is
    checked by tests/test_bench_onnx_smoke.py's run of the script): a streaming sum on 1 and 2 threads."""
    import importlib.util
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("onnx_vs_ort_s13", os.path.join(root, "bench", "onnx_vs_ort.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for nt in (1, 2):
        gbps = script.read_gbps(nt, repeats=1)
        assert np.isfinite(gbps) and 0.05 < gbps < 10000
