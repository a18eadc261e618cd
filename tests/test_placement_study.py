"""experiments/placement/study.py (issue 33 item 3): the cells, the models they build, the
connectivity count, and a tiny run that resumes and collects only small files."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments/placement"))
import study  # noqa: E402


def test_cells_hold_the_mlp_count_and_the_regions():
    cells = {c["cell"]: c for c in study.cells()}
    assert "mlp" in cells and "linear" not in cells  # the linear baseline comes from issue 32's linear_28 runs
    for d in study.DENSITIES:
        for p in ("element", "tile"):
            for region in study.REGIONS:
                c = cells[f"{p}-d{d:g}-{region}"]
                m = study.build(c, seed=1)
                assert m.num_parameters() == c["params"] == 25_818
                pos = {(i, j) for i, j, _, _ in m.positions()}
                if region == "no-shortcut":
                    assert (3, 0) not in pos


def test_connectivity_counts_match_the_built_models():
    cell = next(c for c in study.cells() if c["cell"] == "block-d0.1")
    counts = study.connectivity(cell, draws=4)
    by_hand = [study.structure(study.build(cell, s), cell) for s in range(4)]
    assert counts["empty_output_row"] == sum(st["output_fixed"] for st in by_hand)
    assert counts["no_input_output_walk"] == sum(not st["input_reaches_output"] for st in by_hand)
    assert counts["draws"] == 4


def test_a_run_finishes_writes_its_row_and_collect_keeps_small_files(tmp_path):
    cell = next(c for c in study.cells() if c["cell"] == "element-d0.1-no-shortcut")
    protocol = {"data": "synthetic", "epochs": 1, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                "image_size": 28, "num_threads": 1, "quiet": True, "max_updates": None}
    row = study.run_one(cell, 0, str(tmp_path / "runs"), protocol)
    folder = tmp_path / "runs" / cell["cell"] / "seed0"
    assert row["params"] == 25_818 and (folder / "row.json").is_file() and not (folder / "checkpoint.pt").exists()
    assert json.loads((folder / "row.json").read_text()) == row
    assert study.run_one(cell, 0, str(tmp_path / "runs"), protocol) == row  # finished: read, not retrained
    study.collect(tmp_path / "runs", tmp_path / "dest")
    kept = sorted(p.name for p in (tmp_path / "dest" / cell["cell"] / "seed0").iterdir())
    assert kept == sorted([*(f for f in study.KEEP if (folder / f).is_file()), "machine.json"])
    assert "checkpoint.pt" not in kept


@pytest.mark.parametrize("seed,fixed", [(3, False), (1, True)])
def test_a_block_draw_without_a_walk_is_trained_and_counted(tmp_path, seed, fixed):
    # block-d0.02 seed 3: the output row has blocks, no input -> output walk; seed 1: an empty output row.
    # Draws of the cell: recorded, trained where anything can change the output (to a constant), never
    # refused by the Trainer's constant-output check
    from run import structure

    cell = next(c for c in study.cells() if c["cell"] == "block-d0.02")
    st = structure(study.build(cell, seed), cell)
    assert not st["input_reaches_output"] and st["output_fixed"] == fixed
    protocol = {"data": "synthetic", "epochs": 1, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                "image_size": 28, "num_threads": 1, "quiet": True, "max_updates": None}
    row = study.run_one(cell, seed, str(tmp_path / "runs"), protocol)
    assert row["trained"] == (not fixed) and row["epochs"] == (0 if fixed else 1) and not row["input_reaches_output"]


def test_collect_merges_the_connectivity_counts_of_two_calls(tmp_path):
    # two calls on disjoint cells (two run folders) collected into one place: both cells' counts kept
    import grid

    for name, cell in (("a", "block-d0.1"), ("b", "block-d0.02")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "connectivity.json").write_text(json.dumps([{"cell": cell, "draws": 3}]))
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "connectivity.json").write_text(json.dumps([{"cell": "block-d0.1", "draws": 1}]))
    grid.collect(tmp_path / "a", tmp_path / "dest", study.KEEP)
    grid.collect(tmp_path / "b", tmp_path / "dest", study.KEEP)
    got = json.loads((tmp_path / "dest" / "connectivity.json").read_text())
    assert got == [{"cell": "block-d0.1", "draws": 3}, {"cell": "block-d0.02", "draws": 3}]


# ---------------------------------------------------------------------- the page (study_report.py)
import importlib.util  # noqa: E402

from pages import regenerate  # noqa: E402  (what "the page regenerates" means: one rule for every page)

_spec = importlib.util.spec_from_file_location("study_report", ROOT / "experiments/placement/study_report.py")
R = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(R)


def _rows(cells_accs: dict[str, list[float]]) -> dict[str, list[dict]]:
    return {c: [{"cell": c, "seed": s, "test_acc": a / 100, "params": 25_818, "trained": True, "epochs": 20,
                 "input_reaches_output": True, "curve": [a] * 20, "machine": None} for s, a in enumerate(accs)]
            for c, accs in cells_accs.items()}


def test_the_verdict_on_made_up_rows():
    cells = study.cells()
    mlp = [96.0, 96.1, 95.9, 96.05, 95.95]
    made = {c["cell"]: [x + 0.02 * i for i, x in enumerate(mlp)] for c in cells}  # all within 0.1 of the MLP
    made["mlp"] = mlp
    made["element-d0.1-default"] = [x + 1.5 for x in mlp]            # clearly above
    made["tile-d0.02-default"] = [90.0, 97.0, 93.0, 95.5, 92.0]      # wide: neither shown
    made["tile-d0.02-no-shortcut"] = [11.35, 96.0, 96.1, 95.9, 96.0]  # one at chance: by counts
    made["block-d0.1"] = [11.35, 11.35, 96.0, 95.8, 9.8]
    rows = _rows(made)
    a = R.analyse(rows, cells, linear=[92.2, 92.3, 92.25, 92.28, 92.3])
    assert not a["pending"]
    assert a["cells"]["element-d0.1-default"]["verdict"] == "differs: above"
    assert a["cells"]["element-d0.1-no-shortcut"]["verdict"] == "like the MLP"
    assert a["cells"]["tile-d0.02-default"]["verdict"] == "undecided"
    assert a["cells"]["tile-d0.02-default"]["margin_supported"] > 2
    assert "tile-d0.02-no-shortcut" in a["bimodal"] and "tile-d0.02-no-shortcut" not in a["cells"]
    assert "block-d0.1" not in a["cells"]
    assert all(d["vs_linear"]["diff"] > 3 for c, d in a["cells"].items() if c != "tile-d0.02-default")
    sc = a["shortcut"]["element-d0.1-default -> element-d0.1-no-shortcut"]
    assert sc["diff"] < -1 and sc["p_holm"] < 0.05
    cnt = {d["cell"]: d for d in R.counts(rows, cells, {})}
    assert cnt["block-d0.1"]["chance"] == 3 and cnt["block-d0.1"]["mean_above"] == pytest.approx(95.9)
    assert cnt["tile-d0.02-no-shortcut"]["chance"] == 1 and 0 < cnt["block-d0.1"]["p"] < 1
    text = R.render(rows, cells, {}, [92.2, 92.3, 92.25, 92.28, 92.3], 20, Path("/nonexistent"), "x")
    assert "differs: above" in text and "**No verdict" not in text
    verdict = text.split("## The rules")[0]
    ph = R.holm([d["p"] for d in cnt.values()])
    assert f"block-d0.1 3 of 5 seeds at chance (Fisher p {R._p(cnt['block-d0.1']['p'])}, Holm " in verdict
    assert f"Holm over these {len(cnt)} Fisher tests" in verdict and all(h >= d["p"] for h, d in zip(ph, cnt.values()))
    rows_short = {c: v[:4] for c, v in rows.items()}  # a seed short: pending, no verdict
    assert R.analyse(rows_short, cells, [92.0, 92.1])["pending"]


def test_holm_and_the_equivalence_test():
    assert R.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    same = [96.0, 96.1, 95.9, 96.05, 95.95]
    assert R.tost(same, same, margin=0.5) < 0.001 and R.tost(same, same, margin=0.01) > 0.3
    assert R.tost([x + 2 for x in same], same, margin=0.5) > 0.99


def test_the_page_regenerates_from_a_clean_checkout(committed_tree):
    # conftest.py: the committed tree (HEAD) unpacked, what a clean checkout holds; tests/pages.py: the rule
    changed = regenerate(committed_tree, "docs/results/placement.md", ["experiments/placement/study_report.py"])
    assert not changed, f"regenerating changed {changed}: run `{R.COMMAND}` and commit the result"
