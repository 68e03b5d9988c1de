"""Per-op overhead: one op on 8-element float32 tensors (dispatch cost, not compute)."""
from . import _workloads as W


class Overhead:
    params = (["add", "exp"], list(W.LIBS))
    param_names = ["op", "lib"]

    def setup(self, op, lib):
        self.fn = W.build(f"overhead.{op}", lib)

    def time_op(self, op, lib):
        self.fn()
