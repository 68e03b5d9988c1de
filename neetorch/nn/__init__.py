"""``neetorch.nn``: modules, parameters, initializers and the functional namespace (``torch.nn`` API)."""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from .parameter import Parameter, Buffer  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module  # noqa: F401
from .modules.module import RemovableHandle  # noqa: F401

from . import modules  # noqa: F401,E402
from . import utils  # noqa: F401,E402
