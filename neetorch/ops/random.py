"""Random sampling with PyTorch's argument semantics: ``bernoulli``, ``normal`` (all four overloads),
``multinomial``, ``poisson`` and the in-place samplers ``Tensor.normal_``/``uniform_``/``random_``/
``exponential_``/``geometric_``/``log_normal_``/``cauchy_``/``bernoulli_``.

Samples come from the same generator as ``nee.rand``/``randn`` (``nee.manual_seed``, or a ``generator=``
:class:`neetorch.Generator`; numpy's PCG64 underneath), drawn on the host in float64 and rounded once to the
tensor's dtype, then moved to its device.  The values cannot match torch's RNG bit for bit; the distributions,
supports, shapes, dtypes and argument checks do.  Under ``@nee.jit`` each sampler call becomes a ``random`` node
that calls the sampler again at every call of the compiled function (``@sampler``; ``trace.tracer.RandomOp``).
"""
from __future__ import annotations

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from ..tensor._sampler import sampler
from .registry import export

__all__ = ["bernoulli", "multinomial", "normal", "poisson"]


def _gen(generator):
    from ..tensor.creation import default_generator
    return generator if generator is not None else default_generator


def _draw(generator, fn):
    """Run ``fn(numpy_generator)`` under the generator lock (the same lock ``rand`` takes)."""
    from ..tensor.creation import _rng_lock
    with _rng_lock:
        return fn(_gen(generator)._rng)


def _host_values(t: Tensor) -> np.ndarray:
    return np.asarray(t.numpy(force=True), dtype=np.float64)


def _wrap(a: np.ndarray, dt, device) -> Tensor:
    from ..tensor.creation import _resolve_device, _wrap_host
    with np.errstate(over="ignore", invalid="ignore"):
        return _wrap_host(np.ascontiguousarray(np.asarray(a).astype(dt.np)), dt, _resolve_device(device))


def _fill(self: Tensor, a: np.ndarray) -> Tensor:
    """Write host samples ``a`` (float64 or int64, self's shape) into ``self``."""
    self.copy_(_wrap(a, self._dtype, self._device))
    return self


def _need_float(who, t: Tensor):
    if t._dtype.category != 2:
        raise NotImplementedError(f"\"{who}\" not implemented for '{t._dtype.name}' (floating tensors only)")


# ------------------------------------------------------------------ bernoulli
def _fmt(v) -> str:
    """A float as torch's messages print it (C++ ``operator<<`` on a double: ``%g``)."""
    return format(float(v), "g")


def _check_p(who, p):
    if isinstance(p, Tensor):
        return _host_values(p)
    p = float(p)
    if not 0 <= p <= 1:
        raise RuntimeError(f"{who} expects p to be in [0, 1], but got p={_fmt(p)}")
    return p


def _bernoulli_tensor_p(self: Tensor, p: Tensor, who: str):
    """The probabilities of torch's ``bernoulli_(Tensor p)`` kernel for a non-empty ``self``, with its checks in
    its order: self's dtype (not complex), ``p`` expanding to self's shape, ``p`` floating, ``0 <= p <= 1``."""
    if self._dtype.category == 3:
        raise NotImplementedError(f"\"bernoulli_tensor_cpu_self_\" not implemented for '{self._dtype.name}'")
    from .shape_rules import broadcast_shapes
    try:
        ok = broadcast_shapes(tuple(p.shape), tuple(self.shape), op=who) == tuple(self.shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError(f"{who}: p of shape {tuple(p.shape)} is not broadcastable to self {tuple(self.shape)}")
    if p._dtype.category != 2:
        raise NotImplementedError(f"\"bernoulli_tensor_cpu_p_\" not implemented for '{p._dtype.name}'")
    a = _host_values(p)
    if not (np.all(a >= 0) and np.all(a <= 1)):
        raise RuntimeError(f"Expected p_in >= 0 && p_in <= 1 to be true, but got false ({who}: probabilities must "
                           f"lie in [0, 1])")
    return np.broadcast_to(a, tuple(self.shape))


def _bernoulli_scalar_dtype(self: Tensor):
    if self._dtype.category == 3:
        raise NotImplementedError(f"\"bernoulli_scalar_cpu_\" not implemented for '{self._dtype.name}'")


@export
@sampler(like=0)
def bernoulli(input, p=None, *, generator=None):
    """``torch.bernoulli``: 0/1 samples with probabilities ``input`` (or a float ``p`` for every element),
    in ``input``'s dtype.  As torch (``empty_like(input).bernoulli_(p or input)``): an empty ``input`` of any
    dtype gives an empty result; otherwise probabilities must be floating, and complex results are refused."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not {type(input).__name__}")
    if p is not None and not isinstance(p, Tensor):
        p = _check_p("bernoulli_", p)
    if input.numel() == 0:
        return _wrap(np.zeros(tuple(input.shape)), input._dtype, input._device)
    if p is None:
        probs = _bernoulli_tensor_p(input, input, "bernoulli")
    elif isinstance(p, Tensor):
        probs = _bernoulli_tensor_p(input, p, "bernoulli")
    else:
        _bernoulli_scalar_dtype(input)
        probs = p
    u = _draw(generator, lambda g: g.random(tuple(input.shape)))
    return _wrap((u < probs).astype(np.float64), input._dtype, input._device)


@sampler(like=0, inplace=True)
def bernoulli_(self, p=0.5, *, generator=None):
    """``Tensor.bernoulli_``: fill with 0/1 samples of probability ``p`` (float or tensor broadcast to self).
    torch's checks and order: a float ``p`` in [0, 1] (even for an empty self); nothing else for an empty self;
    then self not complex, a tensor ``p`` broadcastable to self, floating, within [0, 1]."""
    if not isinstance(p, Tensor):
        p = _check_p("bernoulli_", p)
    if self.numel() == 0:
        return self
    if isinstance(p, Tensor):
        probs = _bernoulli_tensor_p(self, p, "bernoulli_")
    else:
        _bernoulli_scalar_dtype(self)
        probs = p
    u = _draw(generator, lambda g: g.random(tuple(self.shape)))
    return _fill(self, (u < probs).astype(np.float64))


export(bernoulli_, name="bernoulli_", function=False)


# ------------------------------------------------------------------ normal
def _check_std(std):
    a = _host_values(std) if isinstance(std, Tensor) else np.float64(std)
    if np.any(a < 0):
        raise RuntimeError(f"normal expects std >= 0.0, but found std {float(np.min(a))}")
    return a


@export(method=False)
@sampler()
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False,
           out=None):
    """``torch.normal``: ``normal(mean_tensor, std_tensor)`` (broadcast), ``normal(mean_tensor, std=1.0)``,
    ``normal(mean=0.0, std_tensor)`` and ``normal(mean, std, size)``; samples ``mean + std * N(0, 1)``."""
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not tm and not ts:
        if size is None:
            raise TypeError("normal(): with float mean and std, the size argument is required")
        from ..tensor.creation import _size
        shape = _size((size,) if isinstance(size, (int, np.integer)) else tuple(size))
        s = _check_std(std)
        dt = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
        if dt.category != 2:
            raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for '{dt.name}'")
        z = _draw(generator, lambda g: g.standard_normal(shape))
        r = _wrap(float(mean) + float(s) * z, dt, device)
    else:
        if size is not None:
            raise TypeError("normal(): size is only accepted with float mean and std")
        for t in (mean, std):
            if isinstance(t, Tensor):
                _need_float("normal", t)
        like = mean if tm else std
        dt = _dt.result_type(mean, std) if tm and ts else like._dtype
        m = _host_values(mean) if tm else np.float64(mean)
        s = _check_std(std)
        try:
            shape = np.broadcast_shapes(np.shape(m), np.shape(s))
        except ValueError:
            raise RuntimeError(f"normal: mean of shape {np.shape(m)} and std of shape {np.shape(s)} cannot be "
                               f"broadcast together") from None
        z = _draw(generator, lambda g: g.standard_normal(shape))
        r = _wrap(m + s * z, dt, like._device)
    if out is not None:
        out.copy_(r)
        return out
    return r


def _need_float_or_complex(who, t: Tensor):
    if t._dtype.category not in (2, 3):
        raise NotImplementedError(f"\"{who}\" not implemented for '{t._dtype.name}' (floating and complex tensors "
                                  f"only)")


def _real_arg(who, name, pos, v):
    """torch's argument parser: a float argument refuses a complex value (``normal_(1j)``)."""
    if isinstance(v, (complex, np.complexfloating)):
        raise TypeError(f"{who}(): argument '{name}' (position {pos}) must be float, not complex")


def _real_shape(t: Tensor) -> tuple:
    """The shape to draw for ``t``: complex tensors draw their real and imaginary parts (torch samples
    ``view_as_real(t)``)."""
    return tuple(t.shape) + ((2,) if t._dtype.category == 3 else ())


def _fill_parts(self: Tensor, r: np.ndarray) -> Tensor:
    """``_fill`` with ``r`` of :func:`_real_shape`: complex tensors take ``r[..., 0] + 1j * r[..., 1]``."""
    if self._dtype.category == 3:
        r = r[..., 0] + 1j * r[..., 1]
    return _fill(self, r)


@sampler(like=0, inplace=True)
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """``Tensor.normal_``: fill with samples of N(mean, std**2).  A complex tensor gets, like torch (which
    samples ``view_as_real(self)`` with ``std / sqrt(2)``), real and imaginary parts each N(mean, std**2 / 2):
    a complex normal of variance ``std**2`` centred on ``mean + mean*1j``."""
    _real_arg("normal_", "mean", 1, mean)
    _real_arg("normal_", "std", 2, std)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if self.numel() == 0:   # (torch checks no dtype on an empty tensor)
        return self
    _need_float_or_complex("normal_kernel_cpu", self)
    if self._dtype.category == 3:
        std = std / np.sqrt(2.0)
    z = _draw(generator, lambda g: g.standard_normal(_real_shape(self)))
    return _fill_parts(self, mean + std * z)


@sampler(like=0, inplace=True)
def uniform_(self, from_=0.0, to=1.0, *, generator=None, **kw):
    """``Tensor.uniform_(from=0, to=1)``: fill with samples of U[from, to).  A complex tensor gets real and
    imaginary parts each U[from, to), independent (torch samples ``view_as_real(self)``)."""
    from_ = kw.pop("from", from_)
    if kw:
        raise TypeError(f"uniform_() got unexpected keyword arguments {sorted(kw)}")
    _real_arg("uniform_", "from", 1, from_)
    _real_arg("uniform_", "to", 2, to)
    _need_float_or_complex("uniform_", self)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    u = _draw(generator, lambda g: g.random(_real_shape(self)))
    r = from_ + (to - from_) * u
    part = _dt.to_real(self._dtype) if self._dtype.category == 3 else self._dtype
    if part is not _dt.float64:   # rounding to a narrower dtype must not reach ``to``
        r = np.minimum(r.astype(part.np).astype(np.float64), np.nextafter(part.np.type(to), part.np.type(-np.inf)))
        r = np.maximum(r, from_)
    return _fill_parts(self, r)


#: std::numeric_limits<T>::digits of the floating dtypes (random_'s exact-integer range is [-2**d, 2**d])
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
_I64_MIN, _I64_MAX = -2 ** 63, 2 ** 63 - 1


def _int_arg(name, v):
    """torch's ``int`` argument of random_: Python ints (and integer 0-d tensors); a float or bool is refused."""
    if isinstance(v, Tensor):
        if v.numel() != 1 or v._dtype.category not in (0, 1) or v._dtype is _dt.bool_:
            raise TypeError(f"random_(): argument '{name}' must be int, not Tensor of dtype {v._dtype.name}")
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"random_(): argument '{name}' must be int, not {type(v).__name__}")
    v = int(v)
    if not _I64_MIN <= v <= _I64_MAX:
        raise ValueError(f"random_(): argument '{name}' = {v} overflows int64 (Overflow when unpacking long long)")
    return v


def _round_to_digits(v: int, digits: int) -> int:
    """``static_cast<int64_t>(static_cast<T>(v))`` for a float type of ``digits`` mantissa bits: ``v`` rounded
    to nearest, ties to even, exactly in integers (the float range itself is checked afterwards)."""
    a = abs(v)
    shift = a.bit_length() - digits
    if shift <= 0:
        return v
    q, r = divmod(a, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << shift) * (1 if v >= 0 else -1)


def _update_from(lo: int, digits: int) -> int:
    # torch's update_from: a 'from' whose float value rounds below it moves up to the next representable one
    lo_p1 = _round_to_digits(lo + 1, digits)
    if lo_p1 < lo:
        n = abs(lo + 1).bit_length() - 1
        lo = lo_p1 + (1 << (n - digits + 1))
    return lo


def _update_to(to: int, digits: int) -> int:
    # torch's update_to: a 'to' whose float value of to - 1 rounds up to it moves down
    to_m1 = _round_to_digits(to - 1, digits)
    if to_m1 >= to:
        n = abs(to - 1).bit_length() - 1
        to = to_m1 - (1 << (n - digits + 1))
    return to


def _check_random_bounds(lo: int, hi: int, dt) -> None:
    """torch's check_from_to_in_range: ``from`` and ``to - 1`` (inclusive ``hi``) within the dtype's range;
    floats warn outside [-2**digits, 2**digits], where not every integer is representable."""
    if dt.category == 2:
        if dt is _dt.bfloat16:
            import ml_dtypes
            fi = ml_dtypes.finfo(dt.np)
        else:
            fi = np.finfo(dt.np)
        mn, mx = float(fi.min), float(fi.max)
        bounds = ((lo, "from"), (hi, "to - 1"))
        for v, nm in bounds:
            if not mn <= v <= mx:
                raise RuntimeError(f"{nm} is out of bounds for {dt.name} (random_: its range is [{mn:g}, {mx:g}])")
        d = _MANTISSA[dt.name]
        for v, nm in bounds:
            if v < -(1 << d) or v > (1 << d):
                import warnings
                warnings.warn(f"{nm} is out of bounds [-(2^{d}), 2^{d}]. Due to precision limitations {dt.name} can "
                              f"support discrete uniform distribution only within this range. This warning will "
                              f"become an error in version 1.7 release, please fix the code in advance", UserWarning,
                              stacklevel=4)
    elif dt.category in (0, 1):
        mn, mx = (0, 1) if dt is _dt.bool_ else (int(np.iinfo(dt.np).min), int(np.iinfo(dt.np).max))
        for v, nm in ((lo, "from"), (hi, "to - 1")):
            if not mn <= v <= mx:
                raise RuntimeError(f"{nm} is out of bounds for {dt.name} (random_: its range is [{mn}, {mx}])")
    else:
        raise RuntimeError(f"check_random_bounds handles only integral, floating-point and boolean types "
                           f"(random_: got {dt.name})")


@sampler(like=0, inplace=True)
def random_(self, *args, generator=None, **kw):
    """``Tensor.random_``: ``random_()`` integers in ``[0, 2**mantissa]`` for floats (``[0, max]`` for
    integer dtypes, {0, 1} for bool), ``random_(to)`` in ``[0, to)``, ``random_(from, to)`` in ``[from, to)``
    (``to=None``: up to the dtype's limit; ``random_(-2**63, None)``: the whole int64 range).  torch's checks in
    its order (random_from_to_impl): ``from < to``; for floats ``from``/``to`` moved to representable values;
    both within the dtype's range (complex refused); an empty tensor is returned as it is after those."""
    if len(args) > 2 or set(kw) - {"from", "to"}:
        raise TypeError(f"random_() takes (from, to), (to) or no arguments, got {args} {sorted(kw)}")
    dt = self._dtype
    empty = self.numel() == 0
    if not args and not kw:
        if empty:
            return self
        if dt.category == 3:
            raise NotImplementedError(f"\"random_kernel_cpu\" not implemented for '{dt.name}'")
        lo, hi = 0, (2 ** _MANTISSA[dt.name] if dt.category == 2 else 1 if dt is _dt.bool_ else
                     int(np.iinfo(dt.np).max))
    else:
        if len(args) == 1 and not kw:
            lo, to = 0, _int_arg("to", args[0])
        else:
            lo = _int_arg("from", args[0] if args else kw.get("from", 0))
            to = args[1] if len(args) > 1 else kw.get("to")
            to = None if to is None else _int_arg("to", to)
        if to is not None:
            if not lo < to:
                raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={to}")
            if dt.category == 2:
                d = _MANTISSA[dt.name]
                lo, to = _update_from(lo, d), _update_to(to, d)
                if not lo < to:
                    raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than 'to' casted to "
                                       f"dtype, but got from={lo} >= to={to}")
            hi = to - 1
            _check_random_bounds(lo, hi, dt)
        elif lo != _I64_MIN:
            if dt.category == 2:
                hi = 2 ** _MANTISSA[dt.name]
                lo = _update_from(lo, _MANTISSA[dt.name])
                if not lo < hi:
                    raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                                       f"casted to dtype, but got from={lo} > to_inc={hi}")
            elif dt.category in (0, 1):
                hi = 1 if dt is _dt.bool_ else int(np.iinfo(dt.np).max)
            else:
                raise RuntimeError(f"random_from_to_impl handles only integral, floating-point and boolean types "
                                   f"(random_: got {dt.name})")
            _check_random_bounds(lo, hi, dt)
        else:   # [-2**63, 2**63 - 1]: torch's full 64-bit range kernel
            if empty:
                return self
            if dt.category == 3 or dt is _dt.bool_ or dt is _dt.float16:
                raise NotImplementedError(f"\"random_full_64_bits_range_kernel_cpu\" not implemented for '{dt.name}'")
            if dt not in (_dt.int64, _dt.float64, _dt.float32, _dt.bfloat16):
                raise RuntimeError(f"random_full_64_bits_range_kernel_cpu handles only int64, double, float and "
                                   f"bfloat16 (random_: got {dt.name})")
            hi = _I64_MAX
        if empty:
            return self
    a = _draw(generator, lambda g: g.integers(lo, hi, size=tuple(self.shape), dtype=np.int64, endpoint=True))
    return _fill(self, a if dt.category != 2 else a.astype(np.float64))


def _continuous_only(dist, self: Tensor):
    """torch's check of exponential_ / cauchy_ (a RuntimeError, not a dispatch NotImplementedError)."""
    if self._dtype.category != 2:
        raise RuntimeError(f"{dist} distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {self._dtype.name}")


@sampler(like=0, inplace=True)
def exponential_(self, lambd=1.0, *, generator=None):
    """``Tensor.exponential_``: fill with samples of Exp(lambd) (density ``lambd * exp(-lambd x)``).  As torch:
    ``lambd > 0`` checked first; an empty tensor of any dtype is returned as it is; else floating only."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_fmt(lambd)}")
    if self.numel() == 0:
        return self
    _continuous_only("Exponential", self)
    return _fill(self, _draw(generator, lambda g: g.exponential(1.0 / lambd, tuple(self.shape))))


@sampler(like=0, inplace=True)
def geometric_(self, p, *, generator=None):
    """``Tensor.geometric_``: fill with the number of Bernoulli(p) trials to the first success (1, 2, ...).
    As torch: ``p`` in (0, 1) checked first; an empty tensor of any dtype is returned as it is; integer and
    floating dtypes take samples, bool and complex are refused."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_fmt(p)}")
    if self.numel() == 0:
        return self
    if self._dtype is _dt.bool_ or self._dtype.category == 3:
        raise NotImplementedError(f"\"geometric_cpu\" not implemented for '{self._dtype.name}'")
    return _fill(self, _draw(generator, lambda g: g.geometric(p, tuple(self.shape))))


@sampler(like=0, inplace=True)
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """``Tensor.log_normal_``: fill with ``exp(N(mean, std**2))`` samples.  As torch: ``std > 0`` checked
    first; an empty tensor of any dtype is returned as it is; else floating only."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_fmt(std)}")
    if self.numel() == 0:
        return self
    if self._dtype.category != 2:
        raise NotImplementedError(f"\"log_normal_cpu\" not implemented for '{self._dtype.name}'")
    return _fill(self, _draw(generator, lambda g: g.lognormal(mean, std, tuple(self.shape))))


@sampler(like=0, inplace=True)
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """``Tensor.cauchy_``: fill with Cauchy(median, sigma) samples.  As torch: ``sigma > 0`` checked first,
    then floating only, even for an empty tensor."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_fmt(sigma)}")
    _continuous_only("Cauchy", self)
    if self.numel() == 0:
        return self
    return _fill(self, median + sigma * _draw(generator, lambda g: g.standard_cauchy(tuple(self.shape))))


for _f in (normal_, uniform_, random_, exponential_, geometric_, log_normal_, cauchy_):
    export(_f, name=_f.__name__, function=False)


# ------------------------------------------------------------------ multinomial / poisson
@export
@sampler()
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``torch.multinomial``: ``num_samples`` category indices (int64) per row of non-negative weights
    (1-D or 2-D); without replacement every sample in a row is distinct (zero-weight categories come last)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' must be Tensor, not {type(input).__name__}")
    _need_float("multinomial", input)
    if input.ndim not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim (got {input.ndim}-D)")
    num_samples = int(num_samples)
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample <= 0 samples (got {num_samples})")
    w = _host_values(input).reshape(-1, input.shape[-1])
    n_cat = w.shape[1]
    if not replacement and num_samples > n_cat:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                           f"(n_sample={num_samples}, categories={n_cat})")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise RuntimeError("multinomial: probability tensor contains either `inf`, `nan` or element < 0")
    sums = w.sum(1)
    if np.any(sums <= 0):
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")

    def sample(g):
        if not replacement:
            # torch's algorithm: the top num_samples of w / Exp(1) keys (successive weighted draws); once the
            # positive weights are used up, zero-weight categories follow in index order, like torch
            keys = w / g.exponential(1.0, w.shape)
            return np.argsort(-keys, axis=1, kind="stable")[:, :num_samples].astype(np.int64)
        out = np.empty((w.shape[0], num_samples), dtype=np.int64)
        for i, row in enumerate(w):
            out[i] = g.choice(n_cat, size=num_samples, replace=True, p=row / row.sum())
        return out
    r = _draw(generator, sample)
    if input.ndim == 1:
        r = r.reshape(num_samples)
    return _wrap(r, _dt.int64, input._device)


@export(method=False)
@sampler()
def binomial(count, prob, generator=None):
    """``torch.binomial``: Binomial(count, prob) samples (broadcast), in ``count``'s dtype (floating; ``prob``
    of the same dtype).  Unlike torch, a negative count or a probability outside [0, 1] is refused."""
    for nm, t in (("count", count), ("prob", prob)):
        if not isinstance(t, Tensor):
            raise TypeError(f"binomial(): argument '{nm}' must be Tensor, not {type(t).__name__}")
    if count._dtype.category != 2:
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: {count._dtype.name}")
    if prob._dtype is not count._dtype:
        raise RuntimeError(f"binomial: Found dtype {prob._dtype.name} but expected {count._dtype.name} (prob must "
                           f"have count's dtype)")
    n, p = _host_values(count), _host_values(prob)
    if np.any(n < 0) or np.any(np.isnan(n)) or np.any(p < 0) or np.any(p > 1) or np.any(np.isnan(p)):
        raise RuntimeError("binomial: count must be >= 0 and prob in [0, 1]")
    n, p = np.broadcast_arrays(n, p)
    r = _draw(generator, lambda g: g.binomial(n.astype(np.int64), p))
    return _wrap(r.astype(np.float64), count._dtype, count._device)


@export
@sampler(like=0)
def poisson(input, generator=None):
    """``torch.poisson``: Poisson samples with rates ``input`` (non-negative), in ``input``'s dtype."""
    if not isinstance(input, Tensor):
        raise TypeError(f"poisson(): argument 'input' must be Tensor, not {type(input).__name__}")
    _need_float("poisson", input)
    lam = _host_values(input)
    if np.any(lam < 0) or np.any(np.isnan(lam)):
        raise RuntimeError("poisson: invalid Poisson rate, expected rate to be non-negative")
    return _wrap(_draw(generator, lambda g: g.poisson(lam)).astype(np.float64), input._dtype, input._device)

