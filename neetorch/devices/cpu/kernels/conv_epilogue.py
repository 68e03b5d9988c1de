"""conv2d's elementwise epilogues run inside the conv kernel (kernels/fused.py's ``matmul_epilogue`` with a
conv2d producer).

The JIT fuses a conv2d and the elementwise group reading its output (``jit/fusion.MatmulEpilogue``).  Its
generic run is the conv kernel into a scratch, then the group's kernel from the scratch into the output:
one more pass over the output (the ONNX CNNs: ~0.4 ns per element, 5-10% of SqueezeNet's time).  The
groups these models give are a chain over the product of

* ``add`` of a per-output-channel bias (a (O, 1, 1) / (1, O, 1, 1) operand: BatchNormalization folded
  into the weights and a shift),
* ``add`` of a tensor of the output's shape (a residual),
* ``relu``,

in that order (any subset).  :func:`plan` recognizes such a chain and returns a runner that hands it to
``conv.conv2d_into``: the bias summed into the conv's own bias (every conv path starts its sums from it or
adds it in a pass it makes anyway), relu and the residual applied where each path writes its output
(the direct kernels' stores, the Winograd output transform, the GEMM paths' bias pass) or, where a path
has no such place, in one in-place pass over its output.  Summation order: the conv's sums start from
(or are followed by) bias + shift, then the residual; the group adds the shift after the sums, so the
results differ from the generic run by float rounding only.

The runner declines (returns False: the generic run follows) when the output shares memory with an
operand (the conv writes the output while it reads its input; the group's generic run reads a scratch),
for dtypes other than the output's, or bias operands of another size.

Input prologues (session 18, :func:`compile_conv_prologue`): a per-channel mul / add / relu group whose only
reader is a 1x1 conv (``jit/fusion.ConvPrologue``: DenseNet's BatchNormalization + ReLU) is applied by the
packed 1x1 kernel as it packs the conv's input (kernels/conv1x1_packed.py PRO_STEPS), not as a pass.
"""
from __future__ import annotations

import os
from operator import is_ as _is

import numpy as np

from .. import native_chain
from . import conv_act

_FLOATS = ("float32", "float64")
# (numpy's dtype.name is computed in Python: ~3 us, per conv call)
_FLOAT_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
_conv = [None]      # kernels/conv.py, imported on the first run (a function-level import: ~0.7 us a call)


# activation nodes -> conv_act steps; a step's constant is a float, or "c" (the node's 0-d operand, read per call)
_UNARY_ACTS = {"relu": (("relu", None),), "relu6": (("max", 0.0), ("min", 6.0)),
               "hardswish": (("add", 3.0), ("max", 0.0), ("min", 6.0), ("mulx", None), ("div", 6.0)),
               "hardsigmoid": (("add", 3.0), ("max", 0.0), ("min", 6.0), ("div", 6.0))}
_BINARY_ACTS = {"maximum": "max", "minimum": "min", "add": "add", "sub": "sub", "mul": "mul", "div": "div",
                "true_divide": "div"}
_COMMUTES = ("add", "mul")


def _act_node(n, prev, x0, O):
    """The conv_act steps of node ``n`` on ``prev`` ([(kind, float | Value | None)]), x0 the activation's input
    (for ``x * v``), or None when it is not such a node: a unary activation, clamp by two 0-d operands,
    leaky_relu by a 0-d slope, or a binary op of ``prev`` and a 0-d operand (``prev`` first where order matters)
    or of ``prev`` and ``x0``."""
    nm, ins = n.op.name, n.inputs
    if nm in _UNARY_ACTS and len(ins) == 1 and ins[0] is prev:
        st = _UNARY_ACTS[nm]
        if prev is not x0 and any(kind == "mulx" for kind, _ in st):
            return None     # (hardswish's x * v is of its own input; a step's x is the chain's first value)
        return list(st)
    if nm in conv_act.EW_OPS and len(ins) == 1 and ins[0] is prev and getattr(n.op, "expr", None):
        # the op's expression as the fused group's kernel writes it (elementwise._group_pieces)
        return [("ew", n.op.expr["py"](prev.dtype))]
    if nm == "clamp" and len(ins) == 3 and ins[0] is prev and all(_scalar_operand(v, prev) for v in ins[1:]):
        return [("max", ins[1]), ("min", ins[2])]
    if nm == "leaky_relu" and len(ins) == 2 and ins[0] is prev and _scalar_operand(ins[1], prev):
        return [("leaky", ins[1])]
    kind = _BINARY_ACTS.get(nm)
    if kind is None or len(ins) != 2 or (ins[0] is prev) == (ins[1] is prev):
        return None
    other = ins[1] if ins[0] is prev else ins[0]
    if ins[1] is prev and kind not in _COMMUTES:
        return None
    if kind == "mul" and other is x0 and x0 is not prev:
        return [("mulx", None)]
    if _scalar_operand(other, prev):
        return [(kind, other)]
    return None


def _scalar_operand(v, prev) -> bool:
    return tuple(v.shape) == () and v.dtype == prev.dtype


def _chain(epi_op, acc):
    """([(kind, value)], act): the group's bias-add / residual-add nodes over ``acc`` ('bias' / 'res' with the other
    operand; in that order, each at most once), then its activation's steps (kernels/conv_act.py; a step's constant
    a float or the 0-d graph value holding it), or None when the group is not such a chain."""
    nodes = getattr(epi_op, "nodes", None)
    outs = getattr(epi_op, "outputs", None)
    if not nodes or not outs or len(outs) != 1 or outs[0] is not nodes[-1].outputs[0]:
        return None
    O = acc.shape[1] if len(acc.shape) == 4 else None
    if O is None or getattr(acc.dtype, "name", None) not in _FLOATS:
        return None
    steps, act = [], []
    prev = x0 = acc
    rank = {"bias": 0, "res": 1}
    for n in nodes:
        if len(n.outputs) != 1 or n.attrs or n.outputs[0].shape != acc.shape or n.outputs[0].dtype != acc.dtype:
            return None
        step = None
        if not act and n.op.name == "add" and len(n.inputs) == 2 and (n.inputs[0] is prev) != (n.inputs[1] is prev):
            other = n.inputs[1] if n.inputs[0] is prev else n.inputs[0]
            shp = tuple(other.shape)
            if other.dtype == acc.dtype and shp == tuple(acc.shape):
                step = ("res", other)
            elif other.dtype == acc.dtype and len(shp) in (3, 4) and shp[-3:] == (O, 1, 1) and \
                    all(d == 1 for d in shp[:-3]):
                step = ("bias", other)
        if step is not None:
            if steps and rank[step[0]] <= rank[steps[-1][0]]:
                return None
            steps.append(step)
            x0 = n.outputs[0]
        else:
            a = _act_node(n, prev, x0, O)
            if a is None:
                return None
            act.extend(a)
        prev = n.outputs[0]
    return steps, tuple(act)


def plan(prod, epi, acc, einputs):
    """A runner ``f(outs, ins) -> bool`` doing ``prod`` (a conv2d node) and its epilogue ``epi`` in the conv
    kernel (``ins``: the conv's operands, then the epilogue's inputs other than ``acc`` in ``einputs``
    order), or None when the epilogue is not such a chain."""
    r = _chain(epi.op, acc)
    if r is None:
        return None
    steps, act = r
    npin = len(prod.inputs)
    pos, where = {}, {}
    j = npin
    for v in einputs:
        if v is acc:
            continue
        for kind, val in steps:
            if val is v:
                pos[kind] = j
        where.setdefault(id(v), j)
        j += 1
    kinds = [k for k, _ in steps]
    if ("bias" in kinds and "bias" not in pos) or ("res" in kinds and "res" not in pos):
        return None
    # relu: the kernels' flag; another activation: its steps (kernels/conv_act.py) with the 0-d operands read
    # per call (act_of), taken by the depthwise, direct and packed 1x1 kernels (conv2d_into returns False on the
    # other paths: the generic run; a bind there is None: fused.py binds the two apart)
    relu = act == (("relu", None),)
    general = bool(act) and not relu
    consts = []
    for kind, c in act:
        if c is None or isinstance(c, (float, str)):
            consts.append((kind, None, c))
        elif id(c) in where:
            consts.append((kind, where[id(c)], None))
        else:
            return None
    ib, ir = pos.get("bias"), pos.get("res")
    attrs = prod.attrs

    def act_of(ins, dt):
        """The activation's steps with this call's constants (0-d arrays of the output's dtype), or None."""
        out = []
        for kind, j, c in consts:
            if j is not None:
                a = ins[j]
                if not isinstance(a, np.ndarray) or a.shape != () or a.dtype != dt:
                    return None
                c = float(a)
            out.append((kind, c))
        return tuple(out)

    def operands(outs, ins):
        """(conv.py, out, b2 as an (O,) view or None, residual or None) when the runner takes these arrays, else
        None (the generic run follows): float output, no operand sharing its memory, epilogue operands of its
        dtype and sizes."""
        conv = _conv[0]
        if conv is None:
            from . import conv
            _conv[0] = conv
        out = outs[0]
        if out.dtype not in _FLOAT_DTYPES:
            return None
        for a in ins:
            if not isinstance(a, np.ndarray) or np.may_share_memory(out, a):
                return None
        O = out.shape[1]
        b2 = res = None
        if ib is not None:
            b2 = ins[ib]
            if b2.dtype != out.dtype or b2.size != O:
                return None
            b2 = b2.reshape(O)
        if ir is not None:
            res = ins[ir]
            if res.dtype != out.dtype or res.shape != out.shape:
                return None
        return conv, out, b2, res

    def run(outs, ins, pre=None) -> bool:
        ops = operands(outs, ins)
        if ops is None:
            return False
        conv, out, b2, res = ops
        a = relu
        if general:
            a = act_of(ins, out.dtype)
            if a is None:
                return False
        if pre is None:
            return conv.conv2d_into(out, ins[:npin], attrs, b2, res, a) is not False
        return conv.conv2d_into(out, ins[:npin], attrs, b2, res, a, pre=pre) is not False

    def bind(outs, ins, pre=None):
        """``f(outs, ins) -> bool``: ``run`` for arrays of these layouts where conv.bind_into binds the conv
        (the direct kernel's launch looked up once), or None.  A second bias given as the same array as here
        is passed as the same (O,) view, so the summed bias of frozen ones is reused."""
        ops = operands(outs, ins) if len(outs) == 1 else None
        if ops is None:
            return None
        conv, out, b2view, res = ops
        O = out.shape[1]
        b2src = None if ib is None else ins[ib]
        a0, dt = relu, out.dtype
        if general:
            a0 = act_of(ins, dt)
            if a0 is None:
                return None
        g = conv.bind_into(out, ins[:npin], attrs, b2view, res, a0) if pre is None else \
            conv.bind_into(out, ins[:npin], attrs, b2view, res, a0, pre=pre)
        if g is None:
            return None
        # the activation's constants are in the kernel: a call with others (a 0-d tensor written since) declines;
        # a replayed chain (native_chain) only where they are frozen constants (ONNX initializers, the JIT's)
        cidx = [j for _, j, _ in consts if j is not None] if general else []
        from .winograd import is_frozen

        def f(outs, ins, S=None) -> bool:
            if cidx and act_of(ins, dt) != a0:
                return False
            if ib is None:
                b2 = None
            else:
                s = ins[ib]
                b2 = b2view if s is b2src else s.reshape(O)
            if S is not None:
                return g(outs[0], ins, b2, None if ir is None else ins[ir], S)
            return g(outs[0], ins, b2, None if ir is None else ins[ir])

        def calls(outs, ins, S=None):
            # (native_chain) where the second bias is the bound array's view (another one is reshaped per call)
            gc = getattr(g, "calls", None)
            if gc is None or (ib is not None and ins[ib] is not b2src) or \
                    (cidx and (not all(is_frozen(ins[j]) for j in cidx) or act_of(ins, dt) != a0)):
                return None
            e = None if ir is None else ins[ir]
            return gc(outs[0], ins, b2view if ib is not None else None, e, S) if S is not None else \
                gc(outs[0], ins, b2view if ib is not None else None, e)
        f.calls = calls
        return f

    run.bind = bind
    return run


# ---------------------------------------------------------------- input prologues (jit/fusion.ConvPrologue)
# DenseNet's BatchNormalization + ReLU before each of its 1x1 convs (x * a + b) * c + d then relu per input channel:
# the JIT's group pass wrote it to a buffer the conv then read (62 passes, ~4 ms of the model at one thread).  Here
# the packed 1x1 kernel (kernels/conv1x1_packed.py, PRO_STEPS) applies the steps to the input as it packs its panels;
# convs that route elsewhere (or operands the kernel declines) run the group's kernel into a scratch and then the
# conv as before.  Results: the same float32 steps in the same order as the group (fmul / fadd, no contraction)
# where the group's own kernel does not contract them either (LLVM's default: it does not).
# NEE_CONV_PROLOGUE=0: never (read when a graph is compiled).
CONV_PROLOGUE = [os.environ.get("NEE_CONV_PROLOGUE", "1") not in ("0", "")]


def compile_conv_prologue(backend, op):
    """``kernels["compile:conv_prologue"]``: (runner, sources) for a :class:`jit.fusion.ConvPrologue`, or None
    (the executable then runs its parts)."""
    if not CONV_PROLOGUE[0]:
        return None
    from ....jit.fusion import MatmulEpilogue, prologue_steps
    from .. import elementwise as ew
    r = prologue_steps(op.group.op, op.x)
    if r is None:
        return None
    data, steps = r
    node = op.conv
    if not _may_pack(op, node.op.matmul if isinstance(node.op, MatmulEpilogue) else node):
        return None             # a conv the packed 1x1 kernel does not take: the parts run
    if isinstance(node.op, MatmulEpilogue):
        prod = node.op.matmul
        inner = plan(prod, node.op.epilogue, node.op.acc, list(node.op.epilogue.inputs))
        if inner is None:
            return None
        from .fused import compile_matmul_epilogue
        res = compile_matmul_epilogue(backend, node.op)
        if res is None:
            return None
        nrun, sources = res
    else:
        prod, inner = node, None
        pkern = backend.kernels[prod.name]

        def nrun(outs, ins):
            pkern(backend, outs, ins, prod.attrs)
        sources = []
    try:
        gk, gsrc = ew.compile_group(op.group.op)
    except NotImplementedError:
        return None
    if gk is None:
        return None
    sources = [(op.name, gsrc)] + [(op.name, s) for _, s in sources]
    gin = list(op.group.op.inputs)
    ng = len(gin)
    di = gin.index(data)
    kinds = tuple(k for k, _ in steps)
    opos = [gin.index(v) for _, v in steps if v is not None]
    attrs = prod.attrs
    last = [None]               # (the operand arrays S was made from (frozen constants), S): one store

    def operands(ins):
        """S: the steps' operands, one row per step with one (float32)."""
        xs = [ins[j] for j in opos]
        hit = last[0]
        if hit is not None and len(hit[0]) == len(xs) and all(a is b for a, b in zip(hit[0], xs)):
            return hit[1]
        C = ins[di].shape[1]
        S = np.empty((len(xs), C), np.float32)
        for q, a in enumerate(xs):
            S[q] = np.asarray(a).reshape(C)
        from . import winograd
        if all(isinstance(a, np.ndarray) and winograd.is_frozen(a) for a in xs):
            last[0] = (xs, S)
        return S

    def fast(outs, ins) -> bool:
        """The prologue in the packed 1x1 kernel: False where the conv routes elsewhere or the kernel declines."""
        x, out = ins[di], outs[0]
        if x.dtype != np.float32 or out.dtype != np.float32 or len(ins) <= ng or not isinstance(x, np.ndarray):
            return False
        conv = _conv[0]
        if conv is None:
            from . import conv
            _conv[0] = conv
        w = ins[ng]
        if not isinstance(w, np.ndarray) or w.dtype != np.float32 or \
                conv.conv_direct.route(x, w, out, attrs, True, True) != "pk1x1":
            return False
        for a in ins:
            if isinstance(a, np.ndarray) and np.may_share_memory(out, a):
                return False
        nins = [x] + list(ins[ng:])
        pre = (kinds, operands(ins))
        if inner is not None:
            return inner(outs, nins, pre=pre)
        return conv._prologue_packed(out, conv._c(x), nins, attrs, None, None, False, pre)

    def run(outs, ins) -> None:
        if outs[0].size == 0:
            return
        if fast(outs, ins):
            return
        # the group into a scratch, then the conv (and its epilogue) as without the fusion
        from .fused import _scratch
        x = ins[di]
        shape = np.broadcast_shapes(*[np.shape(a) for a in ins[:ng]])
        buf = _scratch("prologue", int(np.prod(shape)), x.dtype).reshape(shape)
        ew.run_strided(gk, [buf], list(ins[:ng]))
        nrun(outs, [buf] + list(ins[ng:]))

    def bind(outs, ins):
        """``f(outs, ins) -> bool`` for arrays of these layouts on the packed 1x1 kernel (the conv's launch bound,
        the operands' S reused while they are the same frozen arrays), or None."""
        if len(outs) != 1 or outs[0].size == 0:
            return None
        x, out = ins[di], outs[0]
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or out.dtype != np.float32:
            return None
        for a in ins:
            if isinstance(a, np.ndarray) and np.may_share_memory(out, a):
                return None
        conv = _conv[0]
        if conv is None:
            from . import conv
            _conv[0] = conv
        S0 = operands(ins)
        nins = [x] + list(ins[ng:])

        def kept(ins):
            # (native_chain) S where it is kept (made from frozen operands: the same S every call), else None
            hit, xs = last[0], [ins[j] for j in opos]
            return hit[1] if hit is not None and len(hit[0]) == len(xs) and all(map(_is, hit[0], xs)) else None
        if inner is not None:
            g = inner.bind(outs, nins, pre=(kinds, S0))
            if g is None:
                return None

            def f(outs, ins) -> bool:
                return g(outs, [ins[di]] + list(ins[ng:]), operands(ins))

            def calls(outs, ins):
                S = kept(ins)
                return None if S is None else native_chain.calls_of(g, outs, [ins[di]] + list(ins[ng:]), S)
            f.calls = calls
            return f
        g = conv.bind_into(out, nins, attrs, None, None, False, pre=(kinds, S0))
        if g is None:
            return None

        def f(outs, ins) -> bool:
            return g(outs[0], [ins[di]] + list(ins[ng:]), None, None, operands(ins))

        def calls(outs, ins):
            S = kept(ins)
            return None if S is None else native_chain.calls_of(g, outs[0], [ins[di]] + list(ins[ng:]), None, None, S)
        f.calls = calls
        return f

    run.bind = bind
    return run, sources


def _may_pack(op, cv) -> bool:
    """False where the conv ``cv``'s dtype and shapes are static and the packed 1x1 kernel does not take them
    (float32 only, its cost rule: the fusion would only add a scratch, so the parts run instead); True otherwise
    (decided per call)."""
    if op.x.dtype.name != "float32":
        return False
    shapes = (tuple(cv.inputs[0].shape), tuple(cv.inputs[1].shape), tuple(cv.outputs[0].shape))
    if not all(isinstance(d, int) for s in shapes for d in s):
        return True
    from . import conv1x1_packed
    return conv1x1_packed.pays(shapes[0], shapes[1], shapes[2], 1, 1, 0, 0, 0, 0, 1, True)


def _register():
    from .. import kernel
    kernel("compile:conv_prologue")(compile_conv_prologue)


_register()
