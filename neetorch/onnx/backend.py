"""The standard ``onnx.backend`` API over :class:`~neetorch.onnx.InferenceSession`.

``prepare(model, device="CPU", jit=True)`` (device: "CPU", "CUDA", "OpenCL", any neetorch device type,
optionally ``:index``) returns a :class:`NeeBackendRep` whose
``run(inputs)`` takes a list (positional, in model input order) or a dict of arrays;
``run_node`` builds a one-node model from the inputs' types and runs it eagerly.  String inputs
(numpy str / bytes / object arrays) are ``tensor(string)``: see :class:`~neetorch.onnx.InferenceSession`.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .session import InferenceSession

__all__ = ["NeeBackend", "NeeBackendRep", "is_compatible", "prepare", "run", "run_model", "run_node",
           "supports_device"]


def _nee_device(device) -> str:
    """ONNX backend device string ("CPU", "CUDA", "CUDA:1", "OpenCL", ...) -> neetorch device string.

    ONNX spells devices in upper case with an optional ``:index``; any neetorch device type works
    ("cpu", "cuda", "opencl", a plugin's type such as "simnpu")."""
    d = str(device or "CPU").strip().lower()
    typ, _, idx = d.partition(":")
    if not typ:
        raise ValueError(f"invalid device {device!r}")
    return typ if not idx else f"{typ}:{int(idx)}"


class NeeBackendRep(BackendRep):
    def __init__(self, session: InferenceSession):
        self.session = session

    def run(self, inputs, **kwargs):
        ins = self.session.get_inputs()
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = {a.name: v for a, v in zip(ins, inputs)}
        outs = self.session.run(None, feed)
        names = [o.name for o in self.session.get_outputs()]
        return namedtupledict("Outputs", names)(*outs)


class NeeBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        from .lowering import unsupported_nodes
        return cls.supports_device(device) and not unsupported_nodes(model.graph)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        jit = kwargs.pop("jit", True)
        sess = InferenceSession(model, device=_nee_device(device), jit=jit, check=kwargs.pop("check", True))
        return NeeBackendRep(sess)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        from .loader import ONNX_TO_NP
        np_to_onnx = {v: k for k, v in ONNX_TO_NP.items()}
        vis = []
        for name, x in zip([i for i in node.input if i], inputs):
            x = np.asarray(x)
            et = onnx.TensorProto.STRING if x.dtype.kind in "OSU" else np_to_onnx.get(x.dtype)
            if et is None:
                raise TypeError(f"run_node: input {name!r} has numpy dtype {x.dtype.name}, which has no ONNX type")
            vis.append(helper.make_tensor_value_info(name, et, x.shape))
        outs = []
        for k, name in enumerate(node.output):
            if outputs_info and k < len(outputs_info):
                dt, shp = outputs_info[k]
                dt = np.dtype(dt)
                et = onnx.TensorProto.STRING if dt.kind in "OSU" else np_to_onnx[dt]
                outs.append(helper.make_tensor_value_info(name, et, shp))
            else:
                outs.append(helper.make_empty_tensor_value_info(name))
        g = helper.make_graph([node], "run_node", vis, outs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        imports = [helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            # the node's own domain too: ai.onnx.ml at the newest opset neetorch takes, others (com.microsoft) 1
            from .loader import ML_MAX_OPSET
            imports.append(helper.make_opsetid(node.domain, ML_MAX_OPSET if node.domain == "ai.onnx.ml" else 1))
        m = helper.make_model(g, opset_imports=imports)
        rep = cls.prepare(m, device, jit=kwargs.pop("jit", False), check=False)
        return rep.run(list(inputs))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True when ``device`` ("CPU", "CUDA", "OpenCL", "CUDA:1", ...) names a neetorch device present here."""
        try:
            d = _nee_device(device)
        except ValueError:
            return False
        typ, _, idx = d.partition(":")
        if typ == "cpu":
            return True
        import neetorch as nee
        return any(x.type == typ and x.available and int(idx or 0) < x.count for x in nee.devices())


is_compatible = NeeBackend.is_compatible
prepare = NeeBackend.prepare
run = NeeBackend.run_model         # (onnxruntime.backend's module-level run: run_model's signature)
run_model = NeeBackend.run_model
run_node = NeeBackend.run_node
supports_device = NeeBackend.supports_device
