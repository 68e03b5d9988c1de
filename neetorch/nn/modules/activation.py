"""Activation modules and MultiheadAttention (``torch.nn.modules.activation``)."""
from __future__ import annotations

import math
import warnings

from ...tensor import creation
from ...tensor.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import NonDynamicallyQuantizableLinear
from .module import Module

__all__ = ["ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Mish", "ELU", "CELU", "SELU", "Softplus", "Softsign",
           "Hardtanh", "Hardsigmoid", "Hardswish", "Sigmoid", "Tanh", "LogSigmoid", "Softmax", "LogSoftmax",
           "Softmin", "Softmax2d", "Threshold", "PReLU", "GLU", "Tanhshrink", "Hardshrink", "Softshrink",
           "MultiheadAttention"]


def _inplace_str(inplace: bool, lead: bool = True) -> str:
    if not inplace:
        return ""
    return ", inplace=True" if lead else "inplace=True"


class _InplaceAct(Module):
    _fn = ""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return getattr(F, self._fn)(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_str(self.inplace, lead=False)


class ReLU(_InplaceAct):
    _fn = "relu"


class SiLU(_InplaceAct):
    _fn = "silu"


class Mish(_InplaceAct):
    _fn = "mish"


class SELU(_InplaceAct):
    _fn = "selu"


class Hardsigmoid(_InplaceAct):
    _fn = "hardsigmoid"

    def extra_repr(self) -> str:
        return ""


class Hardswish(_InplaceAct):
    _fn = "hardswish"

    def extra_repr(self) -> str:
        return ""


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False, min_value=None,
                 max_value=None):
        super().__init__()
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated, use `min_val` instead", FutureWarning,
                          stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated, use `max_val` instead", FutureWarning,
                          stacklevel=2)
            max_val = max_value
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_str(self.inplace)}"


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def forward(self, input):
        return F.relu6(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_str(self.inplace, lead=False)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{_inplace_str(self.inplace)}"


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class ELU(Module):
    _fn = "elu"

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return getattr(F, self._fn)(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace_str(self.inplace)}"


class CELU(ELU):
    _fn = "celu"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softsign(Module):
    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return input - input.tanh()


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input):
        return F.softshrink(input, self.lambd)


class Sigmoid(Module):
    def forward(self, input):
        return input.sigmoid()


class Tanh(Module):
    def forward(self, input):
        return input.tanh()


class LogSigmoid(Module):
    def forward(self, input):
        return F.logsigmoid(input)


def _get_softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                  "Change the call to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    _fn = "softmax"

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def __setstate__(self, state):
        super().__setstate__(state)
        if not hasattr(self, "dim"):
            self.dim = None

    def forward(self, input):
        dim = self.dim if self.dim is not None else _get_softmax_dim(self._fn, input.ndim)
        return getattr(F, self._fn)(input, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    _fn = "log_softmax"


class Softmin(Softmax):
    _fn = "softmin"

    def forward(self, input):
        dim = self.dim if self.dim is not None else _get_softmax_dim(self._fn, input.ndim)
        return F.softmin(input, dim)


class Softmax2d(Module):
    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


class Threshold(Module):
    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace_str(self.inplace)}"


class PReLU(Module):
    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = Parameter(creation.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


# ---------------------------------------------------------------------------------------------- attention
def _float_mask(mask, name: str, dtype):
    """Bool masks (True = not allowed) become additive float masks (-inf); float masks pass through."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        mask = creation.tensor(mask)
    if mask.dtype.category == 0:
        return creation.zeros(tuple(mask.shape), dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if mask.dtype.category == 1:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask.to(dtype) if mask.dtype is not dtype else mask


class MultiheadAttention(Module):
    """``torch.nn.MultiheadAttention`` (same parameter names, shapes and defaults, so PyTorch weights load).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (attn_output, attn_weights or None)``.
    """

    __constants__ = ["batch_first"]

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                             f"and num_heads={num_heads} instead")
        fk = {"device": device, "dtype": dtype}
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != self.embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(creation.empty(embed_dim, embed_dim, **fk))
            self.k_proj_weight = Parameter(creation.empty(embed_dim, self.kdim, **fk))
            self.v_proj_weight = Parameter(creation.empty(embed_dim, self.vdim, **fk))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(creation.empty(3 * embed_dim, embed_dim, **fk))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(creation.empty(3 * embed_dim, **fk))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **fk)
        if add_bias_kv:
            self.bias_k = Parameter(creation.empty(1, 1, embed_dim, **fk))
            self.bias_v = Parameter(creation.empty(1, 1, embed_dim, **fk))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def __setstate__(self, state):
        if "_qkv_same_embed_dim" not in state:
            state["_qkv_same_embed_dim"] = True
        super().__setstate__(state)

    def _projections(self, query, key, value):
        E = self.embed_dim
        b = self.in_proj_bias
        bq = bk = bv = None
        if b is not None:
            bq, bk, bv = b.narrow(0, 0, E), b.narrow(0, E, E), b.narrow(0, 2 * E, E)
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w.narrow(0, 0, E), w.narrow(0, E, E), w.narrow(0, 2 * E, E)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        if query is key and key is value and self._qkv_same_embed_dim:
            qkv = F.linear(query, self.in_proj_weight, b)
            return qkv.narrow(-1, 0, E), qkv.narrow(-1, E, E), qkv.narrow(-1, 2 * E, E)
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        from ... import ops as _ops  # noqa: F401  (make sure matmul & co. are registered)
        import neetorch as nee

        is_batched = query.ndim == 3
        if query.ndim not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D "
                                 "query tensor")
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        same_qkv = query is key and key is value
        if is_batched:
            if not self.batch_first:  # (L, N, E) -> (N, L, E)
                query = query.transpose(0, 1)
                key = query if same_qkv else key.transpose(0, 1)
                value = query if same_qkv else value.transpose(0, 1)
        else:
            query = query.unsqueeze(0)
            key = query if same_qkv else key.unsqueeze(0)
            value = query if same_qkv else value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        N, L, E = tuple(query.shape)
        if E != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {E}")
        H, D = self.num_heads, self.head_dim
        dtype = query.dtype

        q, k, v = self._projections(query, key, value)
        attn_mask = _float_mask(attn_mask, "attn_mask", dtype)
        key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", dtype)

        if self.bias_k is not None and self.bias_v is not None:
            k = nee.cat([k, self.bias_k.expand(N, 1, E)], 1)
            v = nee.cat([v, self.bias_v.expand(N, 1, E)], 1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        # F.multi_head_attention_forward's static_k / static_v ((N*H, S, D)): they replace the projected keys /
        # values (after bias_k / bias_v, before add_zero_attn, as torch)
        for i, st in enumerate(getattr(self, "_static_kv", (None, None))):
            if st is None:
                continue
            nm = "static_k" if i == 0 else "static_v"
            if st.ndim != 3 or st.shape[0] != N * H or st.shape[2] != D:
                raise AssertionError(f"expecting {nm} of shape ({N * H}, S, {D}), but got {tuple(st.shape)}")
            st = st.reshape(N, H, st.shape[1], D).transpose(1, 2).reshape(N, st.shape[1], E)
            if i == 0:
                k = st
            else:
                v = st
        if k.shape[1] != v.shape[1]:
            raise RuntimeError(f"key and value have different sequence lengths ({k.shape[1]} and {v.shape[1]})")
        if self.add_zero_attn:
            k = nee.cat([k, creation.zeros(N, 1, E, dtype=k.dtype, device=k.device)], 1)
            v = nee.cat([v, creation.zeros(N, 1, E, dtype=v.dtype, device=v.device)], 1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        S = k.shape[1]
        q = q.reshape(N, L, H, D).transpose(1, 2)  # (N, H, L, D)
        k = k.reshape(N, S, H, D).transpose(1, 2)
        v = v.reshape(N, S, H, D).transpose(1, 2)

        mask = None
        if attn_mask is not None:
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (L, S):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                       f"{(L, S)}.")
                mask = attn_mask
            elif attn_mask.ndim == 3:
                if tuple(attn_mask.shape) != (N * H, L, S):
                    raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                       f"{(N * H, L, S)}.")
                mask = attn_mask.reshape(N, H, L, S)
            else:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (N, S):
                raise AssertionError(f"expecting key_padding_mask shape of {(N, S)}, but got "
                                     f"{tuple(key_padding_mask.shape)}")
            kpm = key_padding_mask.reshape(N, 1, 1, S)
            mask = kpm if mask is None else mask + kpm
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            scale = 1.0 / math.sqrt(D)
            scores = nee.matmul(q * scale, k.transpose(-2, -1))  # (N, H, L, S)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            out = nee.matmul(weights, v)
            if average_attn_weights:
                weights = weights.mean(dim=1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            weights = None
        out = out.transpose(1, 2).reshape(N, L, E)
        out = self.out_proj(out)
        if not is_batched:
            out = out.squeeze(0)
            if weights is not None:
                weights = weights.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights
