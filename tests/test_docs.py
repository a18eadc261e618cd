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


def test_readme_trainer_snippet_runs_as_written(tmp_path):
    """README's ``Trainer(cfg, build_model(cfg), load_data(cfg), callbacks=[...]).fit()``: ``load_data``'s
    default ``device=None`` is the config's device, resolved as the trainer resolves it (issue 18)."""
    from seq2d.train import Trainer, TrainConfig, build_model, load_data

    text = (ROOT / "README.md").read_text()
    snippet = re.search(r"`(Trainer\(cfg, build_model\(cfg\), load_data\(cfg\),\s*callbacks=\[\.\.\.\]\)\.fit\(\))`",
                        text).group(1)
    seen = []

    class Count:
        def on_step_end(self, trainer, step):
            seen.append(step)

    cfg = TrainConfig(data="subset", sizes=[2500, 10], epochs=1, max_steps=2, quiet=True, out_dir=str(tmp_path / "run"))
    code = re.sub(r"\s+", " ", snippet).replace("[...]", "[Count()]")
    exec(code, {"Trainer": Trainer, "build_model": build_model, "load_data": load_data, "cfg": cfg, "Count": Count})
    assert seen == [1, 2]
