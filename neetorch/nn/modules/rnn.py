"""RNN, LSTM, GRU and their cells (``torch.nn.modules.rnn``).

Parameter names, shapes, order and initialization are PyTorch's (``weight_ih_l{k}[_reverse]``,
``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``, ``weight_hr_l{k}`` for LSTM projections), so a
PyTorch ``state_dict`` loads as is.  The recurrences are compositions of existing ops: the input
projection of a whole layer is one ``linear`` over all time steps, then a Python loop over time
does one ``linear`` on the hidden state plus the gate arithmetic per step.  Under ``@nee.jit`` the
loop is unrolled into the traced graph (one graph per sequence length), and the gate arithmetic
of each step fuses into elementwise kernels.

A :class:`~neetorch.nn.utils.rnn.PackedSequence` input runs the same steps on the rows still active at each
step: step ``t`` updates the first ``batch_sizes[t]`` rows of the state (the batch is sorted by decreasing
length) and keeps the rest, so ``h_n``/``c_n`` hold each sequence's state at its own last step (its first step
for the reverse direction), and the outputs of the steps concatenate into the packed output.  ``hx`` is
permuted into the sorted order and ``h_n``/``c_n`` back, as PyTorch does.
"""
from __future__ import annotations

import itertools
import math
import numbers
import warnings

from ...ops.shape import cat as _cat
from ...ops.shape import stack as _stack
from ...tensor import creation
from ...tensor.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]


def _shape(t) -> list:
    return list(t.shape)


def _check_dtype(name: str, input, weight) -> None:
    if input.dtype != weight.dtype:
        raise ValueError(f"{name}: input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                         f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")


# ---------------------------------------------------------------- one time step of each cell kind
def _rnn_step(x_proj, h, w_hh, b_hh, relu: bool):
    """x_proj: the input projection ``x W_ih^T + b_ih`` of this step."""
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return F.relu(pre) if relu else pre.tanh()


def _lstm_step(x_proj, h, c, w_hh, b_hh, w_hr):
    gates = x_proj + F.linear(h, w_hh, b_hh)
    H = gates.shape[-1] // 4
    i = gates.narrow(-1, 0, H).sigmoid()
    f = gates.narrow(-1, H, H).sigmoid()
    g = gates.narrow(-1, 2 * H, H).tanh()
    o = gates.narrow(-1, 3 * H, H).sigmoid()
    c = f * c + i * g
    h = o * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(x_proj, h, w_hh, b_hh):
    hh = F.linear(h, w_hh, b_hh)
    H = hh.shape[-1] // 3
    r = (x_proj.narrow(-1, 0, H) + hh.narrow(-1, 0, H)).sigmoid()
    z = (x_proj.narrow(-1, H, H) + hh.narrow(-1, H, H)).sigmoid()
    n = (x_proj.narrow(-1, 2 * H, H) + r * hh.narrow(-1, 2 * H, H)).tanh()
    return n + z * (h - n)  # == (1 - z) * n + z * h


# ---------------------------------------------------------------- multi-layer recurrent modules
class RNNBase(Module):
    """Base of :class:`RNN`, :class:`LSTM` and :class:`GRU` (``torch.nn.RNNBase``)."""

    __constants__ = ["mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
                     "bidirectional", "proj_size"]

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        fk = {"device": device, "dtype": dtype}
        super().__init__()
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: {type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: {type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        gates = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}.get(mode)
        if gates is None:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                in_size = input_size if layer == 0 else real_hidden * num_directions
                suffix = "_reverse" if direction == 1 else ""
                params = [(f"weight_ih_l{layer}{suffix}", (gates * hidden_size, in_size)),
                          (f"weight_hh_l{layer}{suffix}", (gates * hidden_size, real_hidden))]
                if bias:
                    params += [(f"bias_ih_l{layer}{suffix}", (gates * hidden_size,)),
                               (f"bias_hh_l{layer}{suffix}", (gates * hidden_size,))]
                if proj_size > 0:
                    params.append((f"weight_hr_l{layer}{suffix}", (proj_size, hidden_size)))
                for name, shape in params:
                    setattr(self, name, Parameter(creation.empty(*shape, **fk)))
                names = [n for n, _ in params]
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list:
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """A no-op (PyTorch packs weights for cuDNN here)."""

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # ------------------------------------------------------------ argument handling
    def _name(self) -> str:
        return {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(self.mode, self.mode)

    def _check_input(self, input) -> None:
        _check_dtype(self._name(), input, getattr(self, self._flat_weights_names[0]))
        if self.input_size != input.shape[-1]:
            raise RuntimeError(f"{self._name()}: input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]} (input of shape {_shape(input)})")

    def _check_hidden(self, hx, expected: tuple, what: str) -> None:
        if tuple(hx.shape) != expected:
            raise RuntimeError(f"{self._name()}: Expected {what} size {expected}, got {_shape(hx)}")
        _check_dtype(self._name() + f" ({what})", hx, getattr(self, self._flat_weights_names[0]))

    def _layer_params(self, layer: int, direction: int):
        suffix = "_reverse" if direction == 1 else ""
        g = lambda n: getattr(self, f"{n}_l{layer}{suffix}")
        b_ih = g("bias_ih") if self.bias else None
        b_hh = g("bias_hh") if self.bias else None
        w_hr = g("weight_hr") if self.proj_size > 0 else None
        return g("weight_ih"), g("weight_hh"), b_ih, b_hh, w_hr

    def _run(self, x, h0, c0):
        """``x`` (T, B, I) time-major; ``h0``/``c0`` (L*D, B, H) (``c0`` None unless LSTM).
        Returns (output (T, B, D*H_out), h_n, c_n)."""
        D = 2 if self.bidirectional else 1
        T = x.shape[0]
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for direction in range(D):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, direction)
                k = layer * D + direction
                h = h0.select(0, k)
                c = c0.select(0, k) if c0 is not None else None
                x_proj = F.linear(layer_in, w_ih, b_ih)  # (T, B, G*H): every step's input projection at once
                steps = [None] * T
                for t in (range(T - 1, -1, -1) if direction == 1 else range(T)):
                    xp = x_proj.select(0, t)
                    if self.mode == "LSTM":
                        h, c = _lstm_step(xp, h, c, w_hh, b_hh, w_hr)
                    elif self.mode == "GRU":
                        h = _gru_step(xp, h, w_hh, b_hh)
                    else:
                        h = _rnn_step(xp, h, w_hh, b_hh, self.mode == "RNN_RELU")
                    steps[t] = h
                outs.append(_stack(steps))
                h_n.append(h)
                if c is not None:
                    c_n.append(c)
            layer_in = outs[0] if D == 1 else _cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        return layer_in, _stack(h_n), (_stack(c_n) if c_n else None)

    def _step(self, xp, h, c, w_hh, b_hh, w_hr):
        if self.mode == "LSTM":
            return _lstm_step(xp, h, c, w_hh, b_hh, w_hr)
        if self.mode == "GRU":
            return _gru_step(xp, h, w_hh, b_hh), None
        return _rnn_step(xp, h, w_hh, b_hh, self.mode == "RNN_RELU"), None

    def _run_packed(self, data, batch_sizes: list, h0, c0):
        """``data`` (N, I) packed rows (step after step, ``batch_sizes[t]`` rows for step t); ``h0``/``c0``
        (L*D, B, H) in the sorted batch order.  Returns (packed output (N, D*H_out), h_n, c_n)."""
        D = 2 if self.bidirectional else 1
        T, B = len(batch_sizes), batch_sizes[0]
        offsets = [0] * T
        for t in range(1, T):
            offsets[t] = offsets[t - 1] + batch_sizes[t - 1]

        def merge(new, old, b):  # the first b rows advance, the others keep their state
            return new if b == B else _cat([new, old.narrow(0, b, B - b)], 0)

        h_n, c_n = [], []
        layer_in = data
        for layer in range(self.num_layers):
            outs = []
            for direction in range(D):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, direction)
                k = layer * D + direction
                h = h0.select(0, k)
                c = c0.select(0, k) if c0 is not None else None
                x_proj = F.linear(layer_in, w_ih, b_ih)  # (N, G*H)
                steps = [None] * T
                for t in (range(T - 1, -1, -1) if direction == 1 else range(T)):
                    b = batch_sizes[t]
                    xp = x_proj.narrow(0, offsets[t], b)
                    hb = h if b == B else h.narrow(0, 0, b)
                    cb = None if c is None else (c if b == B else c.narrow(0, 0, b))
                    hb, cb = self._step(xp, hb, cb, w_hh, b_hh, w_hr)
                    steps[t] = hb
                    h = merge(hb, h, b)
                    if c is not None:
                        c = merge(cb, c, b)
                outs.append(steps[0] if T == 1 else _cat(steps, 0))
                h_n.append(h)
                if c is not None:
                    c_n.append(c)
            layer_in = outs[0] if D == 1 else _cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        return layer_in, _stack(h_n), (_stack(c_n) if c_n else None)

    def _forward_packed(self, packed, hx):
        from ..utils.rnn import PackedSequence, _host_ints
        name = self._name()
        data = packed.data
        if not isinstance(data, Tensor) or data.ndim != 2:
            raise ValueError(f"{name}: a PackedSequence input must hold 2-D data (sum of lengths, input_size), got "
                             f"{_shape(data) if isinstance(data, Tensor) else type(data).__name__}")
        self._check_input(data)
        bs = _host_ints(packed.batch_sizes, "batch_sizes", name).tolist()
        if not bs or min(bs) <= 0 or any(a < b for a, b in itertools.pairwise(bs)) or sum(bs) != data.shape[0]:
            raise RuntimeError(f"{name}: invalid PackedSequence: batch_sizes {bs} must be positive, non-increasing "
                               f"and sum to the {data.shape[0]} rows of data")
        lstm = self.mode == "LSTM"
        B = bs[0]
        D = 2 if self.bidirectional else 1
        H_out = self.proj_size if self.proj_size > 0 else self.hidden_size
        h_shape = (self.num_layers * D, B, H_out)
        c_shape = (self.num_layers * D, B, self.hidden_size)
        if hx is None:
            h0 = creation.zeros(*h_shape, dtype=data.dtype, device=data.device)
            c0 = creation.zeros(*c_shape, dtype=data.dtype, device=data.device) if lstm else None
        else:
            if lstm and (not isinstance(hx, (tuple, list)) or len(hx) != 2
                         or not all(isinstance(h, Tensor) for h in hx)):
                raise TypeError(f"LSTM: expected hx to be a tuple (h_0, c_0) of Tensors, got {type(hx).__name__}")
            if not lstm and not isinstance(hx, Tensor):
                raise TypeError(f"{name}: expected hx to be a Tensor, got {type(hx).__name__}")
            h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
            self._check_hidden(h0, h_shape, "hidden[0]" if lstm else "hidden")
            if lstm:
                self._check_hidden(c0, c_shape, "hidden[1]")
            if packed.sorted_indices is not None:  # hx is given in the caller's batch order
                h0 = h0.index_select(1, packed.sorted_indices)
                c0 = c0.index_select(1, packed.sorted_indices) if lstm else None
        out, h_n, c_n = self._run_packed(data, bs, h0, c0)
        if packed.unsorted_indices is not None:
            h_n = h_n.index_select(1, packed.unsorted_indices)
            c_n = c_n.index_select(1, packed.unsorted_indices) if lstm else None
        out = PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        return out, ((h_n, c_n) if lstm else h_n)

    def _forward(self, input, hx):
        name = self._name()
        from ..utils.rnn import PackedSequence
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a Tensor or a PackedSequence input, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
        self._check_input(input)
        lstm = self.mode == "LSTM"
        batched = input.ndim == 3
        if input.shape[1 if (self.batch_first and batched) else 0] == 0:
            raise RuntimeError(f"{name}: Expected sequence length to be larger than 0 in RNN (input of shape "
                               f"{_shape(input)})")
        if hx is not None:
            if lstm and (not isinstance(hx, (tuple, list)) or not all(isinstance(h, Tensor) for h in hx)):
                raise TypeError(f"LSTM: expected hx to be a tuple (h_0, c_0) of Tensors, got {type(hx).__name__}")
            if not lstm and not isinstance(hx, Tensor):
                raise TypeError(f"{name}: expected hx to be a Tensor, got {type(hx).__name__}")
            hs = tuple(hx) if lstm else (hx,)
            if lstm and len(hs) != 2:
                raise RuntimeError(f"LSTM: expected hx to be a tuple (h_0, c_0), got {len(hs)} elements")
            want = 3 if batched else 2
            if any(h.ndim != want for h in hs):
                kind = "batched 3-D" if batched else "unbatched 2-D"
                if lstm:
                    raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D but got "
                                       f"({hs[0].ndim}-D, {hs[1].ndim}-D) tensors")
                raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got {hs[0].ndim}-D tensor")
            if not batched:
                hs = tuple(h.unsqueeze(1) for h in hs)
        if not batched:
            x = input.unsqueeze(1)
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        B = x.shape[1]
        D = 2 if self.bidirectional else 1
        H_out = self.proj_size if self.proj_size > 0 else self.hidden_size
        h_shape = (self.num_layers * D, B, H_out)
        c_shape = (self.num_layers * D, B, self.hidden_size)
        if hx is None:
            h0 = creation.zeros(*h_shape, dtype=input.dtype, device=input.device)
            c0 = creation.zeros(*c_shape, dtype=input.dtype, device=input.device) if lstm else None
        else:
            h0 = hs[0]
            c0 = hs[1] if lstm else None
            self._check_hidden(h0, h_shape, "hidden[0]" if lstm else "hidden")
            if lstm:
                self._check_hidden(c0, c_shape, "hidden[1]")
        out, h_n, c_n = self._run(x, h0, c0)
        if not batched:
            out, h_n = out.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        elif self.batch_first:
            out = out.transpose(0, 1).contiguous()  # PyTorch's is contiguous: out.view(B * T, -1) must work
        return out, ((h_n, c_n) if lstm else h_n)


class RNN(RNNBase):
    """Multi-layer Elman RNN with tanh or ReLU (``torch.nn.RNN``): ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T
    + b_hh)``.  ``forward(input, hx=None) -> (output, h_n)``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nl = args[3]
            args = args[:3] + args[4:]
        else:
            nl = kwargs.pop("nonlinearity", "tanh")
        if nl == "tanh":
            mode = "RNN_TANH"
        elif nl == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nl}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)
        self.nonlinearity = nl

    def forward(self, input, hx=None):
        return self._forward(input, hx)


class LSTM(RNNBase):
    """Multi-layer LSTM (``torch.nn.LSTM``), optionally with projections (``proj_size``).
    ``forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n))``."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def forward(self, input, hx=None):
        return self._forward(input, hx)


class GRU(RNNBase):
    """Multi-layer GRU (``torch.nn.GRU``); ``forward(input, hx=None) -> (output, h_n)``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        return self._forward(input, hx)


# ---------------------------------------------------------------- single cells
class RNNCellBase(Module):
    """Base of the cells: ``weight_ih`` (chunks*H, I), ``weight_hh`` (chunks*H, H), ``bias_ih``, ``bias_hh``."""

    __constants__ = ["input_size", "hidden_size", "bias"]

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None,
                 dtype=None) -> None:
        fk = {"device": device, "dtype": dtype}
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(creation.empty(num_chunks * hidden_size, input_size, **fk))
        self.weight_hh = Parameter(creation.empty(num_chunks * hidden_size, hidden_size, **fk))
        if bias:
            self.bias_ih = Parameter(creation.empty(num_chunks * hidden_size, **fk))
            self.bias_hh = Parameter(creation.empty(num_chunks * hidden_size, **fk))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _prepare(self, input, hx, n_states: int):
        """Batch the input and states; returns (input (B, I), states (B, H) each, batched)."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        states = None if hx is None else (tuple(hx) if n_states == 2 else (hx,))
        if states is not None:
            if n_states == 2 and len(states) != 2:
                raise RuntimeError(f"{name}: expected hx to be a tuple (h_0, c_0), got {len(states)} elements")
            for s in states:
                if s.ndim not in (1, 2):
                    raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got {s.ndim}D instead")
        _check_dtype(name, input, self.weight_ih)
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got {x.shape[1]} expected "
                               f"{self.input_size} (input of shape {_shape(input)})")
        B = x.shape[0]
        if states is None:
            states = tuple(creation.zeros(B, self.hidden_size, dtype=input.dtype, device=input.device)
                           for _ in range(n_states))
        else:
            states = tuple(s if batched else s.unsqueeze(0) for s in states)
            for i, s in enumerate(states):
                if tuple(s.shape) != (B, self.hidden_size):
                    what = "hidden" if n_states == 1 else f"hx[{i}]"
                    raise RuntimeError(f"{name}: expected {what} of shape {[B, self.hidden_size]} for input of shape "
                                       f"{_shape(input)}, got {_shape(hx if n_states == 1 else hx[i])}")
                _check_dtype(name + " (hidden)", s, self.weight_ih)
        return x, states, batched


class RNNCell(RNNCellBase):
    """An Elman RNN cell (``torch.nn.RNNCell``): ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""

    __constants__ = ["input_size", "hidden_size", "bias", "nonlinearity"]

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                      self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """A long short-term memory cell (``torch.nn.LSTMCell``); ``forward(input, (h, c)=None) -> (h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        x, (h, c), batched = self._prepare(input, hx, 2)
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """A gated recurrent unit cell (``torch.nn.GRUCell``)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
