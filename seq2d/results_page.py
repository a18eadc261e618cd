"""The generated sections of the results pages: every experiment and benchmark script that
writes a page (``--doc``) goes through here.

- :func:`write_section`: a section of a page between ``<!-- NAME:begin -->`` and
  ``<!-- NAME:end -->``, the rest of the page left as it is, so hand-written text next to
  generated numbers survives a rerun.
- :func:`from_json`: an experiment's ``--from-json`` mode: the section rendered again from the
  committed JSON record, nothing measured or trained.
- :func:`json_safe`: a record with inf/nan replaced by None, so its JSON loads anywhere.
- :func:`value_range`: "a to b" (or "a" when both print alike) for the numbers a page quotes.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

__all__ = ["from_json", "json_safe", "value_range", "write_section"]


def json_safe(v):
    """``v`` with every non-finite float (inf, nan) replaced by None, through dicts, lists and
    tuples: strict JSON has neither, and a results file must load anywhere."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def write_section(doc: str | os.PathLike, name: str, body: str, *, title: str = "# Results") -> Path:
    """Put ``body`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in the page ``doc``:
    replace the text between the markers when they are there, else append the block (creating
    the page, headed by ``title``, when it does not exist). Everything outside the markers is
    kept byte for byte. Returns the path."""
    doc = Path(doc)
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text() if doc.is_file() else title.rstrip("\n") + "\n"
    block = f"{begin}\n{body.strip(chr(10))}\n{end}"
    if begin in text and end in text and text.index(begin) < text.index(end):
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, count=1, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc


def from_json(json_path: str | os.PathLike, render, doc: str | os.PathLike | None = None,
              section: str | None = None) -> str:
    """An experiment's ``--from-json`` mode: ``render(record)`` of the JSON record, printed, and
    written as the ``section`` of the page ``doc`` when given (nothing is measured or trained)."""
    import json

    text = render(json.loads(Path(json_path).read_text()))
    print(text)
    if doc is not None:
        write_section(doc, section, text)
    return text


def value_range(values, fmt: str = ".2f") -> str:
    """The range of ``values`` (None entries left out) as the text a page quotes: ``"a to b"``
    formatted with ``fmt``, a single ``"a"`` when both ends print alike, ``"n/a"`` when none."""
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    a, b = format(min(v), fmt), format(max(v), fmt)
    return a if a == b else f"{a} to {b}"
