"""String tensors in neetorch.onnx (``neetorch/onnx/ops_string.py``): host nodes on numpy object arrays,
checked differentially against onnxruntime and onnx.reference.ReferenceEvaluator on hand-built models
(UTF-8, empty strings, broadcasting, 0-d), a mixed string/numeric model split into host and jitted
segments, and the errors (wrong input types, ops on strings neetorch does not run)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T
from onnx import helper as h

import neetorch.onnx as no
from neetorch.onnx import InvalidInputError, LoweringError, UnsupportedModelError

S = T.STRING


def _model(nodes, inputs, outputs, opset=20, ml=None, inits=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], initializer=list(inits))
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("ai.onnx.ml", ml)] if ml else [])
    return h.make_model(g, opset_imports=ops)


def _ort(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {k: (v.astype(object) if v.dtype.kind == "U" else v) for k, v in feeds.items()})


def _ref(m, feeds):
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(m).run(None, {k: (v.astype(object) if v.dtype.kind == "U" else v)
                                            for k, v in feeds.items()})


def _same(got, want, what):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        w = np.asarray(w)
        if w.dtype.kind in "OU":
            assert g.dtype == object, f"{what}: {g.dtype}"
            w = w.astype(object)
        else:
            assert g.dtype == w.dtype, f"{what}: {g.dtype} vs {w.dtype}"
        assert g.shape == w.shape, f"{what}: shape {g.shape} vs {w.shape}"
        np.testing.assert_array_equal(g, w, err_msg=what)
        if g.dtype == object:
            assert all(type(v) is str for v in g.reshape(-1).tolist()), what


def _check(m, feeds, ref=True, ort=True):
    """neetorch's outputs (jit session: host nodes) equal onnxruntime's and the reference evaluator's."""
    sess = no.InferenceSession(m)
    got = sess.run(None, feeds)
    if ort:
        _same(got, _ort(m, feeds), "vs onnxruntime")
    if ref:
        _same(got, _ref(m, feeds), "vs onnx.reference")
    return sess, got


U8 = np.array(["héllo", "", "日本語", "a b"])


@pytest.mark.parametrize("x,y", [
    (U8, np.array(["✓", "x", "", " c"])),                 # utf-8, empty strings
    (np.array([["a"], ["bb"]]), np.array(["1", "2", "3"])),  # broadcasting [2,1] x [3]
    (np.array("cat"), np.array("s")),                     # 0-d
    (np.array([], dtype=str).reshape(0, 2), np.array(["z", "w"])),  # empty
])
def test_string_concat_and_equal(x, y):
    m = _model([h.make_node("StringConcat", ["x", "y"], ["z"]), h.make_node("Equal", ["x", "y"], ["e"])],
               [("x", S, list(x.shape)), ("y", S, list(y.shape))],
               [("z", S, list(np.broadcast_shapes(x.shape, y.shape))),
                ("e", T.BOOL, list(np.broadcast_shapes(x.shape, y.shape)))])
    sess, _ = _check(m, {"x": x, "y": y})
    assert sess.get_inputs()[0].type == "tensor(string)" and sess.get_outputs()[0].type == "tensor(string)"
    assert sess.host_nodes == ["StringConcat(z)", "Equal(e)"] and sess.info["mode"] == "host"
    assert "2 node(s) on string tensors run on the host" in sess.info["host"]
    assert "host (numpy, string tensors)" in sess.placement_summary()


def test_regex_and_split(monkeypatch, capsys):
    x = np.array([["alice@example.com", "bob@x.org", ""], ["a,b,,c", "  lead  trail ", "é,ü"]])
    m = _model([h.make_node("RegexFullMatch", ["x"], ["m"], pattern=r"[a-z.]+@example\.(com|net)"),
                h.make_node("StringSplit", ["x"], ["s1", "n1"], delimiter=","),
                h.make_node("StringSplit", ["x"], ["s2", "n2"]),
                h.make_node("StringSplit", ["x"], ["s3", "n3"], delimiter=",", maxsplit=1)],
               [("x", S, [2, "C"])], [("m", T.BOOL, [2, "C"]), ("s1", S, [2, "C", "a"]), ("n1", T.INT64, [2, "C"]),
                                      ("s2", S, [2, "C", "b"]), ("n2", T.INT64, [2, "C"]), ("s3", S, [2, "C", "c"]),
                                      ("n3", T.INT64, [2, "C"])])
    from neetorch import _env
    monkeypatch.setattr(_env, "DEBUG", 1)  # NEE_DEBUG=1 says which nodes run on the host
    _, got = _check(m, {"x": x}, ort=False)
    assert "4 node(s) on string tensors run on the host" in capsys.readouterr().err
    monkeypatch.setattr(_env, "DEBUG", 0)
    assert got[2].tolist() == [[1, 1, 1], [4, 1, 2]]
    # an empty string split on an explicit delimiter: one empty substring, as the reference (Python's str.split;
    # the spec does not say); onnxruntime gives none.  Elsewhere the three agree:
    _check(m, {"x": x[:, :2]})
    bad = _model([h.make_node("RegexFullMatch", ["x"], ["m"], pattern="(unclosed")], [("x", S, [1])],
                 [("m", T.BOOL, [1])])
    with pytest.raises(LoweringError, match=r"RegexFullMatch.*invalid pattern"):
        no.InferenceSession(bad).run(None, {"x": np.array(["a"])})


@pytest.mark.parametrize("x,attrs,ref", [
    (np.array(["Monday", "tuesday", "MONDAY", "wednesday"]), {"case_change_action": "UPPER", "stopwords": ["monday"]},
     True),
    (np.array([["Monday", "tuesday"]]), {"case_change_action": "LOWER", "is_case_sensitive": 1,
                                        "stopwords": ["Monday"]},
     True),
    # case-insensitive stopwords without a case change: the reference compares them case-sensitively
    (np.array(["monday", "Monday", "x"]), {"case_change_action": "NONE", "is_case_sensitive": 0,
                                                 "stopwords": ["MONDAY"]},
     False),
    (np.array([["x", "y"]]), {"stopwords": ["x", "y"]}, True),      # everything dropped: [[""]]
])
def test_string_normalizer(x, attrs, ref):
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **attrs)], [("x", S, list(x.shape))],
               [("y", S, [1] * (x.ndim - 1) + ["C"])], opset=10)
    _check(m, {"x": x}, ref=ref)


def test_string_normalizer_follows_onnxruntime_where_the_reference_differs():
    # the reference also drops empty strings and strips accents; the spec and onnxruntime do neither
    x = np.array(["café", "", "Stop", "straße", "ΟΔΟΣ"])
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", stopwords=["stop"],
                            locale="C.UTF-8")],
               [("x", S, [5])], [("y", S, ["C"])], opset=10)
    _check(m, {"x": x}, ref=False)
    lower = _model([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER", locale="C.UTF-8")],
                   [("x", S, [5])], [("y", S, ["C"])], opset=10)
    _check(lower, {"x": x}, ref=False)
    bad = np.array([["a", "b"], ["c", "d"]])
    with pytest.raises(LoweringError, match=r"StringNormalizer.*\[C\] or \[1, C\]"):
        no.InferenceSession(_model([h.make_node("StringNormalizer", ["x"], ["y"])], [("x", S, [2, 2])],
                                   [("y", S, [2, "C"])], opset=10), check=False).run(None, {"x": bad})


def test_label_encoder_and_category_mapper_both_ways():
    skeys = h.make_tensor("k", S, [3], [b"a", "é".encode(), b""])
    nodes = [
        h.make_node("LabelEncoder", ["s"], ["si"], domain="ai.onnx.ml", keys_strings=["a", "é", ""],
                    values_int64s=[1, 2, 3]),
        h.make_node("LabelEncoder", ["s"], ["sf"], domain="ai.onnx.ml", keys_strings=["a", "é"],
                    values_floats=[0.5, 1.5], default_float=-1.0),
        h.make_node("LabelEncoder", ["s"], ["ss"], domain="ai.onnx.ml", keys_strings=["a", "é"],
                    values_strings=["A", "É"], default_string="?"),
        h.make_node("LabelEncoder", ["i"], ["is"], domain="ai.onnx.ml", keys_int64s=[1, 7],
                    values_strings=["one", "seven"]),
        h.make_node("LabelEncoder", ["f"], ["fs"], domain="ai.onnx.ml", keys_floats=[0.25, 2.0],
                    values_strings=["q", "two"], default_string="none"),
        h.make_node("LabelEncoder", ["s"], ["st"], domain="ai.onnx.ml", keys_tensor=skeys,
                    values_tensor=h.make_tensor("v", T.INT16, [3], [4, 5, 6]),
                    default_tensor=h.make_tensor("d", T.INT16, [1], [-9])),
    ]
    m = _model(nodes, [("s", S, [2, 3]), ("i", T.INT64, [4]), ("f", T.FLOAT, [3])],
               [("si", T.INT64, [2, 3]), ("sf", T.FLOAT, [2, 3]), ("ss", S, [2, 3]), ("is", S, [4]),
                ("fs", S, [3]), ("st", T.INT16, [2, 3])], ml=4)
    feeds = {"s": np.array([["a", "é", "zz"], ["", "a", "b"]]), "i": np.array([7, 1, 0, -1], np.int64),
             "f": np.array([0.25, 2.0, 3.0], np.float32)}
    _check(m, feeds)
    cm = _model([h.make_node("CategoryMapper", ["s"], ["si"], domain="ai.onnx.ml", cats_strings=["a", "é"],
                             cats_int64s=[10, 20]),
                 h.make_node("CategoryMapper", ["i"], ["is"], domain="ai.onnx.ml", cats_strings=["a", "é"],
                             cats_int64s=[10, 20], default_string="n/a")],
                [("s", S, [3]), ("i", T.INT64, [3])], [("si", T.INT64, [3]), ("is", S, [3])], ml=1)
    _check(cm, {"s": np.array(["é", "x", "a"]), "i": np.array([20, 10, 5], np.int64)}, ref=False)


def test_cast_and_data_movement_on_strings():
    m = _model([h.make_node("Cast", ["f"], ["fs"], to=S), h.make_node("Cast", ["n"], ["nf"], to=T.FLOAT),
                h.make_node("Cast", ["n"], ["ni"], to=T.INT64), h.make_node("Cast", ["i"], ["is"], to=S)],
               [("f", T.FLOAT, [7]), ("n", S, [3]), ("i", T.INT32, [2])],
               [("fs", S, [7]), ("nf", T.FLOAT, [3]), ("ni", T.INT64, [3]), ("is", S, [2])])
    feeds = {"f": np.array([1.5, 3, 1 / 3, 1e20, -np.inf, np.nan, 1e-5], np.float32),
             "n": np.array(["12", " -3", "7"]), "i": np.array([-4, 2 ** 30], np.int32)}
    _check(m, feeds, ref=False)  # formats as onnxruntime (%.8g, NaN, INF); the reference uses numpy's str
    shape = h.make_tensor("shape", T.INT64, [2], [3, 2])
    m = _model([h.make_node("Reshape", ["x", "shape"], ["r"]), h.make_node("Transpose", ["r"], ["t"]),
                h.make_node("Gather", ["t", "idx"], ["g"], axis=1), h.make_node("Concat", ["g", "c"], ["cc"], axis=0),
                h.make_node("Unsqueeze", ["cc", "ax"], ["u"]), h.make_node("Shape", ["u"], ["sh"]),
                h.make_node("Identity", ["u"], ["y"])],
               [("x", S, [6]), ("idx", T.INT64, [2])], [("y", S, [1, 3, 2]), ("sh", T.INT64, [3])],
               inits=[shape, h.make_tensor("c", S, [1, 2], [b"k", b"l"]), h.make_tensor("ax", T.INT64, [1], [0])])
    _check(m, {"x": np.array(list("abcdef")), "idx": np.array([2, -1], np.int64)})


def test_mixed_model_runs_host_and_jitted_segments():
    """strings -> LabelEncoder -> numeric graph (jitted) -> LabelEncoder -> strings, and Equal on strings."""
    nodes = [h.make_node("LabelEncoder", ["s"], ["k"], domain="ai.onnx.ml", keys_strings=["a", "b", "é"],
                         values_floats=[1.0, 2.0, 3.0]),
             h.make_node("Constant", [], ["two"], value=h.make_tensor("two", T.FLOAT, [], [2.0])),
             h.make_node("Mul", ["k", "two"], ["k2"]), h.make_node("Add", ["k2", "x"], ["y"]),
             h.make_node("Cast", ["y"], ["yi"], to=T.INT64),
             h.make_node("LabelEncoder", ["yi"], ["lab"], domain="ai.onnx.ml", keys_int64s=[3, 5, 7],
                         values_strings=["three", "five", "seven"], default_string="?"),
             h.make_node("StringConcat", ["lab", "s"], ["cat"]), h.make_node("Equal", ["s", "cs"], ["eq"])]
    m = _model(nodes, [("s", S, [4]), ("x", T.FLOAT, [4])],
               [("y", T.FLOAT, [4]), ("cat", S, [4]), ("eq", T.BOOL, [4])], ml=4,
               inits=[h.make_tensor("cs", S, [], [b"b"])])
    feeds = {"s": np.array(["a", "b", "é", "zz"]), "x": np.array([1, 1, 1, 3], np.float32)}
    sess, got = _check(m, feeds)
    assert sess.info["mode"] == "jit+host"
    assert "segments: host(2) -> nee(3) -> host(2)" in sess.info["host"]
    jf = [j for j in sess._seg_jits if j is not None]
    assert len(jf) == 1 and jf[0].stats["calls"] == 1  # the numeric part ran compiled
    summary = sess.placement_summary()
    assert "LabelEncoder(k)" in summary and "placement of g_nee1" in summary
    np.testing.assert_array_equal(got[1], ["threea", "fiveb", "sevené", "threezz"])
    # bytes and object arrays are string inputs too; outputs are the caller's (object arrays of str)
    got2 = sess.run(["cat"], {"s": np.array([b"b", "é".encode(), b"a", b"a"]),
                              "x": np.array([1, 0, 1, 1], np.float32)})[0]
    assert got2.dtype == object and got2.tolist() == ["fiveb", "?é", "threea", "threea"]
    assert jf[0].stats["calls"] == 2 and jf[0].stats["traces"] == 1


def test_wrong_inputs_and_unsupported_ops_are_named():
    m = _model([h.make_node("StringConcat", ["x", "y"], ["z"])], [("x", S, [2]), ("y", S, [2])], [("z", S, [2])])
    sess = no.InferenceSession(m)
    with pytest.raises(InvalidInputError, match=r"input 'x'.*tensor\(string\).*float32"):
        sess.run(None, {"x": np.zeros(2, np.float32), "y": np.array(["a", "b"])})
    with pytest.raises(InvalidInputError, match=r"input 'y'.*found element 3"):
        sess.run(None, {"x": np.array(["a", "b"]), "y": np.array(["a", 3], dtype=object)})
    with pytest.raises(InvalidInputError, match=r"input 'y'.*not UTF-8"):
        sess.run(None, {"x": np.array(["a", "b"]), "y": np.array([b"\xff", b"b"])})
    with pytest.raises(InvalidInputError, match=r"input 'x': expected rank 1"):
        sess.run(None, {"x": np.array([["a", "b"]]), "y": np.array(["a", "b"])})
    num = _model([h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])])
    with pytest.raises(InvalidInputError, match=r"input 'x': expected tensor\(float\)"):
        no.InferenceSession(num).run(None, {"x": np.array(["1", "2"])})
    # an op neetorch does not run on strings: refused at session creation, naming the node
    bad = _model([h.make_node("Max", ["x", "y"], ["z"], name="mx")], [("x", S, [2]), ("y", S, [2])],
                 [("z", S, [2])], opset=13)
    with pytest.raises(UnsupportedModelError, match=r"Max on string tensors \(nodes: mx\)"):
        no.InferenceSession(bad, check=False)
    # Equal between strings and numbers (only when no types say so: run_node builds the model from the inputs)
    from neetorch.onnx import backend
    out = backend.run_node(h.make_node("Equal", ["a", "b"], ["c"]), [np.array(["x", "y"]), np.array(["x", "z"])])
    np.testing.assert_array_equal(out[0], [True, False])


def _seq_model(nodes, inputs, outputs, inits=()):
    """inputs / outputs: (name, "seq" or elem type, shape)."""
    def vi(n, t, s):
        if t == "seq":
            return h.make_value_info(n, h.make_sequence_type_proto(h.make_tensor_type_proto(S, s or [None])))
        return h.make_tensor_value_info(n, t, s)
    g = h.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs], initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 20)])


def test_sequences_of_strings():
    """SplitToSequence / SequenceConstruct / At / Insert / Erase / Length / ConcatFromSequence on strings (host
    nodes: lists of object arrays), a sequence input, and sequence outputs, against onnxruntime and the
    reference."""
    i64 = lambda name, v: h.make_tensor(name, T.INT64, [], [v])
    nodes = [h.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
             h.make_node("SplitToSequence", ["x", "two"], ["halves"], axis=1),
             h.make_node("SequenceAt", ["parts", "m1"], ["last"]),
             h.make_node("SequenceConstruct", ["last", "w"], ["sc"]),
             h.make_node("SequenceInsert", ["sc", "w", "zero"], ["ins"]),
             h.make_node("SequenceErase", ["ins", "one"], ["er"]),
             h.make_node("SequenceLength", ["er"], ["n"]),
             h.make_node("ConcatFromSequence", ["parts"], ["stacked"], axis=-1, new_axis=1),
             h.make_node("ConcatFromSequence", ["halves"], ["cat"], axis=1),
             h.make_node("ConcatFromSequence", ["inseq"], ["cat_in"], axis=0),
             h.make_node("SequenceLength", ["inseq"], ["n_in"]),
             h.make_node("Optional", ["er"], ["opt"]), h.make_node("OptionalHasElement", ["opt"], ["has"]),
             h.make_node("OptionalGetElement", ["opt"], ["back"])]
    m = _seq_model(nodes, [("x", S, [2, 3]), ("w", S, [2]), ("inseq", "seq", [None])],
                   [("er", "seq", [2]), ("n", T.INT64, []), ("stacked", S, [2, 3]), ("cat", S, [2, 3]),
                    ("halves", "seq", [2, None]), ("cat_in", S, [None]), ("n_in", T.INT64, []),
                    ("has", T.BOOL, []), ("back", "seq", [2])],
                   inits=[i64("m1", -1), i64("zero", 0), i64("one", 1), i64("two", 2)])
    feeds = {"x": np.array([["a", "é", ""], ["d", "e f", "g"]], dtype=object), "w": np.array(["w1", "w2"], dtype=object),
             "inseq": [np.array(["p", "q"], dtype=object), np.array(["r"], dtype=object)]}
    sess = no.InferenceSession(m)
    got = sess.run(None, feeds)
    assert sess.info["mode"] == "host" and "SplitToSequence" in sess.host_nodes[0], sess.info
    from onnx.reference import ReferenceEvaluator
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for who, want in (("onnxruntime", ort.InferenceSession(m.SerializeToString(), so).run(None, feeds)),
                      ("reference", ReferenceEvaluator(m).run(None, feeds))):
        assert len(got) == len(want)
        k = len(got) - (1 if who == "reference" else 0)  # the reference's OptionalGetElement gives [sequence]
        for g, w in zip(got[:k], want[:k]):
            if isinstance(w, list):
                assert type(g) is list and len(g) == len(w), who
                _same(g, w, who)
            else:
                _same([g], [w], who)
    assert [a.tolist() for a in got[0]] == [["w1", "w2"], ["w1", "w2"]] and got[1] == 2
    # wrong input: a numeric sequence element where strings are declared, an out-of-range position
    with pytest.raises(InvalidInputError, match="inseq"):
        sess.run(None, dict(feeds, inseq=[np.zeros(2, np.float32)]))
    bad = _seq_model([h.make_node("SequenceAt", ["s", "p"], ["y"], name="at")], [("s", "seq", None)],
                     [("y", S, [None])], inits=[i64("p", 5)])
    with pytest.raises(LoweringError, match=r"node at \(SequenceAt\): position 5 is out of range for a sequence "
                                            r"of 1"):
        no.InferenceSession(bad).run(None, {"s": [np.array(["a"], dtype=object)]})


def test_cast_string_to_bool_follows_onnxruntime():
    """The spec leaves string -> bool undefined: onnxruntime reads the leading integer (std::stoull: blanks, a
    sign, digits, the rest ignored) and tests it for nonzero, and fails on a string without one; the reference
    instead takes Python's truthiness (every non-empty string is true)."""
    m = _model([h.make_node("Cast", ["s"], ["b"], to=T.BOOL, name="c")], [("s", S, [6])], [("b", T.BOOL, [6])])
    feeds = {"s": np.array(["0", "1", " 12", "-0", "0x1", "00"], dtype=object)}
    _, got = _check(m, feeds, ref=False)
    assert got[0].tolist() == [False, True, True, False, False, False]
    with pytest.raises(LoweringError, match=r"node c \(Cast\): cannot cast 'true' to bool"):
        no.InferenceSession(m).run(None, {"s": np.array(["1", "true", "0", "0", "0", "0"], dtype=object)})


def test_array_feature_extractor_on_strings():
    """classes[argmax]: how sklearn-onnx picks string labels (KNN, MLP, naive Bayes, ...); a 1-D input gives
    [1, k]."""
    for shape, idx in (([2, 3], [2, 0, 2]), ([3], [1]), ([2, 1, 3], [0, 2])):
        x = np.array(["a", "é", "", "d", "e f", "g"][:int(np.prod(shape))], dtype=object).reshape(shape)
        m = _model([h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")],
                   [("x", S, shape), ("i", T.INT64, [len(idx)])], [("y", S, [None] * max(len(shape), 2))], ml=1)
        _, got = _check(m, {"x": x, "i": np.array(idx, np.int64)})
        assert got[0].shape == ((1, len(idx)) if len(shape) == 1 else (*shape[:-1], len(idx)))
    m = _model([h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml", name="afe")],
               [("x", S, [3]), ("i", T.INT64, [1])], [("y", S, [1, 1])], ml=1)
    with pytest.raises(LoweringError, match=r"node afe \(ArrayFeatureExtractor\): index 3 is out of range"):
        no.InferenceSession(m).run(None, {"x": np.array(["a", "b", "c"]), "i": np.array([3], np.int64)})


def test_category_mapper_int_to_string_lookup():
    """int64 -> string through the sorted keys (the path neetorch's index -> class label nodes take): absent
    keys get default_string, a repeated key its last string (as onnxruntime), any input shape."""
    m = _model([h.make_node("CategoryMapper", ["i"], ["s"], domain="ai.onnx.ml", cats_strings=["a", "b", "é"],
                            cats_int64s=[5, -2, 5], default_string="?")],
               [("i", T.INT64, [2, 3])], [("s", S, [2, 3])], ml=1)
    _, got = _check(m, {"i": np.array([[5, -2, 0], [7, -9, 5]], np.int64)}, ref=False)
    assert got[0].tolist() == [["é", "b", "?"], ["?", "?", "é"]]
