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
