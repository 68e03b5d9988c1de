"""Copy bandwidth of this machine (GB/s, read + write bytes) and memory-bound ops as a fraction of it.

The fractions are measured in the same process as the copy they are divided by, so they are
comparable across machines and noisy runs.
"""
from . import _workloads as W


class CopyBandwidth:
    params = (list(W.COPY_METHODS),)
    param_names = ["method"]
    unit = "GB/s"
    timeout = 180

    def setup(self, method):
        if method == "neetorch clone":
            W.nee()
        self.fn = W.copy_fn(method)
        self.fn()

    def teardown(self, method):
        self.fn = None

    def track_gbps(self, method):
        return W.gbps(W.copy_bytes(), W.measure(self.fn, repeats=5))


MEMORY_BOUND = [n for n, w in W.WORKLOADS.items() if w.nbytes is not None]


class FractionOfCopyBandwidth:
    """neetorch GB/s (minimal bytes of the op) / best parallel in-place copy GB/s, same process."""
    params = (MEMORY_BOUND,)
    param_names = ["workload"]
    unit = "fraction of copy GB/s"
    timeout = 300

    def setup(self, workload):
        self.fn = W.build(workload, "neetorch")

    def teardown(self, workload):
        self.fn = None

    def track_fraction(self, workload):
        copy = W.machine_copy_bandwidth(repeats=3, methods=("np.copyto", "threaded np.copyto"))["best"]
        t = W.measure(self.fn, repeats=5)
        return W.gbps(W.WORKLOADS[workload].nbytes(), t) / copy
