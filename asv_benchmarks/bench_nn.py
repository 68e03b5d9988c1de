"""softmax and layer_norm on (4096, 1024) float32 (numpy: written with numpy ops)."""
from . import _workloads as W


class NNOps:
    params = (["softmax", "layer_norm"], list(W.LIBS))
    param_names = ["op", "lib"]
    timeout = 180

    def setup(self, op, lib):
        self.fn = W.build(f"nn.{op}", lib)

    def teardown(self, op, lib):
        self.fn = None

    def time_op(self, op, lib):
        self.fn()
