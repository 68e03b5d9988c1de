"""scikit-learn models as users export them (skl2onnx: classifiers with string or int labels whose
probabilities come out through ZipMap as a sequence of maps, a ColumnTransformer pipeline over mixed
string / numeric columns, regressors), run by neetorch.onnx and compared with onnxruntime on the same
inputs: labels exactly (same numpy dtype: int64, or object arrays of str), probabilities and values to
rtol 1e-5 (atol 1e-6), the maps' keys in the same order with the same Python types (int / str), their
values Python floats.  Skipped when skl2onnx, scikit-learn or onnxruntime are not installed; the models
are small (tens of rows, a few trees) and nothing is written to disk."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import SVC, LinearSVC
from sklearn.tree import DecisionTreeClassifier

import neetorch.onnx as no

RTOL, ATOL = 1e-5, 1e-6


def _ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s, s.run(None, feeds)


def _same(got, want, what):
    """neetorch's outputs equal onnxruntime's: arrays (dtype, shape, values) and sequences of maps."""
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        where = f"{what}, output {k}"
        if isinstance(w, list):  # ZipMap: a list of dicts
            assert type(g) is list and len(g) == len(w), where
            for r, (gd, wd) in enumerate(zip(g, w)):
                assert type(gd) is dict, where
                assert list(gd) == list(wd), f"{where}, row {r}: keys {list(gd)} vs {list(wd)}"
                assert [type(x) for x in gd] == [type(x) for x in wd], f"{where}: key types"
                assert all(type(v) is float for v in gd.values()), f"{where}: values must be Python floats"
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol=RTOL, atol=ATOL,
                                           err_msg=f"{where}, row {r}")
            continue
        assert isinstance(g, np.ndarray), f"{where}: {type(g).__name__}"
        assert g.dtype == w.dtype and g.shape == w.shape, f"{where}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype == object:
            assert all(type(v) is str for v in g.reshape(-1).tolist()), where
            assert g.tolist() == w.tolist(), where
        elif w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=where)
        else:
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=where)


def _check(onx, feeds, what):
    """Run through neetorch (jit) and onnxruntime, compare; also the sessions' output descriptions."""
    s = no.InferenceSession(onx)
    got = s.run(None, feeds)
    osess, want = _ort(onx, feeds)
    _same(got, want, what)
    assert [(o.name, o.type) for o in s.get_outputs()] == [(o.name, o.type) for o in osess.get_outputs()]
    return s, got


_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(60, 4)).astype(np.float32)
_LABELS = {"str3": np.array(["cat", "dog", "émeu"]), "str2": np.array(["no", "yes"]), "int3": np.array([3, 7, 11]),
           "int2": np.array([0, 1])}
_Y = {k: v[(_X[:, 0] + 0.7 * _X[:, 1] > 0).astype(int) + (_X[:, 2] > 0.8).astype(int) * (len(v) - 2)]
      for k, v in _LABELS.items()}
_MODELS = {
    "logreg": lambda: LogisticRegression(max_iter=200),
    "linearsvc": lambda: LinearSVC(),
    "svc_proba": lambda: SVC(probability=True, random_state=0),
    "svc": lambda: SVC(),
    "tree": lambda: DecisionTreeClassifier(max_depth=3, random_state=0),
    "forest": lambda: RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0),
    "boosting": lambda: GradientBoostingClassifier(n_estimators=4, max_depth=2, random_state=0),
    # labels picked by ArrayFeatureExtractor(classes, ArgMax(scores)): on strings, a host node
    "knn": lambda: KNeighborsClassifier(3),
    "mlp": lambda: MLPClassifier((5,), max_iter=30, random_state=0),
    "gaussian_nb": lambda: GaussianNB(),
}


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def _to_onnx(*a, **k):
    with warnings.catch_warnings():  # scikit-learn 1.9 deprecates SVC's probA_ / probB_, which skl2onnx reads
        warnings.simplefilter("ignore", FutureWarning)
        return to_onnx(*a, **k)


# string and int labels, binary and multiclass, over the models (not every pair: each new shape compiles)
_CASES = [("logreg", "str3"), ("logreg", "int2"), ("linearsvc", "str2"), ("linearsvc", "int3"),
          ("svc_proba", "str3"), ("svc_proba", "str2"), ("svc_proba", "int2"), ("svc", "str3"), ("svc", "int2"),
          ("tree", "str3"), ("tree", "int3"), ("forest", "str2"), ("forest", "int3"), ("boosting", "str3"),
          ("boosting", "str2"), ("boosting", "int2"), ("knn", "str3"), ("mlp", "str2"), ("gaussian_nb", "str3"),
          ("gaussian_nb", "int2")]


@pytest.mark.parametrize("model,labels", _CASES)
def test_classifier_labels_and_zipmap(model, labels):
    est = _fit(_MODELS[model](), _X, _Y[labels])
    onx = _to_onnx(est, _X[:1])
    x = np.concatenate([_X[:12], np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32) * 2])
    s, got = _check(onx, {"X": x}, f"{model}/{labels}")
    # the label is what scikit-learn predicts (same dtype family: str or int)
    np.testing.assert_array_equal(got[0].astype(_Y[labels].dtype), est.predict(x))
    if any(n.op_type == "ZipMap" for n in onx.graph.node):  # every model here but LinearSVC (scores)
        assert type(got[1]) is list and len(got[1]) == len(x)
        assert s.info["mode"] == "jit+host", s.info  # the numeric part compiled, ZipMap (and labels) on the host
        assert "ZipMap" in s.host_nodes
        if labels.startswith("str"):  # the label: our index -> label map, or sklearn-onnx's string lookup
            assert any(n.endswith("/labels") or "ArrayFeatureExtractor" in n for n in s.host_nodes), s.host_nodes


def test_outputs_are_the_callers():
    """Each run returns new maps (mutating one changes nothing later) and new label arrays."""
    est = _fit(LogisticRegression(), _X, _Y["str3"])
    onx = _to_onnx(est, _X[:1])
    s = no.InferenceSession(onx)
    a = s.run(None, {"X": _X[:4]})
    a[1][0]["cat"] = -1.0
    a[0][0] = "changed"
    b = s.run(None, {"X": _X[:4]})
    assert b[1][0]["cat"] != -1.0 and b[0][0] != "changed"
    _same(b, _ort(onx, {"X": _X[:4]})[1], "second run")
    # without ZipMap (options zipmap=False) the probabilities are a float tensor
    onx2 = _to_onnx(est, _X[:1], options={id(est): {"zipmap": False}})
    _check(onx2, {"X": _X[:9]}, "zipmap=False")


def _mixed(n, rng):
    num = rng.normal(size=(n, 2)).astype(np.float32)
    cat = np.stack([rng.choice(["x", "y", "zé"], n), rng.choice(["p", "q"], n)], 1).astype(object)
    return num, cat


def _pipeline(est, num, cat, y):
    ct = ColumnTransformer([("num", StandardScaler(), [0, 1]),
                            ("cat", OneHotEncoder(handle_unknown="ignore"), [2, 3])])
    p = _fit(Pipeline([("ct", ct), ("m", est)]), np.concatenate([num.astype(object), cat], 1), y)
    return _to_onnx(p, initial_types=[("num", FloatTensorType([None, 2])), ("cat", StringTensorType([None, 2]))])


def test_column_transformer_pipeline_with_string_labels():
    """StandardScaler on the numeric columns + OneHotEncoder on the string columns (an unseen category
    included) + LogisticRegression with string labels: host (strings) -> jitted numeric -> host (labels,
    ZipMap)."""
    rng = np.random.default_rng(1)
    num, cat = _mixed(50, rng)
    y = np.where(num[:, 0] + (cat[:, 0] == "x") > 0.3, "high", "low")
    onx = _pipeline(LogisticRegression(), num, cat, y)
    feeds = {"num": num[:9], "cat": np.concatenate([cat[:8], [["unseen", "p"]]]).astype(object)}
    s, got = _check(onx, feeds, "pipeline")
    assert s.info["mode"] == "jit+host" and "host(" in s.info["host"] and "nee(" in s.info["host"], s.info
    jf = [j for j in s._seg_jits if j is not None]
    assert jf and all(j.stats["calls"] == 1 for j in jf)
    # numpy str input for the string column works too (onnxruntime needs object arrays)
    got2 = s.run(None, {"num": feeds["num"], "cat": feeds["cat"].astype(str)})
    _same(got2, got, "numpy str input")


@pytest.mark.parametrize("est", [LinearRegression(), RandomForestRegressor(n_estimators=3, max_depth=3, random_state=0),
                                 GradientBoostingRegressor(n_estimators=4, max_depth=2, random_state=0)],
                         ids=["linear", "forest", "boosting"])
def test_regressors(est):
    rng = np.random.default_rng(2)
    num, cat = _mixed(40, rng)
    y = num[:, 0] * 2.0 - (cat[:, 1] == "p") + 0.1 * num[:, 1]
    onx = _pipeline(est, num, cat, y)
    _check(onx, {"num": num[:11], "cat": cat[:11]}, type(est).__name__)
    plain = _to_onnx(_fit(type(est)(**est.get_params()), _X, _X[:, 0] - _X[:, 3]), _X[:1])
    s, _ = _check(plain, {"X": _X[:13]}, f"plain {type(est).__name__}")
    assert s.info["mode"] == "jit", s.info  # no strings: one compiled graph


# ------------------------------------------------------------------------- more estimators
def _more_models():
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA, TruncatedSVD
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor, IsolationForest
    from sklearn.impute import KNNImputer, SimpleImputer
    from sklearn.linear_model import RidgeClassifier, SGDClassifier
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        Binarizer,
        KBinsDiscretizer,
        MaxAbsScaler,
        MinMaxScaler,
        Normalizer,
        PolynomialFeatures,
        RobustScaler,
    )
    from sklearn.svm import SVR
    y3, y2, yr = _Y["int3"], _Y["int2"], _X[:, 0] - 0.5 * _X[:, 3]
    ml3 = {"": 17, "ai.onnx.ml": 3}
    return {  # name: (estimator, y or None, to_onnx options)
        "imputer_scaler_logreg": (make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression()), y3, {}),
        "binarizer": (Binarizer(threshold=0.2), None, {}),
        "normalizer_l1": (Normalizer("l1"), None, {}),
        "normalizer_l2": (Normalizer("l2"), None, {}),
        "minmax_maxabs_robust": (make_pipeline(MinMaxScaler(), MaxAbsScaler(), RobustScaler()), None, {}),
        "poly": (PolynomialFeatures(2), None, {}),
        "kbins_ordinal": (KBinsDiscretizer(3, encode="ordinal", quantile_method="averaged_inverted_cdf"), None, {}),
        "kbins_onehot": (KBinsDiscretizer(3, encode="onehot-dense", quantile_method="averaged_inverted_cdf"), None,
                         {"target_opset": 17}),
        "pca": (PCA(2), None, {}),
        "truncated_svd": (TruncatedSVD(2, random_state=0), None, {}),
        "kmeans": (KMeans(3, n_init=2, random_state=0), None, {}),
        # calls of model-local functions (skl2onnx's local_domain), inlined on loading
        "knn_imputer": (KNNImputer(n_neighbors=2), None, {}),
        # skl2onnx writes ai.onnx.ml 4 nodes it cannot build for IsolationForest: ml opset 3, as its docs say
        "isolation_forest": (IsolationForest(n_estimators=4, random_state=0), None, {"target_opset": ml3}),
        "hist_gb_classifier": (HistGradientBoostingClassifier(max_iter=3, max_depth=3, random_state=0), y3, {}),
        "hist_gb_binary": (HistGradientBoostingClassifier(max_iter=3, max_depth=3, random_state=0), y2, {}),
        "hist_gb_regressor": (HistGradientBoostingRegressor(max_iter=3, max_depth=3, random_state=0), yr, {}),
        "sgd_hinge": (SGDClassifier(random_state=0), y3, {}),
        "sgd_log_binary": (SGDClassifier(loss="log_loss", random_state=0), y2, {}),
        "ridge_classifier": (RidgeClassifier(), y3, {}),
        "ridge_classifier_binary": (RidgeClassifier(), y2, {}),
        "svr": (SVR(), yr, {}),
        "knn_regressor": (KNeighborsRegressor(3), yr, {}),
    }


_MORE = list(_more_models())


@pytest.fixture
def _skl2onnx_bool_ints(monkeypatch):
    """skl2onnx 1.20 hands numpy bools to int-list attributes of HistGradientBoosting's trees, which this onnx
    refuses ("Expected an int, got a boolean"): export with them as ints (the values are 0 / 1 either way)."""
    import skl2onnx.common._container as c
    orig = c.make_node

    def make_node(*a, **k):
        k = {n: [int(x) if isinstance(x, (bool, np.bool_)) else x for x in v] if isinstance(v, (list, tuple)) else v
             for n, v in k.items()}
        return orig(*a, **k)
    monkeypatch.setattr(c, "make_node", make_node)


@pytest.mark.parametrize("name", _MORE)
def test_more_estimators(name, _skl2onnx_bool_ints):
    """Transformers, clusterers, outlier detectors, HistGradientBoosting (NaNs in the input), SGD / Ridge
    classifiers, SVR, KNN regression: neetorch's outputs equal onnxruntime's."""
    est, y, opts = _more_models()[name]
    X = _X.copy()
    if name.startswith(("imputer", "hist_gb", "knn_imputer")):
        X[::5, 1] = np.nan
        X[::7, 3] = np.nan
    if name == "kbins_onehot":
        X = X[:, :2]
    _fit(est, X, y)
    onx = _to_onnx(est, X[:1], **opts)
    x = np.concatenate([X[:9], np.random.default_rng(3).normal(size=(4, X.shape[1])).astype(np.float32) * 2])
    _, got = _check(onx, {"X": x}, name)
    if y is not None and hasattr(est, "predict") and not name.startswith(("svr", "knn", "hist_gb_regressor")):
        np.testing.assert_array_equal(got[0].reshape(-1), est.predict(x))


def test_normalizer_max_follows_scikit_learn():
    """Normalizer(norm="max"): neetorch divides by max |x| per row, as scikit-learn and ONNX's reference do;
    onnxruntime divides by the signed max (the spec's literal "X / max(X)"), so rows whose largest entry is
    not the largest in magnitude differ from it: compared with sklearn and the reference instead."""
    from onnx.reference import ReferenceEvaluator
    from sklearn.preprocessing import Normalizer
    est = Normalizer("max").fit(_X)
    onx = _to_onnx(est, _X[:1])
    got = no.InferenceSession(onx).run(None, {"X": _X[:12]})[0]
    np.testing.assert_allclose(got, est.transform(_X[:12]), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, ReferenceEvaluator(onx).run(None, {"X": _X[:12]})[0], rtol=RTOL, atol=ATOL)


def test_string_label_encoder_and_one_hot_encoder():
    """LabelEncoder over strings (unseen -> -1) and OneHotEncoder with string categories (unseen ignored)."""
    from sklearn.preprocessing import LabelEncoder
    le = LabelEncoder().fit(np.array(["b", "a", "cé"]))
    onx = _to_onnx(le, initial_types=[("input", StringTensorType([None]))])
    _check(onx, {"input": np.array(["a", "cé", "zz", "b"], dtype=object)}, "LabelEncoder")
    oh = OneHotEncoder(handle_unknown="ignore").fit(np.array([["x", "p"], ["y", "q"], ["zé", "p"]], dtype=object))
    onx = _to_onnx(oh, initial_types=[("input", StringTensorType([None, 2]))])
    _check(onx, {"input": np.array([["x", "q"], ["w", "p"], ["zé", "zé"]], dtype=object)}, "OneHotEncoder")


def test_model_local_functions_are_inlined():
    """A model calling functions it defines (an attribute reference with a default, a nested call, a call
    inside an If branch) runs as onnxruntime runs it."""
    from onnx import TensorProto as T
    from onnx import helper as h
    scale = h.make_function(
        "local", "Scale", ["x"], ["y"],
        [h.make_node("Constant", [], ["a"], value_float=0.0),
         h.make_node("Constant", [], ["k"], value_float=1.0),
         h.make_node("Mul", ["x", "k"], ["y"])], [h.make_opsetid("", 17)], attributes=[])
    # Scale's Constant k takes the call's "alpha" (default 2.0 when the call does not set it)
    k = scale.node[1]
    del k.attribute[:]
    ref = onnx_attr_ref("value_float", "alpha")
    k.attribute.append(ref)
    scale.attribute_proto.append(h.make_attribute("alpha", 2.0))
    outer = h.make_function("local", "ScaleTwiceAddOne", ["x"], ["y"],
                            [h.make_node("Scale", ["x"], ["s1"], domain="local", alpha=3.0),
                             h.make_node("Scale", ["s1"], ["s2"], domain="local"),
                             h.make_node("Constant", [], ["one"], value_float=1.0),
                             h.make_node("Add", ["s2", "one"], ["y"])],
                            [h.make_opsetid("", 17), h.make_opsetid("local", 1)])
    then_g = h.make_graph([h.make_node("ScaleTwiceAddOne", ["x"], ["t"], domain="local")], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [2, 3])])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [h.make_tensor_value_info("e", T.FLOAT, [2, 3])])
    g = h.make_graph([h.make_node("ScaleTwiceAddOne", ["x"], ["a"], domain="local"),
                      h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                      h.make_node("Constant", [], ["z"], value_float=0.0),
                      h.make_node("Greater", ["s", "z"], ["c"]),
                      h.make_node("If", ["c"], ["b"], then_branch=then_g, else_branch=else_g),
                      h.make_node("Add", ["a", "b"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)], functions=[scale, outer])
    s = no.InferenceSession(m)
    assert any("inlined" in n for n in s.info["notes"]), s.info
    for x in (np.arange(6, dtype=np.float32).reshape(2, 3), -np.ones((2, 3), np.float32)):
        _same(s.run(None, {"x": x}), _ort(m, {"x": x})[1], "local functions")
    np.testing.assert_allclose(s.run(None, {"x": np.ones((2, 3), np.float32)})[0], np.full((2, 3), 14.0))


def onnx_attr_ref(name, ref):
    from onnx import AttributeProto
    a = AttributeProto()
    a.name, a.ref_attr_name, a.type = name, ref, AttributeProto.FLOAT
    return a
