"""experiments/param_budget/run.py: the quick mode writes its JSON, table and plot, and every
randomized model carries exactly its MLP's trainable-parameter count."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("param_budget_run", ROOT / "experiments" / "param_budget" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_mode(tmp_path):
    mod = _load()
    out = tmp_path / "pb"
    assert mod.main(["--quick", "--out", str(out)]) == 0
    for name in ("results.json", "results.md", "accuracy_vs_params.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    budgets = sorted({r["budget"] for r in rows})
    assert len(budgets) == 2
    for h in budgets:
        rs = [r for r in rows if r["budget"] == h]
        assert {r["model"] for r in rs} == {"mlp", "random_element", "random_tile", "random_block"}
        mlp = next(r for r in rs if r["model"] == "mlp")
        assert mlp["sizes"] == [784, h, h // 2, 10]
        for r in rs:
            assert r["params"] == mlp["params"], (h, r["model"])
            assert 0.0 <= r["test_acc"] <= 1.0 and r["seed"] == 0 and r["epochs"] == 1
            assert {"time_s", "params", "test_acc", "model", "budget", "seed"} <= r.keys()
    # the params also match a direct count of the library's models
    import seq2d

    for h in budgets:
        template = seq2d.mlp([784, h, h // 2, 10])
        n = template.num_parameters()
        assert n == next(r["params"] for r in rows if r["budget"] == h and r["model"] == "mlp")
        for g in ("element", "tile", "block"):
            assert seq2d.randomize(template, granularity=g, seed=0).num_parameters() == n
    table = (out / "results.md").read_text()
    assert "random_block - mlp" in table and "TOST" in table
    assert len(data["differences"]) == 6
    # the page's generated sections from the JSON alone (nothing retrained): verdict, the test set's
    # binomial standard error next to the equivalence claims, the per-seed block placement table
    page = tmp_path / "page.md"
    page.write_text("# P\n\n<!-- param-budget-verdict:begin -->\n<!-- param-budget-verdict:end -->\n\nby hand\n")
    assert mod.main(["--from-json", str(out / "results.json"), "--doc", str(page)]) == 0
    text = page.read_text()
    assert text.index("## Verdict") < text.index("by hand") < text.index("<!-- param-budget-results:begin -->")
    n_test = mod.test_set_size("subset")
    p = min(r["test_acc"] for r in rows if r["model"] == "mlp")
    assert f"{100 * mod.binomial_se(p, n_test):.2f}" in text and "binomial standard error" in text
    assert "output reads a hidden slot" in text and "seeds 003" in text
    assert "Holm-adjusted across all of them" in text and "after Holm at" in text
    before = text
    assert mod.main(["--from-json", str(out / "results.json"), "--doc", str(page)]) == 0
    assert page.read_text() == before  # idempotent


def test_binomial_standard_error():
    mod = _load()
    assert mod.binomial_se(0.92, 1000) == pytest.approx(0.0085790, abs=1e-6)  # sqrt(0.92 * 0.08 / 1000)
    assert mod.test_set_size("subset") == 1000 and mod.test_set_size("full") is None


def test_the_committed_page_counts_block_draws_and_holm():
    """docs/results/param_budget.md (regenerated from its committed JSON): the failing random_block
    runs are counted as independent draws, and the equivalence claims survive Holm or say not."""
    text = (Path(__file__).resolve().parent.parent / "docs/results/param_budget.md").read_text()
    assert "2 independent draws, not 10" in text and "linear classifiers" in text
    assert "random_tile vs the MLP: equivalent within +-1 point (TOST, alpha 0.05) at 304,170 parameters of 5; after Holm at no budget" in text
