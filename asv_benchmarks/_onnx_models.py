"""ONNX models for the neetorch-vs-onnxruntime latency benchmarks (issue 4).

Shared by ``asv_benchmarks/bench_onnx.py``, ``bench/onnx_vs_ort.py`` and
``tests/test_bench_onnx_smoke.py``.  Every model is built with ``onnx.helper`` from seeded
random weights (no download, no torch), or read from the ``light`` model tests shipped with the
``onnx`` package:

- ``light_*``: the nine real CNNs of ``onnx/backend/test/data/light`` (weights are produced by
  ``ConstantOfShape`` nodes inside the graph, all 0.02, so every output element is equal; the input
  is the ONNX runner's deterministic ramp).  ``random_weights=True`` gives the same networks with
  seeded random weights and their logits as an extra output, for a correctness check that means
  something;
- ``bert``: a BERT-like encoder (post-norm, MatMul+Add projections, Reshape/Transpose heads,
  Softmax, Erf-based GELU, LayerNormalization), symbolic ``batch``/``seq`` dims;
- ``gpt_step``: a GPT-style decoder's single-token step: fused QKV MatMul + Split, past key/value
  inputs concatenated with the new token's (``present_*`` outputs), pre-norm, GELU MLP;
- ``mlp``: Gemm(transB=1)+Relu layers, as ``torch.onnx.export`` writes ``nn.Linear`` on 2-D inputs;
- ``mobilenet_v3``: MobileNetV3-Small at 224x224 as ``torch.onnx.export`` writes torchvision's (batch norms folded
  into the convs): 1x1 expansions and projections, 3x3 / 5x5 depthwise convs, HardSwish / Relu, squeeze-and-
  excitation blocks (GlobalAveragePool, two 1x1 convs, HardSigmoid, Mul), residual Adds, a Gemm head.

:func:`spec` returns a :class:`ModelSpec` (model, input feed, and for the decoder the bytes one
step must read); sizes are the issue's, or tiny ones with ``tiny=True`` (smoke tests).
"""
from __future__ import annotations

import glob
import itertools
import math
import os
from dataclasses import dataclass, field

import numpy as np

OPSET = 17  # LayerNormalization needs 17; onnxruntime 1.2x runs it natively

LIGHT = ("light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512")


@dataclass
class ModelSpec:
    name: str
    model: object                      # onnx.ModelProto
    feed: dict                         # input name -> numpy array
    bytes_read: int | None = None      # weights + KV cache one run must read (decoder step), else None
    rtol: float = 1e-4
    atol: float = 1e-5
    info: dict = field(default_factory=dict)

    def close(self, got, ref) -> bool:
        """``np.allclose`` per output with this model's rtol/atol; for the light models with random weights
        (deep, un-normalized: logits up to ~1e5 next to values near 0) atol grows to rtol * max |ref|."""
        if len(got) != len(ref):
            return False
        for a, b in zip(got, ref):
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape:
                return False
            atol = self.atol + (self.rtol * float(np.max(np.abs(b))) if self.name.endswith("_randw") and b.size else 0)
            if not np.allclose(a, b, rtol=self.rtol, atol=atol):
                return False
        return True


def _onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise NotImplementedError("onnx is not installed") from None
    return onnx, helper, numpy_helper, TensorProto


class _Builder:
    """A tiny graph builder: ``b.node("MatMul", [a, w])`` returns the output name."""

    def __init__(self, seed=0):
        _, self.h, self.nh, self.TP = _onnx()
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, prefix):
        self.k += 1
        return f"{prefix}_{self.k}"

    def init(self, prefix, arr):
        n = self.name(prefix)
        self.inits.append(self.nh.from_array(np.ascontiguousarray(arr), n))
        return n

    def weight(self, prefix, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return self.init(prefix, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, prefix, vals):
        return self.init(prefix, np.asarray(vals, dtype=np.int64))

    def node(self, op, inputs, nout=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(nout)]
        self.nodes.append(self.h.make_node(op, list(inputs), outs, name=self.name(op), **attrs))
        return outs[0] if nout == 1 else outs

    def node_to(self, op, inputs, outputs, **attrs):
        self.nodes.append(self.h.make_node(op, list(inputs), list(outputs), name=self.name(op), **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def linear(self, x, din, dout, prefix="fc"):
        """MatMul + Add (the pattern torch exports for nn.Linear on 3-D inputs)."""
        w = self.weight(prefix + "_w", din, dout)
        b = self.init(prefix + "_b", (self.rng.standard_normal(dout) * 0.02).astype(np.float32))
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def layer_norm(self, x, d):
        g = self.init("ln_g", (1.0 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        b = self.init("ln_b", (0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return self.node("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def gelu_erf(self, x):
        """x * 0.5 * (1 + erf(x / sqrt(2))): the Erf chain BERT exports contain."""
        s = self.init("sqrt2", np.array(math.sqrt(2.0), np.float32))
        one = self.init("one", np.array(1.0, np.float32))
        half = self.init("half", np.array(0.5, np.float32))
        e = self.node("Erf", [self.node("Div", [x, s])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [e, one])]), half])

    def model(self, name, inputs, outputs):
        g = self.h.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = self.h.make_model(g, opset_imports=[self.h.make_opsetid("", OPSET)], producer_name="neetorch-bench")
        m.ir_version = 8
        return m


def _heads(b: _Builder, x, shape_name, perm):
    """[B, S, D] -> Reshape [B, S, H, dh] -> Transpose ``perm``."""
    return b.node("Transpose", [b.node("Reshape", [x, shape_name])], perm=perm)


def bert(batch=1, seq=128, d=384, heads=12, layers=6, ffn=4, seed=0) -> ModelSpec:
    b = _Builder(seed)
    h, TP = b.h, b.TP
    dh = d // heads
    x = "input"
    split = b.ints("heads_shape", [0, 0, heads, dh])
    merge = b.ints("merge_shape", [0, 0, d])
    scale = b.init("scale", np.array(1.0 / math.sqrt(dh), np.float32))
    for _ in range(layers):
        q = _heads(b, b.linear(x, d, d, "q"), split, [0, 2, 1, 3])          # [B, H, S, dh]
        kt = _heads(b, b.linear(x, d, d, "k"), split, [0, 2, 3, 1])         # [B, H, dh, S]
        v = _heads(b, b.linear(x, d, d, "v"), split, [0, 2, 1, 3])
        s = b.node("Mul", [b.node("MatMul", [q, kt]), scale])
        p = b.node("Softmax", [s], axis=-1)
        ctx = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [p, v])], perm=[0, 2, 1, 3]), merge])
        x = b.layer_norm(b.node("Add", [x, b.linear(ctx, d, d, "o")]), d)
        f = b.linear(b.gelu_erf(b.linear(x, d, ffn * d, "ff1")), ffn * d, d, "ff2")
        x = b.layer_norm(b.node("Add", [x, f]), d)
    b.node_to("Identity", [x], ["output"])
    m = b.model("bert_encoder",
                [h.make_tensor_value_info("input", TP.FLOAT, ["batch", "seq", d])],
                [h.make_tensor_value_info("output", TP.FLOAT, ["batch", "seq", d])])
    feed = {"input": np.random.default_rng(seed + 1).standard_normal((batch, seq, d)).astype(np.float32)}
    return ModelSpec(f"bert_b{batch}", m, feed, info={"batch": batch, "seq": seq, "d": d, "heads": heads, "layers": layers})


def gpt_step(batch=1, past=512, d=384, heads=12, layers=6, ffn=4, seed=0) -> ModelSpec:
    """One decoder step: x [B, 1, D] and past_{key,value}_i [B, H, P, dh] -> hidden, present_*."""
    b = _Builder(seed)
    h, TP = b.h, b.TP
    dh = d // heads
    x = "x"
    split = b.ints("heads_shape", [0, 0, heads, dh])
    merge = b.ints("merge_shape", [0, 0, d])
    scale = b.init("scale", np.array(1.0 / math.sqrt(dh), np.float32))
    sizes = b.ints("qkv_sizes", [d, d, d])
    inputs = [h.make_tensor_value_info("x", TP.FLOAT, ["batch", 1, d])]
    outputs = [h.make_tensor_value_info("hidden", TP.FLOAT, ["batch", 1, d])]
    feed_rng = np.random.default_rng(seed + 1)
    feed = {"x": feed_rng.standard_normal((batch, 1, d)).astype(np.float32)}
    for i in range(layers):
        pk, pv, ok, ov = f"past_key_{i}", f"past_value_{i}", f"present_key_{i}", f"present_value_{i}"
        for n in (pk, pv):
            inputs.append(h.make_tensor_value_info(n, TP.FLOAT, ["batch", heads, "past", dh]))
            feed[n] = feed_rng.standard_normal((batch, heads, past, dh)).astype(np.float32)
        for n in (ok, ov):
            outputs.append(h.make_tensor_value_info(n, TP.FLOAT, ["batch", heads, "total", dh]))
        n1 = b.layer_norm(x, d)
        q, k, v = b.node("Split", [b.linear(n1, d, 3 * d, "qkv"), sizes], nout=3, axis=-1)
        q = _heads(b, q, split, [0, 2, 1, 3])                                   # [B, H, 1, dh]
        b.node_to("Concat", [pk, _heads(b, k, split, [0, 2, 1, 3])], [ok], axis=2)   # [B, H, P+1, dh]
        b.node_to("Concat", [pv, _heads(b, v, split, [0, 2, 1, 3])], [ov], axis=2)
        s = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [ok], perm=[0, 1, 3, 2])]), scale])
        p = b.node("Softmax", [s], axis=-1)                                     # [B, H, 1, P+1]
        ctx = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [p, ov])], perm=[0, 2, 1, 3]), merge])
        x = b.node("Add", [x, b.linear(ctx, d, d, "o")])
        f = b.linear(b.gelu_erf(b.linear(b.layer_norm(x, d), d, ffn * d, "ff1")), ffn * d, d, "ff2")
        x = b.node("Add", [x, f])
    b.node_to("Identity", [b.layer_norm(x, d)], ["hidden"])
    m = b.model("gpt_decoder_step", inputs, outputs)
    weights = sum(b.nh.to_array(t).nbytes for t in m.graph.initializer)
    cache = sum(a.nbytes for k, a in feed.items() if k.startswith("past_"))
    return ModelSpec(f"gpt_step_p{past}", m, feed, bytes_read=weights + cache,
                     info={"batch": batch, "past": past, "d": d, "heads": heads, "layers": layers,
                           "weight_bytes": weights, "cache_bytes": cache})


def mlp(batch=64, sizes=(784, 1024, 1024, 10), seed=0) -> ModelSpec:
    b = _Builder(seed)
    h, TP = b.h, b.TP
    x = "input"
    for i, (din, dout) in enumerate(itertools.pairwise(sizes)):
        w = b.weight("w", dout, din, scale=1.0 / math.sqrt(din))
        bias = b.init("b", (b.rng.standard_normal(dout) * 0.02).astype(np.float32))
        x = b.node("Gemm", [x, w, bias], transB=1)
        if i < len(sizes) - 2:
            x = b.node("Relu", [x])
    b.node_to("Identity", [x], ["output"])
    m = b.model("mlp", [h.make_tensor_value_info("input", TP.FLOAT, ["batch", sizes[0]])],
                [h.make_tensor_value_info("output", TP.FLOAT, ["batch", sizes[-1]])])
    feed = {"input": np.random.default_rng(seed + 1).standard_normal((batch, sizes[0])).astype(np.float32)}
    return ModelSpec("mlp", m, feed, info={"batch": batch, "sizes": sizes})


# MobileNetV3-Small's blocks (torchvision): (in, kernel, expanded, out, squeeze-excite, HardSwish, stride)
_MV3_SMALL = ((16, 3, 16, 16, 1, 0, 2), (16, 3, 72, 24, 0, 0, 2), (24, 3, 88, 24, 0, 0, 1), (24, 5, 96, 40, 1, 1, 2),
              (40, 5, 240, 40, 1, 1, 1), (40, 5, 240, 40, 1, 1, 1), (40, 5, 120, 48, 1, 1, 1),
              (48, 5, 144, 48, 1, 1, 1), (48, 5, 288, 96, 1, 1, 2), (96, 5, 576, 96, 1, 1, 1),
              (96, 5, 576, 96, 1, 1, 1))


def mobilenet_v3(batch=1, size=224, width=1.0, seed=0) -> ModelSpec:
    """MobileNetV3-Small (see the module docs); ``width`` scales the channels (tiny models)."""
    b = _Builder(seed)
    h, TP = b.h, b.TP

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)

    def conv(x, cin, cout, k, s=1, groups=1, act=None):
        w = b.weight("conv_w", cout, cin // groups, k, k, scale=math.sqrt(2.0 / (cin // groups * k * k)))
        bias = b.init("conv_b", (b.rng.standard_normal(cout) * 0.05).astype(np.float32))
        p = (k - 1) // 2
        y = b.node("Conv", [x, w, bias], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], group=groups)
        return b.node(act, [y]) if act else y

    x = conv("input", 3, ch(16), 3, 2, act="HardSwish")
    for cin, k, exp, cout, se, hs, s in _MV3_SMALL:
        cin, exp, cout = ch(cin), ch(exp), ch(cout)
        act = "HardSwish" if hs else "Relu"
        y = conv(x, cin, exp, 1, act=act) if exp != cin else x
        y = conv(y, exp, exp, k, s, groups=exp, act=act)
        if se:
            sq = max(8, (exp // 4 + 4) // 8 * 8)
            g = b.node("GlobalAveragePool", [y])
            g = conv(conv(g, exp, sq, 1, act="Relu"), sq, exp, 1)
            y = b.node("Mul", [y, b.node("HardSigmoid", [g], alpha=1.0 / 6.0, beta=0.5)])
        y = conv(y, exp, cout, 1)
        x = b.node("Add", [x, y]) if s == 1 and cin == cout else y
    last = ch(576)
    x = conv(x, ch(96), last, 1, act="HardSwish")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    hid = ch(1024)
    w1 = b.weight("fc_w", hid, last, scale=1.0 / math.sqrt(last))
    x = b.node("HardSwish", [b.node("Gemm", [x, w1, b.init("fc_b", np.zeros(hid, np.float32))], transB=1)])
    w2 = b.weight("fc_w", 1000, hid, scale=1.0 / math.sqrt(hid))
    b.node_to("Gemm", [x, w2, b.init("fc_b", np.zeros(1000, np.float32))], ["output"], transB=1)
    m = b.model("mobilenet_v3", [h.make_tensor_value_info("input", TP.FLOAT, ["batch", 3, size, size])],
                [h.make_tensor_value_info("output", TP.FLOAT, ["batch", 1000])])
    feed = {"input": np.random.default_rng(seed + 1).standard_normal((batch, 3, size, size)).astype(np.float32)}
    return ModelSpec("mobilenet_v3", m, feed, info={"batch": batch, "size": size})


def light_dir() -> str:
    onnx = _onnx()[0]
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light(name: str, random_weights: bool = False) -> ModelSpec:
    """A light model test and the ONNX runner's input (a ramp in [0, 1)), with its reference output.

    The shipped light models make every weight with ``ConstantOfShape`` (one value per tensor), so
    their outputs are uniform and agreeing on them proves little.  ``random_weights=True`` replaces
    each such node by a seeded random initializer (:func:`_randomize_light_weights`): the same
    computation, with outputs worth comparing."""
    onnx, _, numpy_helper, _ = _onnx()
    path = os.path.join(light_dir(), name + ".onnx")
    if not os.path.exists(path):
        raise NotImplementedError(f"{path} is not shipped with this onnx version")
    m = onnx.load(path)
    if random_weights:
        _randomize_light_weights(m)
    inits = {i.name for i in m.graph.initializer}
    feed = {}
    for x in m.graph.input:
        if x.name in inits:
            continue
        shape = tuple(dd.dim_value if dd.HasField("dim_value") else 1 for dd in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feed[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    spec = ModelSpec(name + ("_randw" if random_weights else ""), m, feed, rtol=1e-3, atol=1e-5)
    ref = path[:-5] + "_output_0.pb"
    if os.path.exists(ref) and not random_weights:
        t = onnx.TensorProto()
        with open(ref, "rb") as f:
            t.ParseFromString(f.read())
        spec.info["reference"] = numpy_helper.to_array(t)
    return spec


def _randomize_light_weights(m, seed=0):
    """Replace ``ConstantOfShape`` weights by seeded random initializers of a sensible scale: matrices
    and kernels He-normal; per-channel vectors by what reads them (BatchNormalization's variance
    exp(0.1 N) > 0, scales and Mul factors 1 + 0.1 N, biases and means 0.1 N)."""
    onnx, helper, numpy_helper, _ = _onnx()
    rng = np.random.default_rng(seed)
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    users: dict = {}
    alias = {}
    for n in m.graph.node:
        if n.op_type in ("Unsqueeze", "Reshape", "Identity") and n.input:
            alias[n.output[0]] = n.input[0]
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            while x in alias:
                users.setdefault(x, []).append((n.op_type, i))
                x = alias[x]
            users.setdefault(x, []).append((n.op_type, i))
    keep = []
    for n in m.graph.node:
        if not (n.op_type == "ConstantOfShape" and n.input and n.input[0] in consts):
            keep.append(n)
            continue
        shape = tuple(int(d) for d in consts[n.input[0]].reshape(-1))
        val = next((numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"), np.zeros(1, np.float32))
        z = rng.standard_normal(shape)
        use = users.get(n.output[0], [])
        if len(shape) >= 2:
            w = z * math.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))
        elif ("BatchNormalization", 4) in use:
            w = np.exp(0.1 * z)
        elif ("BatchNormalization", 1) in use or any(op == "Mul" for op, _ in use):
            w = 1.0 + 0.1 * z
        else:
            w = 0.1 * z
        w = w.astype(val.dtype)
        m.graph.initializer.append(numpy_helper.from_array(w, n.output[0]))
        if m.ir_version < 4:  # initializers must be graph inputs too before IR version 4
            m.graph.input.append(helper.make_tensor_value_info(n.output[0], helper.np_dtype_to_tensor_dtype(w.dtype),
                                                               list(shape)))
    del m.graph.node[:]
    m.graph.node.extend(keep)
    # random weights make the logits large and the final softmax one-hot: expose the logits too
    sm = [n for n in m.graph.node if n.op_type == "Softmax"]
    if sm:
        logits = sm[-1].input[0]
        inferred = onnx.shape_inference.infer_shapes(m)
        vi = next((v for v in inferred.graph.value_info if v.name == logits), None)
        if vi is not None:
            m.graph.output.append(vi)


def light_names() -> list:
    try:
        d = light_dir()
    except NotImplementedError:
        return []
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(d, "light_*.onnx")))


BUILT = ("bert_b1", "bert_b8", "gpt_step", "mlp", "mobilenet_v3")
MODELS = BUILT + LIGHT


def spec(name: str, tiny: bool = False, random_weights: bool = False) -> ModelSpec:
    """The model ``name`` (one of :data:`MODELS`) at the issue's size, or a tiny one (built models);
    ``random_weights``: light models with seeded random weights (see :func:`light`)."""
    if name.startswith("bert_b"):
        bsz = int(name[6:])
        if tiny:
            return bert(batch=min(bsz, 2), seq=8, d=32, heads=4, layers=2)
        return bert(batch=bsz)
    if name == "gpt_step":
        return gpt_step(past=16, d=32, heads=4, layers=2) if tiny else gpt_step()
    if name == "mlp":
        return mlp(batch=4, sizes=(16, 32, 32, 10)) if tiny else mlp()
    if name == "mobilenet_v3":
        return mobilenet_v3(size=32, width=0.5) if tiny else mobilenet_v3()
    if name.startswith("light_"):
        return light(name, random_weights)
    raise KeyError(f"unknown benchmark model {name!r}; known: {', '.join(MODELS)}")


# ----------------------------------------------------------------------------------- runners
def threads() -> int:
    """The thread count both engines get: NEE_NUM_THREADS, else 2 (this machine's core count)."""
    return int(os.environ.get("NEE_NUM_THREADS") or 0) or min(2, os.cpu_count() or 1)


def ort_session(model, nthreads=None):
    try:
        import onnxruntime as ort
    except ImportError:
        raise NotImplementedError("onnxruntime is not installed") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = nthreads or threads()
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def nee_session(model, nthreads=None):
    import neetorch as nee
    nee.set_num_threads(nthreads or threads())
    from neetorch.onnx import InferenceSession
    return InferenceSession(model)


def run_fn(sess, feed):
    """A zero-argument callable: one ``sess.run(None, feed)``."""
    return lambda: sess.run(None, feed)
