"""MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d."""
from __future__ import annotations

from .. import functional as F
from .conv import _pair, _single
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d"]


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def _as_2d(input, fn, *args):
    """Run a 2-D pooling function on a 1-D input viewed as (N, C, 1, L)."""
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    y = fn(x.unsqueeze(2), *args)
    if isinstance(y, tuple):
        y = tuple(t.squeeze(2) for t in y)
        return tuple(t.squeeze(0) for t in y) if unbatched else y
    y = y.squeeze(2)
    return y.squeeze(0) if unbatched else y


class _MaxPoolNd(Module):
    __constants__ = ["kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode"]

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return ("kernel_size={kernel_size}, stride={stride}, padding={padding}, dilation={dilation}, "
                "ceil_mode={ceil_mode}".format(**self.__dict__))


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):
        fn = getattr(F, "max_pool1d", None)
        if fn is not None:
            return fn(input, self.kernel_size, self.stride, self.padding, self.dilation, ceil_mode=self.ceil_mode,
                      return_indices=self.return_indices)
        if self.return_indices:
            raise NotImplementedError("MaxPool1d(return_indices=True) needs F.max_pool1d")
        k, s, p, d = (_first(v) for v in (self.kernel_size, self.stride, self.padding, self.dilation))
        return _as_2d(input, lambda x: F.max_pool2d(x, (1, k), (1, s), (0, p), (1, d), ceil_mode=self.ceil_mode))


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    __constants__ = ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"]

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        fn = getattr(F, "avg_pool1d", None)
        if fn is not None:
            return fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
        k, s, p = self.kernel_size[0], self.stride[0], self.padding[0]
        return _as_2d(input, lambda x: F.avg_pool2d(x, (1, k), (1, s), (0, p), self.ceil_mode,
                                                    self.count_include_pad))

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    __constants__ = ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"]

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptivePoolNd(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePoolNd):
    def forward(self, input):
        fn = getattr(F, "adaptive_avg_pool1d", None)
        if fn is not None:
            return fn(input, self.output_size)
        return _as_2d(input, lambda x: F.adaptive_avg_pool2d(x, (1, _first(self.output_size))))


class AdaptiveAvgPool2d(_AdaptivePoolNd):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


def _adaptive_max_pool2d(input, output_size):
    """Adaptive max pooling composed from max_pool2d (even bins) or per-bin amax (uneven bins)."""
    H, W = tuple(input.shape)[-2:]
    oh, ow = _pair(output_size)
    oh = H if oh is None else oh
    ow = W if ow is None else ow
    if H % oh == 0 and W % ow == 0:
        return F.max_pool2d(input, (H // oh, W // ow), (H // oh, W // ow))
    import neetorch as nee
    rows = []
    for i in range(oh):
        h0, h1 = (i * H) // oh, -((-(i + 1) * H) // oh)
        cols = []
        for j in range(ow):
            w0, w1 = (j * W) // ow, -((-(j + 1) * W) // ow)
            cols.append(input.narrow(-2, h0, h1 - h0).narrow(-1, w0, w1 - w0).amax(dim=(-2, -1)))
        rows.append(nee.stack(cols, -1))
    return nee.stack(rows, -2)


class AdaptiveMaxPool1d(_AdaptivePoolNd):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        fn = getattr(F, "adaptive_max_pool1d", None)
        if fn is not None:
            return fn(input, self.output_size, self.return_indices)
        if self.return_indices:
            raise NotImplementedError("AdaptiveMaxPool1d(return_indices=True) needs F.adaptive_max_pool1d")
        return _as_2d(input, lambda x: _adaptive_max_pool2d(x, (1, _first(self.output_size))))


class AdaptiveMaxPool2d(_AdaptivePoolNd):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        fn = getattr(F, "adaptive_max_pool2d", None)
        if fn is not None:
            return fn(input, self.output_size, self.return_indices)
        if self.return_indices:
            raise NotImplementedError("AdaptiveMaxPool2d(return_indices=True) needs F.adaptive_max_pool2d")
        return _adaptive_max_pool2d(input, self.output_size)
