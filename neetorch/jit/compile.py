"""``nee.compile``: ``torch.compile``'s API over :func:`neetorch.jit`, so code written for torch.compile runs as is.

* ``nee.compile(fn)`` / ``@nee.compile`` / ``@nee.compile(mode=..., dynamic=..., fullgraph=...)`` compile a function;
  ``nee.compile(module)`` returns an :class:`OptimizedModule` (torch's wrapper: calls run the compiled module, every
  attribute is the module's, ``_orig_mod`` is the module, its state dict keys are prefixed ``_orig_mod.``), and
  ``module.compile()`` compiles a module in place.
* ``dynamic``: ``None`` (torch's default) makes a dim dynamic once a call brings a second size for it (automatic
  dynamic shapes), ``True`` makes every dim of every tensor argument dynamic (sizes 0 and 1 excepted), ``False``
  specializes on every shape.  Dynamic dims are served by shape buckets (see :mod:`neetorch.jit.api`).
* ``fullgraph=False`` (torch's default): code the tracer cannot capture (a value read into Python, ``.item()``, data-
  dependent control flow) is a *graph break*: torch compiles the pieces around it; here the function then runs
  eagerly (a warning names the reason once) — the same results, without the compiled speed.  ``fullgraph=True``
  raises the :class:`~neetorch.trace.tracer.TraceError` instead, as ``nee.jit`` always does.
* ``mode`` / ``options`` are checked as torch checks them and otherwise change nothing (one compiler: its fusion
  and memory plan are what "max-autotune" asks for, and there are no CUDA graphs to capture); ``backend`` is
  accepted (a name or a callable) and ignored; ``disable=True`` returns ``model`` itself.
"""
from __future__ import annotations

import warnings

from ..nn.modules.module import Module
from ..trace.tracer import TraceError
from .api import JitFunction

__all__ = ["compile", "OptimizedModule"]

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class CompiledFunction(JitFunction):
    """A :class:`JitFunction` that runs eagerly after a graph break unless ``fullgraph`` (see the module docs)."""

    def __init__(self, fn, *, fullgraph=False, dynamic=None, name=None):
        super().__init__(fn, dynamic="auto" if dynamic is None else dynamic, name=name)
        self.fullgraph = bool(fullgraph)
        self.graph_break: str | None = None     # why this function runs eagerly (None: compiled)

    def __call__(self, *args, **kwargs):
        if self.graph_break is not None:
            return self.fn(*args, **kwargs)
        if self.fullgraph:
            return super().__call__(*args, **kwargs)
        try:
            return super().__call__(*args, **kwargs)
        except TraceError as e:
            self.graph_break = str(e)
            warnings.warn(f"nee.compile({self.name}): graph break, running eagerly from now on: {e}",
                          RuntimeWarning, stacklevel=2)
            return self.fn(*args, **kwargs)


class OptimizedModule(Module):
    """``torch._dynamo.eval_frame.OptimizedModule``: a module whose calls run compiled.  Attribute reads and writes
    other than its own go to the wrapped module (``_orig_mod``), so parameters, buffers, ``train()`` / ``eval()``
    and attribute changes are the module's (the compiled function re-specializes on the changes that matter)."""

    def __init__(self, mod: Module, compiled, options=None):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_options", dict(options or {}))

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_compiled", None)    # (locks, compiled code: a copy compiles its own module anew)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        o = self.__dict__.get("_options", {})
        object.__setattr__(self, "_compiled", CompiledFunction(self._orig_mod, fullgraph=o.get("fullgraph", False),
                                                               dynamic=o.get("dynamic"), name=type(self._orig_mod).__name__))

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):
        if name in ("_orig_mod", "_modules", "_parameters", "_buffers"):
            return super().__getattr__(name)
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        if name in ("_orig_mod", "training") or "_orig_mod" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"OptimizedModule(\n  (_orig_mod): {self._orig_mod!r}\n)"


def _check(mode, options, backend) -> None:
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODES)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"compile(): options must be a dict, not {type(options).__name__}")
    if not (isinstance(backend, str) or callable(backend)):
        raise TypeError(f"compile(): backend must be a name or a callable, not {type(backend).__name__}")


def compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="inductor", mode=None, options=None,
            disable: bool = False):  # noqa: A001 - torch.compile's name
    """``torch.compile``: see the module docs."""
    _check(mode, options, backend)
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if not callable(model):
        raise RuntimeError(f"compile(): model must be a Module or a callable, got {type(model).__name__}")
    if disable:
        return model
    if isinstance(model, Module):
        return OptimizedModule(model, CompiledFunction(model, fullgraph=fullgraph, dynamic=dynamic,
                                                       name=type(model).__name__),
                               {"fullgraph": fullgraph, "dynamic": dynamic})
    return CompiledFunction(model, fullgraph=fullgraph, dynamic=dynamic)
