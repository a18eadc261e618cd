"""Every example spec in examples/specs builds with seq2d.from_spec and `seq2d show FILE` exits 0;
the spec example of docs/spec.md is the shipped file, word for word."""

import pathlib
import re
import tomllib

import pytest
import torch

import seq2d
import seq2d.cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "examples" / "specs").glob("*.toml")) + sorted((ROOT / "examples" / "specs").glob("*.json"))


def test_examples_exist():
    assert len(SPECS) >= 2, SPECS


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_example_spec_builds_and_runs(path):
    model = seq2d.from_spec(path)
    assert isinstance(model, seq2d.Sequential2D)
    n_in = sum(model.sizes[i] for i in model.inputs)  # a tensor input fills the input slots in order
    y = model(torch.randn(2, n_in))
    assert y.shape == (2, sum(model.sizes[i] for i in model.outputs)) and torch.isfinite(y).all()
    # the parameter count a file states in its header comment is the model's
    stated = re.search(r"Trainable parameters: .*?([\d,]+)\.\s*$", path.read_text(encoding="utf-8"), re.M)
    if stated:
        assert int(stated.group(1).replace(",", "")) == model.num_parameters()


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_seq2d_show_example(path, capsys):
    assert seq2d.cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"trainable parameters = {seq2d.from_spec(path).num_parameters():,}" in out


def test_spec_doc_example_is_the_shipped_file():
    doc = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```toml\n(.*?)^```$", doc, re.S | re.M)
    shipped = (ROOT / "examples" / "specs" / "sparse_rnn_cell.toml").read_text(encoding="utf-8")
    assert shipped.endswith(block)  # the file = a comment header + the doc's block
    assert tomllib.loads(shipped) == tomllib.loads(block)
    assert "examples/specs/sparse_rnn_cell.toml" in doc


def test_docs_point_at_the_examples():
    for doc in ("graphs.md", "spec.md"):
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        assert "examples/specs/" in text, doc
