"""``neetorch.nn`` modules (PyTorch names, signatures, parameter names and shapes)."""
from .module import Module, RemovableHandle  # noqa: F401
from .container import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict  # noqa: F401
from .linear import Identity, Linear, Bilinear, NonDynamicallyQuantizableLinear  # noqa: F401
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d  # noqa: F401
from .normalization import (  # noqa: F401
    LayerNorm, GroupNorm, RMSNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d,
    SyncBatchNorm,
)
from .sparse import Embedding  # noqa: F401
from .dropout import Dropout, Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout  # noqa: F401
from .activation import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .volumetric import *  # noqa: F401,F403
from .extra import *  # noqa: F401,F403
from .ctc import CTCLoss  # noqa: F401,E402
from .lazy import *  # noqa: F401,F403,E402
from .fractional import FractionalMaxPool2d, FractionalMaxPool3d  # noqa: F401,E402
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: F401,E402

from . import activation as _a, pooling as _p, shape as _s, loss as _l, transformer as _t  # noqa: E402

__all__ = ["Module", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
           "Identity", "Linear", "Bilinear", "NonDynamicallyQuantizableLinear", "Conv1d", "Conv2d", "ConvTranspose1d",
           "ConvTranspose2d", "LayerNorm", "GroupNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
           "InstanceNorm1d", "InstanceNorm2d", "Embedding", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
           "AlphaDropout", "FeatureAlphaDropout"] + _a.__all__ + _p.__all__ + _s.__all__ + _l.__all__ + _t.__all__
from . import rnn as _r, volumetric as _v, extra as _x  # noqa: E402
__all__ += _r.__all__ + _v.__all__ + _x.__all__
__all__ += ["SyncBatchNorm"]
__all__ += ["CTCLoss", "FractionalMaxPool2d", "FractionalMaxPool3d", "AdaptiveLogSoftmaxWithLoss"]
from . import lazy as _lz  # noqa: E402
__all__ += [n for n in _lz.__all__ if n != "LazyModuleMixin"]
del _lz
del _a, _p, _s, _l, _t, _r, _v, _x
