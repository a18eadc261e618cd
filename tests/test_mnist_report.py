"""docs/results/mnist.md regenerates from the committed files alone (issue 32 item 4), and the
report's statistics behave: a missing metrics file is an error, predictions must score the run."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments/mnist_sparsity/report.py"
sys.path.insert(0, str(SCRIPT.parent))
import report  # noqa: E402  (the experiment script, as a module)
from pages import regenerate  # noqa: E402


def test_the_page_regenerates_byte_identically_from_a_clean_checkout(committed_tree):
    # conftest.py: HEAD unpacked; tests/pages.py: the rule
    changed = regenerate(committed_tree, "docs/results/mnist.md",
                         ["experiments/mnist_sparsity/report.py", "--doc", "docs/results/mnist.md"])
    assert not changed, f"regenerating changed {changed}: run `{report.COMMAND}` and commit the result"
    assert report.COMMAND in (committed_tree / "docs/results/mnist.md").read_text()


def test_the_param_budget_page_regenerates_from_its_committed_json(committed_tree):
    changed = regenerate(committed_tree, "docs/results/param_budget.md",
                         ["experiments/param_budget/run.py", "--from-json", "docs/results/param_budget/results.json",
                          "--doc", "docs/results/param_budget.md"])
    assert not changed, f"regenerating changed {changed}: rerun the page's --from-json command and commit the result"


def _run(folder: Path, model: str, seed: int, accs: list[float], predictions=None) -> None:
    d = folder / model / f"seed{seed}"
    d.mkdir(parents=True)
    hist = [{"epoch": e + 1, "step": e + 1, "train_loss": 1.0, "train_acc": 0.5, "test_loss": 1.0 / (e + 1),
             "test_acc": a, "epoch_time_s": 1.0, "lr": 1e-3, "device": "cpu", "world_size": 1, "num_threads": 1}
            for e, a in enumerate(accs)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hist))
    (d / "summary.json").write_text(json.dumps({"model": model, "seed": seed, "epochs": len(accs), "test_acc": accs[-1],
                                                "best_test_acc": max(accs), "params": 10, "complete": True,
                                                "time_per_epoch_s": 1.0}))
    if predictions is not None:
        pred, target = predictions
        np.savez_compressed(d / "test_predictions.npz", pred=pred, target=target, nll=np.zeros(len(pred), np.float32))


def test_a_summary_without_its_metrics_is_an_error(tmp_path):
    _run(tmp_path, "mlp", 0, [0.9, 0.95])
    (tmp_path / "mlp/seed0/metrics.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl is missing"):
        report.load_group(tmp_path)


def test_predictions_that_do_not_score_the_run_are_refused(tmp_path):
    target = np.arange(10) % 3
    _run(tmp_path, "mlp", 0, [0.9, 0.5], predictions=(target, target))  # 100% right, but the run says 50%
    with pytest.raises(ValueError, match="does not score"):
        report.load_group(tmp_path)


def test_differences_and_paired_tests_from_run_files(tmp_path):
    target = np.arange(200) % 10
    for s in range(3):
        wrong_mlp = target.copy()
        wrong_mlp[: 10 + s] = (target[: 10 + s] + 1) % 10      # 10-12 errors
        wrong_rnd = target.copy()
        wrong_rnd[: 30 + s] = (target[: 30 + s] + 1) % 10      # 30-32 errors: a real deficit
        _run(tmp_path, "mlp", s, [0.5] * 9 + [1 - (10 + s) / 200], predictions=(wrong_mlp, target))
        _run(tmp_path, "random_element", s, [0.5] * 9 + [1 - (30 + s) / 200], predictions=(wrong_rnd, target))
    runs = report.load_group(tmp_path)
    d = report.differences(runs)
    assert [x["model"] for x in d] == ["random_element"]
    assert d[0]["final"]["diff"] == pytest.approx(-0.1) and d[0]["final"]["holm_p"] == d[0]["final"]["tost_p"]
    p = report.paired(runs)
    assert p[0]["seeds"] == [0, 1, 2]
    assert [(t.only_a, t.only_b) for t in p[0]["mcnemar"]] == [(20, 0)] * 3
    b = p[0]["bootstrap"]
    assert b.diff == pytest.approx(-0.1) and b.high < 0


def test_the_claim_answer_names_a_setting_only_when_both_models_land_near():
    def row(setting, model, acc):
        return {"setting": setting, "model": model, "accs": [acc], "best": [acc], "planned": 1}

    near = [row("A", "mlp", 0.925), row("A", "random_density", 0.930), row("B", "mlp", 0.927), row("B", "random_element", 0.95)]
    text = report.claim_answer(near)
    assert "both land within 0.5 point of 92.7%: A." in text and "B: mlp" in text
    assert "No setting" in report.claim_answer([row("B", "mlp", 0.927), row("B", "random_element", 0.95)])


def test_the_claim_answer_gives_the_paired_test_where_only_the_mlp_lands_near(tmp_path):
    """A setting where the mlp lands at 92.7% and the randomized model does not: the answer quotes their
    paired test and says whether it tells them apart (both ways)."""
    target = np.arange(1000) % 10

    def group(errors_rnd, folder, start=0):
        for s in range(2):
            wrong = target.copy()
            wrong[:73] = (target[:73] + 1) % 10                 # 92.7%
            rnd = target.copy()
            rnd[start:start + errors_rnd] = (target[start:start + errors_rnd] + 1) % 10
            _run(folder, "mlp", s, [0.5] * 9 + [0.927], predictions=(wrong, target))
            _run(folder, "random_element", s, [0.5] * 9 + [1 - errors_rnd / 1000], predictions=(rnd, target))
        runs = report.load_group(folder)
        rows = [{"setting": "S", "model": m, "accs": [r["test_acc"] for r in runs if r["model"] == m], "best": [0.9],
                 "planned": 2, "group": "g"} for m in ("mlp", "random_element")]
        return report.claim_answer(rows, {"g": runs})

    apart = group(150, tmp_path / "a")                            # 85.0%: 77 more errors on the same digits
    assert "Within 0.5 point at all: S: mlp." in apart and "random_element - mlp on the same test digits" in apart
    assert "tells the two models apart" in apart and "-7.70 points" in apart
    close = group(80, tmp_path / "b", start=500)  # 92.0%: outside 0.5 point, but wrong on other digits: 73 vs 80
    assert "S: mlp." in close and "does not tell the two models apart" in close
