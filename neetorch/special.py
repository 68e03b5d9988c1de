"""``neetorch.special``: the ``torch.special`` namespace.

Most names forward to ops neetorch already defines (``erf``, ``logit``, ``softmax``, ``digamma``, ``i0``...,
each defined once in ``neetorch/ops``).  The functions that exist only here (``ndtr``, ``ndtri``, ``log_ndtr``,
``erfcx``, ``entr``, ``xlog1py``, ``i0e``, ``i1``, ``i1e``, ``zeta``, ``spherical_bessel_j0``) are compositions of
existing elementwise ops, like ``neetorch/ops/special.py``: they run on every device that runs those ops, trace
as those nodes and fuse under ``@nee.jit``.  They follow the algorithms of PyTorch's CPU kernels (Cephes'
Chebyshev series for the Bessel functions, Cephes' ``ndtri``, SciPy's ``log_ndtr``, Cephes' Hurwitz zeta), with
fixed iteration counts instead of data-dependent loops so that they trace.  The series-based ones compute in
float64 and round once (float16/float32 inputs); integer and bool inputs give the default float dtype.
"""
from __future__ import annotations

import math

from .ops.registry import EXPORTS as _EXPORTS
from .tensor import creation as _creation
from .tensor import dtypes as _dt
from .tensor.tensor import Tensor

__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc",
           "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp",
           "modified_bessel_i0", "modified_bessel_i1", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round",
           "sinc", "softmax", "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]


def _E(name):
    try:
        return _EXPORTS[name][0]
    except KeyError:
        raise NotImplementedError(f"neetorch.special: the op {name!r} is not defined in this build of "
                                  "neetorch") from None


def _out(r, out):
    if out is None:
        return r
    if not isinstance(out, Tensor):
        raise TypeError(f"out must be a Tensor, got {type(out).__name__}")
    from .ops.elementwise import _can_cast, resize_out
    if out._dtype is not r._dtype and not _can_cast(r._dtype, out._dtype):
        raise RuntimeError(f"result type {r._dtype.name} can't be cast to the desired output type {out._dtype.name}")
    resize_out(out, r.shape, "out=")       # (torch: another shape is resized, with a warning when it held elements)
    return out.copy_(r)


def _arg(op, x, name="input", pos=1):
    if not isinstance(x, Tensor):
        raise TypeError(f"special.{op}(): argument '{name}' (position {pos}) must be Tensor, not "
                        f"{type(x).__name__}")


def _result_dtype(*xs):
    rt = _dt.result_type(*xs)
    return rt if rt.category == 2 else _dt.get_default_dtype()


def _opmath(x: Tensor, wide: bool):
    """(x converted to its compute dtype, result dtype): float64 when ``wide`` (series evaluations),
    else float32 for float16 and the input's float dtype otherwise."""
    odt = _result_dtype(x)
    cdt = _dt.float64 if wide else (_dt.float32 if odt in _dt.LOW_FLOATS else odt)
    return (x if x._dtype is cdt else x.to(cdt)), odt


def _back(r: Tensor, odt) -> Tensor:
    return r if r._dtype is odt else r.to(odt)


def _where(c, a, b):
    return _E("where")(c, a, b)


def _zeros(x):
    return _creation.zeros_like(x)


def _polevl(x, coef):
    r = _zeros(x) + coef[0]
    for c in coef[1:]:
        r = r * x + c
    return r


def _chbevl(x, coef):
    """Cephes' Chebyshev series (the one ``ops/compat.py``'s i0 uses)."""
    from .ops.compat import _chbevl as chbevl
    return chbevl(x, coef)


# ------------------------------------------------------------------ forwards to existing ops
def erf(input, *, out=None):
    """``torch.special.erf``."""
    return _out(_E("erf")(input), out)


def erfc(input, *, out=None):
    """``torch.special.erfc``."""
    return _out(_E("erfc")(input), out)


def erfinv(input, *, out=None):
    """``torch.special.erfinv``."""
    return _out(_E("erfinv")(input), out)


def expit(input, *, out=None):
    """``torch.special.expit``: the logistic sigmoid."""
    return _out(_E("sigmoid")(input), out)


def logit(input, eps=None, *, out=None):
    """``torch.special.logit(input, eps=None)``."""
    return _out(_E("logit")(input, eps), out)


def exp2(input, *, out=None):
    """``torch.special.exp2``."""
    return _out(_E("exp2")(input), out)


def expm1(input, *, out=None):
    """``torch.special.expm1``."""
    return _out(_E("expm1")(input), out)


def log1p(input, *, out=None):
    """``torch.special.log1p``."""
    return _out(_E("log1p")(input), out)


def gammaln(input, *, out=None):
    """``torch.special.gammaln``: ``log|Gamma(x)|``."""
    return _out(_E("lgamma")(input), out)


def digamma(input, *, out=None):
    """``torch.special.digamma`` (``psi``)."""
    return _out(_E("digamma")(input), out)


psi = digamma


def polygamma(n, input, *, out=None):
    """``torch.special.polygamma(n, input)``."""
    return _out(_E("polygamma")(n, input), out)


def multigammaln(input, p, *, out=None):
    """``torch.special.multigammaln(input, p)``: the multivariate log-gamma of dimension ``p``."""
    return _out(_E("mvlgamma")(input, p), out)


def gammainc(input, other, *, out=None):
    """``torch.special.gammainc(input, other)``: the regularized lower incomplete gamma."""
    return _out(_E("igamma")(input, other), out)


def gammaincc(input, other, *, out=None):
    """``torch.special.gammaincc(input, other)``: the regularized upper incomplete gamma."""
    return _out(_E("igammac")(input, other), out)


def i0(input, *, out=None):
    """``torch.special.i0``: the modified Bessel function of the first kind, order 0."""
    return _out(_E("i0")(input), out)


def modified_bessel_i0(input, *, out=None):
    """``torch.special.modified_bessel_i0`` (the same function as :func:`i0`)."""
    return i0(input, out=out)


def sinc(input, *, out=None):
    """``torch.special.sinc``: ``sin(pi x) / (pi x)``."""
    return _out(_E("sinc")(input), out)


def round(input, *, decimals=0, out=None):
    """``torch.special.round(input, *, decimals=0)``."""
    return _E("round")(input, decimals=decimals, out=out)


def softmax(input, dim, *, dtype=None):
    """``torch.special.softmax(input, dim, *, dtype=None)``."""
    return _E("softmax")(input, dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    """``torch.special.log_softmax(input, dim, *, dtype=None)``."""
    return _E("log_softmax")(input, dim, dtype=dtype)


def logsumexp(input, dim, keepdim=False, *, out=None):
    """``torch.special.logsumexp(input, dim, keepdim=False)``."""
    return _out(_E("logsumexp")(input, dim, keepdim), out)


def xlogy(input, other, *, out=None):
    """``torch.special.xlogy(input, other)``: ``input * log(other)``, 0 where ``input == 0`` (NaN ``other``
    gives NaN); either argument may be a Python number."""
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            raise TypeError("special.xlogy(): at least one of input and other must be a Tensor")
        input = _creation.full((), input, dtype=_dt.result_type(input, other), device=other.device)
    return _out(_E("xlogy")(input, other), out)


# ------------------------------------------------------------------ new compositions
def entr(input, *, out=None):
    """``torch.special.entr``: ``-x ln x`` for ``x > 0``, 0 at 0, ``-inf`` for ``x < 0`` (NaN passes)."""
    _arg("entr", input)
    x, odt = _opmath(input, False)
    safe = _where(x > 0, x, 1.0)
    r = _where(x > 0, -x * safe.log(), _where(x == 0, 0.0, -math.inf))
    return _out(_back(_where(x.isnan(), x, r), odt), out)


def xlog1py(input, other, *, out=None):
    """``torch.special.xlog1py(input, other)``: ``input * log1p(other)``, 0 where ``input == 0`` unless
    ``other`` is NaN; either argument may be a Python number."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError("special.xlog1py(): at least one of input and other must be a Tensor")
    like = input if isinstance(input, Tensor) else other
    rt = _result_dtype(input, other)
    cdt = _dt.float32 if rt in _dt.LOW_FLOATS else rt

    def conv(v):
        return v.to(cdt) if isinstance(v, Tensor) else _creation.full((), v, dtype=cdt, device=like.device)
    x, y = conv(input), conv(other)
    r = _where(x == 0, 0.0, x * y.log1p())
    r = _where(y.isnan(), math.nan, r)
    return _out(_back(r, rt), out)


_SQRT1_2 = 0.7071067811865476


def ndtr(input, *, out=None):
    """``torch.special.ndtr``: the standard normal CDF, ``(1 + erf(x / sqrt(2))) / 2`` (PyTorch's formula,
    which reaches 0 below about -8.3; :func:`log_ndtr` keeps the lower tail)."""
    _arg("ndtr", input)
    x, odt = _opmath(input, False)
    return _out(_back(0.5 * (1.0 + (x * _SQRT1_2).erf()), odt), out)


_ISPI = 0.56418958354775628694807945156  # 1 / sqrt(pi)
_CF_FROM = 25.0  # below, exp(x^2) erfc(x) is exact to ~1e-13 (float64); above, erfc underflows
_CF_TERMS = 8    # Laplace's continued fraction from x = 25 on: truncation error far below float64 precision


def _erfcx_pos(x):
    """erfcx for x >= 0 (float64): ``exp(x^2) erfc(x)`` below 25, Laplace's continued fraction above."""
    small = x < _CF_FROM
    xs = _where(small, x, 0.0)
    direct = (xs * xs).exp() * xs.erfc()
    xl = _where(small, _CF_FROM, x)
    cf = _zeros(xl)
    for k in range(_CF_TERMS, 0, -1):
        cf = (k * 0.5) / (xl + cf)
    return _where(small, direct, _ISPI / (xl + cf))


def _erfcx(x, xsq=None):
    """``xsq``: ``x*x`` rounded in the caller's dtype, which PyTorch's float32 kernel feeds to ``exp`` on the
    negative side (its rounding dominates the result's error there: matched rather than improved)."""
    pos = _erfcx_pos(x.abs())
    xn = _where(x < -26.7, 0.0, x)
    sq = xn * xn if xsq is None else _where(x < -26.7, 0.0, xsq)
    neg = 2.0 * sq.exp() - pos
    r = _where(x >= 0, pos, _where(x < -26.7, math.inf, neg))
    return _where(x.isnan(), x, r)


def erfcx(input, *, out=None):
    """``torch.special.erfcx``: the scaled complementary error function ``exp(x^2) erfc(x)``."""
    _arg("erfcx", input)
    x, odt = _opmath(input, True)
    xsq = None
    if odt is not _dt.float64:
        xi = input.to(odt if odt not in _dt.LOW_FLOATS else _dt.float32)
        xsq = (xi * xi).to(_dt.float64)
    return _out(_back(_erfcx(x, xsq), odt), out)


def log_ndtr(input, *, out=None):
    """``torch.special.log_ndtr``: ``log(ndtr(x))``, accurate far into the lower tail (SciPy's algorithm:
    ``log(erfcx(-x/sqrt2)/2) - x^2/2`` below -1, ``log1p(-erfc(x/sqrt2)/2)`` above)."""
    _arg("log_ndtr", input)
    x, odt = _opmath(input, True)
    t = x * _SQRT1_2
    lo = x < -1.0
    tl = _where(lo, t, -1.0)
    low = (_erfcx(-tl) / 2.0).log() - tl * tl
    th = _where(lo, 0.0, t)
    high = (-th.erfc() / 2.0).log1p()
    return _out(_back(_where(lo, low, high), odt), out)


# Cephes ndtri coefficients (as in PyTorch's calc_ndtri)
_NP0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1, 1.39312609387279679503E1,
        -1.23916583867381258016E0)
_NQ0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
        -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1, 1.59056225126211695515E1,
        -1.18331621121330003142E0)
_NP1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1, 4.40805073893200834700E1,
        1.46849561928858024014E1, 2.18663306850790267539E0, -1.40256079171354495875E-1, -3.50424626827848203418E-2,
        -8.57456785154685413611E-4)
_NQ1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
        1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1, -3.80806407691578277194E-2,
        -9.33259480895457427372E-4)
_NP2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0, 1.33303460815807542389E0,
        2.01485389549179081538E-1, 1.23716634817820021358E-2, 3.01581553508235416007E-4, 2.65806974686737550832E-6,
        6.23974539184983293730E-9)
_NQ2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
        2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4, 2.89247864745380683936E-6,
        6.79019408009981274425E-9)
_EXPM2 = 0.13533528323661269189  # exp(-2)


def ndtri(input, *, out=None):
    """``torch.special.ndtri``: the inverse of :func:`ndtr` (Cephes' three rational approximations);
    0 gives ``-inf``, 1 ``inf``, outside [0, 1] NaN."""
    _arg("ndtri", input)
    p, odt = _opmath(input, True)
    upper = p > 1.0 - _EXPM2
    y = _where(upper, 1.0 - p, p)
    central = y > _EXPM2
    yc = _where(central, y, 0.5) - 0.5
    y2 = yc * yc
    xc = (yc + yc * (y2 * _polevl(y2, _NP0) / _polevl(y2, _NQ0))) * 2.50662827463100050242
    yt = _where(central, 0.5, _where(y > 0, y, 0.5))
    t = (-2.0 * yt.log()).sqrt()
    x0 = t - t.log() / t
    z = 1.0 / t
    x1 = _where(t < 8.0, z * _polevl(z, _NP1) / _polevl(z, _NQ1), z * _polevl(z, _NP2) / _polevl(z, _NQ2))
    xt = x0 - x1
    xt = _where(upper, xt, -xt)
    r = _where(central, xc, xt)
    r = _where(p == 0, -math.inf, _where(p == 1, math.inf, r))
    r = _where(_E("logical_or")(p < 0, p > 1), math.nan, r)
    return _out(_back(_where(p.isnan(), p, r), odt), out)


# Cephes Chebyshev coefficients for i0e / i1e (as in PyTorch's Math.h, double precision sets)
_I0A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
        1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
        -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
        9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
        -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
        1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
        -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
        1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
        -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
        1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
        3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
        1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
        -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
        7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
        -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
        3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
        2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
        8.04490411014108831608E-1)
_I1A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
        -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
        3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
        -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
        9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
        -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
        4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
        -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
        2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
        -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
        -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
        -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
        4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
        -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
        3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
        -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
        -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
        7.78576235018280120474E-1)


def _scaled_bessel(x, A, B, order1: bool):
    """exp(-|x|) * I_n(|x|) by Cephes' two Chebyshev series (|x| <= 8 and beyond)."""
    ax = x.abs()
    small = ax <= 8.0
    xa = _where(small, ax, 8.0)
    a = _chbevl(xa * 0.5 - 2.0, A)
    if order1:
        a = a * xa
    xb = _where(small, 32.0, ax)
    b = _chbevl(32.0 / xb - 2.0, B) / xb.sqrt()
    return _where(small, a, b)


def i0e(input, *, out=None):
    """``torch.special.i0e``: the exponentially scaled modified Bessel function ``exp(-|x|) I0(x)``."""
    _arg("i0e", input)
    x, odt = _opmath(input, True)
    return _out(_back(_scaled_bessel(x, _I0A, _I0B, False), odt), out)


def i1e(input, *, out=None):
    """``torch.special.i1e``: ``exp(-|x|) I1(x)`` (odd in x)."""
    _arg("i1e", input)
    x, odt = _opmath(input, True)
    r = _scaled_bessel(x, _I1A, _I1B, True)
    return _out(_back(_where(x < 0, -r, r), odt), out)


def i1(input, *, out=None):
    """``torch.special.i1``: the modified Bessel function of the first kind, order 1."""
    _arg("i1", input)
    x, odt = _opmath(input, True)
    r = _scaled_bessel(x, _I1A, _I1B, True) * x.abs().exp()
    return _out(_back(_where(x < 0, -r, r), odt), out)


def modified_bessel_i1(input, *, out=None):
    """``torch.special.modified_bessel_i1`` (the same function as :func:`i1`)."""
    return i1(input, out=out)


def spherical_bessel_j0(input, *, out=None):
    """``torch.special.spherical_bessel_j0``: ``sin(x) / x`` (its Taylor series below 0.5, 0 at ``±inf``)."""
    _arg("spherical_bessel_j0", input)
    x, odt = _opmath(input, False)
    x2 = x * x
    taylor = 1.0 + x2 * (-1.0 / 6.0 + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (
        1.0 / 362880.0 + x2 * (-1.0 / 39916800.0 + x2 * (1.0 / 6227020800.0))))))
    small = x.abs() < 0.5
    xs = _where(small, 1.0, x)
    r = _where(small, taylor, xs.sin() / xs)
    return _out(_back(_where(x.isinf(), 0.0, r), odt), out)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)


def zeta(input, other, *, out=None):
    """``torch.special.zeta(input, other)``: the Hurwitz zeta function ``sum_k (k + q)^-x`` (``x = input``,
    ``q = other``; either may be a Python number).  Cephes' algorithm: direct sums until the shifted ``q``
    exceeds 9, then the Euler-Maclaurin tail; ``x == 1`` gives ``inf``, ``x < 1`` NaN, ``q`` a non-positive
    integer ``inf``, a negative non-integer ``q`` with non-integer ``x`` NaN.  Negative ``q`` needs more direct
    terms the further below 0 it is: eager calls size that from the data; under ``@nee.jit`` (where the count
    must be fixed) negative non-integer ``q`` gives NaN, so compute those eagerly."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError("special.zeta(): at least one of input and other must be a Tensor")
    like = input if isinstance(input, Tensor) else other
    odt = _result_dtype(input, other)

    def conv(v):
        if isinstance(v, Tensor):
            return v.to(_dt.float64)
        # (a Python number is read in the result dtype first, as torch's wrapped scalars are)
        return _creation.full((), float(v), dtype=odt, device=like.device).to(_dt.float64)
    x, q = conv(input), conv(other)
    x, q = _E("broadcast_tensors")(x, q) if "broadcast_tensors" in _EXPORTS else (x + q * 0.0, q + x * 0.0)
    from .trace.tracer import is_tracing
    traced = is_tracing()
    if traced or q.numel() == 0:
        shift = 0
    else:
        # (over the finite q: a NaN would hide the rest, and q = -inf is a pole, answered below)
        qmin = float(_where(q.isfinite(), q, 0.0).min().item())
        shift = 0 if not (qmin < 0) else min(math.ceil(-qmin) + 1, 10 ** 6)
    # torch's Math.h zeta (Cephes), element by element: its two early exits (a direct term below MACHEP of the
    # sum; an Euler-Maclaurin term below MACHEP of it) are followed with a ``done`` mask, so the sums stop
    # where torch's do (same bits)
    machep = 1.11022302462515654042E-16
    # (its first term is std::pow(q, -x) of the operands' own type: a float32 pow, the rest in double)
    s = q.pow(-x) if odt is not _dt.float32 else q.to(_dt.float32).pow(-x.to(_dt.float32)).to(_dt.float64)
    a = q
    b = _zeros(s)
    done = _zeros(s) != 0.0
    r = _zeros(s)
    for i in range(9 + shift):
        go = _E("logical_not")(done) if i < 9 else _E("logical_and")(a <= 9.0, _E("logical_not")(done))
        a_next = a + 1.0
        b_next = a_next.pow(-x)
        s_next = s + b_next
        a, b, s = _where(go, a_next, a), _where(go, b_next, b), _where(go, s_next, s)
        stop = _E("logical_and")(go, _E("logical_and")(-machep * s < b, b < machep * s))
        r = _where(stop, s, r)
        done = _E("logical_or")(done, stop)
    w = a
    s = s + b * w / (x - 1.0) - 0.5 * b
    fac = _zeros(x) + 1.0
    k = 0.0
    for i in range(12):
        fac = fac * (x + k)
        b = b / w
        t = fac * b / _ZETA_A[i]
        s = s + t
        stop = _E("logical_and")(_E("logical_not")(done), (t / s).abs() < machep)
        r = _where(stop, s, r)
        done = _E("logical_or")(done, stop)
        k += 1.0
        fac = fac * (x + k)
        b = b / w
        k += 1.0
    r = _where(done, r, s)
    if traced:  # the shift for q < 0 depends on the data: a traced call leaves those NaN (documented)
        r = _where(q < 0, math.nan, r)
    # torch's order of the special cases (the first that holds wins): x == 1: inf (even for a NaN q); x < 1: NaN;
    # q a non-positive integer: inf (even for a NaN x); q <= 0 with x no integer (or NaN): NaN
    qneg = q <= 0
    r = _where(_E("logical_and")(qneg, x != x.floor()), math.nan, r)
    r = _where(_E("logical_and")(qneg, q == q.floor()), math.inf, r)
    r = _where(x < 1.0, math.nan, r)
    r = _where(x == 1.0, math.inf, r)
    return _out(_back(r, odt), out)


# dtypes torch.special's CPU kernels refuse (measured on torch 2.13; every name refuses complex unless noted):
# the refusal names the kernel like torch's NotImplementedError, before any computation
_HALF = ("float16", "bfloat16")
_INTS = ("bool", "uint8", "int8", "int16", "int32", "int64")
_REFUSED = {
    "digamma": (), "psi": (), "entr": (), "erf": (), "erfc": (), "erfinv": (), "gammaln": (), "i0": (), "i0e": (),
    "i1": (), "i1e": (), "logit": (), "multigammaln": (), "ndtr": (), "polygamma": (), "xlog1py": (), "xlogy": (),
    "erfcx": _HALF, "log_ndtr": _HALF, "modified_bessel_i0": _HALF, "modified_bessel_i1": _HALF, "ndtri": _HALF,
    "spherical_bessel_j0": _HALF, "zeta": _HALF, "gammainc": _INTS, "gammaincc": _INTS, "round": _INTS,
    "softmax": _INTS, "log_softmax": _INTS,
}


def _refusing(name, fn, refused):
    import functools

    @functools.wraps(fn)
    def f(*args, **kw):
        for a in args:
            if isinstance(a, Tensor) and (a._dtype.category == 3 or a._dtype.name in refused):
                from .ops.linalg import _CAP
                raise NotImplementedError(f"special.{name}: \"{name}_cpu\" not implemented for "
                                          f"'{_CAP.get(a._dtype.name, a._dtype.name)}'")
        return fn(*args, **kw)
    return f


for _n, _r in _REFUSED.items():
    globals()[_n] = _refusing(_n, globals()[_n], _r)


# ------------------------------------------------------------------ orthogonal polynomials
# torch.special's polynomial families P_n(x), following the branches of PyTorch's CPU kernels (ATen Math.h):
# the closed trigonometric forms for large n inside (-1, 1), exact values at the interval ends, else the
# three-term recurrence (integer n, truncated; n < 0 gives 0).  Computed eagerly in float64 numpy on the host
# (n is data: the recurrence length depends on its values) and rounded once to the result dtype.
def _poly_args(name, x, n):
    import numpy as np
    if not isinstance(x, Tensor) and not isinstance(n, Tensor):
        raise TypeError(f"special.{name}(): expected a Tensor for 'input' or 'n'")
    like = x if isinstance(x, Tensor) else n
    for a in (x, n):
        if isinstance(a, Tensor) and (a._dtype.category == 3 or a._dtype.name in _HALF):
            from .ops.linalg import _CAP
            raise NotImplementedError(f"special.{name}: \"{name}_cpu\" not implemented for "
                                      f"'{_CAP.get(a._dtype.name, a._dtype.name)}'")
    odt = _result_dtype(*(a for a in (x, n)))
    xa = x.numpy(force=True).astype(np.float64) if isinstance(x, Tensor) else np.float64(x)
    na = n.numpy(force=True).astype(np.float64) if isinstance(n, Tensor) else np.float64(n)
    xa, na = np.broadcast_arrays(np.asarray(xa, np.float64), np.asarray(na, np.float64))
    # (torch casts n to int64: NaN / inf become INT64_MIN on x86, a negative order, so 0)
    return like, odt, xa, np.where(np.isfinite(na), na, -1).astype(np.int64)


def _poly_wrap(r, like, odt):
    import numpy as np
    t = _creation.tensor(np.asarray(r, np.float64))
    return t.to(dtype=odt, device=like.device)


def _recurrence(x, n, p0, p1, step):
    """P_n(x) from P_0 = p0, P_1 = p1 and P_{k+1} = step(k, P_k, P_{k-1}), for an array of n (>= 0)."""
    import numpy as np
    p, q = np.broadcast_to(np.asarray(p0, np.float64), x.shape).copy(), np.asarray(p1, np.float64) + 0 * x
    out = np.where(n == 0, p, q)
    top = int(n.max()) if n.size else 0
    for k in range(1, top):
        p, q = q, step(k, q, p)
        out = np.where(n == k + 1, q, out)
    return out


def _poly(name, x, n, body, out):
    import numpy as np
    like, odt, xa, na = _poly_args(name, x, n)
    with np.errstate(all="ignore"):
        r = np.where(na < 0, 0.0, body(xa, np.maximum(na, 0)))
    return _out(_poly_wrap(r, like, odt), out)


def _sgn_even(n):
    import numpy as np
    return np.where(n % 2 == 0, 1.0, -1.0)


def chebyshev_polynomial_t(input, n, *, out=None):
    """``torch.special.chebyshev_polynomial_t``: Chebyshev polynomials of the first kind T_n(x)."""
    import numpy as np

    def body(x, n):
        rec = _recurrence(x, n, 1.0, x, lambda k, q, p: (x + x) * q - p)
        r = np.where((n > 6) & (np.abs(x) < 1), np.cos(n * np.arccos(np.clip(x, -1, 1))), rec)
        return np.where(np.abs(x) == 1, np.where((x > 0) | (n % 2 == 0), 1.0, -1.0), r)
    return _poly("chebyshev_polynomial_t", input, n, body, out)


def chebyshev_polynomial_u(input, n, *, out=None):
    """``torch.special.chebyshev_polynomial_u``: Chebyshev polynomials of the second kind U_n(x)."""
    import numpy as np

    def body(x, n):
        rec = _recurrence(x, n, 1.0, x + x, lambda k, q, p: (x + x) * q - p)
        a = np.arccos(np.clip(x, -1, 1))
        trig = np.where(np.sin(a) != 0, np.sin((n + 1) * a) / np.sin(a), (n + 1) * np.cos((n + 1) * a) / x)
        r = np.where((n > 8) & (np.abs(x) < 1), trig, rec)
        return np.where(np.abs(x) == 1, np.where((x > 0) | (n % 2 == 0), n + 1.0, -(n + 1.0)), r)
    return _poly("chebyshev_polynomial_u", input, n, body, out)


def chebyshev_polynomial_v(input, n, *, out=None):
    """``torch.special.chebyshev_polynomial_v``: Chebyshev polynomials of the third kind V_n(x)."""
    import numpy as np

    def body(x, n):
        rec = _recurrence(x, n, 1.0, x + x - 1, lambda k, q, p: (x + x) * q - p)
        a = np.arccos(np.clip(x, -1, 1))
        trig = np.where(np.sin(a / 2) != 1, np.cos((n + 0.5) * a) / np.cos(a / 2), _sgn_even(n) * (n + n + 1.0))
        r = np.where((n > 8) & (np.abs(x) < 1), trig, rec)
        return np.where(np.abs(x) == 1, np.where(x > 0, 1.0, _sgn_even(n) * (n + n + 1.0)), r)
    return _poly("chebyshev_polynomial_v", input, n, body, out)


def chebyshev_polynomial_w(input, n, *, out=None):
    """``torch.special.chebyshev_polynomial_w``: Chebyshev polynomials of the fourth kind W_n(x)."""
    import numpy as np

    def body(x, n):
        rec = _recurrence(x, n, 1.0, x + x + 1, lambda k, q, p: (x + x) * q - p)
        a = np.arccos(np.clip(x, -1, 1))
        end = np.where(x > 0, n + n + 1.0, _sgn_even(n))
        trig = np.where(np.cos(a / 2) != 1, np.sin((n + 0.5) * a) / np.sin(a / 2), end)
        r = np.where((n > 8) & (np.abs(x) < 1), trig, rec)
        return np.where(np.abs(x) == 1, end, r)
    return _poly("chebyshev_polynomial_w", input, n, body, out)


def _shifted(kind):
    def f(input, n, *, out=None):
        plain = {"t": chebyshev_polynomial_t, "u": chebyshev_polynomial_u, "v": chebyshev_polynomial_v,
                 "w": chebyshev_polynomial_w}[kind]
        like, odt, xa, na = _poly_args(f"shifted_chebyshev_polynomial_{kind}", input, n)
        r = plain(_creation.tensor(xa + xa - 1), _creation.tensor(na)).numpy()
        return _out(_poly_wrap(r, like, odt), out)
    f.__name__ = f"shifted_chebyshev_polynomial_{kind}"
    f.__doc__ = f"``torch.special.shifted_chebyshev_polynomial_{kind}``: the kind-{kind} polynomial of 2x - 1."
    return f


shifted_chebyshev_polynomial_t = _shifted("t")
shifted_chebyshev_polynomial_u = _shifted("u")
shifted_chebyshev_polynomial_v = _shifted("v")
shifted_chebyshev_polynomial_w = _shifted("w")


def hermite_polynomial_h(input, n, *, out=None):
    """``torch.special.hermite_polynomial_h``: physicists' Hermite polynomials H_n(x)."""
    return _poly("hermite_polynomial_h", input, n,
                 lambda x, n: _recurrence(x, n, 1.0, x + x, lambda k, q, p: (x + x) * q - (k + k) * p), out)


def hermite_polynomial_he(input, n, *, out=None):
    """``torch.special.hermite_polynomial_he``: probabilists' Hermite polynomials He_n(x)."""
    return _poly("hermite_polynomial_he", input, n,
                 lambda x, n: _recurrence(x, n, 1.0, x, lambda k, q, p: x * q - k * p), out)


def laguerre_polynomial_l(input, n, *, out=None):
    """``torch.special.laguerre_polynomial_l``: Laguerre polynomials L_n(x)."""
    import numpy as np

    def body(x, n):
        r = _recurrence(x, n, 1.0, 1 - x, lambda k, q, p: ((k + k + (1 - x)) * q - k * p) / (k + 1))
        return np.where(x == 0, 1.0, r)
    return _poly("laguerre_polynomial_l", input, n, body, out)


def legendre_polynomial_p(input, n, *, out=None):
    """``torch.special.legendre_polynomial_p``: Legendre polynomials P_n(x)."""
    import numpy as np

    def body(x, n):
        r = _recurrence(x, n, 1.0, x, lambda k, q, p: ((k + k + 1) * x * q - k * p) / (k + 1))
        return np.where(np.abs(x) == 1, np.where(x > 0, 1.0, _sgn_even(n)), r)
    return _poly("legendre_polynomial_p", input, n, body, out)


__all__ += ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
            "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
            "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
            "laguerre_polynomial_l", "legendre_polynomial_p"]


# ------------------------------------------------------------------ Bessel functions J, Y and K (orders 0, 1)
# Host float64 numpy, rounded once: the power series for |x| <= 12 and Hankel's asymptotic expansion beyond
# (J, Y; both accurate to ~1e-12 absolute there), and for K the integral int_0^inf exp(-x cosh t) cosh(nu t) dt
# by the trapezoid rule (exponentially convergent for this analytic, doubly decaying integrand).
_EULER = 0.5772156649015329


def _bessel_small(x, nu, kind):
    import numpy as np
    q = -(x * x) / 4
    term = np.ones_like(x) if nu == 0 else x / 2
    j = term.copy()
    h = 0.0                                             # harmonic numbers H_k
    ysum = np.zeros_like(x) if nu == 0 else term * (-_EULER + (1 - _EULER))   # psi(1) + psi(2) at k = 0
    for k in range(1, 60):
        term = term * q / (k * (k + nu))
        j = j + term
        h += 1.0 / k
        if nu == 0:
            ysum = ysum - term * h                          # (-1)^(k+1) H_k (x^2/4)^k / (k!)^2
        else:
            ysum = ysum + term * (2 * (-_EULER + h) + 1.0 / (k + 1))   # psi(k+1) + psi(k+2)
    if kind == "j":
        return j
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(x / 2)
        if nu == 0:
            return (2 / np.pi) * ((lg + _EULER) * j + ysum)
        return -2 / (np.pi * x) + (2 / np.pi) * lg * j - ysum / np.pi


def _bessel_large(x, nu, kind):
    import numpy as np
    mu = 4.0 * nu * nu
    p, qq = np.ones_like(x), np.zeros_like(x)
    a = np.ones_like(x)
    for k in range(1, 21):
        a = a * (mu - (2 * k - 1) ** 2) / (k * 8 * x)
        sign = (-1) ** (k // 2)
        if k % 2 == 0:
            p = p + sign * a
        else:
            qq = qq + sign * a
    chi = x - (nu / 2 + 0.25) * np.pi
    amp = np.sqrt(2 / (np.pi * x))
    if kind == "j":
        return amp * (p * np.cos(chi) - qq * np.sin(chi))
    return amp * (p * np.sin(chi) + qq * np.cos(chi))


def _bessel_jy(name, input, nu, kind, out):
    import numpy as np
    _arg(name, input)
    like, odt, xa, _ = _poly_args(name, input, 0)
    ax = np.abs(xa) if kind == "j" else xa
    with np.errstate(all="ignore"):
        small = np.abs(ax) <= 12
        r = np.where(small, _bessel_small(np.where(small, ax, 1.0), nu, kind),
                     _bessel_large(np.where(small, 13.0, ax), nu, kind))
        if kind == "j" and nu == 1:
            r = np.where(xa < 0, -r, r)                     # J1 is odd
        if kind == "y":
            r = np.where(xa == 0, -np.inf, np.where(xa < 0, np.nan, r))
        r = np.where(np.isinf(xa), np.nan, r)             # (torch: NaN at +-inf)
        r = np.where(np.isnan(xa), np.nan, r)
    return _out(_poly_wrap(r, like, odt), out)


def bessel_j0(input, *, out=None):
    """``torch.special.bessel_j0``: the Bessel function of the first kind of order 0."""
    return _bessel_jy("bessel_j0", input, 0, "j", out)


def bessel_j1(input, *, out=None):
    """``torch.special.bessel_j1``: the Bessel function of the first kind of order 1."""
    return _bessel_jy("bessel_j1", input, 1, "j", out)


def bessel_y0(input, *, out=None):
    """``torch.special.bessel_y0``: the Bessel function of the second kind of order 0 (-inf at 0, NaN below)."""
    return _bessel_jy("bessel_y0", input, 0, "y", out)


def bessel_y1(input, *, out=None):
    """``torch.special.bessel_y1``: the Bessel function of the second kind of order 1 (-inf at 0, NaN below)."""
    return _bessel_jy("bessel_y1", input, 1, "y", out)


def _bessel_k(name, input, nu, scaled, out):
    import numpy as np
    _arg(name, input)
    like, odt, xa, _ = _poly_args(name, input, 0)
    flat = xa.reshape(-1)
    pos = flat > 0
    xs = np.where(pos & np.isfinite(flat), flat, 1.0)
    h = 0.05
    tmax = float(np.arccosh(max(1.0, 60.0 / float(xs.min())))) + 1.0 if xs.size else 1.0
    t = np.arange(0.0, tmax + h, h)[:, None]
    with np.errstate(all="ignore"):
        w = np.exp(-xs[None, :] * (np.cosh(t) - 1.0)) * np.cosh(nu * t)
        s = h * (w.sum(axis=0) - 0.5 * w[0])                 # e^x K_nu(x)
        big = xs > 30                                         # (the peak narrows: Hankel's expansion there)
        xb = np.where(big, xs, 31.0)
        a, asum = np.ones_like(xb), np.ones_like(xb)
        for k in range(1, 21):
            a = a * (4.0 * nu * nu - (2 * k - 1) ** 2) / (k * 8 * xb)
            asum = asum + a
        s = np.where(big, np.sqrt(np.pi / (2 * xb)) * asum, s)
        r = s if scaled else s * np.exp(-xs)
        r = np.where(flat == 0, np.inf, np.where(pos, r, np.nan))
        r = np.where(np.isposinf(flat), 0.0, r)
        r = np.where(np.isnan(flat), np.nan, r)
    return _out(_poly_wrap(r.reshape(xa.shape), like, odt), out)


def modified_bessel_k0(input, *, out=None):
    """``torch.special.modified_bessel_k0``: the modified Bessel function of the second kind of order 0."""
    return _bessel_k("modified_bessel_k0", input, 0, False, out)


def modified_bessel_k1(input, *, out=None):
    """``torch.special.modified_bessel_k1``: the modified Bessel function of the second kind of order 1."""
    return _bessel_k("modified_bessel_k1", input, 1, False, out)


def scaled_modified_bessel_k0(input, *, out=None):
    """``torch.special.scaled_modified_bessel_k0``: ``exp(x) * K0(x)``."""
    return _bessel_k("scaled_modified_bessel_k0", input, 0, True, out)


def scaled_modified_bessel_k1(input, *, out=None):
    """``torch.special.scaled_modified_bessel_k1``: ``exp(x) * K1(x)``."""
    return _bessel_k("scaled_modified_bessel_k1", input, 1, True, out)


__all__ += ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
            "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"]


def airy_ai(input, *, out=None):
    """``torch.special.airy_ai``: the Airy function Ai(x).  x >= 0: ``sqrt(x / 3) K_{1/3}(zeta) / pi`` with
    ``zeta = 2/3 x^(3/2)`` (the K integral above); -8 <= x < 0: the Maclaurin series; x < -8: the oscillating
    asymptotic expansion (DLMF 9.7.9)."""
    import numpy as np
    _arg("airy_ai", input)
    like, odt, xa, _ = _poly_args("airy_ai", input, 0)
    flat = xa.reshape(-1)
    with np.errstate(all="ignore"):
        # Maclaurin: Ai = c1 f - c2 g
        c1, c2 = 0.3550280538878172, 0.2588194037928068
        xs = np.where((flat < 0) & (flat >= -8), flat, -1.0)
        x3 = xs ** 3
        f, g = np.ones_like(xs), xs.copy()
        tf, tg = np.ones_like(xs), xs.copy()
        for k in range(1, 60):
            tf = tf * x3 / ((3 * k - 1) * (3 * k))
            tg = tg * x3 / ((3 * k) * (3 * k + 1))
            f, g = f + tf, g + tg
        series = c1 * f - c2 * g
        # x < -8: Ai(-z) = pi^-1/2 z^-1/4 (sin(zeta + pi/4) P - cos(zeta + pi/4) Q)
        z = np.where(flat < -8, -flat, 9.0)
        zeta = 2.0 / 3.0 * z ** 1.5
        u, p, q = 1.0, np.ones_like(z), np.zeros_like(z)
        for k in range(1, 24):
            u = u * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216 * k)
            term = u / zeta ** k
            if k % 2 == 0:
                p = p + (-1) ** (k // 2) * term
            else:
                q = q + (-1) ** ((k - 1) // 2) * term
        osc = (np.sin(zeta + np.pi / 4) * p - np.cos(zeta + np.pi / 4) * q) / (np.sqrt(np.pi) * z ** 0.25)
        # x >= 0 through K_{1/3}
        pos = np.where(flat > 0, flat, 1.0)
        kz = _bessel_k("airy_ai", _creation.tensor(2.0 / 3.0 * pos ** 1.5), 1.0 / 3.0, False, None).numpy()
        kpos = np.sqrt(pos / 3.0) * kz / np.pi
        r = np.where(flat < -8, osc, np.where(flat < 0, series, np.where(flat == 0, c1, kpos)))
        r = np.where(np.isinf(flat) | np.isnan(flat), np.nan, r)   # (torch: NaN at +-inf)
    return _out(_poly_wrap(r.reshape(xa.shape), like, odt), out)


__all__ += ["airy_ai"]
