"""Large elementwise ops (16M float32) and eagerly-run chains that a fuser would merge."""
from . import _workloads as W


class Elementwise:
    params = (list(W.EW_OPS), list(W.LIBS))
    param_names = ["op", "lib"]
    timeout = 180

    def setup(self, op, lib):
        self.fn = W.build(f"ew.{op}", lib)

    def teardown(self, op, lib):
        self.fn = None

    def time_op(self, op, lib):
        self.fn()


class EagerChain:
    params = (["bias_gelu", "silu"], list(W.LIBS))
    param_names = ["chain", "lib"]
    timeout = 180

    def setup(self, chain, lib):
        self.fn = W.build(f"chain.{chain}", lib)

    def teardown(self, chain, lib):
        self.fn = None

    def time_chain(self, chain, lib):
        self.fn()
