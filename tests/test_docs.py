"""The README quick start runs as written; the docs name every constructor."""

import json
import pathlib
import re

import pytest

import seq2d
from doc_code import python_blocks as _python_blocks
from doc_code import run_blocks as _run_blocks

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
        def on_update_end(self, trainer, update):
            seen.append(update)

    cfg = TrainConfig(data="subset", sizes=[2500, 10], epochs=1, max_updates=2, quiet=True, out_dir=str(tmp_path / "run"))
    code = re.sub(r"\s+", " ", snippet).replace("[...]", "[Count()]")
    exec(code, {"Trainer": Trainer, "build_model": build_model, "load_data": load_data, "cfg": cfg, "Count": Count})
    assert seen == [1, 2]


def _h2(text):
    """(line number, heading) of each ``## `` heading outside code fences."""
    out, fence = [], False
    for k, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("## "):
            out.append((k, line))
    return out


def test_performance_page_opens_with_the_decision_box():
    """docs/performance.md: the rule for to_blocksparse is the first section, in the first screen;
    the raw logs sit in the appendix at the end; the sections benchmarks/mnist_protocol.py writes
    (--section, default 'mnist-protocol') have their markers once, in order."""
    text = (ROOT / "docs" / "performance.md").read_text()
    heads = _h2(text)
    line, first = heads[0]
    assert first.startswith("## When to use `to_blocksparse`") and line <= 15, heads[0]
    box = text.split(first, 1)[1].split("\n## ", 1)[0]
    for needle in ("stored-tile density", "0.86x on AVX512", "0.92x with torch's AVX2 kernels", "Machines:",
                   "**On a GPU** (one H200, bf16)"):
        assert needle in box, needle
    assert heads[-1][1].startswith("## Appendix"), heads[-1]
    script = (ROOT / "benchmarks" / "mnist_protocol.py").read_text()
    assert 'default="mnist-protocol"' in script
    for name in ("mnist-protocol", "mnist-protocol-avx2"):
        b, e = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        assert text.count(b) == 1 and text.count(e) == 1 and text.index(b) < text.index(e), name


def test_results_pages_open_with_their_verdict():
    """Each results page's first section is its generated verdict (docs/results/mnist.md opens with
    the 100-epoch run's status until that run is complete)."""
    for page, marker in (("results/stability.md", "verdict"), ("results/param_budget.md", "param-budget-verdict"),
                         ("stability.md", "stability-verdict"), ("results/placement.md", "placement-verdict"),
                         ("results/placement-1epoch.md", "placement-verdict"),
                         ("results/mnist1d.md", "mnist1d-placement")):
        text = (ROOT / "docs" / page).read_text()
        heads = _h2(text)
        assert heads[0][1] == "## Verdict", (page, heads[0])
        begin = text.index(f"<!-- {marker}:begin -->")
        assert begin < text.index("## Verdict") < text.index(f"<!-- {marker}:end -->"), page
        assert text[:begin].count("\n") <= 3, (page, "the verdict follows the title")
    # docs/results/mnist.md is generated whole (experiments/mnist_sparsity/report.py): no markers, verdict first
    assert _h2((ROOT / "docs" / "results" / "mnist.md").read_text())[0][1] == "## Verdict"


def test_performance_page_links_resolve():
    """docs/performance.md was reordered (decision box first, logs in an appendix): each of its
    relative links names an existing file and each #anchor one of its headings (GitHub's slugs)."""
    page = ROOT / "docs" / "performance.md"
    text = page.read_text()

    def slug(h):
        return re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")

    heads = {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,4} ", line)}
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if link.startswith("http"):
            continue
        path, _, anchor = link.partition("#")
        if path:
            assert (page.parent / path).exists(), link
        elif anchor:
            assert anchor in heads, link


def test_value_range_is_the_text_a_page_quotes():
    from seq2d.results_page import value_range

    assert value_range([0.5, None, 2.25, 1.0]) == "0.50 to 2.25"
    assert value_range([3.14159, 3.14161], ".3f") == "3.142"  # both ends print alike: one number
    assert value_range([-1.25, 0.5], "+.1f") == "-1.2 to +0.5"
    assert value_range([None]) == value_range([]) == "n/a"


def test_stability_page_tanh_rnn_recipe_runs(capsys):
    """docs/stability.md's tanh-RNN recipe (issue 31): every block runs as written, and the prose's
    claims hold (both lambdas above 1 before the projection, the certificate at most 0.7 after)."""
    blocks = _python_blocks("stability.md", "## A stable tanh RNN, step by step")
    assert len(blocks) == 4
    ns = _run_blocks("stability.md", "tanh RNN recipe", blocks)
    out = capsys.readouterr().out
    assert re.search(r"certified lambda 1\.\d+, data lambda 1\.\d+", out), out
    assert re.search(r"k = \d+ \(with the data lambda: \d+\); largest gap on these inputs", out), out
    assert ns["k"] > 1 and ns["k"] < ns["xs"].shape[0]  # the window is shorter than the sequences: a real test


def test_training_page_own_model_recipe_runs(tmp_path, monkeypatch, capsys):
    """docs/training.md "Train your own model" (issue 31): the Python blocks (a mask, a cyclic mask with
    steps=) train as written; the TOML block saved as my_model.toml, the shell lines run as written
    (from a fresh folder: the runs land in its runs/)."""
    import shlex

    from seq2d.cli import main

    heading = "## Train your own model"
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks("training.md", heading)
    assert len(blocks) == 2
    ns = _run_blocks("training.md", heading, blocks)
    out = capsys.readouterr().out
    assert "trainable parameters" in out and ns["summary"]["params"] == 109_610
    assert ns["model"].steps == 4 and ns["model"].depth is None  # the cyclic one, with its steps
    assert (tmp_path / "runs" / "my_mask" / "checkpoint.pt").is_file() and (tmp_path / "runs" / "my_cycle").is_dir()
    section = (ROOT / "docs" / "training.md").read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    (toml,) = re.findall(r"^```toml\n(.*?)^```$", section, re.S | re.M)
    assert "Save this as `my_model.toml`" in section
    (tmp_path / "my_model.toml").write_text(toml)
    (shell,) = re.findall(r"^```bash\n(.*?)^```$", section, re.S | re.M)
    lines = [shlex.split(line, comments=True) for line in shell.splitlines() if line.strip()]
    assert [w[:2] for w in lines] == [["seq2d", "show"], ["seq2d", "train"]]
    for words in lines:
        assert main(words[1:]) == 0, words
    out = capsys.readouterr().out
    assert "steps = 4" in out and "final test accuracy" in out
    assert f"{seq2d.from_mask([784, 64, 10], ns['cyclic'], steps=4).num_parameters():,} trainable parameters" in out


def test_readme_says_how_long_the_tests_take_and_how_to_run_fewer():
    """Issue 31: the README's test paragraph gives the expected time and the faster ways, and the ways
    it names exist: the `slow` and `serial` markers are registered, pytest-xdist is in the `test` extra."""
    import tomllib

    readme = (ROOT / "README.md").read_text()
    paragraph = readme.split("<!-- ci:test -->", 1)[1].split("`.ci/run` runs exactly", 1)[0]
    for needle in ("about 8 minutes on a 2-core machine", '-m "not slow"', "-n 2", "pytest-xdist", '-m "not serial"',
                   "-m serial"):
        assert needle in paragraph, needle
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("slow:") for m in markers) and any(m.startswith("serial:") for m in markers)
    assert any(d.startswith("pytest-xdist") for d in project["project"]["optional-dependencies"]["test"])


MNIST_PROTOCOL_SECTIONS = {"mnist-protocol": "mnist_protocol-cpu-2026-11-25-quiet.json",
                           "mnist-protocol-avx2": "mnist_protocol-cpu-avx2-2026-11-25-quiet.json",
                           "mnist-protocol-tiles": "mnist_protocol-cpu-2026-11-26-tiles-quiet.json",
                           "mnist-protocol-tiles-avx2": "mnist_protocol-cpu-avx2-2026-11-26-tiles-quiet.json"}


def test_the_mnist_protocol_sections_regenerate_from_their_json():
    """benchmarks/mnist_protocol.py --from-json renders each section from its committed record as
    the page has it, an old record (``steps``, hyphenated model names) in today's words."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("mnist_protocol", ROOT / "benchmarks" / "mnist_protocol.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    page = (ROOT / "docs" / "performance.md").read_text()
    for section, name in MNIST_PROTOCOL_SECTIONS.items():
        record = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
        m = re.search(f"<!-- {section}:begin -->\n(.*?)\n<!-- {section}:end -->", page, flags=re.S)
        assert m and m.group(1) == mod.report(record).strip("\n"), section
    with pytest.raises(SystemExit):
        mod.main(["--steps", "3", "--quick"])  # the old flag: refused, naming --updates
