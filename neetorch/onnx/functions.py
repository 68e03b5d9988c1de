"""Model-local ONNX functions (``ModelProto.functions``), inlined before a model is checked and lowered.

skl2onnx exports some estimators (KNNImputer) as calls to functions it defines in the model
(domain ``local_domain``).  :func:`inline_local_functions` replaces every call, in the main graph and in
subgraphs, recursively, by the function's body: the body's formal inputs / outputs become the call's
actual names, every other name the body defines (subgraphs included) gets a prefix unique to the call,
attribute references (``ref_attr_name``) take the call's attribute or the function's default (an
attribute neither sets is dropped: the op's default applies).  onnx's own ``onnx.inliner`` refuses
skl2onnx's functions (their default-domain opset differs from the model's, and its type inference
asserts on them); the body's ops run at the model's opset (a note says so when the versions differ).
"""
from __future__ import annotations

__all__ = ["inline_local_functions"]

_MAX_DEPTH = 64


def _rename_graph(g, fn):
    for n in g.node:
        n.input[:] = [fn(x) for x in n.input]
        n.output[:] = [fn(x) for x in n.output]
        for a in n.attribute:
            if a.type == a.GRAPH:
                _rename_graph(a.g, fn)
            for sg in a.graphs:
                _rename_graph(sg, fn)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = fn(vi.name)
    for t in g.initializer:
        t.name = fn(t.name)


def inline_local_functions(model):
    """(model with every model-local function call inlined and ``functions`` emptied, notes); the model
    itself when it defines no functions."""
    import onnx
    if not len(model.functions):
        return model, []
    funcs = {(f.domain, f.name): f for f in model.functions}
    calls = [0]
    other = {}  # function -> its default-domain opset, where it differs from the model's
    mv = {o.domain: o.version for o in model.opset_import}

    def expand(nodes, depth):
        out = []
        for n in nodes:
            f = funcs.get((n.domain, n.op_type))
            if f is None:
                for a in n.attribute:
                    for g in ([a.g] if a.type == a.GRAPH else []) + list(a.graphs):
                        body = list(g.node)
                        del g.node[:]
                        g.node.extend(expand(body, depth))
                out.append(n)
                continue
            if depth >= _MAX_DEPTH:
                from .loader import UnsupportedModelError
                raise UnsupportedModelError(f"model-local function {f.domain}.{f.name} calls nest deeper than "
                                            f"{_MAX_DEPTH} (recursive functions are not supported)")
            for o in f.opset_import:
                if o.domain in ("", "ai.onnx") and mv.get(o.domain, mv.get("ai.onnx")) not in (None, o.version):
                    other[f"{f.domain}.{f.name}"] = o.version
            calls[0] += 1
            pre = f"{f.name}_{calls[0]}__"
            ren = {}
            for i, formal in enumerate(f.input):
                ren[formal] = n.input[i] if i < len(n.input) else ""
            for i, formal in enumerate(f.output):
                ren[formal] = n.output[i] if i < len(n.output) and n.output[i] else pre + formal

            def fn(x, ren=ren, pre=pre):
                return ren.get(x, pre + x) if x else ""
            attrs = {a.name: a for a in f.attribute_proto}
            attrs.update({a.name: a for a in n.attribute})
            body = []
            for b in f.node:
                c = onnx.NodeProto()
                c.CopyFrom(b)
                c.name = pre + (b.name or b.op_type)
                c.input[:] = [fn(x) for x in b.input]
                c.output[:] = [fn(x) for x in b.output]
                keep = []
                for a in c.attribute:
                    if a.ref_attr_name:
                        src = attrs.get(a.ref_attr_name)
                        if src is None:
                            continue
                        na = onnx.AttributeProto()
                        na.CopyFrom(src)
                        na.name = a.name
                        keep.append(na)
                    else:
                        keep.append(a)
                del c.attribute[:]
                c.attribute.extend(keep)
                for a in c.attribute:
                    for g in ([a.g] if a.type == a.GRAPH else []) + list(a.graphs):
                        _rename_graph(g, fn)
                body.append(c)
            out.extend(expand(body, depth + 1))
        return out

    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(expand(nodes, 0))
    names = {(f.domain, f.name) for f in m.functions}
    del m.functions[:]
    used = set()

    def domains(g):
        for n in g.node:
            used.add(n.domain)
            for a in n.attribute:
                for sg in ([a.g] if a.type == a.GRAPH else []) + list(a.graphs):
                    domains(sg)
    domains(m.graph)
    fdoms = {d for d, _ in names}
    keep = [o for o in m.opset_import if o.domain not in fdoms or o.domain in used]
    have = {o.domain for o in keep}
    for f in model.functions:  # an opset the bodies use that the model did not import
        for o in f.opset_import:
            if o.domain in used and o.domain not in have and o.domain not in fdoms:
                keep.append(o)
                have.add(o.domain)
    del m.opset_import[:]
    m.opset_import.extend(keep)
    notes = [f"inlined {calls[0]} call(s) of {len(names)} model-local function(s)"]
    if other:
        vs = sorted(set(other.values()))
        notes.append(f"model-local function(s) {', '.join(sorted(other))} import default-domain opset "
                     f"{', '.join(map(str, vs))}: their bodies run at the model's opset "
                     f"{mv.get('', mv.get('ai.onnx'))}")
    return m, notes
