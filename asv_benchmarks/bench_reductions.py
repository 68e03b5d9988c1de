"""sum / mean: 16M flat and (4096, 1024) over dim -1 and dim 0."""
from . import _workloads as W


class Reductions:
    params = (list(W.RED_OPS), list(W.LIBS))
    param_names = ["reduction", "lib"]
    timeout = 180

    def setup(self, reduction, lib):
        self.fn = W.build(f"red.{reduction}", lib)

    def teardown(self, reduction, lib):
        self.fn = None

    def time_reduction(self, reduction, lib):
        self.fn()
