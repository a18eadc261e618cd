"""docs/spec.md stays true: its TOML example builds the model it describes, its Python
example runs, and its links resolve (tests/test_spec.py builds the same example)."""

import pathlib
import re
import tomllib

import torch

from seq2d import Identity, LinearBlock, from_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "spec.md"


def blocks(lang: str) -> list[str]:
    """The fenced ```lang code blocks of docs/spec.md, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


def doc_example() -> str:
    (toml,) = blocks("toml")  # exactly one TOML example
    return toml


def test_doc_example_builds_what_the_doc_says():
    model = from_spec(tomllib.loads(doc_example()))
    assert model.block(2, 1) is model.block(1, 2)  # the tie
    assert isinstance(model.block(2, 0), Identity)
    assert model.steps == 3 and model.inputs == (0,) and model.outputs == (3,)
    assert model(torch.randn(2, 16)).shape == (2, 4)

    # "Trainable parameters: 64 + 3 + ... (blocks) + 16 + 4 (biases) = 115."
    line = re.search(r"^Trainable parameters: (.*?) = (\d+)\.$", DOC.read_text(encoding="utf-8"), re.M)
    assert line, "docs/spec.md lost its parameter count"
    blocks_part, biases_part = line.group(1).split("(blocks)")
    stated_blocks = [int(t) for t in re.findall(r"\d+", blocks_part)]
    stated_biases = [int(t) for t in re.findall(r"\d+", biases_part)]
    order = [(1, 0), (2, 1), (2, 2), (3, 2), (3, 0)]  # the linear blocks, tie counted once
    assert all(isinstance(model.block(i, j), LinearBlock) for i, j in order)
    assert stated_blocks == [model.block(i, j).num_trainable() for i, j in order]
    assert stated_biases == [model.bias(i).numel() for i in range(model.n) if model.bias(i) is not None]
    assert sum(stated_blocks) + sum(stated_biases) == int(line.group(2)) == model.num_parameters()


def test_doc_python_example_runs(tmp_path, monkeypatch):
    (tmp_path / "model.toml").write_text(doc_example(), encoding="utf-8")  # "Save it as model.toml"
    monkeypatch.chdir(tmp_path)
    code = blocks("python")
    assert code, "docs/spec.md lost its Python example"
    for k, src in enumerate(code):
        exec(compile(src, f"docs/spec.md python block {k}", "exec"), {})
    assert (tmp_path / "copy.toml").is_file()


def test_doc_links_resolve():
    links = re.findall(r"\]\(([^)#]+)\)", DOC.read_text(encoding="utf-8"))
    assert links
    for link in links:
        assert (DOC.parent / link).resolve().is_file(), link
