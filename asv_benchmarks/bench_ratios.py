"""Speed ratios neetorch vs numpy / torch measured in one process: t_other / t_neetorch (higher = better).

Skipped where the other library (or the neetorch op) is missing.
"""
from . import _workloads as W


class SpeedRatio:
    params = (list(W.WORKLOADS), ["numpy", "torch"])
    param_names = ["workload", "vs"]
    unit = "x (t_other / t_neetorch)"
    timeout = 300

    def setup(self, workload, vs):
        self.other = W.build(workload, vs)
        self.mine = W.build(workload, "neetorch")

    def teardown(self, workload, vs):
        self.other = self.mine = None

    def track_speed_ratio(self, workload, vs):
        t = W.measure_interleaved({"other": self.other, "mine": self.mine}, repeats=5)
        return t["other"] / t["mine"]
