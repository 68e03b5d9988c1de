"""Elementwise ops: one row per op (dtype rule, numpy reference, scalar expression).

The scalar expression (``expr["py"]``) is what every renderer prints inside its
loop: the CPU backend's Numba kernel generator today, fused JIT kernels and other
devices' renderers later.  ``{0}``, ``{1}``… stand for the inputs, already cast to
the op's compute dtype; helper names (``f_exp`` …) come from
``neetorch/devices/cpu/scalar.py``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.dtypes import DType, result_type
from ..tensor.tensor import Tensor
from .registry import Meta, OpDef, _trace_hook, export, register, run
from .shape_rules import broadcast_shapes


# ---------------------------------------------------------------- dtype rules
def _same(dts):           # compute and output in the promoted dtype
    return dts, dts[0]


def _float(dts):          # integers and bools compute in the default float dtype (complex stays complex)
    d = dts[0] if dts[0].category >= 2 else _dt.get_default_dtype()
    return [d] * len(dts), d


def _to_bool(dts):        # compute promoted, output bool
    return dts, _dt.bool_


def _logical(dts):
    return [_dt.bool_] * len(dts), _dt.bool_


class EW:
    """Spec of an elementwise op: ``rule`` maps the promoted dtype to compute/out dtypes."""

    check = None  # optional ``check(args)``: raises for argument combinations torch refuses

    def __init__(self, name, nin, py, rule=_same, ref=None, allow=None, promote=None, doc=""):
        self.name, self.nin, self.py, self.rule, self.ref = name, nin, py, rule, ref
        self.allow = allow          # None = all dtypes, else a predicate on the promoted dtype
        self.promote = promote      # indices that take part in promotion (default: all)


def _ew_infer(spec):
    def infer(metas, attrs):
        shape = broadcast_shapes(*[m.shape for m in metas], op=spec.name)
        comp, out = ew_dtypes(spec, [m.dtype for m in metas])
        return [Meta(shape, out)]
    return infer


def ew_dtypes(spec, in_dtypes):
    """(per-input compute dtypes, output dtype) for an elementwise op."""
    idx = spec.promote if spec.promote is not None else range(len(in_dtypes))
    p = None
    for i in idx:
        p = in_dtypes[i] if p is None else _dt.promote_types(p, in_dtypes[i])
    comp, out = spec.rule([p] * len(idx))
    c = list(in_dtypes)
    for j, i in enumerate(idx):
        c[i] = comp[j]
    return c, out


def define(name, nin, py, rule=_same, ref=None, allow=None, promote=None, doc="") -> OpDef:
    spec = EW(name, nin, py, rule, ref, allow, promote, doc)
    op = OpDef(name=name, kind="elementwise", infer=_ew_infer(spec), reference=ref, expr={"py": py}, doc=doc)
    op.ew = spec
    return register(op)


# ---------------------------------------------------------------- frontend
def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, Tensor)


_scalar_cache: dict = {}


def _freeze(data) -> bool:
    """Mark a device array read-only; False when its device array cannot be (then it is not cached).
    numpy arrays: ``flags.writeable``; device arrays: a settable ``writeable`` attribute that their
    backend checks before writing (the OpenCL ``CLArray``)."""
    if isinstance(data, np.ndarray):
        data.flags.writeable = False
        return True
    if "writeable" in getattr(type(data), "__slots__", ()):
        data.writeable = False
        return not data.flags.writeable
    return False


def _scalar_tensor(v, dt: DType, dev) -> Tensor:
    # Python scalars become cached read-only 0-d tensors, per device (a device one would otherwise
    # cost an allocation and a fill per ``x + 1.0``)
    # (the sign bit keys too: 0.0 == -0.0 hash alike, yet x / -0.0 is not x / 0.0)
    key = (type(v), v, dt, dev, v == 0 and isinstance(v, (float, np.floating)) and math.copysign(1.0, v) < 0)
    t = _scalar_cache.get(key)
    if t is None:
        from ..tensor.creation import full
        try:
            t = full((), v, dtype=dt, device=dev)
        except (OverflowError, RuntimeError):
            # an int scalar outside an integer compute dtype wraps like torch (int8 tensor + 1000)
            with np.errstate(over="ignore"):
                t = full((), np.array(v).astype(dt.np).item(), dtype=dt, device=dev)
        if len(_scalar_cache) < 4096 and not (isinstance(v, float) and v != v) and _freeze(t._data):
            _scalar_cache[key] = t
    return t


_plans: dict = {}
_layout_ids: dict = {}


def layout_id(t: Tensor) -> int:
    """A small int naming (dtype, device, shape, strides, writeable): cheap to hash in plan keys."""
    d = t._data
    key = (t._dtype, t._device, d.shape, d.strides, d.flags.writeable)
    i = _layout_ids.get(key)
    if i is None:
        i = _layout_ids[key] = len(_layout_ids)
    return i


def _cast_0d(t: Tensor, dt: DType) -> Tensor:
    if t._device.type == "cpu" and _trace_hook[0] is None:   # (while tracing: a cast node, not a constant)
        with np.errstate(over="ignore", invalid="ignore"):
            return Tensor._make(np.asarray(t._data.astype(dt.np, casting="unsafe")), t._device, dt)
    return cast(t, dt)


# (torch's add/sub/remainder/fmod kernels round the scalar to float16/bfloat16 first; these read it at float32
# when it is the operand at this position: a first-operand scalar, as in 70000.0 // x, is cast to float16 like a
# tensor; lerp's weight and leaky_relu's slope are read at float32 too)
_OPMATH_SCALAR_OPS = {"mul": 1, "true_divide": 1, "floor_divide": 1, "trunc_divide": 1, "leaky_relu": 1, "lerp": 2,
                      "addcmul": 3, "addcdiv": 3}   # (addcmul/addcdiv: ``value.to<float>()`` for Half/BFloat16)


# ops whose torch Scalar overloads pass a Python number to the kernel as a parameter (pow.Tensor_Scalar, clamp,
# leaky_relu ...), not as a 0-d operand of the TensorIterator: it has no say in the result's layout
_SCALAR_PARAM_OPS = frozenset({"pow", "clamp", "leaky_relu", "lerp", "softplus", "elu", "addcmul", "addcdiv",
                               "minimum", "maximum"})


def _exact_in(v, dt: DType) -> bool:
    """The Python scalar ``v`` is a value of the float dtype ``dt`` (converting it rounds nothing)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.array(v, np.float64).astype(dt.np).astype(np.float64) == v) or v != v


_ost_cache: dict = {}     # plan key -> None (row-major result) or (strides, dim order or None, shape)


def _apply_permuted(op, args, shape, order):
    """``op`` with a result that is row-major in the dim order ``order`` (outermost first): computed on the
    inputs viewed in that order (their launches prepared once, like any row-major one), then viewed back."""
    nd = len(shape)
    inv = [0] * nd
    for j, d in enumerate(order):
        inv[d] = j
    pargs = [(a if a.ndim == nd else a.reshape((1,) * (nd - a.ndim) + tuple(a.shape))).permute(*order)
             if isinstance(a, Tensor) and a.ndim else a for a in args]
    return apply(op, *pargs, _layout=False).permute(*inv)


def apply(op: OpDef, *args, out: Tensor | None = None, _layout: bool = True) -> Tensor:
    """Run elementwise ``op`` on tensors and Python scalars with PyTorch's promotion (``_layout=False``: a
    row-major result whatever the inputs' strides)."""
    key = None
    if out is None and _trace_hook[0] is None:
        # prepared launches: the dtype/shape rules and the kernel's layout depend only on
        # (op, dtypes, devices, shapes, strides, scalar types), so they are computed once
        if len(args) == 2:
            a, b = args
            if isinstance(a, Tensor):
                ka = a._sig
                if ka is None:
                    ka = a._sig = layout_id(a)
            else:
                ka = type(a)
            if isinstance(b, Tensor):
                kb = b._sig
                if kb is None:
                    kb = b._sig = layout_id(b)
            else:
                kb = type(b)
            key = (op, ka, kb)
        else:
            sig = [op]
            for a in args:
                if isinstance(a, Tensor):
                    s = a._sig
                    if s is None:
                        s = a._sig = layout_id(a)
                    sig.append(s)
                else:
                    sig.append(type(a))
            key = tuple(sig)
        if not _layout:
            key = (False,) + key     # (its plans give row-major results: kept apart from the layout-aware ones)
        plan = _plans.get(key)
        if plan is not None:
            return plan(args)
        lay = _ost_cache.get(key) if _layout else None
        if lay is not None and lay[1] is not None:
            return _apply_permuted(op, args, lay[2], lay[1])
    spec = op.ew
    if spec.check is not None:
        spec.check(args)  # raising here also keeps a plan from ever being cached for these argument types
    dev = None
    for a in args:
        if isinstance(a, Tensor):
            if dev is None:
                dev = a._device
            elif dev.type == "cpu" and a._device.type != "cpu":
                dev = a._device  # (torch: a 0-d CPU tensor is a scalar next to a tensor on another device)
                break
    if any(not isinstance(a, Tensor) and a is not None and not _is_scalar(a) for a in args):
        # lists / numpy arrays become tensors first (they take part in promotion as tensors)
        from ..tensor.creation import tensor
        args = tuple(a if isinstance(a, Tensor) or a is None or _is_scalar(a) else tensor(a, device=dev)
                     for a in args)
        key = None
    if dev is None:
        from ..tensor.creation import _default_device
        dev = _default_device()
    idx = spec.promote if spec.promote is not None else range(len(args))
    promoted = result_type(*[args[i] for i in idx])
    if spec.allow is not None:
        msg = spec.allow(promoted)
        if msg:
            raise _dt.DTypeNotImplementedError(f"{op.name}: {msg} (got {promoted.name})")
    # torch casts every promoted operand to the op's compute dtype: this matters for 0-d tensors and
    # scalars, which do not take part in promotion within their category (int8 tensor // tensor(1000):
    # 1000 wraps to int8; int8 tensor / tensor(1000): 1000 becomes 1000.0)
    cdt = spec.rule([promoted] * len(idx))[0][0] if len(idx) else promoted
    ins = []
    opmath = False
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            if a._device != dev and a._data.ndim == 0 and a._device.type == "cpu":
                a, key = a.to(dev), None  # a 0-d CPU tensor goes along as a scalar (torch allows it too)
            if (a._dtype is not cdt or (op.name == "floor_divide" and cdt in _dt.LOW_FLOATS)) and \
                    a._data.ndim == 0 and i in idx:
                # (floor_divide: torch's float32 path even for a 0-d divisor of the low dtype itself)
                key = None  # the prepared plan would feed the uncast argument
                if cdt in _dt.LOW_FLOATS and i == _OPMATH_SCALAR_OPS.get(op.name) and a._device.type == "cpu" \
                        and op.name != "lerp":
                    # torch reads a 0-d CPU tensor there at float32 too, as a Python scalar (float16 x *
                    # tensor(70000.) is finite; x * tensor(1.1) rounds once): the scalar path's computation
                    a, opmath = _cast_0d(a, _dt.float32), cdt
                    if _trace_hook[0] is not None:
                        r = apply(op, *[t if t._dtype is _dt.float32 else t.to(_dt.float32) for t in ins], a)
                        return r.to(opmath) if out is None else out.copy_(r)
                else:
                    if spec.rule is _logical and a._dtype is not promoted:
                        # torch reads the 0-d operand in the promoted dtype first: float16 x and
                        # tensor(1e-39) is False (1e-39 underflows to 0 in float16)
                        a = _cast_0d(a, promoted)
                    a = _cast_0d(a, cdt)
            ins.append(a)
        elif _is_scalar(a):
            dt = cdt if i in idx else _dt.scalar_dtype(a)
            if dt in _dt.LOW_FLOATS and i == _OPMATH_SCALAR_OPS.get(op.name):
                # torch's CPU kernels read a Python scalar at float32 ("opmath") precision in these ops:
                # float16 x * 70000.0 is 0.5 * 70000 rounded once (35008), not x * inf (the result stays float16)
                opmath, dt = dt, _dt.float32   # (opmath: the float16/bfloat16 the result stays in)
                if _trace_hook[0] is not None and _exact_in(a, opmath):
                    opmath, dt = False, opmath    # (exact in the storage dtype: rounding it first changes nothing)
                elif _trace_hook[0] is not None:
                    # a traced graph has no op mixing dtypes like this: the same float32 computation as
                    # explicit casts (cast, op in float32, one rounding cast), so jit and eager agree
                    # (the scalar is the op's last operand: see _OPMATH_SCALAR_OPS)
                    wide = [t if t._dtype is _dt.float32 else t.to(_dt.float32) for t in ins]
                    r = apply(op, *wide, _scalar_tensor(a, dt, dev))
                    return r.to(opmath) if out is None else out.copy_(r)
            ins.append(_scalar_tensor(a, dt, dev))
        elif a is None:
            raise TypeError(f"{op.name}: argument {i} is None")
        else:
            from ..tensor.creation import tensor
            ins.append(tensor(a, device=dev))
    metas = op.infer([Meta(t._data.shape, t._dtype) for t in ins], {}) if not opmath else \
        op.infer([Meta(t._data.shape, opmath if t._dtype is _dt.float32 else t._dtype) for t in ins], {})
    if out is not None:
        from .indexing import _check_no_overlap, _check_partial_overlap
        _check_no_overlap(out)  # torch refuses to write into an expanded (stride-0) output
        for a in args:
            _check_partial_overlap(out, a)
        if tuple(out.shape) != metas[0].shape and any(a is out for a in args):
            # (in place, x.mul_(y): the result must fit self, torch never resizes it)
            raise RuntimeError(f"{op.name}: output with shape {tuple(out.shape)} doesn't match the broadcast shape "
                               f"{metas[0].shape}")
        resize_out(out, metas[0].shape, op.name)
        if metas[0].dtype is not out._dtype:
            if op.name in _OUT_BOOL_ONLY:
                raise RuntimeError(f"{op.name} does not support non-boolean outputs.")
            if op.name in ("abs", "absolute") and ins[0]._dtype.category == 3:
                # torch: abs of a complex tensor writes its real result into a real out= of any dtype it casts
                # to, or into a complex out= of the input's own dtype (imaginary part 0)
                if any(a is out for a in args):
                    raise RuntimeError("In-place abs is not supported for complex tensors.")
                exp = ins[0]._dtype if out._dtype.category == 3 else out._dtype
                if out._dtype is not exp or not _can_cast(metas[0].dtype, out._dtype):
                    raise RuntimeError(f"{op.name}: Found dtype {out._dtype.name} but expected {exp.name}"
                                       if out._dtype is not exp else f"{op.name}: result type "
                                       f"{metas[0].dtype.name} can't be cast to the desired output type "
                                       f"{out._dtype.name}")
                return out.copy_(run(op, ins, {}, metas)[0])
            if op.name in _OUT_SAME_DTYPE:
                raise RuntimeError(f"{op.name}: Found dtype {out._dtype.name} but expected {metas[0].dtype.name} "
                                   f"(its out= must have the result's dtype)")
            if not _can_cast(metas[0].dtype, out._dtype):
                raise RuntimeError(f"{op.name}: result type {metas[0].dtype.name} can't be cast to the desired output "
                                   f"type {out._dtype.name}")
            # torch computes in the result dtype, then casts into out (exp(float32, out=float64) is the float32
            # exp widened; float16.add_(float64) rounds the float64 sum once)
            return out.copy_(run(op, ins, {}, metas)[0])
        return run(op, ins, {}, metas, out=[out])[0]
    ost = None
    if not _layout:
        pass
    elif key is not None and key in _ost_cache:
        ost = _ost_cache[key]
    elif _layout and _trace_hook[0] is None and dev.type == "cpu" and len(metas[0].shape) >= 2 and \
            any(t._data.ndim >= 2 and (not t._data.flags.c_contiguous or 1 in t._data.shape) for t in ins):
        # torch's TensorIterator lays the result out like its operands (a permuted input: a permuted result)
        from ..tensor._layout import iter_strides
        # (a Python number is a 0-d operand of torch's iterator, except where its kernel takes it as a parameter)
        # (an input of another dtype than the computation's is first copied to it by torch, preserve_format:
        # the copy's layout is what counts)
        from ..tensor._layout import contiguous_strides, like_strides
        opd = []
        for i, (t, a) in enumerate(zip(ins, args)):
            if not (isinstance(a, Tensor) or op.name not in _SCALAR_PARAM_OPS):
                continue
            if t._dtype is not cdt and i in idx and t._data.ndim:
                st = like_strides(t._data.shape, t.stride()) or contiguous_strides(t._data.shape)
                opd.append((t._data.shape, st, cdt.itemsize))
            else:
                opd.append((t._data.shape, t.stride(), t._dtype.itemsize))
        ost = iter_strides(metas[0].shape, opd)
        if ost is not None:
            from ..tensor._layout import dense_order
            ost = (ost, dense_order(metas[0].shape, ost), tuple(metas[0].shape))
        if key is not None and len(_ost_cache) < 65536:
            _ost_cache[key] = ost
    if ost is not None:
        ost, order, shape = ost
        if order is not None:      # (a dense permutation: row-major in that dim order)
            return _apply_permuted(op, args, shape, order)
        from ..tensor._layout import alloc
        o = Tensor._make(alloc(metas[0].shape, ost, metas[0].dtype.np), dev, metas[0].dtype)
        return run(op, ins, {}, metas, out=[o])[0]     # (no prepared plan: those allocate row-major results)
    res = run(op, ins, {}, metas)[0]
    if key is not None and len(_plans) < 65536:
        from ..devices import get_backend
        backend = get_backend(dev)
        prep = getattr(backend, "prepare_elementwise", None)
        if prep is not None and backend.supports(op.name, [t._dtype for t in ins] + [metas[0].dtype]) is not None:
            prep = None  # the op falls back on this device: a plan would skip the fallback (and strict mode)
        plan = prep(op, args, ins, metas[0]) if prep is not None else None
        if plan is not None:
            _plans[key] = plan
    return res


def resize_out(out: Tensor, shape, op: str) -> None:
    """torch's out= convention: an ``out`` of another shape is resized to the result's (one that holds elements
    with torch's deprecation UserWarning)."""
    shape = tuple(shape)
    if tuple(out.shape) == shape:
        return
    if out.numel():
        import warnings
        warnings.warn(f"{op}: An output with one or more elements was resized since it had shape "
                      f"{list(out.shape)}, which does not match the required output shape {list(shape)}. This "
                      f"behavior is deprecated, and in a future PyTorch release outputs will not be resized unless "
                      f"they have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to "
                      f"zero elements with t.resize_(0).", UserWarning, stacklevel=3)
    out.resize_(shape)


# the unary ops torch builds without output casting (TensorIterator's check_all_same_dtype): out= must match
_OUT_SAME_DTYPE = frozenset({"abs", "neg", "sign", "sgn", "round", "ceil", "floor", "trunc", "frac", "bitwise_not",
                             "nan_to_num", "fix", "negative", "absolute", "where"})
# the predicates whose out= must be bool (torch: "signbit does not support non-boolean outputs.")
_OUT_BOOL_ONLY = frozenset({"signbit", "isposinf", "isneginf"})
# the unary ops torch has no out= keyword for (torch.isnan(x, out=o) is a TypeError)
_NO_OUT = frozenset({"isnan", "isinf", "isfinite", "relu"})


def _can_cast(frm: DType, to: DType) -> bool:
    # torch's canCast: no float->int, no non-bool->bool
    if frm.category > to.category:
        return False
    return True


def _unary(op):
    def f(input, *, out=None):
        if out is not None and op.name in _NO_OUT:
            raise TypeError(f"{op.name}() got an unexpected keyword argument 'out'")
        return apply(op, input, out=out)
    f.__name__ = op.name
    f.__doc__ = op.doc or f"Elementwise {op.name} (``torch.{op.name}``)."
    return f


def _binary(op):
    def f(input, other, *, out=None):
        return apply(op, input, other, out=out)
    f.__name__ = op.name
    f.__doc__ = op.doc or f"Elementwise {op.name} with broadcasting (``torch.{op.name}``)."
    return f


def _no_bool(d):
    return "not supported for bool tensors" if d.category == 0 else None


def _int_or_bool(d):
    return "only integral and bool tensors are supported" if d.category == 2 else None


def _F(name):  # dtype-specialised helper: f_exp -> f_exp32/f_exp64 chosen at render time
    return lambda dt: f"{name}{'32' if dt is _dt.float32 else '64'}"


# expressions are callables of the compute dtype of input 0 -> template
def _fexpr(fmt):
    return lambda dt: fmt.format(*["{%d}" % i for i in range(4)], s="32" if dt is not _dt.float64 else "64")


UNARY_FLOAT = {
    # name: (expression, numpy reference)
    "exp": ("f_exp{s}({0})", np.exp),
    "exp2": ("f_exp2{s}({0})", np.exp2),
    "expm1": ("f_expm1{s}({0})", np.expm1),
    "log": ("f_log{s}({0})", np.log),
    "log2": ("f_log2{s}({0})", np.log2),
    "log10": ("f_log10{s}({0})", np.log10),
    "log1p": ("f_log1p{s}({0})", np.log1p),
    "sqrt": ("np.sqrt({0})", np.sqrt),
    "rsqrt": ("f_rsqrt{s}({0})", lambda x: 1 / np.sqrt(x)),
    "sin": ("f_sin{s}({0})", np.sin),
    "cos": ("f_cos{s}({0})", np.cos),
    "tan": ("np.tan({0})", np.tan),
    "asin": ("np.arcsin({0})", np.arcsin),
    "acos": ("np.arccos({0})", np.arccos),
    "atan": ("np.arctan({0})", np.arctan),
    "sinh": ("np.sinh({0})", np.sinh),
    "cosh": ("np.cosh({0})", np.cosh),
    "tanh": ("f_tanh{s}({0})", np.tanh),
    "asinh": ("np.arcsinh({0})", np.arcsinh),
    "acosh": ("np.arccosh({0})", np.arccosh),
    "atanh": ("np.arctanh({0})", np.arctanh),
    "sigmoid": ("f_sigmoid{s}({0})", lambda x: 1 / (1 + np.exp(-x))),
    "erf": ("f_erf{s}({0})", None),
    "erfc": ("f_erfc{s}({0})", None),
    "reciprocal": ("f_one{s} / {0}", np.reciprocal),
    "silu": ("{0} * f_sigmoid{s}({0})", lambda x: x / (1 + np.exp(-x))),
    "gelu": ("f_gelu{s}({0})", None),
    "gelu_tanh": ("f_gelu_tanh{s}({0})", None),
    "mish": ("{0} * f_tanh{s}(f_softplus{s}({0}))", None),
    "logsigmoid": ("min({0}, f_zero{s}) - f_log1p{s}(f_exp{s}(-abs({0})))", None),
    "softsign": ("{0} / (f_one{s} + abs({0}))", lambda x: x / (1 + np.abs(x))),
    "tanhshrink": ("{0} - f_tanh{s}({0})", lambda x: x - np.tanh(x)),
    "selu": ("f_selu{s}({0})", None),
    "hardsigmoid": ("f_hardsigmoid{s}({0})", None),
    "hardswish": ("f_hardswish{s}({0})", None),
    "relu6": ("f_clamp{s}({0}, f_zero{s}, f_six{s})", lambda x: np.clip(x, 0, 6)),
    "lgamma": ("f_lgamma{s}({0})", None),
}

for _n, (_e, _r) in UNARY_FLOAT.items():
    _op = define(_n, 1, _fexpr(_e), rule=_float, ref=_r)
    export(_unary(_op), name=_n, method=_n not in ("gelu", "gelu_tanh", "mish", "logsigmoid", "softsign",
                                                    "tanhshrink", "selu", "hardsigmoid", "hardswish", "relu6", "silu"))


def _rounded_per_op(name, comp):
    """torch's softsign / tanhshrink are Python compositions of ops, so a float16/bfloat16 result is rounded
    after each of them: ``comp`` (those ops) runs for these dtypes, the one-kernel op for the others."""
    from .registry import OPS
    whole = _unary(OPS[name])

    def f(input, *, out=None):
        if out is None and isinstance(input, Tensor) and input._dtype in _dt.LOW_FLOATS:
            return comp(input)
        return whole(input, out=out)
    f.__name__, f.__doc__ = name, whole.__doc__
    export(f, name=name, method=False)


_rounded_per_op("softsign", lambda x: x / (x.abs() + 1))
_rounded_per_op("tanhshrink", lambda x: x - x.tanh())

_abs = define("abs", 1, lambda dt: "abs({0})" if dt.category != 0 else "{0}", ref=np.abs, allow=_no_bool,
              rule=lambda dts: (dts, _dt.to_real(dts[0])))   # |complex64| is float32
_neg = define("neg", 1, lambda dt: "-{0}", ref=np.negative, allow=lambda d: (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
    "use the `~` or `logical_not()` operator instead" if d.category == 0 else None))
_floor = define("floor", 1, lambda dt: "np.floor({0})" if dt.category == 2 else "{0}", ref=np.floor, allow=_no_bool)
_ceil = define("ceil", 1, lambda dt: "np.ceil({0})" if dt.category == 2 else "{0}", ref=np.ceil, allow=_no_bool)
_trunc = define("trunc", 1, lambda dt: "np.trunc({0})" if dt.category == 2 else "{0}", ref=np.trunc, allow=_no_bool)
_round = define("round", 1, lambda dt: "np.rint({0})" if dt.category == 2 else "{0}", ref=np.round, allow=_no_bool)
_frac = define("frac", 1, lambda dt: "{0} - np.trunc({0})", ref=lambda x: x - np.trunc(x),
               allow=lambda d: "only floating-point tensors" if d.category != 2 else None)
_sign = define("sign", 1, lambda dt: "{0}" if dt.category == 0 else
               ("f_sign{s}({0})".replace("{s}", "32" if dt is not _dt.float64 else "64") if dt.category == 2
                else "(({0} > 0) - ({0} < 0))"), ref=np.sign)
_relu = define("relu", 1, lambda dt: "max({0}, 0)" if dt.category != 2 else
               ("f_relu64({0})" if dt is _dt.float64 else "f_relu32({0})"),
               ref=lambda x: np.maximum(x, 0), allow=_no_bool)
_bitwise_not = define("bitwise_not", 1, lambda dt: "~{0}" if dt.category == 1 else "not {0}",
                      ref=np.invert, allow=_int_or_bool)
_logical_not = define("logical_not", 1, lambda dt: "not {0}", rule=_logical, ref=np.logical_not)
_isnan = define("isnan", 1, lambda dt: "{0} != {0}" if dt.category == 2 else "False", rule=_to_bool, ref=np.isnan)
_isinf = define("isinf", 1, lambda dt: "abs({0}) == np.inf" if dt.category == 2 else "False", rule=_to_bool,
                ref=np.isinf)
_isfinite = define("isfinite", 1, lambda dt: "abs({0}) < np.inf" if dt.category == 2 else "True", rule=_to_bool,
                   ref=np.isfinite)
_isposinf = define("isposinf", 1, lambda dt: "{0} == np.inf" if dt.category == 2 else "False", rule=_to_bool)
_isneginf = define("isneginf", 1, lambda dt: "{0} == -np.inf" if dt.category == 2 else "False", rule=_to_bool)
_signbit = define("signbit", 1, lambda dt: "np.signbit({0})" if dt.category == 2 else
                  ("{0} < 0" if dt.category == 1 else "False"), rule=_to_bool, ref=np.signbit)
def _square_rule(dts):  # torch.square(bool) is int64 (bool ** 2)
    d = _dt.int64 if dts[0].category == 0 else dts[0]
    return [d], d


_square = define("square", 1, lambda dt: "{0} * {0}", rule=_square_rule, ref=np.square)
# identity with a dtype change: the cast op (also used by .to(dtype))
_cast = define("cast", 1, lambda dt: "{0}", ref=None)
_cast_same = _cast.infer
# the target dtype travels in attrs["dtype"] so a traced cast node infers its own type
_cast.infer = lambda metas, attrs: ([Meta(metas[0].shape, attrs["dtype"])] if "dtype" in attrs
                                    else _cast_same(metas, attrs))

for _op in (_abs, _neg, _floor, _ceil, _trunc, _frac, _sign, _relu, _bitwise_not, _logical_not, _isnan,
            _isinf, _isfinite, _isposinf, _isneginf, _signbit, _square):
    export(_unary(_op), name=_op.name)
export(_unary(_abs), name="absolute")
export(_unary(_neg), name="negative")
export(_unary(_trunc), name="fix")


@export
def round(input, *, decimals=None, out=None):
    """Round half to even; ``decimals`` (default 0) scales by 10**decimals first (``torch.round``)."""
    if decimals is not None and isinstance(input, Tensor) and input._dtype.category != 2:
        # torch's decimals kernel is floating-only, even for decimals=0
        raise NotImplementedError(f"round: decimals= is not implemented for {input._dtype.name} tensors "
                                  f"(floating point only)")
    if not decimals:
        return apply(_round, input, out=out)
    # torch's kernel, in the op-math type (float32 for float16/bfloat16, rounded once at the end):
    # nearbyint(x * 10**d) / 10**d, and for d < 0 nearbyint(x / 10**-d) * 10**-d (a division, not x * 0.01)
    decimals = int(decimals)
    x = input.float() if input._dtype.np in _dt.LOW_NP else input
    p = 10.0 ** abs(decimals)
    r = apply(_round, x / p) * p if decimals < 0 else apply(_round, x * p) / p
    r = r.to(input._dtype)
    if out is None:
        return r
    if out._dtype is not r._dtype:   # (torch's round keeps its input's dtype: out= must have it, as without decimals)
        raise RuntimeError(f"round: Found dtype {out._dtype.name} but expected {r._dtype.name} (its out= tensor "
                           f"must have the input's dtype)")
    resize_out(out, r.shape, "round")
    out.copy_(r)
    return out


def cast(t: Tensor, dtype) -> Tensor:
    """A copy of ``t`` converted to ``dtype`` (float->int truncates toward zero)."""
    dt = _dt.to_dtype(dtype)
    if t._dtype is dt:
        return t
    return run(_cast, [t], {"dtype": dt}, [Meta(t._data.shape, dt)])[0]


# ------------------------------------------------------------------ binary
def _div_rule(dts):
    return _float(dts)


BINARY = {
    # name: (expression(dt) -> template, rule, reference, allow)
    "add": (lambda dt: "{0} + {1}" if dt.category != 0 else "{0} or {1}", _same, np.add, None),
    "sub": (lambda dt: "{0} - {1}", _same, np.subtract, lambda d: (
        "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
        "operator instead" if d.category == 0 else None)),
    "mul": (lambda dt: "{0} * {1}" if dt.category != 0 else "{0} and {1}", _same, np.multiply, None),
    "true_divide": (lambda dt: "{0} / {1}", _div_rule, np.true_divide, None),
    "floor_divide": (lambda dt: "f_floordiv({0}, {1})" if dt.category == 2 else "f_ifloordiv({0}, {1})", _same,
                     np.floor_divide, _no_bool),
    "trunc_divide": (lambda dt: "np.trunc({0} / {1})" if dt.category == 2 else "f_itruncdiv({0}, {1})", _same,
                     None, _no_bool),
    "remainder": (lambda dt: "f_remainder({0}, {1})" if dt.category == 2 else "f_iremainder({0}, {1})", _same,
                  np.remainder, _no_bool),
    "fmod": (lambda dt: "f_fmod({0}, {1})" if dt.category == 2 else "f_ifmod({0}, {1})", _same, np.fmod, _no_bool),
    # (float32 and the low floats computed in it: f_pow32, vectorizable; float64 Numba's ** (pow))
    "pow": (lambda dt: ("f_pow32({0}, {1})" if dt in (_dt.float32, _dt.float16, _dt.bfloat16) else "f_pow({0}, {1})")
            if dt.category == 2 else "f_ipow({0}, {1})", _same, np.power, None),
    "atan2": (lambda dt: "np.arctan2({0}, {1})", _float, np.arctan2, None),
    "hypot": (lambda dt: "np.hypot({0}, {1})", _float, np.hypot, None),
    "copysign": (lambda dt: "np.copysign({0}, {1})", _float, np.copysign, None),
    "maximum": (lambda dt: "f_maximum({0}, {1})" if dt.category == 2 else "max({0}, {1})", _same, np.maximum, None),
    "minimum": (lambda dt: "f_minimum({0}, {1})" if dt.category == 2 else "min({0}, {1})", _same, np.minimum, None),
    "fmax": (lambda dt: "f_fmax({0}, {1})" if dt.category == 2 else "max({0}, {1})", _same, np.fmax, None),
    "fmin": (lambda dt: "f_fmin({0}, {1})" if dt.category == 2 else "min({0}, {1})", _same, np.fmin, None),
    "eq": (lambda dt: "{0} == {1}", _to_bool, np.equal, None),
    "ne": (lambda dt: "{0} != {1}", _to_bool, np.not_equal, None),
    "lt": (lambda dt: "{0} < {1}", _to_bool, np.less, None),
    "le": (lambda dt: "{0} <= {1}", _to_bool, np.less_equal, None),
    "gt": (lambda dt: "{0} > {1}", _to_bool, np.greater, None),
    "ge": (lambda dt: "{0} >= {1}", _to_bool, np.greater_equal, None),
    "logical_and": (lambda dt: "{0} and {1}", _logical, np.logical_and, None),
    "logical_or": (lambda dt: "{0} or {1}", _logical, np.logical_or, None),
    "logical_xor": (lambda dt: "{0} != {1}", _logical, np.logical_xor, None),
    "bitwise_and": (lambda dt: "{0} & {1}", _same, np.bitwise_and, _int_or_bool),
    "bitwise_or": (lambda dt: "{0} | {1}", _same, np.bitwise_or, _int_or_bool),
    "bitwise_xor": (lambda dt: "{0} ^ {1}", _same, np.bitwise_xor, _int_or_bool),
    "bitwise_left_shift": (lambda dt: "f_shl({0}, {1})", _same, None,
                           lambda d: "only integral tensors are supported" if d.category != 1 else None),
    "bitwise_right_shift": (lambda dt: "f_shr({0}, {1})", _same, None,
                            lambda d: "only integral tensors are supported" if d.category != 1 else None),
    "leaky_relu": (lambda dt: "{0} if {0} > 0 else {0} * {1}", _same, None, None),
    "xlogy": (lambda dt: "f_xlogy({0}, {1})", _float, None, None),
}

# torch's signatures for these take tensors only: ``torch.maximum(t, 2)`` is a TypeError (use clamp)
_TENSOR_ONLY = frozenset({"maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "logical_and", "logical_or",
                          "logical_xor"})


def _binary_tensors_only(op):
    f0 = _binary(op)

    def f(input, other, *, out=None):
        for nm, a in (("input", input), ("other", other)):
            if _is_scalar(a):
                raise TypeError(f"{op.name}(): argument '{nm}' must be Tensor, not {type(a).__name__}")
        if op.name == "hypot" and result_type(input, other).category != 2:
            # (checked here, not in the op's dtype rule, so device claims keep integer hypot for the ONNX path)
            raise _dt.DTypeNotImplementedError(f"hypot(): not implemented for {result_type(input, other).name} inputs (floating only)")
        return f0(input, other, out=out)
    f.__name__, f.__doc__ = f0.__name__, f0.__doc__
    return f


_BIN = {}
for _n, (_e, _rule, _r, _allow) in BINARY.items():
    _BIN[_n] = define(_n, 2, _e, rule=_rule, ref=_r, allow=_allow)
    if _n not in ("leaky_relu", "trunc_divide"):
        export((_binary_tensors_only if _n in _TENSOR_ONLY else _binary)(_BIN[_n]), name=_n)

def _sub_check(args):
    for x in args:
        if (isinstance(x, Tensor) and x._dtype is _dt.bool_) or isinstance(x, (bool, np.bool_)):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                               "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


_BIN["sub"].ew.check = _sub_check

for _alias, _n in [("multiply", "mul"), ("subtract", "sub"), ("greater", "gt"), ("greater_equal", "ge"),
                   ("less", "lt"), ("less_equal", "le"), ("not_equal", "ne"), ("max_elementwise", "maximum"),
                   ("arctan2", "atan2")]:
    if _alias != "max_elementwise":
        export((_binary_tensors_only if _n in _TENSOR_ONLY else _binary)(_BIN[_n]), name=_alias)


class IntegerDivisionByZero(ZeroDivisionError, RuntimeError):
    """Integer division by zero: torch raises ``RuntimeError('ZeroDivisionError')``; this is both."""


def _any_zero(t: Tensor) -> bool:
    if t._device.type == "cpu":
        return bool(np.any(t._data == 0))
    z = apply(_BIN["eq"], t, 0)
    return bool(z.any()) if hasattr(z, "any") else bool(np.any(z.numpy(force=True)))


def _check_int_div(op, a, b):
    # integer division by zero raises in torch (RuntimeError: ZeroDivisionError), it is never garbage
    if not isinstance(b, Tensor) and not _is_scalar(b):
        return  # lists/arrays: converted by apply(); checked by the caller through _as_operand
    pa = result_type(a, b) if _is_scalar(a) or isinstance(a, Tensor) else result_type(b)
    if pa.category != 1:
        return  # (floats divide by zero; bool: the op's dtype check refuses it first, as torch does)
    try:
        empty = 0 in np.broadcast_shapes(*[tuple(x.shape) for x in (a, b) if isinstance(x, Tensor)])
    except ValueError:
        empty = False  # not broadcastable: the op itself reports it
    if empty:
        return  # an empty result computes no quotient: torch raises nothing
    if not isinstance(b, Tensor):
        if b == 0:
            raise IntegerDivisionByZero(f"ZeroDivisionError: {op}: integer division by zero")
        if pa.category == 1 and not isinstance(b, (bool, np.bool_)):
            # torch casts the scalar to the tensor's dtype first: uint8 x // 256 divides by 256 wrapped to 0
            bits = 8 * pa.itemsize
            lo = -(1 << (bits - 1)) if pa.is_signed else 0
            if (int(b) - lo) % (1 << bits) + lo == 0:
                raise IntegerDivisionByZero(f"ZeroDivisionError: {op}: integer division by zero (the divisor {b} "
                                            f"wraps to 0 in {pa.name})")
        return
    if b._data.ndim == 0 and b._dtype is not pa:
        b = _cast_0d(b, pa)          # a 0-d divisor is read in the promoted dtype (uint8 x // tensor(256): 0)
    if _any_zero(b):
        raise IntegerDivisionByZero(f"ZeroDivisionError: {op}: integer division by zero (divisor tensor of "
                                    f"shape {tuple(b.shape)} contains zeros)")


def _as_operand(x, like):
    """Lists/arrays -> tensors (on ``like``'s device) so that checks see them; tensors and scalars as they are."""
    if isinstance(x, Tensor) or _is_scalar(x):
        return x
    from ..tensor.creation import tensor
    dev = like._device if isinstance(like, Tensor) else None
    return tensor(x, device=dev)


def _scale_alpha(op, input, other, alpha):
    """``alpha * other`` for add/sub, with torch's checks on alpha's type."""
    if alpha is None or (alpha == 1 and not isinstance(alpha, (bool, np.bool_))):
        return other
    other = _as_operand(other, input)
    rt = result_type(_as_operand(input, other), other)
    if isinstance(alpha, (bool, np.bool_)):
        if rt.category != 0:
            raise RuntimeError(f"{op}: Boolean alpha only supported for Boolean results.")
    elif isinstance(alpha, (float, np.floating, complex, np.complexfloating)) and rt.category < 2:
        # (a complex result takes a float alpha; an integer one neither a float nor a complex alpha)
        raise RuntimeError(f"{op}: For integral input tensors, argument alpha must not be a floating point number.")
    if rt.category in (1, 2):
        # torch: alpha converts to the result dtype (float16 alpha=70000, int8 alpha=1000 raise; uint8 alpha=-1
        # wraps to 255, which scales as -1 does modulo 256)
        if op == "sub" and rt.category == 1 and isinstance(alpha, (int, np.integer)) and \
                not isinstance(alpha, (bool, np.bool_)):
            # torch adds -alpha: it is -alpha that must fit (int8 alpha=-128 raises, int32 alpha=2**31 does not);
            # alpha itself then taken modulo 2**bits (the product wraps the same)
            _dt.check_scalar(-int(alpha), rt, op)
            bits = 8 * rt.itemsize
            alpha = int(alpha) % (1 << bits)
            if rt.is_signed and alpha >= 1 << (bits - 1):
                alpha -= 1 << bits
            alpha = _dt.fit_scalar(alpha, rt, op)
        else:
            alpha = _dt.fit_scalar(alpha, rt, op)
    if isinstance(other, Tensor) and other._dtype is not rt:
        other = other.to(rt)  # torch scales in the result dtype: a promoted product must not re-promote the sum
    if not isinstance(other, Tensor):  # a Python scalar stays one (a 0-d product would join the promotion)
        return bool(other) and bool(alpha) if rt.category == 0 else other * alpha
    if rt.category == 0:
        return apply(_BIN["mul"], other, bool(alpha))
    return apply(_BIN["mul"], other, alpha)


@export
def add(input, other, *, alpha=1, out=None):
    """``input + alpha * other`` (``torch.add``)."""
    other = _scale_alpha("add", input, other, alpha)
    return apply(_BIN["add"], input, other, out=out)


@export
def sub(input, other, *, alpha=1, out=None):
    """``input - alpha * other`` (``torch.sub``)."""
    _sub_check((input, other))  # before alpha scales a bool ``other`` into a number
    other = _scale_alpha("sub", input, other, alpha)
    return apply(_BIN["sub"], input, other, out=out)


export(sub, name="subtract")


@export
def rsub(input, other, *, alpha=1):
    return sub(other, input, alpha=alpha)


@export
def div(input, other, *, rounding_mode=None, out=None):
    """True division, or ``rounding_mode='trunc'|'floor'`` (``torch.div``)."""
    if rounding_mode is None:
        return apply(_BIN["true_divide"], input, other, out=out)
    if rounding_mode in ("floor", "trunc"):
        other = _as_operand(other, input)
        input = _as_operand(input, other)
    if rounding_mode == "floor":
        _check_int_div("div", input, other)
        return apply(_BIN["floor_divide"], input, other, out=out)
    if rounding_mode == "trunc":
        _check_int_div("div", input, other)
        return apply(_BIN["trunc_divide"], input, other, out=out)
    raise _RoundingModeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                             f"'{rounding_mode}'")


class _RoundingModeError(RuntimeError, ValueError):
    """torch raises RuntimeError for an unknown ``rounding_mode`` (neetorch raised ValueError before: both)."""


export(div, name="divide")
export(div, name="true_divide")


@export
def floor_divide(input, other, *, out=None):
    other = _as_operand(other, input)
    input = _as_operand(input, other)
    _check_int_div("floor_divide", input, other)
    return apply(_BIN["floor_divide"], input, other, out=out)


@export
def remainder(input, other, *, out=None):
    other = _as_operand(other, input)
    input = _as_operand(input, other)
    _check_int_div("remainder", input, other)
    return apply(_BIN["remainder"], input, other, out=out)


@export
def fmod(input, other, *, out=None):
    other = _as_operand(other, input)
    input = _as_operand(input, other)
    _check_int_div("fmod", input, other)
    return apply(_BIN["fmod"], input, other, out=out)


@export
def pow(input, exponent, *, out=None):
    """``input ** exponent`` with PyTorch's promotion (``torch.pow``)."""
    if _is_scalar(exponent) and not isinstance(exponent, (bool, np.bool_, complex, np.complexfloating)) \
            and exponent < 0:
        # torch refuses only a *scalar* negative exponent for integer bases (tensors: 0 / 1 / -1 results)
        if result_type(input, exponent).category == 1:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
    if isinstance(input, Tensor) and input._dtype is _dt.bool_ and isinstance(exponent, (bool, np.bool_)) \
            and (out is None or out is input):
        # torch special-cases a scalar exponent of 1 (a copy) and 0 (ones); other bool powers are refused
        if out is input:                   # (pow_)
            return input if exponent else input.fill_(True)
        return input.clone() if exponent else apply(_BIN["eq"], input, input)
    if isinstance(exponent, (int, np.integer)) and not isinstance(exponent, (bool, np.bool_)) and \
            isinstance(input, Tensor) and input._dtype.category == 1:
        _dt.check_scalar(exponent, input._dtype, "pow")   # (torch: the exponent must fit the integer dtype)
    if result_type(input, exponent) is _dt.bool_:
        raise _dt.DTypeNotImplementedError("pow: not implemented for bool tensors (got bool ** bool)")
    if isinstance(input, Tensor) and input._dtype in _dt.LOW_FLOATS and _is_scalar(exponent) and \
            result_type(input, exponent) is input._dtype:
        _dt.check_scalar(exponent, input._dtype, "pow")   # (torch: the exponent converts to float16/bfloat16)
    if isinstance(input, Tensor) and input._dtype is _dt.bfloat16 and _is_scalar(exponent) and \
            not isinstance(exponent, (bool, np.bool_)) and exponent in (3, -2):
        # torch's bfloat16 kernel computes these as x * x * x and 1 / (x * x), rounding each product
        sq = apply(_BIN["mul"], input, input)
        r = apply(_BIN["mul"], sq, input) if exponent == 3 else apply(_BIN["true_divide"], 1.0, sq)
        return r if out is None else out.copy_(r)
    if isinstance(input, Tensor) and input._dtype in (_dt.float32, _dt.float64, _dt.bfloat16) and out is None and \
            _is_scalar(exponent) and not isinstance(exponent, (bool, np.bool_)) and exponent in (0.5, -0.5):
        # torch: x ** 0.5 is sqrt(x) and x ** -0.5 rsqrt(x) for these dtypes (-inf ** 0.5 is NaN, not C's inf)
        from .registry import OPS as _ops
        return apply(_ops["sqrt" if exponent == 0.5 else "rsqrt"], input)
    fixes = []
    if result_type(input, exponent).category == 3 and (isinstance(input, Tensor) or input == 0):
        # torch's complex pow is exp(y * log(x)) at a zero base: 0 ** 0 is NaN+NaNj for a tensor exponent (a
        # Python-scalar 0 gives ones) and 0 ** y with Re(y) < 0 is inf+NaNj; numpy's power gives 1 and NaN+NaNj.
        # (The masks are taken first: pow_ overwrites input.)
        zb = apply(_BIN["eq"], input, 0)
        if isinstance(exponent, Tensor):
            fixes.append((apply(_BIN["logical_and"], zb, apply(_BIN["eq"], exponent, 0)), math.nan))
            re = exponent.real if exponent._dtype.category == 3 else exponent
            fixes.append((apply(_BIN["logical_and"], zb, apply(_BIN["lt"], re, 0)), math.inf))
        elif complex(exponent).real < 0:
            fixes.append((zb, math.inf))
        fixes = [(m, v) for m, v in fixes if bool(np.any(m.numpy(force=True)))]
    r = apply(_BIN["pow"], input, exponent, out=out)
    if fixes and r._dtype.category == 3:
        fixed = r
        for m, v in fixes:
            fixed = where(m, complex(v, math.nan), fixed)
        r = fixed if out is None else out.copy_(fixed)
    return r


@export(method=False)
def float_power(input, exponent):
    a = input.to(_dt.float64) if isinstance(input, Tensor) else float(input)
    b = exponent.to(_dt.float64) if isinstance(exponent, Tensor) else float(exponent)
    return apply(_BIN["pow"], a, b)


# ------------------------------------------------------------------ ternary
def _where_rule(dts):
    return dts, dts[0]


_where = define("where", 3, lambda dt: "{1} if {0} else {2}", rule=_same, ref=np.where, promote=(1, 2))
_clamp = define("clamp", 3, lambda dt: "f_clamp({0}, {1}, {2})" if dt.category == 2 else "min(max({0}, {1}), {2})",
                rule=_same, ref=None, allow=_no_bool)
_softplus = define("softplus", 3, _fexpr("f_softplus_bt{s}({0}, {1}, {2})"), rule=_float, ref=None)
# torch's lerp (ATen/native/Lerp.h, LerpKernel.cpp's lerp_vec): from the nearer end, one fused multiply-add
# each way: |w| < 0.5: fma(w, end - start, start); else fma(w - 1, end - start, end) (exact at w == 1)
# (fmuladd: llvm.fmuladd, one rounding on FMA hardware; "contract" alone left some vector loops unfused)
_lerp = define("lerp", 3, lambda dt: "fmuladd({2}, {1} - {0}, {0}) if abs({2}) < 0.5 else "
               "fmuladd({2} - %s, {1} - {0}, {1})" % ("f_one64" if dt is _dt.float64 else "f_one32"),
               rule=_float, ref=None)
_addcmul = define("addcmul", 4, lambda dt: "{0} + {3} * {1} * {2}", rule=_same, ref=None)
_addcdiv = define("addcdiv", 4, lambda dt: "{0} + {3} * {1} / {2}", rule=_float, ref=None)
_elu = define("elu", 4, _fexpr("f_elu{s}({0}, {1}, {2}, {3})"), rule=_float, ref=None)
_hardtanh = _clamp


@export(method=False)   # Tensor.where(condition, y) is where(condition, self, y): bound in tensor/methods.py
def where(condition, input=None, other=None, *, out=None):
    """``input`` where ``condition`` else ``other`` (``torch.where``); one argument: ``nonzero`` tuple."""
    if input is None and other is None:
        from .indexing import nonzero
        return nonzero(condition, as_tuple=True)
    if isinstance(condition, Tensor) and condition._dtype is not _dt.bool_:
        if condition._dtype is _dt.uint8:
            condition = condition.bool()
        else:
            raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                               f"{condition._dtype.name}")
    if _is_scalar(input) or _is_scalar(other):  # torch refuses a scalar that overflows an integer result
        rdt = result_type(input, other)
        if rdt.category == 1:
            for v in (input, other):
                if _is_scalar(v):
                    _dt.check_scalar(v, rdt, "where")
    return apply(_where, condition, input, other, out=out)


@export
def clamp(input, min=None, max=None, *, out=None):
    """Clamp into ``[min, max]``; either bound may be None or a tensor (``torch.clamp``)."""
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    if min is not None and max is not None and isinstance(min, Tensor) != isinstance(max, Tensor):
        # torch has a Scalar and a Tensor overload: a number beside a tensor bound selects the Scalar one, where
        # a 0-d tensor is read as a number (it promotes like one) and a tensor with dims is refused
        t = min if isinstance(min, Tensor) else max
        if t.ndim:
            raise TypeError(f"clamp() received an invalid combination of arguments - got (Tensor, "
                            f"{type(min).__name__}, {type(max).__name__}): the bounds must be both tensors or "
                            f"both numbers (a 0-d tensor passes as a number)")
        if t is min:
            min = min.item()
        else:
            max = max.item()
    if _is_scalar(min) or _is_scalar(max):  # torch refuses scalar bounds that overflow the result dtype
        rdt = result_type(*[a for a in (input, min, max) if a is not None])
        for bound in (min, max):
            if _is_scalar(bound):
                _dt.check_scalar(bound, rdt, "clamp")
    if isinstance(input, Tensor) and input._dtype is _dt.bool_ and \
            result_type(*[a for a in (input, min, max) if a is not None]) is _dt.bool_ and \
            (min is not None and max is not None or _is_scalar(min) or _is_scalar(max)):
        # torch's one-sided tensor bound is a bool maximum/minimum; its scalar and two-sided kernels refuse bool
        raise NotImplementedError("clamp: not implemented for 'Bool'")
    if out is not None and out is not input and isinstance(input, Tensor):
        rdt = result_type(*[a for a in (input, min, max) if a is not None])
        if out._dtype is not rdt:      # (torch's clamp out= takes the result dtype only; clamp_ casts into self)
            raise RuntimeError(f"clamp: Found dtype {out._dtype.name} but expected {rdt.name}")
    if min is None:
        return apply(_BIN["minimum"], input, max, out=out)
    if max is None:
        return apply(_BIN["maximum"], input, min, out=out)
    return apply(_clamp, input, min, max, out=out)


export(clamp, name="clip")


@export
def clamp_min(input, min):
    if isinstance(input, Tensor) and input._dtype is _dt.bool_ and isinstance(min, (bool, np.bool_)):
        raise NotImplementedError("clamp_min: \"clamp_min_scalar_cpu\" not implemented for 'Bool'")
    if _is_scalar(min):     # (torch refuses a bound that overflows the result dtype, like clamp's)
        _dt.check_scalar(min, result_type(input, min), "clamp_min")
    return apply(_BIN["maximum"], input, min)


@export
def clamp_max(input, max):
    if isinstance(input, Tensor) and input._dtype is _dt.bool_ and isinstance(max, (bool, np.bool_)):
        raise NotImplementedError("clamp_max: \"clamp_max_scalar_cpu\" not implemented for 'Bool'")
    if _is_scalar(max):
        _dt.check_scalar(max, result_type(input, max), "clamp_max")
    return apply(_BIN["minimum"], input, max)


@export
def lerp(input, end, weight):
    # torch: end (and a weight tensor with dims) must have input's dtype; a 0-d weight tensor promotes like a
    # scalar (int8 start/end with a float16 0-d weight: float16); the computation is floating point only
    if isinstance(input, Tensor):
        for nm, o in (("end", end), ("weight", weight)):
            if isinstance(o, Tensor) and o._dtype is not input._dtype and (nm == "end" or o.ndim):
                raise RuntimeError(f"lerp: expected dtype {input._dtype.name} for `{nm}` but got dtype {o._dtype.name}")
        # (a Python scalar weight never makes integer inputs floating)
        rt = result_type(input, end, weight) if isinstance(weight, Tensor) else input._dtype
        if rt.category < 2:
            raise RuntimeError(f"lerp: only floating-point inputs are supported, got {rt.name}")
        if _is_scalar(weight) and rt.category == 2:      # (torch converts the weight to the op's compute float)
            _dt.check_scalar(weight, _dt.float64 if rt is _dt.float64 else _dt.float32, "lerp")
    return apply(_lerp, input, end, weight)


def _int_value(value, *tensors, op="addcmul"):
    # torch casts the scalar ``value`` to the (integer) result dtype: addcmul(int, int, int, value=0.5) adds 0;
    # the conversion is checked (out of the integer range, or a complex value for a real result: refused)
    rt = result_type(*tensors)
    if isinstance(value, complex) and rt.category != 3:
        if value.imag != 0:
            raise RuntimeError(f"{op}: value {value!r} cannot be converted to type {rt.name} without overflow")
        value = value.real
    if rt.category == 1 and not isinstance(value, bool):
        _dt.check_scalar(value, rt, op)
    if isinstance(value, float) and rt.category < 2:   # (not for complex results: addcmul(c, c, c, value=0.5))
        return int(value)
    return value


@export
def addcmul(input, tensor1, tensor2, *, value=1):
    if all(isinstance(t, Tensor) for t in (input, tensor1, tensor2)) and \
            result_type(input, tensor1, tensor2) is _dt.bool_:
        raise _dt.DTypeNotImplementedError("addcmul: not implemented for bool operands (torch: \"addcmul_cpu_out\" "
                                           "not implemented for 'Bool')")
    return apply(_addcmul, input, tensor1, tensor2, _int_value(value, input, tensor1, tensor2))


@export
def addcdiv(input, tensor1, tensor2, *, value=1):
    if all(isinstance(t, Tensor) and t._dtype.category < 2 for t in (tensor1, tensor2)):
        raise RuntimeError("addcdiv: integer division with addcdiv is no longer supported (tensor1 and tensor2 are "
                           f"{tensor1._dtype.name} and {tensor2._dtype.name}); use input + value * tensor1 / tensor2")
    return apply(_addcdiv, input, tensor1, tensor2, _int_value(value, input, tensor1, tensor2, op="addcdiv"))


@export
def masked_fill(input, mask, value):
    """``input`` with ``value`` where ``mask`` is True (``Tensor.masked_fill``)."""
    if not isinstance(mask, Tensor) or mask._dtype is not _dt.bool_:
        raise RuntimeError(f"masked_fill only supports boolean masks, but got mask with dtype "
                           f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.ndim} dimension(s).")
        value = value.item()
    value = _dt.fit_scalar(value, input._dtype, "masked_fill")
    # out of place the result has the broadcast shape of input and mask (torch); masked_fill_ refuses a mask
    # that would grow self (Tensor.masked_fill_ checks the result's shape)
    broadcast_shapes(tuple(input.shape), tuple(mask.shape), op="masked_fill")
    return apply(_where, mask, _scalar_tensor(value, input._dtype, input._device), input, _layout=False)   # (torch: a contiguous clone, then masked_fill_)


@export
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = input, other
    for i, (name, x) in enumerate((("input", a), ("other", b))):
        if not isinstance(x, Tensor):
            raise TypeError(f"isclose(): argument '{name}' (position {i + 1}) must be Tensor, not {type(x).__name__}")
    if a._dtype is not b._dtype:  # torch compares like dtypes only
        raise RuntimeError(f"isclose: {a._dtype.name} did not match {b._dtype.name} (input and other must have the "
                           f"same dtype)")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose: {'rtol' if rtol < 0 else 'atol'} must be greater than or equal to zero, "
                           f"but got {rtol if rtol < 0 else atol}")
    if a._dtype is _dt.bool_:
        return apply(_BIN["eq"], a, b)
    diff = abs(a - b)
    # torch: equal (infinities included), or a finite error within tolerance (-inf vs inf is not close)
    r = logical_or(logical_and(diff <= atol + rtol * abs(b), apply(_isfinite, diff)), a == b)
    if equal_nan:
        r = logical_or(r, logical_and(a != a, b != b))
    return r


def logical_or(a, b):
    return apply(_BIN["logical_or"], a, b)


def logical_and(a, b):
    return apply(_BIN["logical_and"], a, b)


@export
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


@export
def equal(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all())


# ------------------------------------------------------------------ nn-style
def leaky_relu(input, negative_slope=0.01, inplace=False):
    r = apply(_BIN["leaky_relu"], input, negative_slope)
    return input.copy_(r) if inplace else r


def gelu(input, approximate="none"):
    if approximate == "none":
        return apply(OPS_["gelu"], input)
    if approximate == "tanh":
        return apply(OPS_["gelu_tanh"], input)
    raise RuntimeError(f"gelu: approximate argument must be either none or tanh, got {approximate!r}")


def softplus(input, beta=1.0, threshold=20.0):
    return apply(_softplus, input, float(beta), float(threshold))


def elu(input, alpha=1.0, inplace=False):
    r = apply(_elu, input, float(alpha), 1.0, 1.0)
    return input.copy_(r) if inplace else r


def celu(input, alpha=1.0, inplace=False):
    if float(alpha) == 0:
        raise RuntimeError("celu: ZeroDivisionError: alpha cannot be 0 for CELU")
    r = apply(_elu, input, float(alpha), 1.0, 1.0 / float(alpha))
    return input.copy_(r) if inplace else r


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if isinstance(input, Tensor) and input._dtype.category != 2:
        # torch: integer input keeps its dtype (the limits are cast to it); bool is refused
        if input._dtype is _dt.bool_:
            raise RuntimeError("Bool inputs not supported for hardtanh")
        if not input._dtype.is_signed and (min_val < 0 or max_val < 0):
            raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
        min_val, max_val = int(min_val), int(max_val)
    r = apply(_clamp, input, min_val, max_val)
    return input.copy_(r) if inplace else r


from .registry import OPS as OPS_  # noqa: E402
