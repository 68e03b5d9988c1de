"""Text: the ``com.microsoft`` Tokenizer and TfIdfVectorizer over strings (what skl2onnx exports for
scikit-learn's CountVectorizer / TfidfVectorizer: StringNormalizer -> Tokenizer -> Flatten ->
TfIdfVectorizer(pool_strings) -> ...).

Strings live on the host (``ops_string``), so both are host nodes, run with Python's ``re`` and numpy:

* ``Tokenizer`` (onnxruntime's contrib op, its current kernel): input [C] or [N, C] strings, output
  input.shape + [T] where T is the most tokens any string has (+ 2 with ``mark``: "\\x02" first, "\\x03"
  after the tokens, then ``pad_value`` up to T); no token anywhere gives a last dim of 0.  ``tokenexp``:
  the tokens are the successive matches of the expression (a match shorter than ``mincharnum``
  characters is skipped, the search resuming one character after its start; a string shorter than
  ``mincharnum`` has no tokens); ``separators``: each separator expression in turn splits every token of
  the row (pieces shorter than ``mincharnum`` dropped; a separator that leaves no piece empties the row);
  ``tokenexp == "."`` or ``separators == [""]``: one token per character.  Expressions are RE2 syntax in
  onnxruntime; neetorch compiles them in ASCII mode (RE2's ``\\w``, ``\\d``, ``\\s``, ``\\b`` are ASCII),
  refusing (naming the node) what it cannot parse.  RE2 there takes the
  leftmost-longest match: neetorch uses the ``regex`` package's POSIX mode when it is installed; without
  it, Python's ``re`` (leftmost-first) for the expressions where both agree (no alternation, lazy
  quantifier or quantified group: skl2onnx's default ``[a-zA-Z0-9_]+`` and separators), refusing others;
* ``TfIdfVectorizer`` with ``pool_strings``: :func:`neetorch.onnx.ops_ml.expand_node` splits the node into
  ``neetorch.internal:StringIds`` (here: each string -> the rank of that string among the pool's distinct
  strings, -1 when absent) and ``neetorch.internal:TfIdfCounts``, the int64 form's lowering over
  ``pool_int64s`` = those ranks, run eagerly on the host (exact string equality, as onnxruntime).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from .lowering import LoweringError
from .ops_string import HOST_OPS, _num, _s, host_op

__all__ = ["tokenize"]

_START, _END = "\x02", "\x03"


def _err(node, msg):
    return LoweringError(f"node {node.name} ({node.op_type}): {msg}")


def _may_prefer_shorter(pattern: str) -> bool:
    """Whether leftmost-first matching (Python's ``re``) may stop short of RE2's leftmost-longest on
    ``pattern``: it has an alternation, a lazy quantifier or a quantified group (a pattern of quantified
    characters / classes only takes the longest match either way)."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c, nxt = pattern[i], pattern[i + 1:i + 2]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if nxt == "]" or pattern[i + 1:i + 3] == "^]":  # a leading "]" is a member, not the end
                i += 2 if nxt == "]" else 3
                continue
        else:
            alternation = c == "|"
            lazy = c in "*+?}" and nxt == "?"
            group_quantified = c == ")" and nxt in ("?", "*", "+", "{")
            if alternation or lazy or group_quantified:
                return True
        i += 1
    return False


@lru_cache(maxsize=256)
def _compile(pattern):
    """RE2's leftmost-longest matching (onnxruntime sets ``longest_match``): the ``regex`` package's POSIX
    mode when it is installed, else Python's ``re`` for the patterns on which it finds the same matches;
    ASCII classes (``\\w``, ``\\d``, ``\\s``, ``\\b``), as RE2's."""
    try:
        import regex
    except ImportError:
        regex = None
    if regex is not None:
        return regex.compile(pattern, regex.ASCII | regex.POSIX), None
    if _may_prefer_shorter(pattern):
        return None, ("it needs RE2's leftmost-longest matching (it has an alternation, a lazy quantifier or a "
                      "quantified group), which Python's re does not do: install the 'regex' package")
    return re.compile(pattern, re.ASCII), None


def _rx(node, pattern, what):
    try:
        rx, why = _compile(pattern)
    except Exception as e:  # noqa: BLE001  (re.error / regex.error)
        raise _err(node, f"cannot compile {what} {pattern!r} ({e}; onnxruntime takes RE2 syntax, neetorch "
                         f"evaluates it with Python's re / regex)") from None
    if rx is None:
        raise _err(node, f"{what} {pattern!r}: {why}")
    return rx


def _by_expression(rx, s, mincharnum):
    """onnxruntime's TokenExpression on one string."""
    out = []
    if len(s) < mincharnum:
        return out
    pos, end = 0, len(s)
    while pos <= end:
        m = rx.search(s, pos)
        if m is None:
            break
        a, b = m.span()
        if b - a >= mincharnum:
            out.append(s[a:b])
            pos = b if b > a else a + 1
        else:
            pos = a + 1
    return out


def _by_separators(seps, s, mincharnum):
    """onnxruntime's SeparatorExpressionTokenizer on one string."""
    row = [s]
    for rx in seps:
        tokens = []
        for text in row:
            pos, end = 0, len(text)
            while True:
                m = rx.search(text, pos) if pos <= end else None
                if m is None:
                    if pos <= end and end - pos >= mincharnum:
                        tokens.append(text[pos:end])
                    break
                a, b = m.span()
                if a - pos >= mincharnum:
                    tokens.append(text[pos:a])
                pos = b if b > a else a + 1  # an empty match skips the character it stands before
        if not tokens:
            return []
        row = tokens
    return row


def tokenize(strings, *, mark=False, pad_value="#", mincharnum=1, separators=None, tokenexp=None, node=None):
    """onnxruntime's com.microsoft Tokenizer on a numpy object array of str ([C] or [N, C])."""
    x = strings
    if x.ndim not in (1, 2):
        raise _err(node, f"input must have shape [C] or [N, C], got {list(x.shape)}")
    if x.size == 0:
        shape = ([x.shape[0]] if x.ndim == 2 else []) + [0]
        return np.empty(shape, dtype=object)
    chars = (tokenexp == ".") if separators is None else (len(separators) == 1 and separators[0] == "")
    if chars:
        rows = [list(s) for s in x.reshape(-1).tolist()]
    elif separators is not None:
        seps = [_rx(node, p, "separator") for p in separators]
        rows = [_by_separators(seps, s, mincharnum) for s in x.reshape(-1).tolist()]
    else:
        rx = _rx(node, tokenexp, "tokenexp")
        rows = [_by_expression(rx, s, mincharnum) for s in x.reshape(-1).tolist()]
    T = max(len(r) for r in rows)
    if T == 0:
        return np.empty(list(x.shape) + [0], dtype=object)
    if mark:
        T += 2
        rows = [[_START] + r + [_END] for r in rows]
    out = np.full((len(rows), T), pad_value, dtype=object)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out.reshape(list(x.shape) + [T])


@host_op("com.microsoft:Tokenizer")
def _tokenizer(ctx, node, x):
    x = _s(node, x, "X")
    for a in ("mark", "pad_value", "mincharnum"):
        if node.get(a) is None:
            raise _err(node, f"attribute {a} is not set (onnxruntime requires it)")
    mincharnum = int(node.get("mincharnum"))
    if mincharnum <= 0:
        raise _err(node, f"mincharnum must be positive, got {mincharnum}")
    seps, exp = node.get("separators"), node.get("tokenexp")
    if seps is not None:
        seps = list(seps)
        if not seps:
            raise _err(node, "separators must not be empty")
        if any(s == "" for s in seps) and seps != [""]:
            raise _err(node, "an empty separator is only allowed alone (character tokenization)")
        exp = None
    elif not exp:
        raise _err(node, "one of separators and tokenexp (non-empty) must be set")
    chars = (exp == ".") if seps is None else seps == [""]
    if chars and mincharnum >= 2:
        raise _err(node, f"mincharnum {mincharnum} is too big for character tokenization (must be 1)")
    return tokenize(x, mark=bool(node.get("mark")), pad_value=node.get("pad_value"), mincharnum=mincharnum,
                    separators=seps, tokenexp=exp, node=node)


def _string_ids(ctx, node, x):
    """Strings -> int64: the index of each in the ``vocabulary`` attribute (distinct strings), -1 if absent."""
    x = _s(node, x, "X (the TfIdfVectorizer's pool is strings)")
    table = {w: i for i, w in enumerate(node.get("vocabulary") or [])}
    ids = np.fromiter((table.get(s, -1) for s in x.reshape(-1).tolist()), dtype=np.int64, count=x.size)
    return _num(ctx, ids.reshape(x.shape))


HOST_OPS["neetorch.internal:StringIds"] = _string_ids  # internal: not in OPS / supported_ops()
