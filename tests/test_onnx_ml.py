"""Classical-ML ONNX ops (ai.onnx.ml, TfIdfVectorizer): small models built with onnx.helper, run by
neetorch (eager and under nee.jit) and compared with ONNX's ReferenceEvaluator and onnxruntime.

Where the two references disagree the test says which one neetorch follows and why (the spec's text).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from neetorch.onnx import InferenceSession, UnsupportedModelError

try:
    import onnxruntime as ort
except ImportError:  # pragma: no cover
    ort = None

F32, F64, I64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32
_NP = {F32: np.float32, F64: np.float64, I64: np.int64, I32: np.int32}


def _model(node, inputs, outputs, ml=3, default=None):
    """One-node model: inputs/outputs are [(name, elem type, shape)]."""
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs])
    ops = [helper.make_opsetid("ai.onnx.ml", ml)]
    if default:
        ops.append(helper.make_opsetid("", default))
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def _ml(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="ai.onnx.ml", **attrs)


def _compare(m, feeds, ref=True, use_ort=True, rtol=1e-5, atol=1e-6, jit=False):
    """neetorch's outputs against the references; returns neetorch's."""
    s = InferenceSession(m, jit=jit)
    got = s.run(None, feeds)
    if jit:
        assert s.info["mode"] == "jit", s.info
    oracles = []
    if ref:
        oracles.append(("reference", ReferenceEvaluator(m).run(None, feeds)))
    if use_ort and ort is not None:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        r = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        oracles.append(("onnxruntime", r.run(None, feeds)))
    for who, want in oracles:
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            w = np.asarray(w)
            assert g.shape == w.shape, (who, k, g.shape, w.shape)
            if w.dtype.kind in "iub":
                np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{who} output {k}")
            else:
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=f"{who} output {k}")
    return got


rng_seed = np.random.default_rng


def _ort_run(m, feeds):
    if ort is None:
        pytest.skip("onnxruntime is not installed")
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


# ------------------------------------------------------------------------- simple ops
def test_elementwise_ops():
    rng = rng_seed(0)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    _compare(_model(_ml("Binarizer", ["x"], ["y"], threshold=0.3), [("x", F32, [5, 4])], [("y", F32, [5, 4])]),
             {"x": x})
    _compare(_model(_ml("Scaler", ["x"], ["y"], offset=[0.5, -1.0, 2.0, 0.0], scale=[2.0, 0.5, 1.0, 3.0]),
                    [("x", F32, [5, 4])], [("y", F32, [5, 4])]), {"x": x})
    _compare(_model(_ml("Scaler", ["x"], ["y"], offset=[1.5], scale=[0.25]),
                    [("x", F64, [5, 4])], [("y", F32, [5, 4])]), {"x": x.astype(np.float64)}, ref=False)
    for norm in ("MAX", "L1", "L2"):
        # onnxruntime's MAX divides by the row's max (not its max |x|): positive rows agree with both
        xx = np.abs(x) + 0.1 if norm == "MAX" else x
        _compare(_model(_ml("Normalizer", ["x"], ["y"], norm=norm), [("x", F32, [5, 4])], [("y", F32, [5, 4])]),
                 {"x": xx})
    _compare(_model(_ml("Normalizer", ["x"], ["y"], norm="MAX"), [("x", F32, [5, 4])], [("y", F32, [5, 4])]),
             {"x": x}, use_ort=False)


def test_array_feature_extractor_imputer_feature_vectorizer():
    rng = rng_seed(1)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    m = _model(_ml("ArrayFeatureExtractor", ["x", "i"], ["y"]), [("x", F32, [3, 5]), ("i", I64, [3])],
               [("y", F32, [3, 3])])
    _compare(m, {"x": x, "i": np.array([4, 0, 4], np.int64)})
    m = _model(_ml("ArrayFeatureExtractor", ["x", "i"], ["y"]), [("x", I64, [5]), ("i", I64, [2])],
               [("y", I64, [1, 2])])
    _compare(m, {"x": np.arange(5, dtype=np.int64), "i": np.array([1, 3], np.int64)})
    xn = x.copy()
    xn[0, 1] = xn[2, 3] = np.nan
    _compare(_model(_ml("Imputer", ["x"], ["y"], imputed_value_floats=[1.0, 2.0, 3.0, 4.0, 5.0], replaced_value_float=np.nan),
                    [("x", F32, [3, 5])], [("y", F32, [3, 5])]), {"x": xn})
    xi = rng.integers(0, 3, (4, 2)).astype(np.int64)
    _compare(_model(_ml("Imputer", ["x"], ["y"], imputed_value_int64s=[7], replaced_value_int64=1),
                    [("x", I64, [4, 2])], [("y", I64, [4, 2])]), {"x": xi})
    a, b = rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    _compare(_model(_ml("FeatureVectorizer", ["a", "b"], ["y"], inputdimensions=[3, 2]),
                    [("a", F32, [3, 2]), ("b", F32, [3, 4])], [("y", F32, [3, 5])]), {"a": a, "b": b})
    # inputs of different types: onnxruntime binds them to one type, the spec and the reference do not
    c = rng.integers(0, 9, (3,)).astype(np.int64)
    _compare(_model(_ml("FeatureVectorizer", ["a", "c"], ["y"], inputdimensions=[2, 1]),
                    [("a", F32, [3, 2]), ("c", I64, [3])], [("y", F32, [3, 3])]), {"a": a, "c": c}, use_ort=False)


def test_label_encoder_and_one_hot():
    rng = rng_seed(2)
    xi = rng.integers(-2, 8, (4, 3)).astype(np.int64)
    n = _ml("LabelEncoder", ["x"], ["y"], keys_int64s=[5, 1, 3, 0], values_int64s=[50, 10, 30, 0], default_int64=-7)
    _compare(_model(n, [("x", I64, [4, 3])], [("y", I64, [4, 3])], ml=2), {"x": xi}, jit=True)
    n = _ml("LabelEncoder", ["x"], ["y"], keys_int64s=[5, 1, 3], values_floats=[0.5, 1.5, 3.5], default_float=-1.0)
    _compare(_model(n, [("x", I64, [4, 3])], [("y", F32, [4, 3])], ml=2), {"x": xi})
    xf = np.array([0.5, np.nan, 2.0, 7.0, -0.0], np.float32)
    n = _ml("LabelEncoder", ["x"], ["y"], keys_floats=[0.5, 2.0, np.nan, 0.0], values_int64s=[1, 2, 3, 4])
    _compare(_model(n, [("x", F32, [5])], [("y", I64, [5])], ml=2), {"x": xf})
    kt = numpy_helper.from_array(np.array([1, 4, 9], np.int64), "keys_tensor")
    vt = numpy_helper.from_array(np.array([1.0, 16.0, 81.0], np.float64), "values_tensor")
    dt = numpy_helper.from_array(np.array([-1.0], np.float64), "default_tensor")
    n = _ml("LabelEncoder", ["x"], ["y"], keys_tensor=kt, values_tensor=vt, default_tensor=dt)
    _compare(_model(n, [("x", I64, [5])], [("y", F64, [5])], ml=4), {"x": np.array([1, 2, 4, 9, 9], np.int64)})
    n = _ml("OneHotEncoder", ["x"], ["y"], cats_int64s=[3, 1, 7], zeros=1)
    _compare(_model(n, [("x", I64, [2, 3])], [("y", F32, [2, 3, 3])]),
             {"x": np.array([[1, 3, 5], [7, 7, 1]], np.int64)})
    n = _ml("OneHotEncoder", ["x"], ["y"], cats_int64s=[3, 1, 7], zeros=0)
    m = _model(n, [("x", F32, [4])], [("y", F32, [4, 3])])
    _compare(m, {"x": np.array([1, 3, 7, 3], np.float32)})
    s = InferenceSession(m)  # the zeros=0 check reads values: the trace fails there, the node runs eagerly
    with pytest.raises(Exception, match=r"OneHotEncoder\): zeros=0 and an input value is not one of the categories"):
        s.run(None, {"x": np.array([1, 3, 5, 3], np.float32)})
    (why,) = s.info["break_reasons"].values()
    assert s.info["mode"] == "eager" and "OneHotEncoder, zeros=0" in why, s.info


# ------------------------------------------------------------------------- linear models
@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")  # the reference's probit
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_linear_classifier(post):
    rng = rng_seed(3)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    if post == "PROBIT":  # probit of scores in (0, 1)
        x = np.abs(x) * 0.05
    coef = rng.normal(size=12).astype(np.float32)
    if post == "PROBIT":
        coef = np.abs(coef) * 0.2
    icpt = (np.abs(rng.normal(size=3)) * 0.1 + (0.2 if post == "PROBIT" else 0)).astype(np.float32)
    n = _ml("LinearClassifier", ["x"], ["y", "z"], coefficients=coef.tolist(), intercepts=icpt.tolist(),
            classlabels_ints=[10, 20, 30], post_transform=post)
    m = _model(n, [("x", F32, [6, 4])], [("y", I64, [6]), ("z", F32, [6, 3])], ml=1)
    got = _compare(m, {"x": x})
    assert np.isfinite(got[1]).all()
    # binary: one row of coefficients, two labels -> scores [-s, s]
    n = _ml("LinearClassifier", ["x"], ["y", "z"], coefficients=coef[:4].tolist(), intercepts=[0.1],
            classlabels_ints=[0, 1], post_transform=post)
    m = _model(n, [("x", F32, [6, 4])], [("y", I64, [6]), ("z", F32, [6, 2])], ml=1)
    # onnxruntime scores a binary linear classifier its own way ([1 - s, s], no softmax): reference only
    _compare(m, {"x": x}, use_ort=False)


def test_linear_regressor():
    rng = rng_seed(4)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    n = _ml("LinearRegressor", ["x"], ["y"], coefficients=rng.normal(size=8).tolist(), intercepts=[0.5, -1.0],
            targets=2)
    _compare(_model(n, [("x", F32, [6, 4])], [("y", F32, [6, 2])], ml=1), {"x": x}, jit=True)
    c = rng.normal(size=4)
    n = _ml("LinearRegressor", ["x"], ["y"], coefficients=c.tolist())
    got = InferenceSession(_model(n, [("x", F64, [6, 4])], [("y", F32, [6, 1])], ml=1)).run(None, {"x": x.astype(
        np.float64)})[0]  # double input: onnxruntime has no kernel, the reference returns float64
    np.testing.assert_allclose(got, (x.astype(np.float64) @ c.astype(np.float32).astype(np.float64))[:, None],
                               rtol=1e-6)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor(kernel):
    rng = rng_seed(14)
    x = rng.normal(size=(7, 3)).astype(np.float32)
    sv = rng.normal(size=(5, 3)).astype(np.float32)
    attrs = {"kernel_type": kernel, "kernel_params": [0.3, 0.5, 3.0], "n_supports": 5,
             "support_vectors": sv.reshape(-1).tolist(), "coefficients": rng.normal(size=5).tolist(), "rho": [0.25]}
    m = _model(_ml("SVMRegressor", ["x"], ["y"], **attrs), [("x", F32, ["N", 3])], [("y", F32, ["N", 1])])
    _compare(m, {"x": x}, rtol=1e-5, atol=1e-5, jit=kernel == "RBF")
    m = _model(_ml("SVMRegressor", ["x"], ["y"], one_class=1, **attrs), [("x", F32, ["N", 3])],
               [("y", F32, ["N", 1])])
    _compare(m, {"x": x})
    if kernel == "LINEAR":  # no support vectors: x . coefficients + rho
        m = _model(_ml("SVMRegressor", ["x"], ["y"], coefficients=[0.5, -1.0, 2.0], rho=[1.0], n_supports=0,
                       kernel_params=[0.0, 0.0, 0.0]),
                   [("x", F32, ["N", 3])], [("y", F32, ["N", 1])])
        _compare(m, {"x": x})


# ------------------------------------------------------------------------- tree ensembles
_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _random_trees(rng, n_trees, F, max_depth, n_out, modes=_MODES, per_leaf=1, mtt=None):
    """Legacy tree attributes: node ids in a shuffled order, thresholds on the input's value grid."""
    at = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                          "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    leaves = {"treeids": [], "nodeids": [], "ids": [], "weights": []}
    for t in range(n_trees):
        ids = iter(rng.permutation(2 ** (max_depth + 1)).tolist())

        def grow(d, t=t, ids=ids):
            nid = next(ids)
            at["nodes_treeids"].append(t)
            at["nodes_nodeids"].append(nid)
            k = len(at["nodes_treeids"]) - 1
            leaf = d == max_depth or (d > 0 and rng.random() < 0.25)
            at["nodes_featureids"].append(int(rng.integers(F)) if not leaf else 0)
            at["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            at["nodes_values"].append(float(rng.integers(-4, 5)) / 2 if not leaf else 0.0)
            track = int(rng.integers(2)) if mtt is None else mtt
            at["nodes_missing_value_tracks_true"].append(track if not leaf else 0)
            at["nodes_truenodeids"].append(0)
            at["nodes_falsenodeids"].append(0)
            if leaf:
                for c in rng.choice(n_out, size=min(per_leaf, n_out), replace=False).tolist():
                    leaves["treeids"].append(t)
                    leaves["nodeids"].append(nid)
                    leaves["ids"].append(int(c))
                    leaves["weights"].append(float(np.round(rng.normal(), 3)))
            else:
                at["nodes_truenodeids"][k] = grow(d + 1, t, ids)
                at["nodes_falsenodeids"][k] = grow(d + 1, t, ids)
            return nid
        grow(0)
    return at, leaves


def _tree_input(rng, n, F, nan=0.1):
    x = (rng.integers(-5, 6, (n, F)) / 2).astype(np.float32)
    x[rng.random((n, F)) < nan] = np.nan
    return x


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor_random(agg):
    rng = rng_seed(5)
    at, lv = _random_trees(rng, 6, 4, 4, 2, per_leaf=2)
    n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, aggregate_function=agg, base_values=[0.5, -0.25],
            target_treeids=lv["treeids"], target_nodeids=lv["nodeids"], target_ids=lv["ids"],
            target_weights=lv["weights"], **at)
    m = _model(n, [("x", F32, ["N", 4])], [("y", F32, ["N", 2])])
    x = _tree_input(rng, 40, 4)
    # a NaN at a BRANCH_NEQ node: the spec (and the reference) take its missing-value track, onnxruntime
    # the comparison's result (NaN != t): onnxruntime is compared on rows without NaN
    _compare(m, {"x": x}, use_ort=False)
    _compare(m, {"x": np.nan_to_num(x, nan=0.75)})


@pytest.mark.parametrize("mode,mtt", [("BRANCH_LEQ", 0), ("BRANCH_LEQ", 1), ("BRANCH_GT", 1), ("BRANCH_NEQ", 0),
                                      ("BRANCH_NEQ", 1)])
def test_tree_regressor_one_mode(mode, mtt):
    """Every node with one mode and one missing-value track (sklearn's exports): the direct-compare path."""
    rng = rng_seed(12)
    at, lv = _random_trees(rng, 4, 3, 5, 1, modes=[mode], mtt=mtt)
    n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1, target_treeids=lv["treeids"],
            target_nodeids=lv["nodeids"], target_ids=lv["ids"], target_weights=lv["weights"], **at)
    m = _model(n, [("x", F32, ["N", 3])], [("y", F32, ["N", 1])])
    x = _tree_input(rng, 30, 3, nan=0.2)
    # NaN at a BRANCH_NEQ node without missing-value track: onnxruntime goes true (NaN != t), the spec false
    _compare(m, {"x": x}, use_ort=not (mode == "BRANCH_NEQ" and mtt == 0), jit=True)


@pytest.mark.parametrize("agg", ["AVERAGE", "MAX"])
def test_tree_ensemble_in_chunks_of_trees(agg, monkeypatch):
    """Large rows x trees x targets products go through the trees in chunks (here: 2 trees at a time)."""
    from neetorch.onnx import ops_ml
    monkeypatch.setattr(ops_ml, "_CHUNK", 2 * 10 * 2)
    rng = rng_seed(13)
    at, lv = _random_trees(rng, 7, 3, 4, 2, per_leaf=2)
    n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, aggregate_function=agg, target_treeids=lv["treeids"],
            target_nodeids=lv["nodeids"], target_ids=lv["ids"], target_weights=lv["weights"], **at)
    m = _model(n, [("x", F32, [10, 3])], [("y", F32, [10, 2])])
    _compare(m, {"x": np.nan_to_num(_tree_input(rng, 10, 3), nan=1.0)}, jit=True)


def test_tree_regressor_unscored_target():
    """A target no reached leaf scores: MIN / MAX give 0 (onnxruntime; the reference: the float's extreme
    plus the base value); SUM gives the base value (the reference; onnxruntime: 0)."""
    def model(agg):
        n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, aggregate_function=agg, base_values=[0.5, 0.25],
                nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
                nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                target_weights=[3.0, -2.0])
        return _model(n, [("x", F32, [2, 1])], [("y", F32, [2, 2])])
    x = np.array([[-1.0], [1.0]], np.float32)
    for agg in ("MIN", "MAX"):
        _compare(model(agg), {"x": x}, ref=False)
    _compare(model("SUM"), {"x": x}, use_ort=False)


def test_tree_ensemble_regressor_jit_and_double():
    rng = rng_seed(6)
    at, lv = _random_trees(rng, 8, 3, 5, 1)
    vals = at.pop("nodes_values")
    n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1,
            nodes_values_as_tensor=numpy_helper.from_array(np.array(vals, np.float64), "v"),
            target_treeids=lv["treeids"], target_nodeids=lv["nodeids"], target_ids=lv["ids"],
            target_weights_as_tensor=numpy_helper.from_array(np.array(lv["weights"], np.float64), "w"), **at)
    m = _model(n, [("x", F64, ["N", 3])], [("y", F32, ["N", 1])])
    s = InferenceSession(m)  # nee.jit, the batch dim dynamic
    for rows in (7, 30):  # the reference evaluator fails on nodes_values_as_tensor: onnxruntime
        x = _tree_input(rng, rows, 3).astype(np.float64)
        x[np.isnan(x)] = 0.125
        got = s.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, _ort_run(m, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert s.info["mode"] == "jit", s.info


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_ensemble_classifier_random(post):
    rng = rng_seed(7)
    at, lv = _random_trees(rng, 5, 4, 4, 3, per_leaf=3)
    if post == "PROBIT":  # weights and base in (0, 1): probabilities
        lv["weights"] = [abs(w) / 20 for w in lv["weights"]]
    n = _ml("TreeEnsembleClassifier", ["x"], ["y", "z"], classlabels_int64s=[4, 5, 6], post_transform=post,
            base_values=[0.1, 0.2, 0.05], class_treeids=lv["treeids"], class_nodeids=lv["nodeids"],
            class_ids=lv["ids"], class_weights=lv["weights"], **at)
    m = _model(n, [("x", F32, ["N", 4])], [("y", I64, ["N"]), ("z", F32, ["N", 3])])
    x = _tree_input(rng, 30, 4)
    _compare(m, {"x": x}, use_ort=False, rtol=1e-5, atol=1e-6)
    # onnxruntime's probit is float32 arithmetic (-v + sqrt(v * v - v2) cancels): 4e-5 apart
    _compare(m, {"x": np.nan_to_num(x, nan=-0.25)}, rtol=1e-4 if post == "PROBIT" else 1e-5, atol=1e-6)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_ensemble_classifier_binary(post):
    """One class scored (gradient boosting's export): the reference's [1 - s, s] / [-s, s] pairs."""
    rng = rng_seed(8)
    at, lv = _random_trees(rng, 4, 3, 3, 1)
    lv["weights"] = [abs(w) / 8 for w in lv["weights"]]
    n = _ml("TreeEnsembleClassifier", ["x"], ["y", "z"], classlabels_int64s=[0, 1], post_transform=post,
            base_values=[0.3], class_treeids=lv["treeids"], class_nodeids=lv["nodeids"], class_ids=lv["ids"],
            class_weights=lv["weights"], **at)
    m = _model(n, [("x", F32, ["N", 3])], [("y", I64, ["N"]), ("z", F32, ["N", 2])])
    x = np.nan_to_num(_tree_input(rng, 25, 3), nan=0.25)
    got = _compare(m, {"x": x}, use_ort=False)
    # onnxruntime gives the same scores but picks the label by comparing the raw score with 0.5 (whatever
    # the post transform); neetorch, as the reference, takes the argmax of the scores it outputs
    r = _ort_run(m, {"x": x})
    np.testing.assert_allclose(got[1], r[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[0], np.argmax(got[1], 1))


def _opset5_trees(rng, n_trees, F, max_depth, K, member=True):
    """ai.onnx.ml 5 TreeEnsemble attributes (nodes / leaves in separate arrays, BRANCH_MEMBER sets)."""
    nd = {k: [] for k in ("feat", "split", "mode", "t", "f", "tl", "fl", "mtt")}
    lf_t, lf_w, roots, members = [], [], [], []

    def grow(d):
        if d == max_depth or (d > 0 and rng.random() < 0.25):
            lf_t.append(int(rng.integers(K)))
            lf_w.append(float(np.round(rng.normal(), 3)))
            return len(lf_t) - 1, 1
        i = len(nd["feat"])
        mode = int(rng.integers(7 if member else 6))
        for k, v in (("feat", int(rng.integers(F))), ("split", float(rng.integers(-4, 5)) / 2), ("mode", mode),
                     ("t", 0), ("f", 0), ("tl", 0), ("fl", 0), ("mtt", int(rng.integers(2)))):
            nd[k].append(v)
        if mode == 6:  # no 0.0 member: the reference ends a set at a falsy value
            # onnxruntime implements integer members only
            members.extend(sorted(set((rng.choice([-2, -1, 1, 2, 3], 3)).tolist())) + [np.nan])
        nd["t"][i], nd["tl"][i] = grow(d + 1)
        nd["f"][i], nd["fl"][i] = grow(d + 1)
        return i, 0

    for _ in range(n_trees):
        roots.append(grow(0)[0])
    return nd, lf_t, lf_w, roots, members


@pytest.mark.parametrize("agg,post", [(1, 0), (0, 0), (1, 1), (1, 2)])
def test_tree_ensemble_opset5_random(agg, post):
    rng = rng_seed(9)
    nd, lf_t, lf_w, roots, members = _opset5_trees(rng, 5, 3, 4, 2)
    def T(a, dt, name):
        return numpy_helper.from_array(np.array(a, dt), name)
    attrs = {"n_targets": 2, "aggregate_function": agg, "post_transform": post, "tree_roots": roots,
             "nodes_featureids": nd["feat"], "nodes_splits": T(nd["split"], np.float32, "s"),
             "nodes_modes": T(nd["mode"], np.uint8, "m"), "nodes_truenodeids": nd["t"], "nodes_falsenodeids": nd["f"],
             "nodes_trueleafs": nd["tl"], "nodes_falseleafs": nd["fl"], "nodes_missing_value_tracks_true": nd["mtt"],
             "leaf_targetids": lf_t, "leaf_weights": T(lf_w, np.float32, "w")}
    if members:
        attrs["membership_values"] = T(members, np.float32, "mv")
    m = _model(_ml("TreeEnsemble", ["x"], ["y"], **attrs), [("x", F32, ["N", 3])], [("y", F32, ["N", 2])], ml=5)
    # onnxruntime truncates a value to an integer before the set-membership test: integer inputs
    x = np.round(_tree_input(rng, 40, 3))
    got = _compare(m, {"x": x}, ref=post == 0, use_ort=post == 0, jit=True)
    if post:
        # the reference ignores post_transform; onnxruntime swaps the spec's codes 1 (SOFTMAX) and
        # 2 (LOGISTIC): compare with it under the swapped code
        attrs["post_transform"] = 3 - post
        m2 = _model(_ml("TreeEnsemble", ["x"], ["y"], **attrs), [("x", F32, ["N", 3])], [("y", F32, ["N", 2])],
                    ml=5)
        r = _ort_run(m2, {"x": x})[0]
        np.testing.assert_allclose(got[0], r, rtol=1e-5, atol=1e-6)
        raw = ReferenceEvaluator(m).run(None, {"x": x})[0].astype(np.float64)
        want = 1 / (1 + np.exp(-raw)) if post == 2 else np.exp(raw) / np.exp(raw).sum(1, keepdims=True)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- TfIdfVectorizer
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_random(mode):
    rng = rng_seed(10)
    pool1 = [2, 3, 5, 7]
    pool2 = [[2, 3], [3, 3], [5, 2], [7, 7], [3, 5]]
    pool3 = [[2, 3, 5], [3, 3, 3]]
    pool = pool1 + [t for g in pool2 + pool3 for t in g]
    for lo, hi, skip in ((1, 1, 0), (1, 3, 2), (2, 2, 1), (2, 3, 0), (3, 3, 3)):
        # weights: the spec and onnxruntime weigh the pool's i-th n-gram by weights[i], the reference the
        # output column i: with permuted ngram_indexes compare with onnxruntime only
        perm = mode != "TF" and skip != 2
        nidx = rng.permutation(11).tolist() if mode == "TF" or perm else list(range(11))
        attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip,
                 "ngram_counts": [0, 4, 14], "ngram_indexes": nidx, "pool_int64s": pool}
        if mode != "TF":
            attrs["weights"] = np.round(rng.random(11) + 0.5, 3).tolist()
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
        for shape, dt in (((17,), I64), ((3, 12), I32)):
            x = rng.choice([2, 3, 5, 7, 9], size=shape).astype(_NP[dt])
            g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dt, list(shape))],
                                  [helper.make_tensor_value_info("y", F32, [*shape[:-1], 11])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            _compare(m, {"x": x}, ref=not perm, jit=len(shape) == 2)


# ------------------------------------------------------------------------- string labels, ZipMap, SVMClassifier
S = TensorProto.STRING


def _same_as_ort(m, feeds, got=None, rtol=1e-5, atol=1e-6):
    """neetorch's outputs (strings, ints, floats, ZipMap's lists of dicts) equal onnxruntime's."""
    if got is None:
        got = InferenceSession(m).run(None, feeds)
    want = _ort_run(m, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list):
            assert type(g) is list and len(g) == len(w), k
            for gd, wd in zip(g, w):
                assert list(gd) == list(wd) and [type(x) for x in gd] == [type(x) for x in wd], (gd, wd)
                assert all(type(v) is float for v in gd.values())
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol=rtol, atol=atol)
            continue
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype == object or w.dtype.kind in "iub":
            assert g.tolist() == w.tolist(), k
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    return got


def _labeled(op, labels, extra, F, C, label_attr):
    """A classifier node (+ ZipMap of its scores) with string or int labels."""
    strings = isinstance(labels[0], str)
    attrs = dict(extra, **{("classlabels_strings" if strings else label_attr): labels})
    nodes = [_ml(op, ["x"], ["y", "z"], name="clf", **attrs),
             _ml("ZipMap", ["z"], ["zm"], **{("classlabels_strings" if strings else "classlabels_int64s"): labels})]
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(S if strings else I64,
                                                                     helper.make_tensor_type_proto(F32, [])))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["N", F])],
                          [helper.make_tensor_value_info("y", S if strings else I64, ["N"]),
                           helper.make_tensor_value_info("z", F32, ["N", C]), helper.make_value_info("zm", seq)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    return m


def test_string_class_labels_tree_and_linear_classifiers():
    """classlabels_strings: the classifier runs on class indices (jitted), the labels are mapped on the host;
    the label output is an object array of str, ZipMap's keys are str, as onnxruntime's."""
    rng = rng_seed(21)
    at, lv = _random_trees(rng, 4, 4, 3, 3, per_leaf=3)
    tree = dict(post_transform="SOFTMAX", class_treeids=lv["treeids"], class_nodeids=lv["nodeids"],
                class_ids=lv["ids"], class_weights=lv["weights"], **at)
    x = np.nan_to_num(_tree_input(rng, 23, 4), nan=0.5)
    strs, ints = ["β", "alpha", ""], [7, 3, 9]
    ms = _labeled("TreeEnsembleClassifier", strs, tree, 4, 3, "classlabels_int64s")
    s = InferenceSession(ms)
    got = _same_as_ort(ms, {"x": x}, s.run(None, {"x": x}))
    assert got[0].dtype == object and s.info["mode"] == "jit+host", s.info
    assert s.host_nodes == ["clf/labels", "ZipMap(zm)"], s.host_nodes
    gi = _same_as_ort(_labeled("TreeEnsembleClassifier", ints, tree, 4, 3, "classlabels_int64s"), {"x": x})
    # the same classes, named differently
    assert [strs[ints.index(v)] for v in gi[0].tolist()] == got[0].tolist()
    np.testing.assert_array_equal(gi[1], got[1])
    # binary gradient-boosting form (one class scored) with string labels
    at2, lv2 = _random_trees(rng, 3, 4, 3, 1)
    binary = dict(post_transform="LOGISTIC", base_values=[0.2], class_treeids=lv2["treeids"],
                  class_nodeids=lv2["nodeids"], class_ids=lv2["ids"], class_weights=lv2["weights"], **at2)
    _same_as_ort(_labeled("TreeEnsembleClassifier", ["neg", "pos"], binary, 4, 2, "classlabels_int64s"), {"x": x})
    coef = rng.normal(size=12).tolist()
    for post in ("NONE", "SOFTMAX", "LOGISTIC"):
        lin = {"coefficients": coef, "intercepts": [0.1, -0.2, 0.05], "post_transform": post}
        _same_as_ort(_labeled("LinearClassifier", strs, lin, 4, 3, "classlabels_ints"), {"x": x})
    # binary: one row of coefficients, two string labels
    lin = {"coefficients": coef[:4], "intercepts": [0.1], "post_transform": "LOGISTIC"}
    m = _labeled("LinearClassifier", ["no", "yes"], lin, 4, 2, "classlabels_ints")
    _same_as_ort(m, {"x": x})


def test_zipmap():
    def model(attr, keys, kt, shape):
        seq = helper.make_sequence_type_proto(helper.make_map_type_proto(kt, helper.make_tensor_type_proto(F32, [])))
        g = helper.make_graph([_ml("ZipMap", ["p"], ["m"], name="zm", **{attr: keys})], "g",
                              [helper.make_tensor_value_info("p", F32, shape)], [helper.make_value_info("m", seq)])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])

    p = rng_seed(1).random((4, 3)).astype(np.float32)
    p[1, 2] = np.nan
    # onnxruntime's maps list their keys in ascending order; a repeated label keeps its last column
    for keys, kt in ((["b", "é", "a"], S), ([5, -1, 2], I64), (["b", "a", "b"], S), ([4, 4, 1], I64)):
        attr = "classlabels_strings" if kt == S else "classlabels_int64s"
        for shape, feeds in ((["N", "C"], (p, p[:0])), ([3], (p[0],))):  # [N, C], no rows, one row [C]
            m = model(attr, keys, kt, shape)
            s = InferenceSession(m)
            assert s.get_outputs()[0].type == f"seq(map({'string' if kt == S else 'int64'},tensor(float)))"
            for feed in feeds:
                got = s.run(None, {"p": feed})
                want = _ort_run(m, {"p": feed})
                assert len(got[0]) == len(want[0]) == (1 if feed.ndim == 1 else feed.shape[0])
                for gd, wd in zip(got[0], want[0]):
                    assert list(gd) == list(wd) and [type(k) for k in gd] == [type(k) for k in wd], (gd, wd)
                    np.testing.assert_array_equal(list(gd.values()), list(wd.values()))  # NaN included
    s = InferenceSession(model("classlabels_int64s", [1, 2, 3], I64, ["N", "C"]))
    with pytest.raises(Exception, match=r"node zm \(ZipMap\): X has 2 columns for 3 class labels"):
        s.run(None, {"p": p[:, :2]})
    s = InferenceSession(model("classlabels_int64s", [1, 2, 3], I64, [2, 2, 3]), check=False)
    with pytest.raises(Exception, match=r"node zm \(ZipMap\): X must be 1-D or 2-D"):
        s.run(None, {"p": p.reshape(2, 2, 3)})


def _svm(rng, C, F, kernel="RBF", proba=False, post="NONE", strings=False, linear=False):
    vpc = [int(v) for v in rng.integers(1, 4, C)]
    V, P = sum(vpc), C * (C - 1) // 2
    at = {"kernel_type": kernel, "kernel_params": [0.3, 0.5, 2.0], "post_transform": post}
    if linear:
        at.update(coefficients=rng.normal(size=C * F).tolist(), rho=[float(rng.normal())])
    else:
        at.update(vectors_per_class=vpc, support_vectors=rng.normal(size=V * F).tolist(),
                  coefficients=rng.normal(size=(C - 1) * V).tolist(), rho=rng.normal(size=P).tolist())
        if proba:
            at.update(prob_a=(-np.abs(rng.normal(size=P)) - 0.5).tolist(), prob_b=(rng.normal(size=P) * 0.1).tolist())
    if strings:
        at["classlabels_strings"] = [f"c{i}é" for i in range(C)]
    else:
        at["classlabels_ints"] = [int(v) for v in rng.permutation(10)[:C]]
    g = helper.make_graph([_ml("SVMClassifier", ["x"], ["y", "z"], name="svm", **at)], "g",
                          [helper.make_tensor_value_info("x", F32, ["N", F])],
                          [helper.make_tensor_value_info("y", S if strings else I64, ["N"]),
                           helper.make_tensor_value_info("z", F32, ["N", None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("C,kernel,proba,post,strings", [
    (2, "RBF", True, "NONE", True), (2, "POLY", False, "NONE", False), (2, "SIGMOID", False, "LOGISTIC", True),
    (3, "RBF", True, "NONE", False), (3, "LINEAR", False, "SOFTMAX", True), (4, "POLY", True, "LOGISTIC", True),
    (4, "RBF", False, "NONE", False)])
def test_svm_classifier_vs_onnxruntime(C, kernel, proba, post, strings):
    """SVC mode: one-vs-one votes, pairwise scores or (prob_a) libsvm's probability coupling on the host."""
    rng = rng_seed(31 + C)
    m = _svm(rng, C, 3, kernel, proba, post, strings)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    s = InferenceSession(m)
    _same_as_ort(m, {"x": x}, s.run(None, {"x": x}))
    assert s.info["mode"] == ("jit+host" if proba or strings else "jit"), s.info
    if proba:
        assert "svm/probabilities" in s.host_nodes


@pytest.mark.parametrize("C,post", [(2, "NONE"), (2, "LOGISTIC"), (3, "SOFTMAX")])
def test_svm_classifier_linear_mode(C, post):
    """No support vectors (liblinear): x @ coef.T + rho[0]; binary labels by onnxruntime's rule."""
    rng = rng_seed(41 + C)
    m = _svm(rng, C, 3, post=post, strings=C == 3, linear=True)
    _same_as_ort(m, {"x": rng.normal(size=(30, 3)).astype(np.float32)})


def _coupling_one_row(C, r):
    """onnxruntime's multiclass_probability (ml_common.h) for one row, scalar float32 loops.  (ONNX's reference
    builds Q's off-diagonal entries with one dot product for a whole row slice, so it differs for 3+ classes.)"""
    f = np.float32
    Q = np.zeros((C, C), f)
    Qp = np.zeros(C, f)
    p = np.full(C, f(1) / f(C), f)
    for i in range(C):
        for j in range(i):
            Q[i, i] += r[j, i] * r[j, i]
            Q[i, j] = Q[j, i]
        for j in range(i + 1, C):
            Q[i, i] += r[j, i] * r[j, i]
            Q[i, j] = -r[j, i] * r[i, j]
    for _ in range(100):
        pQp = f(0)
        for i in range(C):
            Qp[i] = 0
            for j in range(C):
                Qp[i] += Q[i, j] * p[j]
            pQp += p[i] * Qp[i]
        if max(abs(Qp[i] - pQp) for i in range(C)) < f(0.005) / f(C):
            break
        for i in range(C):
            diff = (-Qp[i] + pQp) / Q[i, i]
            p[i] += diff
            pQp = (pQp + diff * (diff * Q[i, i] + f(2) * Qp[i])) / (f(1) + diff) / (f(1) + diff)
            for j in range(C):
                Qp[j] = (Qp[j] + diff * Q[i, j]) / (f(1) + diff)
                p[j] /= f(1) + diff
    return p


def test_svm_coupling_matches_onnxruntimes_algorithm():
    """The vectorized coupling (all rows at once, each stopping on its own test) against the per-row loop."""
    from neetorch.onnx.ops_ml import svm_coupling
    rng = rng_seed(5)
    for C in (2, 3, 5):
        v = rng.uniform(0.01, 0.99, size=(20, C, C)).astype(np.float32)
        up = np.triu(v, 1)
        r = (up + np.transpose(1 - up, (0, 2, 1)) * (np.tril(np.ones((C, C)), -1) > 0)).astype(np.float32)
        got = svm_coupling(r)
        want = np.stack([_coupling_one_row(C, r[i]) for i in range(20)])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-5)


def test_unsupported_label_forms_are_named():
    at = {"nodes_treeids": [0], "nodes_nodeids": [0], "nodes_featureids": [0], "nodes_modes": ["LEAF"],
          "nodes_values": [0.0], "nodes_truenodeids": [0], "nodes_falsenodeids": [0], "class_treeids": [0],
          "class_nodeids": [0], "class_ids": [0], "class_weights": [1.0]}
    m = _labeled("TreeEnsembleClassifier", ["only"], at, 1, 1, "classlabels_int64s")
    with pytest.raises(Exception, match=r"node clf \(TreeEnsembleClassifier\): a single string class label"):
        InferenceSession(m, jit=False).run(None, {"x": np.zeros((2, 1), np.float32)})
    m = _svm(rng_seed(0), 2, 3, "RBF", False, "SOFTMAX")
    with pytest.raises(Exception, match=r"node svm \(SVMClassifier\): post_transform 'SOFTMAX' on a binary"):
        InferenceSession(m, jit=False).run(None, {"x": np.zeros((2, 3), np.float32)})
    # ops on maps (DictVectorizer, CastMap, ...) are not supported: refused up front, naming the node
    g = helper.make_graph([_ml("ZipMap", ["p"], ["m"], classlabels_int64s=[0, 1]),
                           _ml("DictVectorizer", ["m"], ["v"], int64_vocabulary=[0, 1], name="dv")], "g",
                          [helper.make_tensor_value_info("p", F32, [2, 2])],
                          [helper.make_tensor_value_info("v", F32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    with pytest.raises(UnsupportedModelError, match=r"DictVectorizer.*dv"):
        InferenceSession(m, check=False)


def test_bad_trees_raise_naming_the_node():
    def model(true2, F):
        n = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1, nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2],
                nodes_featureids=[0, 0, 5], nodes_modes=["BRANCH_LEQ", "LEAF", "BRANCH_LT"],
                nodes_values=[0.0, 0.0, 1.0], nodes_truenodeids=[1, 0, true2], nodes_falsenodeids=[2, 0, 1],
                target_treeids=[0], target_nodeids=[1], target_ids=[0], target_weights=[1.0], name="reg")
        return _model(n, [("x", F32, [2, F])], [("y", F32, [2, 1])])
    with pytest.raises(Exception, match=r"node reg \(TreeEnsembleRegressor\): a node tests feature 5.*2 features"):
        InferenceSession(model(1, 2), jit=False).run(None, {"x": np.zeros((2, 2), np.float32)})
    got = InferenceSession(model(1, 6)).run(None, {"x": np.ones((2, 6), np.float32)})[0]
    np.testing.assert_array_equal(got, [[1.0], [1.0]])
    with pytest.raises(Exception, match=r"node reg \(TreeEnsembleRegressor\): the trees have a cycle"):
        InferenceSession(model(0, 6), jit=False).run(None, {"x": np.zeros((2, 6), np.float32)})


def test_pipeline_with_default_domain_ops_under_jit():
    """A sklearn-like pipeline (Imputer -> Scaler -> tree classifier, default-domain ops between) at default
    opset 9 (converted up) runs compiled, with a dynamic batch."""
    rng = rng_seed(11)
    at, lv = _random_trees(rng, 3, 3, 3, 3, per_leaf=3)
    nodes = [_ml("Imputer", ["x"], ["i"], imputed_value_floats=[0.5], replaced_value_float=np.nan),
             _ml("Scaler", ["i"], ["s"], offset=[0.5, 0.0, -0.5], scale=[1.0, 2.0, 0.5]),
             helper.make_node("Clip", ["s"], ["c"], min=-2.0, max=2.0),
             _ml("TreeEnsembleClassifier", ["c"], ["label", "prob"], classlabels_int64s=[3, 8, 11],
                 post_transform="SOFTMAX", class_treeids=lv["treeids"], class_nodeids=lv["nodeids"],
                 class_ids=lv["ids"], class_weights=lv["weights"], **at)]
    g = helper.make_graph(nodes, "pipe", [helper.make_tensor_value_info("x", F32, ["N", 3])],
                          [helper.make_tensor_value_info("label", I64, ["N"]),
                           helper.make_tensor_value_info("prob", F32, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 7
    s = InferenceSession(m)
    for rows in (5, 19):
        x = _tree_input(rng, rows, 3)
        got = s.run(None, {"x": x})
        for want in (ReferenceEvaluator(m).run(None, {"x": x}), _ort_run(m, {"x": x})):
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert s.info["mode"] == "jit" and s.info["notes"], s.info
