"""``nn.Module``: parameters, buffers and submodules registered by attribute assignment (PyTorch semantics)."""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict, namedtuple

import numpy as np

from ...tensor import dtypes as _dt
from ...tensor.tensor import Tensor
from ..parameter import Buffer, Parameter

__all__ = ["Module", "RemovableHandle"]

# bumped by every attribute write on any Module (train()/eval(), a scalar changed, a parameter, buffer or child
# reassigned): a ``nee.jit`` of a module re-reads its modules' state only when this moved (jit.api)
STATE_EPOCH = [0]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Returned by the ``register_*_hook`` methods; ``handle.remove()`` unregisters the hook."""

    _next_id = itertools.count()

    def __init__(self, *dicts):
        self.id = next(RemovableHandle._next_id)
        self._dicts = [weakref.ref(d) if _weakrefable(d) else (lambda d=d: d) for d in dicts]

    def remove(self) -> None:
        for ref in self._dicts:
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.remove()


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


class _HookDict(OrderedDict):
    """An OrderedDict that can be weak-referenced (plain dicts cannot)."""


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * n + line for line in lines)


def _to_host_array(value):
    """A numpy array for a checkpoint value: neetorch Tensor, numpy array, torch tensor, anything with __array__."""
    if isinstance(value, Tensor):
        return None
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch.Tensor (maybe requires_grad / on a GPU)
        v = value.detach()
        if hasattr(v, "cpu"):
            v = v.cpu()
        if "bfloat16" in str(getattr(v, "dtype", "")):
            if _dt.bfloat16 is None:
                v = v.float()
            else:                       # exact: the bits of a bfloat16 are the top half of a float32's
                return v.float().numpy().astype(_dt.bfloat16.np)
        return v.numpy()
    if hasattr(value, "__array__"):
        return np.asarray(value)
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _to_tensor(value) -> Tensor:
    a = _to_host_array(value)
    if a is None:
        return value
    from ...tensor import creation
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype == np.dtype("float16") or a.dtype in tuple(d.np for d in _dt.ALL_DTYPES):
        if any(s % a.itemsize for s in a.strides) or not a.flags.writeable:
            a = np.array(a, copy=True)
        return creation.from_numpy(a)
    return creation.tensor(a)


def _fmt_shape(shape) -> str:
    return f"torch.Size({list(shape)})"


class Module:
    """Base class of all neural network modules (``torch.nn.Module``)."""

    training: bool
    _version: int = 1
    dump_patches = False
    call_super_init = False

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments {args} {kwargs}")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_hooks"] = _HookDict()
        d["_forward_hooks_with_kwargs"] = {}
        d["_forward_pre_hooks"] = _HookDict()
        d["_forward_pre_hooks_with_kwargs"] = {}
        d["_state_dict_hooks"] = _HookDict()
        d["_load_state_dict_post_hooks"] = _HookDict()

    # ------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def _call_impl(self, *args, **kwargs):
        d = self.__dict__
        pre, post = d.get("_forward_pre_hooks"), d.get("_forward_hooks")
        if not pre and not post:
            return self.forward(*args, **kwargs)
        if pre:
            for hid, hook in list(pre.items()):
                if d["_forward_pre_hooks_with_kwargs"].get(hid):
                    r = hook(self, args, kwargs)
                    if r is not None:
                        if not (isinstance(r, tuple) and len(r) == 2):
                            raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                               f"but got {r}.")
                        args, kwargs = r
                else:
                    r = hook(self, args)
                    if r is not None:
                        args = r if isinstance(r, tuple) else (r,)
        result = self.forward(*args, **kwargs)
        if post:
            for hid, hook in list(post.items()):
                if d["_forward_hooks_with_kwargs"].get(hid):
                    r = hook(self, args, kwargs, result)
                else:
                    r = hook(self, args, result)
                if r is not None:
                    result = r
        return result

    def __call__(self, *args, **kwargs):
        c = self.__dict__.get("_compiled_call_impl")
        if c is not None:
            return c(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> RemovableHandle:
        h = RemovableHandle(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[h.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[h.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(h.id, last=False)
        return h

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        h = RemovableHandle(self._forward_hooks, self._forward_hooks_with_kwargs)
        self._forward_hooks[h.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[h.id] = True
        if prepend:
            self._forward_hooks.move_to_end(h.id, last=False)
        return h

    def register_full_backward_hook(self, hook):
        raise RuntimeError("neetorch is an inference engine: backward hooks are not supported")

    register_backward_hook = register_full_backward_pre_hook = register_full_backward_hook

    def register_state_dict_post_hook(self, hook) -> RemovableHandle:
        h = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[h.id] = hook
        return h

    def register_load_state_dict_post_hook(self, hook) -> RemovableHandle:
        h = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[h.id] = hook
        return h

    # ------------------------------------------------------------ registration
    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        STATE_EPOCH[0] += 1
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"buffer name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('buffer name can\'t contain "."')
        if name == "":
            raise KeyError('buffer name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        if isinstance(tensor, Buffer):
            persistent = getattr(tensor, "persistent", persistent)
            tensor = Tensor._make(tensor._data, tensor._device, tensor._dtype)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param) -> None:
        STATE_EPOCH[0] += 1
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"parameter name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('parameter name can\'t contain "."')
        if name == "":
            raise KeyError('parameter name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        self._parameters[name] = param

    def add_module(self, name: str, module) -> None:
        STATE_EPOCH[0] += 1
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    register_module = add_module

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            s = d.get(store)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        STATE_EPOCH[0] += 1
        d = self.__dict__

        def remove_from(*dicts_or_sets):
            for s in dicts_or_sets:
                if name in s:
                    if isinstance(s, dict):
                        del s[name]
                    else:
                        s.discard(name)

        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, d["_buffers"], d["_modules"], d["_non_persistent_buffers_set"])
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(d, d["_parameters"], d["_buffers"], d["_non_persistent_buffers_set"])
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = value
            return
        buffers = d.get("_buffers")
        if isinstance(value, Buffer) or (buffers is not None and name in buffers):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            if isinstance(value, Buffer):
                persistent = value.persistent
            else:
                persistent = name not in d["_non_persistent_buffers_set"]
            remove_from(d, d["_parameters"], d["_modules"])
            self.register_buffer(name, value, persistent)
            return
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        STATE_EPOCH[0] += 1
        d = self.__dict__
        if name in d.get("_parameters", ()):
            del d["_parameters"][name]
        elif name in d.get("_buffers", ()):
            del d["_buffers"][name]
            d["_non_persistent_buffers_set"].discard(name)
        elif name in d.get("_modules", ()):
            del d["_modules"][name]
        else:
            object.__delattr__(self, name)

    def __getstate__(self):
        # a compiled call (Module.compile) holds locks and compiled code: not copied; the copy compiles anew
        # (__setstate__), as the module's own compile() would
        state = self.__dict__.copy()
        state.pop("_compiled_call_impl", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        ck = self.__dict__.get("_compile_kwargs")
        if ck is not None and "_compiled_call_impl" not in self.__dict__:
            self.compile(**ck)
        for k, v in (("_forward_pre_hooks", _HookDict), ("_forward_hooks", _HookDict), ("_state_dict_hooks", _HookDict),
                     ("_load_state_dict_post_hooks", _HookDict), ("_forward_hooks_with_kwargs", dict),
                     ("_forward_pre_hooks_with_kwargs", dict), ("_non_persistent_buffers_set", set)):
            if k not in self.__dict__:
                self.__dict__[k] = v()

    def __dir__(self):
        module_attrs = dir(self.__class__)
        attrs = list(self.__dict__.keys())
        keys = module_attrs + attrs + list(self._parameters) + list(self._modules) + list(self._buffers)
        keys = [k for k in keys if not k[0].isdigit()]
        return sorted(set(keys))

    # ------------------------------------------------------------ lookup
    def get_submodule(self, target: str) -> "Module":
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module: "Module") -> None:
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        *path, last = target.split(".")
        parent = self.get_submodule(".".join(path))
        setattr(parent, last, module)

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return getattr(mod, name)

    # ------------------------------------------------------------ iteration
    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate: bool = True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members_fn(module):
                if v is None or id(v) in memo:
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                name = module_prefix + ("." if module_prefix else "") + k
                yield name, v

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix=prefix, recurse=recurse,
                                       remove_duplicate=remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix=prefix, recurse=recurse,
                                       remove_duplicate=remove_duplicate)

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_children(self):
        memo = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield name, m

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, sub, remove_duplicate)

    # ------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            p.grad = None

    def share_memory(self) -> "Module":
        return self

    def _get_name(self) -> str:
        return type(self).__name__

    # ------------------------------------------------------------ conversion
    def _apply(self, fn, recurse: bool = True) -> "Module":
        if recurse:
            for m in self.children():
                m._apply(fn)
        for key, p in self._parameters.items():
            if p is None:
                continue
            new = fn(p)
            if new is not p:
                # keep the Parameter object (optimizers, tied weights) and swap its storage, like param.data = ...
                p._set_storage(new._data, new._device, new._dtype)
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``: floating parameters and buffers only
        change dtype; every tensor moves device."""
        dev = kwargs.pop("device", None)
        dt = kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dev, dt = a._device, a._dtype
            elif isinstance(a, _dt.DType) or isinstance(a, np.dtype) or a in (float, int, bool):
                dt = a
            elif a is None or isinstance(a, bool):
                continue
            else:
                dev = a
        if dt is not None:
            dt = _dt.to_dtype(dt)
            if dt.category != 2:
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dt}")

        def convert(t):
            if dt is not None and t.is_floating_point():
                return t.to(device=dev, dtype=dt)
            return t.to(device=dev) if dev is not None else t
        return self._apply(convert)

    def cpu(self) -> "Module":
        return self._apply(lambda t: t.to("cpu"))

    def cuda(self, device=None) -> "Module":
        return self._apply(lambda t: t.to(f"cuda:{device or 0}"))

    def type(self, dst_type) -> "Module":
        return self._apply(lambda t: t.to(dst_type))

    def _float_cast(self, dt):
        return self._apply(lambda t: t.to(dt) if t.is_floating_point() else t)

    def float(self) -> "Module":
        return self._float_cast(_dt.float32)

    def double(self) -> "Module":
        return self._float_cast(_dt.float64)

    def half(self) -> "Module":
        return self._float_cast(_dt.float16)

    def bfloat16(self) -> "Module":
        if _dt.bfloat16 is None:
            raise TypeError("Module.bfloat16(): bfloat16 needs the ml_dtypes package")
        return self._float_cast(_dt.bfloat16)

    def to_empty(self, *, device=None, recurse: bool = True) -> "Module":
        from ...tensor import creation
        return self._apply(lambda t: creation.empty_like(t, device=device), recurse=recurse)

    # ------------------------------------------------------------ state dict
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        extra = getattr(type(self), "get_extra_state", None)
        if extra is not None and extra is not Module.get_extra_state:
            destination[prefix + "_extra_state"] = self.get_extra_state()

    def get_extra_state(self):
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called.")

    def set_extra_state(self, state) -> None:
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called.")

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of every parameter and persistent buffer, by dotted name."""
        if args:  # legacy positional (destination, prefix, keep_vars)
            destination = args[0] if len(args) > 0 else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        meta = getattr(destination, "_metadata", None)
        if meta is not None:
            meta[prefix[:-1]] = {"version": self._version}
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            r = hook(self, destination, prefix, {"version": self._version})
            if r is not None:
                destination = r
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs, assign=False):
        persistent_buffers = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in itertools.chain(self._parameters.items(), persistent_buffers.items())
                       if v is not None}
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            raw = state_dict[key]
            try:
                value = _to_tensor(raw)
            except Exception as ex:  # noqa: BLE001
                error_msgs.append(f'While copying the parameter named "{key}", could not convert the checkpoint '
                                  f"value of type {type(raw).__name__}: {ex}")
                continue
            if not isinstance(value, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                                  f"object from checkpoint but received {type(raw)}")
                continue
            if param.ndim == 0 and value.ndim == 1 and tuple(value.shape) == (1,):
                value = value.reshape(())  # PyTorch's backward compatibility for 0-d params saved as 1-d
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {_fmt_shape(value.shape)} "
                                  f"from checkpoint, the shape in current model is {_fmt_shape(param.shape)}.")
                continue
            try:
                if assign:
                    if value._device != param._device:
                        value = value.to(param._device)
                    if isinstance(param, Parameter):
                        new = Parameter(value, requires_grad=param.requires_grad)
                        self._parameters[name] = new
                    else:
                        self._buffers[name] = value if type(value) is Tensor else value.detach()
                else:
                    param.copy_(value)
            except Exception as ex:  # noqa: BLE001
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                                  f"{_fmt_shape(param.shape)} and whose dimensions in the checkpoint are "
                                  f"{_fmt_shape(value.shape)}, an exception occurred : {ex.args}.")
        extra_key = prefix + "_extra_state"
        has_extra = getattr(type(self), "set_extra_state", Module.set_extra_state) is not Module.set_extra_state
        if has_extra:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    input_name = key[len(prefix):].split(".", 1)
                    if len(input_name) > 1:
                        if input_name[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif input_name[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy parameters and buffers from ``state_dict`` (values: neetorch Tensors, numpy arrays, torch tensors or
        anything with ``__array__``).  Returns ``(missing_keys, unexpected_keys)``; with ``strict`` raises
        ``RuntimeError`` on any mismatch, like PyTorch."""
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys, unexpected_keys, error_msgs = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module, local_state_dict, prefix=""):
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing_keys,
                                         unexpected_keys, error_msgs, assign=assign)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    child_sd = {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)}
                    load(child, child_sd, child_prefix)
            incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                hook(module, incompatible)

        load(self, state_dict)
        del load
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                self._get_name(), "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # ------------------------------------------------------------ repr
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        extra_lines = []
        extra_repr = self.extra_repr()
        if extra_repr:
            extra_lines = extra_repr.split("\n")
        child_lines = []
        for key, module in self._modules.items():
            mod_str = _addindent(repr(module), 2)
            child_lines.append("(" + key + "): " + mod_str)
        lines = extra_lines + child_lines
        main_str = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main_str += extra_lines[0]
            else:
                main_str += "\n  " + "\n  ".join(lines) + "\n"
        return main_str + ")"

    def compile(self, *args, **kwargs):
        """``torch.nn.Module.compile``: this module's calls run compiled from now on (``nee.compile`` of its
        ``__call__``, arguments as ``nee.compile``'s)."""
        from ...jit.compile import CompiledFunction, _check
        _check(kwargs.get("mode"), kwargs.get("options"), kwargs.get("backend", "inductor"))
        if kwargs.get("disable"):
            return None
        self.__dict__["_compile_kwargs"] = dict(kwargs)
        self.__dict__["_compiled_call_impl"] = CompiledFunction(
            self._call_impl, fullgraph=kwargs.get("fullgraph", False), dynamic=kwargs.get("dynamic"),
            name=type(self).__name__)
        return None
