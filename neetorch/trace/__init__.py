"""Graph capture: the tracer and the graph IR."""
from .ir import Graph, GraphError, Node, Value  # noqa: F401
from .tracer import TraceError, run_graph, trace  # noqa: F401


# ``torch.trace(input)`` (the sum of a matrix's diagonal) shares its name with this subpackage, which
# ``import neetorch`` binds as ``neetorch.trace``: calling the package computes torch's ``trace``, so
# ``nee.trace(x)`` works as in torch while ``nee.trace.trace`` / ``nee.trace.Graph`` stay the tracer's.
import sys as _sys
import types as _types


class _TracePackage(_types.ModuleType):
    def __call__(self, input):
        from ..ops.matrix import trace as _matrix_trace
        return _matrix_trace(input)


_sys.modules[__name__].__class__ = _TracePackage
