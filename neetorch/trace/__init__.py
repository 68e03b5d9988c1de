"""Graph capture: the tracer and the graph IR."""
from .ir import Graph, GraphError, Node, Value  # noqa: F401
from .tracer import TraceError, run_graph, trace  # noqa: F401
