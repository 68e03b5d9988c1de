"""ONNX models through ``nee.onnx.InferenceSession`` against onnxruntime, same thread count (issue 4).

Models (``_onnx_models``): the nine ``light`` CNNs shipped with the onnx package, a BERT-like
encoder (6 layers, d 384, 12 heads, seq 128, batch 1 and 8), a GPT-style decoder's single-token
step with a 512-long KV cache, and an MLP, all built with ``onnx.helper`` from seeded weights.
Both engines get ``_onnx_models.threads()`` threads (NEE_NUM_THREADS, else 2).

- ``OnnxLatency.time_run``: steady-state latency of one ``sess.run`` per engine;
- ``OnnxRatio.track_latency_ratio``: neetorch / onnxruntime, interleaved in one process (the
  issue's bar is <= 1.5, the goal <= 1.0);
- ``OnnxFirstRun.track_first_run_seconds``: neetorch's session construction + first run (load,
  lowering, trace, fusion, kernel compile or disk-cache load), separately from the latency;
- ``DecoderBandwidth.track_fraction_of_floor``: (bytes of weights + KV cache read per step) /
  copy bandwidth measured in the same process, divided by the step's latency (target >= 0.8).

With NEE_BENCH_TINY=1 (the smoke test) the built models are tiny and the light models are skipped
(they are fixed 224x224 CNNs: use ``bench/onnx_vs_ort.py --quick`` for a seconds-long run).
"""
import os

from . import _onnx_models as M
from . import _workloads as W

ENGINES = ("neetorch", "onnxruntime")


def _tiny() -> bool:
    return W.TINY or os.environ.get("NEE_BENCH_TINY", "0") not in ("", "0")


def _spec(name):
    if name.startswith("light_") and _tiny():
        raise NotImplementedError("light models are skipped at tiny sizes")
    return M.spec(name, tiny=_tiny())


def _session(engine, spec):
    if engine == "onnxruntime":
        return M.ort_session(spec.model)
    return M.nee_session(spec.model)


class OnnxLatency:
    params = [list(M.MODELS), list(ENGINES)]
    param_names = ["model", "engine"]
    timeout = 600

    def setup(self, model, engine):
        self.spec = _spec(model)
        self.sess = _session(engine, self.spec)
        self.fn = M.run_fn(self.sess, self.spec.feed)
        self.fn()

    def teardown(self, model, engine):
        self.sess = self.fn = self.spec = None

    def time_run(self, model, engine):
        self.fn()


class OnnxRatio:
    """neetorch latency / onnxruntime latency (lower is better), measured interleaved in one process."""
    params = [list(M.MODELS)]
    param_names = ["model"]
    unit = "neetorch / onnxruntime"
    timeout = 900

    def setup(self, model):
        self.spec = _spec(model)
        self.fns = {e: M.run_fn(_session(e, self.spec), self.spec.feed) for e in ENGINES}
        for f in self.fns.values():
            f()

    def teardown(self, model):
        self.fns = self.spec = None

    def track_latency_ratio(self, model):
        t = W.measure_interleaved(self.fns, repeats=5, min_time=0.1, stat="min")
        return t["neetorch"] / t["onnxruntime"]


class OnnxFirstRun:
    """Seconds from ``InferenceSession(model)`` to the end of the first ``run`` (kernels from the disk cache
    when warm: asv runs setup once before timing, so this is the warm-cache first run)."""
    params = [list(M.MODELS)]
    param_names = ["model"]
    unit = "seconds"
    timeout = 900

    def setup(self, model):
        self.spec = _spec(model)

    def track_first_run_seconds(self, model):
        import time
        t0 = time.perf_counter()
        M.nee_session(self.spec.model).run(None, self.spec.feed)
        return time.perf_counter() - t0


class DecoderBandwidth:
    """Decoder step: memory-bandwidth floor / latency, copy bandwidth measured in the same process."""
    params = [list(ENGINES)]
    param_names = ["engine"]
    unit = "fraction of the bandwidth floor"
    timeout = 600

    def setup(self, engine):
        self.spec = _spec("gpt_step")
        self.fn = M.run_fn(_session(engine, self.spec), self.spec.feed)
        self.fn()

    def teardown(self, engine):
        self.fn = self.spec = None

    def track_fraction_of_floor(self, engine):
        copy = W.machine_copy_bandwidth(repeats=3, methods=("np.copyto", "threaded np.copyto", "numba prange"))
        floor = self.spec.bytes_read / (copy["best"] * 1e9)
        return floor / W.measure(self.fn, repeats=5)
