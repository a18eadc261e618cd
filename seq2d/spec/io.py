"""Spec files: :func:`load_spec` and :func:`save_spec` (TOML, or JSON by file name)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ..tablefile import read_table
from .parse import _parse
from .schema import _is_list


def load_spec(path: str | os.PathLike) -> dict:
    """Read a spec from a TOML file (or JSON when the name ends in ``.json``); not validated.

    Raises MissingFile when there is no such file, InvalidValue naming the file (and, for a
    syntax error, the line and column) when it cannot be read or parsed."""
    return read_table(path, "spec file")


def save_spec(spec: Mapping, path: str | os.PathLike) -> None:
    """Validate ``spec`` and write it as TOML (or JSON when the name ends in ``.json``)."""
    _parse(spec)  # a typo should fail here, not when someone loads the file
    path = Path(path)
    if path.suffix.lower() == ".json":
        text = json.dumps(spec, indent=1, allow_nan=True) + "\n"
    else:
        text = _toml(spec)
    path.write_text(text, encoding="utf-8")


# A validated spec has a fixed shape (bare keys; values that are scalars, flat or 2-D
# lists of numbers, or the flat init table), so the layout is written here and only
# scalars go through tomli_w: tomli_w alone puts every array element on its own line,
# which turns a 100 x 100 weight into 10^4 lines. Tested: tomllib reads back the spec.
def _toml(spec: Mapping) -> str:
    top = [(k, v) for k, v in spec.items() if k not in ("slots", "blocks") or not v]
    chunks = ["".join(_toml_line(k, v) for k, v in top)]
    for key in ("slots", "blocks"):
        for table in spec.get(key) or []:
            chunks.append(f"[[{key}]]\n" + "".join(_toml_line(k, v) for k, v in table.items()))
    return "\n".join(c for c in chunks if c)


def _toml_line(key: str, v) -> str:
    if isinstance(v, Mapping):  # the init table, inline
        return f"{key} = {{ " + ", ".join(f"{k} = {_toml_scalar(x)}" for k, x in v.items()) + " }\n"
    if _is_list(v) and v and all(_is_list(r) for r in v):  # 2-D: one row per line
        return f"{key} = [\n" + "".join(f"    {_toml_flat(r)},\n" for r in v) + "]\n"
    if _is_list(v):
        return f"{key} = {_toml_flat(v)}\n"
    return f"{key} = {_toml_scalar(v)}\n"


def _toml_flat(v) -> str:
    return "[" + ", ".join(_toml_scalar(x) for x in v) + "]"


def _toml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)  # repr: exact round trip; nan/inf are TOML too
    import tomli_w

    return tomli_w.dumps({"v": v})[len("v = ") : -1]
