"""neetorch demo: the main job on the default CPU device.

1. eager: a small convolutional classifier written with ``nee.nn``, run on a batch and
   checked against a numpy reference of the same arithmetic;
2. jit: the MLP head compiled with ``@nee.jit`` (fused elementwise kernels), checked
   against eager, with its graph and kernel counts;
3. ONNX: the same head exported as an ONNX model (built with ``onnx.helper``), run through
   ``nee.onnx.InferenceSession`` with onnxruntime's API, checked against eager;
4. devices: what ran where (``nee.devices()``, the fallback report).

Run: ``python3 examples/demo.py`` (a second run starts warm from the kernel cache).
"""
import time

import numpy as np

import neetorch as nee
import neetorch.nn as nn
import neetorch.nn.functional as F

T0 = time.perf_counter()


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.norm = nn.LayerNorm(32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def features(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(x, 2)
        x = F.gelu(self.conv2(x))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)

    def head(self, h):
        return F.softmax(self.fc2(F.silu(self.fc1(self.norm(h)))), dim=-1)

    def forward(self, x):
        return self.head(self.features(x))


def numpy_reference(net, x):
    """The same network in plain numpy (float64), to check the eager result."""
    def conv(x, w, b, stride, pad):
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
        cols = np.stack([x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                         for i in range(kh) for j in range(kw)], axis=2)        # n, c, kh*kw, oh, ow
        return np.einsum("nckhw,ock->nohw", cols, w.reshape(o, c, kh * kw)) + b[None, :, None, None]
    from math import erf
    p = {k: v.numpy().astype(np.float64) for k, v in net.state_dict().items()}
    x = x.numpy().astype(np.float64)
    x = np.maximum(conv(x, p["conv1.weight"], p["conv1.bias"], 1, 1), 0)
    n, c, h, w = x.shape
    x = x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    x = conv(x, p["conv2.weight"], p["conv2.bias"], 2, 1)
    x = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    h = x.mean(axis=(2, 3))
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * p["norm.weight"] + p["norm.bias"]
    h = h @ p["fc1.weight"].T + p["fc1.bias"]
    h = h / (1 + np.exp(-h))
    h = h @ p["fc2.weight"].T + p["fc2.bias"]
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def onnx_head(net, h, expected):
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        print("\nonnx: skipped (pip install -e '.[onnx]' to run this part)")
        return
    p = {k: v.numpy() for k, v in net.state_dict().items()}
    inits = [numpy_helper.from_array(p[k], k) for k in ("norm.weight", "norm.bias", "fc1.weight", "fc1.bias",
                                                         "fc2.weight", "fc2.bias")]
    nodes = [
        helper.make_node("LayerNormalization", ["h", "norm.weight", "norm.bias"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("Gemm", ["n", "fc1.weight", "fc1.bias"], ["a"], transB=1),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Mul", ["a", "s"], ["m"]),
        helper.make_node("Gemm", ["m", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = nee.onnx.InferenceSession(model.SerializeToString())
    print("\nonnx: inputs", [(i.name, i.shape, i.type) for i in sess.get_inputs()],
          "outputs", [(o.name, o.shape, o.type) for o in sess.get_outputs()])
    (probs,) = sess.run(None, {"h": h.numpy()})
    err = float(np.abs(probs - expected.numpy()).max())
    print(f"onnx: InferenceSession output {probs.shape}, max |onnx - eager| = {err:.2e}")
    assert err < 1e-5
    try:
        import onnxruntime as ort
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"h": h.numpy()})[0]
        print(f"onnx: max |neetorch - onnxruntime| = {float(np.abs(probs - ref).max()):.2e}")
    except ImportError:
        pass


def main():
    nee.manual_seed(0)
    print("devices:")
    for d in nee.devices():
        print("  ", d)
    net = SmallNet().eval()
    x = nee.randn(8, 3, 32, 32)

    # 1. eager
    t = time.perf_counter()
    probs = net(x)
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    probs = net(x)
    t_eager = time.perf_counter() - t
    ref = numpy_reference(net, x)
    err = float(np.abs(probs.numpy() - ref).max())
    print(f"\neager: output {tuple(probs.shape)} {probs.dtype}, max |err| vs numpy float64 reference = {err:.2e} "
          f"(first call {t_first * 1e3:.0f} ms incl. kernel loading, then {t_eager * 1e3:.1f} ms)")
    assert err < 1e-4, "eager result disagrees with the numpy reference"
    print("predicted classes:", probs.argmax(-1).tolist())

    # 2. jit
    head = nee.jit(net.head)
    h = net.features(x)
    out = head(h)
    jerr = float((out - net.head(h)).abs().max())
    g = head.graph(h)
    print(f"\njit: head compiled to {len(g.nodes)} steps "
          f"({sum(1 for n in g.nodes if n.op.kind == 'fused')} fused kernels); max |jit - eager| = {jerr:.2e}")
    assert jerr < 1e-5
    print(g)

    # 3. ONNX: the head as an ONNX graph, run through neetorch's InferenceSession
    onnx_head(net, h, out)

    # 4. what ran where
    print("\nfallbacks:", nee.fallback_report())
    print(f"\ndemo finished in {time.perf_counter() - T0:.2f} s")


if __name__ == "__main__":
    main()
