"""Random sampling with PyTorch's argument semantics: ``bernoulli``, ``normal`` (all four overloads),
``multinomial``, ``poisson`` and the in-place samplers ``Tensor.normal_``/``uniform_``/``random_``/
``exponential_``/``geometric_``/``log_normal_``/``cauchy_``/``bernoulli_``.

Samples come from the same generator as ``nee.rand``/``randn`` (``nee.manual_seed``, or a ``generator=``
:class:`neetorch.Generator`; numpy's PCG64 underneath), drawn on the host in float64 and rounded once to the
tensor's dtype, then moved to its device.  The values cannot match torch's RNG bit for bit; the distributions,
supports, shapes, dtypes and argument checks do.  Being host draws, they are not traced: under ``@nee.jit`` a
sample is taken once, at trace time.
"""
from __future__ import annotations

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
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
def _check_p(who, p):
    if isinstance(p, Tensor):
        a = _host_values(p)
        if a.size and not (np.all(a >= 0) and np.all(a <= 1)):
            raise RuntimeError(f"{who}: Expected p_in >= 0 && p_in <= 1 to be true, but got false (probabilities "
                               f"must lie in [0, 1])")
        return a
    p = float(p)
    if not 0 <= p <= 1:
        raise RuntimeError(f"{who}: bernoulli expects p to be in [0, 1], but got p={p}")
    return p


@export
def bernoulli(input, p=None, *, generator=None):
    """``torch.bernoulli``: 0/1 samples with probabilities ``input`` (or a float ``p`` for every element),
    in ``input``'s dtype."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not {type(input).__name__}")
    if p is None:
        _need_float("bernoulli", input)
        probs = _check_p("bernoulli", input)
    else:
        probs = np.broadcast_to(_check_p("bernoulli", p), tuple(input.shape))
    u = _draw(generator, lambda g: g.random(tuple(input.shape)))
    return _wrap((u < probs).astype(np.float64), input._dtype, input._device)


def bernoulli_(self, p=0.5, *, generator=None):
    """``Tensor.bernoulli_``: fill with 0/1 samples of probability ``p`` (float or tensor broadcast to self)."""
    probs = _check_p("bernoulli_", p)
    if isinstance(probs, np.ndarray):
        from .shape_rules import broadcast_shapes
        if broadcast_shapes(probs.shape, tuple(self.shape), op="bernoulli_") != tuple(self.shape):
            raise RuntimeError(f"bernoulli_: p of shape {probs.shape} is not broadcastable to self "
                               f"{tuple(self.shape)}")
        probs = np.broadcast_to(probs, tuple(self.shape))
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


_MANTISSA = {"float16": 11, "float32": 24, "float64": 53}


def random_(self, *args, generator=None, **kw):
    """``Tensor.random_``: ``random_()`` integers in ``[0, 2**mantissa]`` for floats (``[0, max]`` for
    integer dtypes, {0, 1} for bool), ``random_(to)`` in ``[0, to)``, ``random_(from, to)`` in ``[from, to)``
    (``to=None``: up to the dtype's limit)."""
    if len(args) > 2 or set(kw) - {"from", "to"}:
        raise TypeError(f"random_() takes (from, to), (to) or no arguments, got {args} {sorted(kw)}")
    dt = self._dtype
    if dt.category == 2:
        top = 2 ** _MANTISSA[dt.name]
    elif dt.category == 1:
        top = int(np.iinfo(dt.np).max)
    else:
        top = 1
    if len(args) == 1 and not kw:
        lo, to = 0, args[0]
    else:
        lo = args[0] if args else kw.get("from", 0)
        to = args[1] if len(args) > 1 else kw.get("to")
    lo = int(lo)
    hi = top if to is None else int(to) - 1   # inclusive
    if hi < lo:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi + 1}")
    if dt.category == 1:
        ii = np.iinfo(dt.np)
        if lo < ii.min or hi > ii.max:
            raise RuntimeError(f"random_: [from, to) = [{lo}, {hi + 1}) is outside the range of {dt.name} "
                               f"[{ii.min}, {ii.max}]")
    a = _draw(generator, lambda g: g.integers(lo, hi, size=tuple(self.shape), dtype=np.int64, endpoint=True))
    return _fill(self, a if dt.category != 2 else a.astype(np.float64))


def exponential_(self, lambd=1.0, *, generator=None):
    """``Tensor.exponential_``: fill with samples of Exp(lambd) (density ``lambd * exp(-lambd x)``)."""
    _need_float("exponential_", self)
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _fill(self, _draw(generator, lambda g: g.exponential(1.0 / lambd, tuple(self.shape))))


def geometric_(self, p, *, generator=None):
    """``Tensor.geometric_``: fill with the number of Bernoulli(p) trials to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    if self._dtype is _dt.bool_:
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'bool'")
    return _fill(self, _draw(generator, lambda g: g.geometric(p, tuple(self.shape))))


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """``Tensor.log_normal_``: fill with ``exp(N(mean, std**2))`` samples."""
    _need_float("log_normal_", self)
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return _fill(self, _draw(generator, lambda g: g.lognormal(mean, std, tuple(self.shape))))


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """``Tensor.cauchy_``: fill with Cauchy(median, sigma) samples."""
    _need_float("cauchy_", self)
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    return _fill(self, median + sigma * _draw(generator, lambda g: g.standard_cauchy(tuple(self.shape))))


for _f in (normal_, uniform_, random_, exponential_, geometric_, log_normal_, cauchy_):
    export(_f, name=_f.__name__, function=False)


# ------------------------------------------------------------------ multinomial / poisson
@export
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
def poisson(input, generator=None):
    """``torch.poisson``: Poisson samples with rates ``input`` (non-negative), in ``input``'s dtype."""
    if not isinstance(input, Tensor):
        raise TypeError(f"poisson(): argument 'input' must be Tensor, not {type(input).__name__}")
    _need_float("poisson", input)
    lam = _host_values(input)
    if np.any(lam < 0) or np.any(np.isnan(lam)):
        raise RuntimeError("poisson: invalid Poisson rate, expected rate to be non-negative")
    return _wrap(_draw(generator, lambda g: g.poisson(lam)).astype(np.float64), input._dtype, input._device)

