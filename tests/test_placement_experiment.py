"""experiments/placement: the grid, the densities it claims, and the verdict's statistics on rows
made up for the test (the real runs are in experiments/placement/results/)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "experiments" / "placement"


def _load(name):
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(f"placement_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run = _load("run")
report = _load("placement_report")


def test_grid_has_each_run_once_and_the_minimum_seeds():
    g = run.grid([0, 1, 2, 3, 4], [0, 1, 2])
    keys = [run.run_key(r) for r in g]
    assert len(keys) == len(set(keys))
    rand = [r for r in g if r["placement"] != "mlp"]
    density_cells = {(r["placement"], r["h_params"], r["h_slots"]) for r in rand if r["iterations"] == 3}
    for cell in density_cells:
        assert sorted(r["seed"] for r in rand if (r["placement"], r["h_params"], r["h_slots"]) == cell
                      and r["iterations"] == 3) == [0, 1, 2, 3, 4]
    for it in range(1, 9):
        for p in run.PLACEMENTS:
            assert {r["seed"] for r in rand if r["iterations"] == it and r["placement"] == p
                    and r["h_slots"] == r["h_params"] == run.BASE_H} >= {0, 1, 2}


@pytest.mark.parametrize("target", run.SPREAD_DENSITIES)
@pytest.mark.parametrize("placement", ["element", "block"])
def test_spread_width_gives_the_stated_density(target, placement):
    params = run.mlp_count(run.mlp_sizes(run.BASE_H, 196))
    w = run.spread_width(target, params, 196)
    spec = dict(placement=placement, h_params=run.BASE_H, h_slots=w, iterations=3, seed=0)
    model = run.build(spec, 196)
    assert model.num_parameters() == params
    st = run.structure(model, spec)
    sizes = run.mlp_sizes(w, 196)
    rows, n = sum(sizes[1:]), sum(sizes)
    assert st["density"] == pytest.approx((params - st["biases"]) / (rows * n), rel=1e-12)
    if st["biases"] == rows:  # every slot drew an entry: density_of's figure is exact
        assert st["density"] == pytest.approx(run.density_of(sizes, params), rel=1e-12)
    assert st["density"] == pytest.approx(target, rel=0.1)


def _rows(placement, h_params, h_slots, accs):
    return [dict(placement=placement, h_params=h_params, h_slots=h_slots, iterations=3, seed=k, test_acc=a,
                 params=100, sizes=[4, 2, 1, 2], density=None if placement == "mlp" else 0.1, path_length=1,
                 fraction_on_path=1.0, input_reaches_output=True, key=f"{placement}{h_params}{h_slots}/{k}")
            for k, a in enumerate(accs)]


def test_matters_needs_more_than_the_margin_and_an_interval_that_excludes_zero():
    rows = (_rows("mlp", 32, 32, [0.930, 0.932, 0.931, 0.929, 0.933])
            + _rows("element", 32, 86, [0.800, 0.810, 0.805, 0.795, 0.802])   # far below: matters
            + _rows("tile", 32, 86, [0.925, 0.935, 0.928, 0.931, 0.930])      # within the margin
            + _rows("block", 32, 86, [0.60, 0.95, 0.93, 0.94, 0.62]))         # below on average, too noisy
    s = report.summarize(rows, 32)
    by = {c["placement"]: c for c in s["spread"]}
    assert by["element"]["matters"] is True and by["element"]["hi"] < 0
    assert by["tile"]["matters"] is False
    assert by["block"]["matters"] is False and by["block"]["lo"] < 0 < by["block"]["hi"]
    g = report.gaps(s["spread"])
    assert g[0]["best"] == "tile" and g[0]["worst"] == "element" and g[0]["matters"] is True  # block: 0.808 > 0.802


def test_the_1_epoch_page_regenerates_from_a_clean_checkout(committed_tree):
    from pages import regenerate  # what "the page regenerates" means (one rule for every page)

    # conftest.py: the committed tree (HEAD) unpacked, what a clean checkout holds
    changed = regenerate(committed_tree, "docs/results/placement-1epoch.md", report.REGEN.split()[1:])
    assert not changed, f"regenerating changed {changed}: run `{report.REGEN}` and commit the result"
