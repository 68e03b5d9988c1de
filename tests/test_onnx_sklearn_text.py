"""scikit-learn text and dict pipelines as skl2onnx exports them, run by neetorch.onnx and compared with
onnxruntime: TfidfVectorizer / CountVectorizer (StringNormalizer -> com.microsoft Tokenizer -> Flatten ->
TfIdfVectorizer over strings -> ...), DictVectorizer (a map input), CastMap, the Tokenizer on its own, and
the map-input checks.  Labels exactly, scores to rtol 1e-5.  onnxruntime's StringNormalizer needs an
installed locale: its copy of each model gets ``locale="C.UTF-8"`` (neetorch ignores the attribute)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

from onnx import TensorProto as T
from onnx import helper as h
from skl2onnx import to_onnx
from skl2onnx.common.data_types import (
    DictionaryType,
    FloatTensorType,
    Int64TensorType,
    StringTensorType,
)
from sklearn.feature_extraction import DictVectorizer
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from test_onnx_sklearn import _same

import neetorch.onnx as no
from neetorch.onnx import InvalidInputError, UnsupportedModelError


def _ort_model(m):
    c = onnx.ModelProto()
    c.CopyFrom(m)

    def fix(g):
        for n in g.node:
            if n.op_type == "StringNormalizer":
                keep = [a for a in n.attribute if a.name != "locale"]
                del n.attribute[:]
                n.attribute.extend(keep + [h.make_attribute("locale", "C.UTF-8")])
            for a in n.attribute:
                if a.type == a.GRAPH:
                    fix(a.g)
    fix(c.graph)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(c.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _check(m, feeds, what, sess=None):
    s = sess or no.InferenceSession(m)
    got = s.run(None, feeds)
    want = _ort_model(m).run(None, feeds)
    _same(got, want, what)
    return s, got


def _fit(est, X, y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y) if y is not None else est.fit(X)


_DOCS = np.array(["The cat sat on the mat.", "the dog ate my homework", "A cat, and a dog!", "Homework is fun; isn't it?",
                  "mat mat cat", "Émeu and DOG: a_b c9 99", "dog dog dog cat the", "fun fun homework mat"])
_Y = np.array(["pet", "work", "pet", "work", "pet", "pet", "pet", "work"])
_NEW = np.array(["", "an unseen sentence", "CAT! Cat? cat.", "   ", "the the the the", "Émeu émeu ÉMEU dog",
                 "homework: dog, cat; mat"])


@pytest.mark.parametrize("vec,opts", [
    (lambda: TfidfVectorizer(), None),
    (lambda: CountVectorizer(ngram_range=(1, 2), stop_words=["the", "a"]), None),
    (lambda: TfidfVectorizer(ngram_range=(1, 2), lowercase=False, sublinear_tf=True),
     {"separators": [" ", "[.]", "\\?", ",", ";", ":", "\\!"]}),
    # keep_empty_string: StringNormalizer row by row in a Scan over strings (run on the host)
    (lambda: TfidfVectorizer(stop_words=["the", "a"]), {"keep_empty_string": True}),
], ids=["tfidf", "count_bigrams_stopwords", "tfidf_separators", "tfidf_keep_empty_string"])
def test_text_pipeline(vec, opts):
    """make_pipeline(<vectorizer>, LogisticRegression()) with string labels, one document per row."""
    v = vec()
    p = _fit(make_pipeline(v, LogisticRegression()), _DOCS, _Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = to_onnx(p, initial_types=[("input", StringTensorType([None, 1]))],
                    options={type(v): opts} if opts else None)
    assert any(n.op_type == "Tokenizer" and n.domain == "com.microsoft" for n in m.graph.node)
    s, got = _check(m, {"input": _DOCS.reshape(-1, 1)}, "training docs")
    assert s.info["mode"] == "jit+host", s.info
    assert "Tokenizer" in s.host_nodes and any(n.endswith("/ids") for n in s.host_nodes), s.host_nodes
    _check(m, {"input": _NEW.reshape(-1, 1).astype(object)}, "new docs", s)
    _check(m, {"input": _NEW[1:2].reshape(-1, 1)}, "one doc", s)
    if opts and "keep_empty_string" in opts:
        assert any(n.op_type == "Scan" for n in m.graph.node) and "Scan" not in str(s.info["fallback_reason"])
    if opts is None:  # the default token expression gives sklearn's tokens here: sklearn's labels too
        np.testing.assert_array_equal(got[0], p.predict(_DOCS))


def test_vectorizer_alone_matches_sklearn():
    """CountVectorizer's counts (the TfIdfVectorizer over strings, TF mode) equal onnxruntime's and sklearn's."""
    cv = _fit(CountVectorizer(), _DOCS)
    m = to_onnx(cv, initial_types=[("input", StringTensorType([None, 1]))])
    _, got = _check(m, {"input": _DOCS.reshape(-1, 1)}, "counts")
    # skl2onnx's token expression [a-zA-Z0-9_]+ is ASCII (sklearn's \w is not): sklearn agrees on ASCII rows
    ascii_rows = [i for i, d in enumerate(_DOCS) if d.isascii()]
    assert len(ascii_rows) == len(_DOCS) - 1
    np.testing.assert_array_equal(got[0][ascii_rows], cv.transform(_DOCS[ascii_rows]).toarray().astype(np.float32))


def _tok_model(shape, **attrs):
    n = h.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", name="tok", **attrs)
    g = h.make_graph([n], "g", [h.make_tensor_value_info("x", T.STRING, shape)],
                     [h.make_tensor_value_info("y", T.STRING, [None] * (len(shape) + 1))])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])


_TOK_IN = np.array([["Hello, world! a bb ccc 3.14", ""], ["x-y-z  zz 2.5.6", "éé ßa,,b abab-cab"]], dtype=object)


@pytest.mark.parametrize("attrs", [
    {"tokenexp": "[a-zA-Z0-9_]+"},
    {"tokenexp": "\\w+", "mincharnum": 2},
    {"tokenexp": "[a-z]", "mark": 1},
    {"tokenexp": "."},
    {"separators": [" "]},
    {"separators": [" ", ",", "-"], "mincharnum": 2, "mark": 1, "pad_value": "<p>"},
    {"separators": ["[,!]", "\\s+"]},
    {"separators": [""], "mark": 1},
    # RE2's leftmost-longest match (onnxruntime sets longest_match): "3.14" where leftmost-first takes "3"
    {"tokenexp": "[0-9]+|[0-9]+[.][0-9]+|[a-z]+?"},
    {"separators": ["a|ab", "-"]},
], ids=lambda a: "-".join(f"{k}={v}" for k, v in a.items()))
def test_tokenizer(attrs):
    at = {"mark": 0, "pad_value": "#", "mincharnum": 1}
    at.update(attrs)
    m = _tok_model([2, 2], **at)
    _check(m, {"x": _TOK_IN}, str(attrs))
    m1 = _tok_model([None], **at)
    for x in (_TOK_IN[1], np.array(["", ""], dtype=object), np.array(["abc"], dtype=object)):
        _check(m1, {"x": x}, f"{attrs} on {x.tolist()}")


def test_tokenizer_needs_longest_match_without_regex(monkeypatch):
    """Without the regex package, an expression on which Python's re could stop short of RE2's longest match
    is refused, naming the node; the others run with re."""
    import sys

    from neetorch.onnx import ops_text
    monkeypatch.setitem(sys.modules, "regex", None)
    ops_text._compile.cache_clear()
    try:
        m = _tok_model([2, 2], mark=0, pad_value="#", mincharnum=1, tokenexp="[0-9]+|[0-9]+[.][0-9]+")
        with pytest.raises(Exception, match=r"node tok \(Tokenizer\): tokenexp .*leftmost-longest.*'regex'"):
            no.InferenceSession(m).run(None, {"x": _TOK_IN})
        m = _tok_model([2, 2], mark=0, pad_value="#", mincharnum=1, tokenexp="[a-zA-Z0-9_]+")
        _check(m, {"x": _TOK_IN}, "re")
    finally:
        ops_text._compile.cache_clear()


def test_dict_vectorizer_pipeline():
    """DictVectorizer (a map(string, float) input: one dict per run, as onnxruntime) + LogisticRegression."""
    D = [{"a": 1.0, "b": 2.0}, {"c": 3.0}, {"a": -1.0, "c": 1.0}, {"b": 5.0, "d": 0.5}, {"d": 2.0, "a": 0.1}]
    y = ["x", "y", "y", "x", "y"]
    p = _fit(make_pipeline(DictVectorizer(sparse=False), LogisticRegression()), D, y)
    m = to_onnx(p, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))])
    s = no.InferenceSession(m)
    assert [(i.name, i.type) for i in s.get_inputs()] == [("input", "map(string,tensor(float))")]
    for d in D + [{"a": 2, "zz": 4.0}, {"b": np.float32(1.5), np.str_("c"): np.float64(2.0)}, {"d": True}]:
        _, got = _check(m, {"input": d}, f"dict {d}", s)
        assert got[0].tolist() == p.predict([{str(k): float(v) for k, v in d.items()}]).tolist()
    assert s.info["mode"] == "jit+host" and "DictVectorizer" in s.host_nodes, s.info
    # int64 keys
    dv = _fit(DictVectorizer(sparse=False), [{1: 1.0, 5: 2.0}, {3: 1.0, -2: 4.0}])
    m2 = to_onnx(dv, initial_types=[("input", DictionaryType(Int64TensorType([1]), FloatTensorType([1])))])
    s2 = no.InferenceSession(m2)
    for d in ({5: 2.0, 3: 1.5}, {np.int64(-2): 7.0, 99: 1.0}, {True: 3.0}):
        _check(m2, {"input": d}, f"int dict {d}", s2)
    # an empty map: a row of zeros (onnxruntime's Python binding refuses empty dicts)
    np.testing.assert_array_equal(s2.run(None, {"input": {}})[0], np.zeros((1, 4), np.float32))


def test_map_inputs_refuse_bad_values():
    D = [{"a": 1.0, "b": 2.0}, {"c": 3.0}]
    dv = _fit(DictVectorizer(sparse=False), D)
    m = to_onnx(dv, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))])
    s = no.InferenceSession(m)
    bad = [(D, r"input 'input': expected map\(string,tensor\(float\)\).*a list of 2 dicts.*one dict per run"),
           (np.ones((1, 3), np.float32), r"input 'input': expected map\(string,tensor\(float\)\).*numpy float32"),
           ({1: 1.0}, r"input 'input'.*key 1 is a int, not a str"),
           ({b"a": 1.0}, r"input 'input'.*key b'a' is a bytes, not a str"),
           ({"a": "x"}, r"input 'input'.*the value of key 'a' is a str, not a number"),
           ({"a": None}, r"input 'input'.*the value of key 'a' is a NoneType, not a number")]
    for v, msg in bad:
        with pytest.raises(InvalidInputError, match=msg):
            s.run(None, {"input": v})
    # a dict where a tensor is expected
    lr = _fit(LogisticRegression(), np.eye(3, dtype=np.float32), [0, 1, 1])
    s2 = no.InferenceSession(to_onnx(lr, np.eye(3, dtype=np.float32)))
    with pytest.raises(InvalidInputError, match=r"input 'X': expected tensor\(float\), got a dict \(a map\)"):
        s2.run(None, {"X": {"a": 1.0}})
    with pytest.raises(InvalidInputError, match=r"input 'X': expected tensor\(float\), got a list of dicts"):
        s2.run(None, {"X": D})


def _ml_model(nodes, inputs, outputs):
    g = h.make_graph(nodes, "g", inputs, outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])


def _map_vi(name, key, value):
    return h.make_value_info(name, h.make_map_type_proto(key, h.make_tensor_type_proto(value, [1])))


def _cast_map_model(value, attrs):
    out = {"TO_FLOAT": T.FLOAT, "TO_INT64": T.INT64, "TO_STRING": T.STRING}[attrs["cast_to"]]
    return _ml_model([h.make_node("CastMap", ["m"], ["y"], domain="ai.onnx.ml", **attrs)],
                     [_map_vi("m", T.INT64, value)], [h.make_tensor_value_info("y", out, [1, None])])


@pytest.mark.parametrize("attrs,maps", [
    ({"cast_to": "TO_FLOAT"}, [{3: 1.5, 1: -2.0, 8: 0.25}]),
    ({"cast_to": "TO_FLOAT", "map_form": "SPARSE", "max_map": 6}, [{3: 1.5, 1: -2.0, 8: 0.25}, {0: 1.0}]),
    ({"cast_to": "TO_INT64", "map_form": "SPARSE", "max_map": 4}, [{0: 1.7, 2: -2.7}]),
    ({"cast_to": "TO_INT64"}, [{5: 3.99, 2: -0.5}]),
    ({"cast_to": "TO_STRING"}, [{3: 1.5, 1: 1e20, 2: float("nan"), 4: -1e-9, 5: float("-inf"), 6: 0.1}]),
    ({"cast_to": "TO_STRING", "map_form": "SPARSE", "max_map": 3}, [{1: 2.5}]),
], ids=lambda v: None if isinstance(v, list) else "-".join(map(str, v.values())))
def test_cast_map(attrs, maps):
    """map(int64, float) -> float / int64 / string, DENSE and SPARSE, against onnxruntime."""
    m = _cast_map_model(T.FLOAT, attrs)
    s = no.InferenceSession(m)
    for d in maps:
        _check(m, {"m": d}, f"{attrs} {d}", s)


def test_cast_map_from_strings():
    """map(int64, string): onnxruntime's Python API cannot feed one (its binding makes map(int64, float) of
    dicts), so against its kernel's rules, written out: std::stof / std::stoll read the leading number."""
    cases = [({"cast_to": "TO_FLOAT"}, {1: " 1.5e3xyz", 0: "-7", 4: "inf", 5: "0x1p3"},
              np.array([[-7.0, 1500.0, np.inf, 8.0]], np.float32)),
             ({"cast_to": "TO_INT64", "map_form": "SPARSE", "max_map": 4}, {1: " 42abc", 2: "-3.9"},
              np.array([[0, 42, -3, 0]], np.int64)),
             ({"cast_to": "TO_STRING", "map_form": "SPARSE", "max_map": 3}, {2: "b", 0: "a"},
              np.array([["a", "0.f", "b"]], dtype=object))]
    for attrs, d, want in cases:
        got = no.InferenceSession(_cast_map_model(T.STRING, attrs)).run(None, {"m": d})[0]
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), (attrs, got, want)
    s = no.InferenceSession(_cast_map_model(T.STRING, {"cast_to": "TO_FLOAT"}))
    with pytest.raises(Exception, match=r"CastMap\): cannot convert 'x1' to float"):
        s.run(None, {"m": {0: "x1"}})
    with pytest.raises(Exception, match=r"CastMap\): '1e39' is out of float's range"):
        s.run(None, {"m": {0: "1e39"}})


def test_dict_vectorizer_value_types():
    """map(string, int64) -> int64, map(int64, string) -> strings ("" for absent keys), map(string, double),
    a repeated vocabulary entry: onnxruntime's Python API feeds only float-valued maps, so these are checked
    against the values onnxruntime's kernel writes ([1, V], the map's value or its type's zero), and against
    ONNX's reference (which returns [V])."""
    from onnx.reference import ReferenceEvaluator
    cases = [(T.STRING, T.INT64, {"string_vocabulary": ["b", "a", "z"]}, {"a": 3, "b": -1}, [[-1, 3, 0]], np.int64),
             (T.INT64, T.STRING, {"int64_vocabulary": [2, 7, 1]}, {7: "x", 1: "é"}, [["", "x", "é"]], object),
             (T.STRING, T.DOUBLE, {"string_vocabulary": ["q", "p"]}, {"p": 0.1}, [[0.0, 0.1]], np.float64),
             (T.STRING, T.FLOAT, {"string_vocabulary": ["a", "b", "a"]}, {"a": 2.5}, [[2.5, 0.0, 2.5]], np.float32)]
    for key, value, attrs, d, want, dt in cases:
        m = _ml_model([h.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", **attrs)],
                      [_map_vi("m", key, value)], [h.make_tensor_value_info("y", value, [1, None])])
        got = no.InferenceSession(m).run(None, {"m": d})[0]
        assert got.dtype == np.dtype(dt) and got.tolist() == want, (attrs, got)
        if value != T.STRING:  # the reference fills absent string values with 0
            ref = ReferenceEvaluator(m).run(None, {"m": d})[0]
            np.testing.assert_array_equal(got.reshape(-1), np.asarray(ref).reshape(-1))
    with pytest.raises(InvalidInputError, match=r"input 'm'.*the value of key 'a' is a float, not an int"):
        m = _ml_model([h.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a"])],
                      [_map_vi("m", T.STRING, T.INT64)], [h.make_tensor_value_info("y", T.INT64, [1, None])])
        no.InferenceSession(m).run(None, {"m": {"a": 1.5}})


def test_map_ops_on_sequences_are_refused_up_front():
    """DictVectorizer on ZipMap's sequence of maps: onnxruntime refuses the model; so does neetorch, naming it."""
    g = h.make_graph([h.make_node("ZipMap", ["p"], ["m"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
                      h.make_node("DictVectorizer", ["m"], ["v"], domain="ai.onnx.ml", int64_vocabulary=[0, 1],
                                  name="dv")], "g",
                     [h.make_tensor_value_info("p", T.FLOAT, [2, 2])], [h.make_tensor_value_info("v", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("ai.onnx.ml", 1)])
    with pytest.raises(UnsupportedModelError, match=r"DictVectorizer on input 'm' of type seq\(map.*one map.*dv"):
        no.InferenceSession(m, check=False)


def test_unknown_microsoft_ops_are_named():
    n = h.make_node("BeamSearch", ["x", "x"], ["y"], domain="com.microsoft", name="fg")
    g = h.make_graph([n], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedModelError, match=r"com\.microsoft\.BeamSearch \(nodes: fg\)"):
        no.InferenceSession(m)
