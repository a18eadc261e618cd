"""The ``seq2d`` command line.

    seq2d models                       list the registered constructors
    seq2d show NAME [key=value ...]    print a model's block grid, slots and parameter count
    seq2d equivalence [--seeds N]      max errors of every constructor vs torch.nn
"""

from __future__ import annotations

import argparse
import ast
import sys

from .registry import create_model, list_models


def _parse_kv(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"seq2d: expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            val = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            val = v if "," not in v else ast.literal_eval(f"({v},)")
        out[k] = val
    return out


def _cmd_models(args) -> int:
    for name in list_models():
        print(name)
    return 0


def _cmd_show(args) -> int:
    model = create_model(args.name, **_parse_kv(args.kwargs))
    core = getattr(model, "core", model)
    print(type(model).__name__ + (f" (core: {type(core).__name__})" if core is not model else ""))
    print(core.summary())
    return 0


def _cmd_equivalence(args) -> int:
    from .testing import CASES, TOLERANCE, compare  # noqa: F401 - imported lazily (slow deps)
    import torch

    worst_all = True
    print(f"{'case':<46}{'float32':>12}{'float64':>12}")
    for case in CASES:
        errs = []
        for dtype in (torch.float32, torch.float64):
            e = max(max(compare(case, dtype, s).values()) for s in range(args.seeds))
            worst_all &= e <= TOLERANCE[dtype]
            errs.append(e)
        print(f"{case.name:<46}{errs[0]:>12.2e}{errs[1]:>12.2e}")
    return 0 if worst_all else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="seq2d", description="Sequential2D block networks.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("models", help="list the registered constructors")
    p.set_defaults(fn=_cmd_models)
    p = sub.add_parser("show", help="print a model's block grid, slot table and parameter count")
    p.add_argument("name", help="a registered constructor (see `seq2d models`)")
    p.add_argument("kwargs", nargs="*", help="constructor arguments as key=value (values are Python literals)")
    p.set_defaults(fn=_cmd_show)
    p = sub.add_parser("equivalence", help="max abs errors of every constructor vs torch.nn")
    p.add_argument("--seeds", type=int, default=1)
    p.set_defaults(fn=_cmd_equivalence)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, TypeError) as e:
        print(f"seq2d: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
