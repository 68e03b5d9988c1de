"""The device-coverage table: which dtypes each device claims for each op of the op table.

    python3 -m neetorch.devices.coverage            # print the table
    python3 -m neetorch.devices.coverage --write    # write docs/DEVICE_COVERAGE.md
    python3 -m neetorch.devices.coverage --check    # exit 1 (with a diff) if the file drifted

Every backend registered in the ``neetorch.devices`` entry-point group gets a column, so a
new backend or plugin appears without touching this module.  A column's claims come from,
in order of preference:

1. an instance of the backend (``supports(op, dtypes)``) when ``nee.devices()`` says the
   device is available here ("instance" basis);
2. the backend's ``static_claims()`` when it has no device here ("static" basis; e.g. a
   CUDA backend on a machine without a GPU);
3. nothing: the column says "not available here".

An op is asked about one dtype ``D`` at a time, with the dtype tuple the dispatcher would
pass for a typical call whose data operands are ``D`` (:func:`signature`): elementwise ops
get ``D`` for every promoted input (``where``'s condition is bool) and the output dtype
from the op's own rule; other ops use the operand/result template of ``_TEMPLATES``
(index operands int64, masks bool, ``sum`` of integers int64, ...), ``D`` elsewhere.
A dtype the op rejects (``bitwise_and`` on float32) is not asked about at all.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from dataclasses import dataclass, field

__all__ = ["Column", "applicable", "columns", "default_path", "main", "render", "signature"]

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
ABBREV = {"bool": "b", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "float16": "f16", "float32": "f32", "float64": "f64"}

# Operand / result templates of the non-elementwise ops: "x" = the dtype asked about, "i" = int64,
# "b" = bool, "f64" = float64, "acc" = the accumulator rule of sum/prod (bool and integers -> int64),
# "any" = any/all's result (uint8 for uint8, else bool).  Ops not listed: one "x" operand, nout "x" results.
_TEMPLATES: dict[str, tuple[str, str]] = {
    "matmul": ("x,x", "x"), "einsum": ("x,x", "x"), "cat": ("x,x", "x"),
    "conv2d": ("x,x,x", "x"), "conv_transpose2d": ("x,x,x", "x"),
    "sum": ("x", "acc"), "nansum": ("x", "acc"), "prod": ("x", "acc"),
    "cumsum": ("x", "acc"), "cumprod": ("x", "acc"),
    "any": ("x", "any"), "all": ("x", "any"),
    "argmax": ("x", "i"), "argmin": ("x", "i"), "count_nonzero": ("x", "i"), "nonzero": ("x", "i"),
    "max_dim": ("x", "x,i"), "min_dim": ("x", "x,i"), "median": ("x", "x,i"),
    "cummax": ("x", "x,i"), "cummin": ("x", "x,i"), "sort": ("x", "x,i"), "topk": ("x", "x,i"),
    "max_pool2d_with_indices": ("x", "x,i"), "adaptive_max_pool2d": ("x", "x,i"),
    "unique_sorted": ("x,i", "x,i,i"), "unique_dim": ("x", "x,i,i"),
    "gather": ("x,i", "x"), "take": ("x,i", "x"), "index_select": ("x,i", "x"), "index": ("x,i", "x"),
    "embedding": ("x,i", "x"), "embedding_renorm_": ("x,i", "x"), "repeat_interleave": ("x,i", "x"),
    "scatter": ("x,i,x", "x"), "index_reduce_dim": ("x,i,x", "x"), "index_put": ("x,x,i", "x"),
    "masked_select": ("x,b", "x"), "masked_scatter": ("x,b,x", "x"),
    "searchsorted": ("x,x", "i"), "nll_loss_terms": ("x,i", "x,x,f64"), "batch_norm_stats": ("x", "x,x"),
    "layer_norm": ("x,x,x", "x"), "group_norm": ("x,x,x", "x"), "rms_norm": ("x,x", "x"),
}


def _dt(name):
    from ..tensor import dtypes as d
    return d.bool_ if name == "bool" else getattr(d, name)


def applicable(op, dname: str) -> bool:
    """False when the op itself rejects ``dname`` (an elementwise op's ``allow`` rule)."""
    spec = getattr(op, "ew", None)
    if op.kind == "elementwise" and spec is not None and spec.allow is not None:
        return not spec.allow(_dt(dname))
    return True


def signature(op, dname: str) -> tuple:
    """The (inputs + outputs) DType tuple the dispatcher would pass for a typical call of ``op`` on ``dname``."""
    from ..ops.registry import Meta
    D = _dt(dname)
    spec = getattr(op, "ew", None)
    if op.kind == "elementwise" and spec is not None:
        idx = set(spec.promote) if spec.promote is not None else set(range(spec.nin))
        ins = [D if i in idx else _dt("bool") for i in range(spec.nin)]
        outs = [m.dtype for m in op.infer([Meta((), d) for d in ins], {})]
        return tuple(ins + outs)
    ins_t, outs_t = _TEMPLATES.get(op.name, ("x", ",".join(["x"] * op.nout)))

    def one(tok):
        if tok == "x":
            return D
        if tok == "i":
            return _dt("int64")
        if tok == "b":
            return _dt("bool")
        if tok == "f64":
            return _dt("float64")
        if tok == "acc":
            return _dt("int64") if D.category < 2 else D
        if tok == "any":
            return _dt("uint8") if dname == "uint8" else _dt("bool")
        raise ValueError(f"coverage template token {tok!r}")
    return tuple(one(t) for t in ins_t.split(",")) + tuple(one(t) for t in outs_t.split(","))


@dataclass
class Column:
    """One device's column: ``basis`` is "instance", "static" or "none"; ``claims`` maps op name to the
    dtype names claimed; ``note`` says what the claims were computed from (machine independent)."""
    type: str
    basis: str
    note: str
    reason: str | None = None            # why there is no device here (printed, not written)
    claims: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)   # op -> "supports raised ..."


def _instance_column(info) -> Column:
    from ..ops.registry import OPS
    from . import device, get_backend
    be = get_backend(device(info.type, 0))
    stores = [ABBREV[d] for d in DTYPES if d in getattr(be, "dtypes", ())]
    col = Column(info.type, "instance", f"instance of {info.type}:0, stores {' '.join(stores) or 'nothing'}")
    for name, op in OPS.items():
        got = []
        for d in DTYPES:
            if not applicable(op, d):
                continue
            try:
                ok = be.supports(name, signature(op, d)) is None
            except Exception as e:  # noqa: BLE001 - a plugin's bug shows in the table, it does not break it
                col.errors[name] = f"supports raised {type(e).__name__}: {e}"
                ok = False
            if ok:
                got.append(d)
        col.claims[name] = tuple(got)
    return col


def _static_column(info, cls, table) -> Column:
    from ..ops.registry import OPS
    col = Column(info.type, "static", "static_claims() (no device here)", info.reason)
    for name, op in OPS.items():
        have = table.get(name)
        if not have:
            col.claims[name] = ()
            continue
        have = {getattr(d, "name", d) for d in have}
        col.claims[name] = tuple(d for d in DTYPES if applicable(op, d)
                                 and all(x.name in have for x in signature(op, d)))
    unknown = sorted(set(table) - set(OPS))
    if unknown:
        col.errors["(static claims)"] = f"claims ops the op table does not have: {', '.join(unknown)}"
    return col


def columns() -> list[Column]:
    """One column per registered backend, cpu first, then by name."""
    from . import _backend_classes, devices
    out = []
    for info in sorted(devices(), key=lambda i: (i.type != "cpu", i.type)):
        cls = _backend_classes.get(info.type, (None,))[0]
        if info.available and cls is not None:
            out.append(_instance_column(info))
            continue
        table = None
        if cls is not None:
            try:
                table = cls.static_claims()
            except Exception as e:  # noqa: BLE001
                info = type(info)(info.type, info.count, False, f"static_claims() raised {type(e).__name__}: {e}",
                                  info.plugin)
        if table is not None:
            out.append(_static_column(info, cls, table))
        else:
            out.append(Column(info.type, "none", "not available here, no static claims", info.reason))
    return out


def _cell(op, col: Column) -> str:
    if col.basis == "none":
        return "not available here"
    got = col.claims.get(op.name, ())
    app = [d for d in DTYPES if applicable(op, d)]
    if not got:
        return "decomposes" if op.decompose is not None else "falls back"
    if list(got) == app:
        return "all"
    missing = [d for d in app if d not in got]
    if len(missing) <= 2 < len(got):
        return "all but " + " ".join(ABBREV[d] for d in missing)
    return " ".join(ABBREV[d] for d in got)


def render(cols: list[Column] | None = None) -> str:
    """The markdown table (deterministic: ops and devices sorted, nothing machine-specific but the bases)."""
    from ..ops.registry import OPS
    cols = columns() if cols is None else cols
    names = [c.type for c in cols]
    lines = [
        "# Device coverage: ops x devices x dtypes",
        "",
        ("Generated by `python3 -m neetorch.devices.coverage --write` from the op table and every registered "
         "device backend; do not edit by hand. `tests/test_device_coverage.py` fails when this file drifts."),
        "",
        ("A cell lists the dtypes the device claims for the op (`supports(op, dtypes)` on an instance, or the "
         "backend's `static_claims()` when no device is present), asked one dtype at a time with the dtypes a "
         "typical call passes (index operands int64, `sum` of integers int64, ...; see "
         "`neetorch/devices/coverage.py`). `all` = every dtype the op accepts, `all but f16` = all of them "
         "except float16. Dtypes not listed **fall back to the CPU** (visibly: `nee.fallback_report()`, an "
         "error under `NEE_STRICT=1`); `falls back` = no dtype is claimed; `decomposes` = the op runs as its "
         "parts there. Dtypes: " + ", ".join(f"{v} {k}" for k, v in ABBREV.items()) + "."),
        "",
        "## Devices",
        "",
        "| device | claims from | ops claimed (any dtype) | op x dtype pairs claimed |",
        "| --- | --- | --- | --- |",
    ]
    total_pairs = sum(len([d for d in DTYPES if applicable(op, d)]) for op in OPS.values())
    for c in cols:
        if c.basis == "none":
            lines.append(f"| {c.type} | {c.note} | - | - |")
            continue
        nops = sum(1 for v in c.claims.values() if v)
        npairs = sum(len(v) for v in c.claims.values())
        lines.append(f"| {c.type} | {c.note} | {nops} / {len(OPS)} | {npairs} / {total_pairs} |")
    errs = [(c.type, k, v) for c in cols for k, v in sorted(c.errors.items())]
    if errs:
        lines += ["", "Problems met while asking the backends:", ""]
        lines += [f"* {t}: {k}: {v}" for t, k, v in errs]
    lines += ["", "## Ops", "", "| op | kind | " + " | ".join(names) + " |",
              "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for name in sorted(OPS):
        op = OPS[name]
        lines.append(f"| {name} | {op.kind} | " + " | ".join(_cell(op, c) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def parse_bases(text: str) -> dict[str, str]:
    """{device: "claims from" note} of a rendered table (what the drift test compares per column)."""
    out, on = {}, False
    for line in text.splitlines():
        if line.startswith("| device | claims from"):
            on = True
            continue
        if on:
            if not line.startswith("|"):
                break
            parts = [p.strip() for p in line.strip("|").split("|")]
            if parts[0] != "---":
                out[parts[0]] = parts[1]
    return out


def parse_ops(text: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(device names, {op: {device: cell}}) of a rendered table's op section."""
    devs, rows, on = [], {}, False
    for line in text.splitlines():
        if line.startswith("| op | kind |"):
            devs = [p.strip() for p in line.strip().strip("|").split("|")][2:]
            on = True
            continue
        if on and line.startswith("|") and not line.startswith("| ---"):
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            rows[parts[0]] = dict(zip(devs, parts[2:]))
    return devs, rows


def default_path() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "docs", "DEVICE_COVERAGE.md")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m neetorch.devices.coverage", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table to --output")
    ap.add_argument("--check", action="store_true", help="exit 1 with a diff when --output differs")
    ap.add_argument("--output", default=default_path(), help="default: docs/DEVICE_COVERAGE.md of the checkout")
    args = ap.parse_args(argv)
    cols = columns()
    text = render(cols)
    for c in cols:
        why = f" ({c.reason})" if c.reason else ""
        print(f"[coverage] {c.type}: {c.note}{why}", file=sys.stderr)
    if args.write:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    if args.check:
        try:
            with open(args.output) as f:
                old = f.read()
        except FileNotFoundError:
            print(f"{args.output} does not exist; run python3 -m neetorch.devices.coverage --write", file=sys.stderr)
            return 1
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       args.output, "regenerated"))
            print("device coverage drifted; run python3 -m neetorch.devices.coverage --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
