"""Graph compilation: passes, fusion, memory planning, ``@nee.jit``."""
from .api import JitFunction, jit  # noqa: F401
from .executable import Executable, MemoryPlan, plan_memory  # noqa: F401
from .fusion import FusedElementwise, fuse_elementwise  # noqa: F401
from .passes import PIPELINE  # noqa: F401
