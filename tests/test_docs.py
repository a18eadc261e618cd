"""The README quick start runs as written; the docs name every constructor."""

import pathlib
import re

import seq2d

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_quick_start_runs(capsys):
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, "README quick start", "exec"), {})
    out = capsys.readouterr().out
    assert "trainable parameters = 109,610" in out


def test_concepts_document_the_loop_and_networks():
    text = (ROOT / "docs" / "concepts.md").read_text()
    for needle in ("Jacobi", "rows are outputs", "### MLP", "### RNN", "### Truncated RNN", "### Transformer"):
        assert needle in text, needle
    # the docstring carries the same loop
    assert "equivalent to the following" in seq2d.Sequential2D.__doc__
