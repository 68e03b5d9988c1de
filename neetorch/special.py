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
    return _out(_E("round")(input, decimals=decimals), out)


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
        return _creation.full((), float(v), dtype=_dt.float64, device=like.device)
    x, q = conv(input), conv(other)
    x, q = _E("broadcast_tensors")(x, q) if "broadcast_tensors" in _EXPORTS else (x + q * 0.0, q + x * 0.0)
    from .trace.tracer import is_tracing
    traced = is_tracing()
    if traced or q.numel() == 0:
        shift = 0
    else:
        qmin = float(q.min().item())
        shift = 0 if not (qmin < 0) else min(math.ceil(-qmin) + 1, 10 ** 6)
    s = q.pow(-x)
    a = q
    b = _zeros(s)
    for i in range(9 + shift):
        go = (a <= 9.0) if i >= 9 else None
        a_next = a + 1.0
        b_next = a_next.pow(-x)
        if go is None:
            a, b, s = a_next, b_next, s + b_next
        else:
            a, b, s = _where(go, a_next, a), _where(go, b_next, b), _where(go, s + b_next, s)
    w = a
    s = s + b * w / (x - 1.0) - 0.5 * b
    fac = _zeros(x) + 1.0
    k = 0.0
    for i in range(12):
        fac = fac * (x + k)
        b = b / w
        s = s + fac * b / _ZETA_A[i]
        k += 1.0
        fac = fac * (x + k)
        b = b / w
        k += 1.0
    r = s
    if traced:  # the shift for q < 0 depends on the data: a traced call leaves those NaN (documented)
        r = _where(q < 0, math.nan, r)
    qpole = _E("logical_and")(q <= 0, q == q.floor())
    bad = _E("logical_and")(q <= 0, x != x.floor())
    r = _where(bad, math.nan, r)
    r = _where(qpole, math.inf, r)
    r = _where(x < 1.0, math.nan, _where(x == 1.0, math.inf, r))
    r = _where(_E("logical_or")(x.isnan(), q.isnan()), math.nan, r)
    return _out(_back(r, odt), out)
