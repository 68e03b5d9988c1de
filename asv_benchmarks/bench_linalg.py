"""matmul (square float32, 256 / 1024 / 2048) and conv2d (N=1, 64->64, 56x56, 3x3, pad 1)."""
from . import _workloads as W


class Matmul:
    params = (list(W.MATMUL_SIZES), list(W.LIBS))
    param_names = ["n", "lib"]
    timeout = 300

    def setup(self, n, lib):
        self.fn = W.build(f"matmul.{n}", lib)

    def teardown(self, n, lib):
        self.fn = None

    def time_matmul(self, n, lib):
        self.fn()


class Conv2d:
    params = (list(W.LIBS),)
    param_names = ["lib"]
    timeout = 300

    def setup(self, lib):
        self.fn = W.build("conv.conv2d", lib)

    def teardown(self, lib):
        self.fn = None

    def time_conv2d(self, lib):
        self.fn()
