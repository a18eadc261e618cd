"""experiments/mnist1d/placement.py (issue 33, items 2 and 4): every cell holds the count it
states, the no-shortcut region has no input -> output block, the recurrent readouts agree with
the plain RNN, and a tiny run (synthetic data, seconds) finishes, resumes, extends and collects."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from pages import regenerate  # what "the page regenerates" means (one rule for every page)

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mnist1d_placement", ROOT / "experiments/mnist1d/placement.py")
P = importlib.util.module_from_spec(_spec)
sys.modules["mnist1d_placement"] = P
_spec.loader.exec_module(P)

CELLS = P.cells()


def test_the_grid_has_every_cell_the_issue_asks_for():
    names = {c["cell"] for c in CELLS}
    assert len(names) == len(CELLS)
    for h in P.WIDTHS:
        for p in P.PLACEMENTS:
            for region in P.REGIONS:
                assert f"{p}-h{h}-{region}-i3" in names  # item 2: each random placement, both regions
            for t in range(1, 9):
                assert f"{p}-h{h}-default-i{t}" in names  # item 4: iterations 1-8
    assert {"mlp", "rnn", "rnn-lr0.001", "gru"} <= names and all(f"trnn-k{k}" in names for k in range(1, 9))
    assert set(P.PILOT_CELLS) <= names
    assert P.WIDTHS[1] % P.TILE == 0  # the larger matrix's hidden slots are whole tiles (176 = 11 x 16)


@pytest.mark.parametrize("cell", CELLS, ids=[c["cell"] for c in CELLS])
def test_every_cell_builds_with_its_stated_count(cell):
    for seed in ((0, 1) if cell.get("iterations") == 3 or cell["family"] != "random" else (0,)):
        n = P.num_parameters(P.build(cell, seed))
        assert n == P.expected_count(cell)
        if cell["family"] in ("mlp", "random"):
            assert n == P.PARAMS == 15_210
        elif not (cell["family"] == "trnn" and cell["iterations"] == 1):  # k = 1 has no W_hh (stated in expected_count)
            assert abs(n / P.PARAMS - 1) <= P.COUNT_TOLERANCE


def test_the_recurrent_counts_are_the_closest_hidden_sizes():
    assert (P.RNN_H, P.rnn_count(P.RNN_H)) == (117, 15_103)
    assert (P.GRU_H, P.gru_count(P.GRU_H)) == (68, 15_174)
    gru = P.build({"cell": "gru", "family": "gru", "hidden": P.GRU_H}, 0)
    assert sum(p.numel() for p in gru.parameters()) == P.gru_count(P.GRU_H)  # the formula against torch's count
    for h in (P.RNN_H - 1, P.RNN_H + 1):
        assert abs(P.rnn_count(h) - P.PARAMS) > abs(P.rnn_count(P.RNN_H) - P.PARAMS)


def _blocks(model):
    core = model.core if hasattr(model, "core") else model
    return core, {(i, j) for i, j, _, _ in core.positions()}


@pytest.mark.parametrize("cell", [c for c in CELLS if c["family"] == "random" and c["iterations"] == 3],
                         ids=lambda c: c["cell"])
def test_no_shortcut_cells_have_no_input_output_block(cell):
    for seed in range(3):
        core, pos = _blocks(P.build(cell, seed))
        shortcut = {(o, i) for o in core.outputs for i in core.inputs}
        if cell["region"] == "no-shortcut":
            assert not pos & shortcut
        elif cell["placement"] == "element":  # 15,000 entries over the region: the 10 x 40 block is never empty
            assert pos & shortcut


def test_the_truncated_readout_is_the_rnn_over_the_last_k_samples():
    torch.manual_seed(0)
    from seq2d import rnn, truncated_rnn

    body = rnn(1, 8, batch_first=True)
    full = P.Readout(body, "rnn", 8)
    x = torch.randn(5, 12, 1)
    for k in (3, 12):
        trunc = P.Readout(truncated_rnn(body, k), "truncated", 8)
        trunc.readout.load_state_dict(full.readout.state_dict())
        torch.testing.assert_close(trunc(x), full(x[:, -k:]), rtol=1e-5, atol=1e-6)
    ref = torch.nn.RNN(1, 8, batch_first=True)  # the seq2d RNN's last state against torch's
    with torch.no_grad():
        wih, whh = body.layer_blocks(1)
        ref.weight_ih_l0.copy_(wih.weight)
        ref.weight_hh_l0.copy_(whh.weight)
        ref.bias_ih_l0.copy_(body.core.bias(1))
        ref.bias_hh_l0.zero_()
    torch.testing.assert_close(full.readout(ref(x)[1][-1]), full(x), rtol=1e-5, atol=1e-6)


def _protocol(epochs):
    return {**P.PROTOCOL, "epochs": epochs, "source": "synthetic"}


@pytest.mark.parametrize("name", ["tile-h100-no-shortcut-i3", "trnn-k2"])
def test_a_tiny_run_finishes_resumes_and_collects(tmp_path, name, monkeypatch):
    from seq2d.train import Trainer, read_metrics

    monkeypatch.setattr(P, "DYN_BATCH", 4)  # the dynamics' own test is below: here only its file matters

    cell = next(c for c in CELLS if c["cell"] == name)
    straight = P.run_one(cell, 0, str(tmp_path / "a"), _protocol(2))
    folder = tmp_path / "a" / name / "seed0"
    assert straight["params"] == P.expected_count(cell) and straight["epochs"] == 2
    assert json.loads((folder / "row.json").read_text()) == straight and (folder / "checkpoint.pt").is_file()
    assert P.run_one(cell, 0, str(tmp_path / "a"), _protocol(2)) == straight  # finished: read, not retrained
    assert P.run_one(cell, 0, str(tmp_path / "a"), _protocol(1)) == straight  # longer than asked: read too
    # a finished shorter run is extended from its checkpoint: the same as the longer run
    short = P.run_one(cell, 0, str(tmp_path / "c"), _protocol(1))
    assert short["epochs"] == 1 and not P.finished(tmp_path / "c" / name / "seed0", 2)
    longer = P.run_one(cell, 0, str(tmp_path / "c"), _protocol(2))
    assert longer["epochs"] == 2 and longer["test_acc"] == straight["test_acc"]
    assert longer["test_loss"] == pytest.approx(straight["test_loss"], rel=1e-6)
    # an interrupted run: its checkpoint after epoch 1 of 2, no row.json; run_one continues it
    part = tmp_path / "b" / name / "seed0"
    Trainer(P.config_for(cell, 0, part, _protocol(1)), P.build(cell, 0), P.data_for(cell, "synthetic")).fit()
    assert (part / "checkpoint.pt").is_file() and not (part / "row.json").exists()
    resumed = P.run_one(cell, 0, str(tmp_path / "b"), _protocol(2))
    assert resumed["epochs"] == 2 and len([r for r in read_metrics(part) if "test_acc" in r]) == 2
    assert resumed["test_acc"] == straight["test_acc"]  # the same computation, continued
    assert resumed["test_loss"] == pytest.approx(straight["test_loss"], rel=1e-6)
    assert (folder / "checkpoint.pt").is_file()  # kept in the run folder, never collected
    (tmp_path / "a" / "other" / "seed0").mkdir(parents=True)  # unfinished: no row.json, not collected
    (tmp_path / "a" / "other" / "seed0" / "checkpoint.pt").write_bytes(b"x")
    assert P.main(["--collect", str(tmp_path / "a"), "--dest", str(tmp_path / "dest")]) == 0
    kept = sorted(p.name for p in (tmp_path / "dest" / name / "seed0").iterdir())
    assert kept == sorted([*(f for f in P.KEEP if (folder / f).is_file()), "machine.json"])
    assert {"row.json", "dynamics.json"} <= set(kept)
    assert not (tmp_path / "dest" / "other").exists()
    from seq2d.envinfo import machine

    record = tmp_path / "dest" / name / "seed0" / "machine.json"
    assert json.loads(record.read_text()) == json.loads(json.dumps(machine()))  # the machine that trained it
    record.write_text('{"cpu": "elsewhere"}\n')  # collected again, unchanged: the first record stands
    assert P.main(["--collect", str(tmp_path / "a"), "--dest", str(tmp_path / "dest")]) == 0
    assert json.loads(record.read_text()) == {"cpu": "elsewhere"}
    (folder / "row.json").write_text(json.dumps({**straight, "seed": 0, "note": "trained again"}))  # another run
    assert P.main(["--collect", str(tmp_path / "a"), "--dest", str(tmp_path / "dest")]) == 0
    assert json.loads(record.read_text())["cpu"] == machine()["cpu"]


@pytest.mark.parametrize("name,seed,fixed", [("block-h100-default-i3", 3, False), ("tile-h100-default-i1", 0, False),
                                             ("block-h100-default-i3", 1, True)])
def test_a_draw_whose_output_cannot_see_its_input_is_trained_and_counted(tmp_path, name, seed, fixed, monkeypatch):
    # block seed 3: no input -> output walk; tile i1 seed 0: a walk of 2 blocks, 1 step; block seed 1: an
    # empty output row (nothing to train). All are draws of their cell (the connectivity counts): recorded,
    # trained where anything can change the output, never refused by the Trainer's constant-output check
    monkeypatch.setattr(P, "DYN_BATCH", 4)
    cell = next(c for c in CELLS if c["cell"] == name)
    st = P.structure(P.build(cell, seed), cell)
    assert not st["input_reaches_output"] and st["output_fixed"] == fixed
    row = P.run_one(cell, seed, str(tmp_path), _protocol(1))
    assert row["trained"] == (not fixed) and row["epochs"] == (0 if fixed else 1) and not row["input_reaches_output"]


@pytest.mark.parametrize("name", ["tile-h100-default-i3", "trnn-k3", "mlp"])
def test_a_finished_run_records_its_iteration_dynamics(tmp_path, name, monkeypatch):
    # item 5: dynamics.json is written with row.json, computed again from the checkpoint when missing
    # (without training), deterministic, and its readout after the trained step count scores the run
    monkeypatch.setattr(P, "DYN_BATCH", 16)  # 15 increment pairs x 16 = 240 columns >= the 210 updated units
    cell = next(c for c in CELLS if c["cell"] == name)
    row = P.run_one(cell, 0, str(tmp_path), _protocol(1))
    folder = tmp_path / name / "seed0"
    dyn = json.loads((folder / "dynamics.json").read_text())
    assert dyn["epochs"] == row["epochs"] == 1 and dyn["batch"] == 16
    if cell["family"] == "trnn":
        r = dyn["recurrent_jacobian_radius"]
        assert 0 <= r["median"] <= r["max"] and "dmd_spectral_radius" not in dyn
    else:
        assert len(dyn["change"]) == len(dyn["test_acc_by_steps"]) == P.DYN_HORIZON
        assert dyn["test_acc_by_steps"][cell["iterations"] - 1] == pytest.approx(row["test_acc"], abs=1e-6)
        assert len(dyn["dmd_abs_eigenvalues_top"]) == P.DYN_TOP and dyn["dmd_rank"] >= P.DYN_TOP
        if name == "mlp":  # acyclic: a nilpotent Jacobian, and no change once the depth is reached
            assert dyn["jacobian_radius_at_horizon"]["max"] == 0 and max(dyn["change"][3:]) == 0
        else:
            assert dyn["jacobian_radius_at_iterations"]["mean"] > 0
    metrics = (folder / "metrics.jsonl").read_bytes()
    (folder / "dynamics.json").unlink()
    assert not P.finished(folder, 1)  # a run finished before item 5 is not finished while its model can be read
    assert P.run_one(cell, 0, str(tmp_path), _protocol(1)) == row
    assert (folder / "metrics.jsonl").read_bytes() == metrics and P.finished(folder, 1)  # not trained again
    again = json.loads((folder / "dynamics.json").read_text())
    assert again.keys() == dyn.keys()
    for k in dyn:  # the model loaded from the checkpoint against the one fit() left in memory
        assert again[k] == (dyn[k] if isinstance(dyn[k], str) else pytest.approx(dyn[k], rel=1e-5, abs=1e-6))


def test_the_recurrent_radius_is_the_closed_form_jacobian():
    # the trnn's one-step map rebuilt from its tied blocks against diag(1 - h^2) W_hh by hand
    torch.manual_seed(0)
    cell = next(c for c in CELLS if c["cell"] == "trnn-k4")
    model = P.build(cell, 3)
    x = torch.randn(6, 40, 1)
    core = model.body.core
    W_ih, W_hh, b = core.block(4, 0).weight, core.block(5, 4).weight, core.bias(4)
    h = torch.zeros(6, P.RNN_H)
    with torch.no_grad():
        for t in range(36, 40):  # the window: the last 4 samples from a zero state
            h = torch.tanh(x[:, t] @ W_ih.T + h @ W_hh.T + b)
            if t == 38:
                h_prev = h
        torch.testing.assert_close(model.readout(h), model(x), rtol=1e-5, atol=1e-6)
    h_last = torch.tanh(x[:, 39] @ W_ih.T + h_prev @ W_hh.T + b)
    J = (1 - h_last.double() ** 2)[:, :, None] * W_hh.detach().double()
    by_hand = torch.linalg.eigvals(J.detach()).abs().amax(-1)
    got = P.iteration_dynamics(model, cell, {"test": (x, torch.zeros(6, dtype=torch.long))})
    assert got["recurrent_jacobian_radius"]["max"] == pytest.approx(float(by_hand.max()), rel=1e-5)
    assert got["recurrent_jacobian_radius"]["mean"] == pytest.approx(float(by_hand.mean()), rel=1e-5)
    k1 = next(c for c in CELLS if c["cell"] == "trnn-k1")  # no W_hh: nothing recurs
    assert P.iteration_dynamics(P.build(k1, 0), k1, {"test": (x, torch.zeros(6, dtype=torch.long))})[
        "recurrent_jacobian_radius"] is None


def test_the_pilot_rule_on_made_up_curves(tmp_path):
    # two cells, two seeds, 10 epochs: "a" settles within 1 point of its last value from epoch 4,
    # "b" from epoch 7 -> grid epochs = ceil(1.2 * 7 / 10) * 10 = 10 (at most the pilot's length)
    curves = {"a": [10, 20, 30, 59, 60, 60, 60, 60, 60, 60], "b": [10, 20, 30, 40, 50, 60, 69, 70, 70, 70]}
    for name, c in curves.items():
        for s in (0, 1):
            f = tmp_path / name / f"seed{s}"
            f.mkdir(parents=True)
            f.joinpath("metrics.jsonl").write_text("".join(json.dumps({"epoch": e + 1, "test_acc": v / 100}) + "\n"
                                                           for e, v in enumerate(c)))
    out = P.pilot_summary(tmp_path, ["a", "b"], [0, 1], 10)
    assert out["cells"]["a"]["plateau_epoch"] == 4 and out["cells"]["b"]["plateau_epoch"] == 7
    assert out["grid_epochs"] == 10
    out = P.pilot_summary(tmp_path, ["a"], [0, 1], 10)
    assert out["grid_epochs"] == 10  # 1.2 x 4 = 4.8, rounded up to 10
    for s in (0, 1):  # a cell at chance (never above 20%) sets no epoch count, however its noise falls
        f = tmp_path / "chance" / f"seed{s}"
        f.mkdir(parents=True)
        f.joinpath("metrics.jsonl").write_text("".join(json.dumps({"epoch": e + 1, "test_acc": (10 + e % 3) / 100}) + "\n"
                                                       for e in range(10)))
    out = P.pilot_summary(tmp_path, ["a", "chance"], [0, 1], 10)
    assert out["cells"]["chance"]["plateau_epoch"] == 10 and out["grid_epochs"] == 10
    out = P.pilot_summary(tmp_path, ["a", "b"], [0, 1], 100)  # curves shorter than the pilot: not counted
    assert out["cells"] == {} and "grid_epochs" not in out


def _report():
    spec = importlib.util.spec_from_file_location("mnist1d_placement_report", ROOT / "experiments/mnist1d/placement_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_permutation_p_value_exact_and_sampled():
    R = _report()
    # a = {3, 4}, b = {1, 2}: of the 6 relabellings, 2 give |difference| >= 2 (the observed one and its mirror)
    assert R.permutation_p([3, 4], [1, 2]) == pytest.approx(2 / 6)
    assert R.permutation_p([1, 2, 3], [1, 2, 3]) == 1.0
    a, b = [60 + 0.3 * i for i in range(10)], [61 + 0.3 * i for i in range(10)]
    exact = R.permutation_p(a, b, resamples=200_000)  # C(20, 10) = 184,756 relabellings: exact
    sampled = R.permutation_p(a, b, resamples=20_000)  # Monte Carlo
    assert abs(sampled - exact) < 0.02 and 0 < exact < 1


def test_the_spearman_p_value_exact_with_ties_and_sampled():
    from scipy import stats

    R = _report()
    # 4! = 24 pairings: only the observed one reaches rho = 1; with y's tie (2, 2) swapping the tied pair gives it too
    assert R.spearman_p([1, 2, 3, 4], [1, 2, 3, 4]) == (pytest.approx(1.0), pytest.approx(1 / 24))
    rho, p = R.spearman_p([1, 2, 3, 4], [1, 2, 2, 4])
    assert rho == pytest.approx(4.5 / (5 * 4.5) ** 0.5) and p == pytest.approx(2 / 24)  # ranks (1, 2.5, 2.5, 4): 4.5 / sqrt(5 * 4.5)
    x = [float(i) for i in range(40)]
    y = [(v * 7) % 40 for v in x]  # a weak positive trend; 40! pairings: seeded Monte Carlo
    rho, p = R.spearman_p(x, y)
    ref = stats.spearmanr(x, y, alternative="greater")  # scipy's t approximation (p 0.152 here)
    assert rho == pytest.approx(ref.statistic) and abs(p - ref.pvalue) < 0.02
    assert R.spearman_p(x, [-v for v in x])[1] == pytest.approx(1.0)  # perfectly decreasing: every pairing is >= it


def _fake_run(root, cell, seed, acc, epochs=3, metrics=True, dynamics=None, **extra):
    f = root / cell / f"seed{seed}"
    f.mkdir(parents=True)
    f.joinpath("row.json").write_text(json.dumps({"cell": cell, "seed": seed, "test_acc": acc / 100, "params": 15210,
                                                  "epochs": epochs, "trained": True, "diverged": None, **extra}))
    if metrics:
        f.joinpath("metrics.jsonl").write_text("".join(json.dumps({"epoch": e + 1, "test_acc": acc / 100 - 0.01 * (epochs - 1 - e)})
                                                       + "\n" for e in range(epochs)))
    if dynamics is not None:
        f.joinpath("dynamics.json").write_text(json.dumps(dynamics))


def test_the_verdict_on_made_up_rows(tmp_path):
    R = _report()
    for s in range(10):
        _fake_run(tmp_path, "mlp", s, 66 + 0.3 * s)
        _fake_run(tmp_path, "gru", s, 90 + 0.3 * s)
        _fake_run(tmp_path, "element-h100-default-i3", s, 66.2 + 0.3 * s)  # the MLP's accuracies: like the MLP
        _fake_run(tmp_path, "tile-h100-default-i3", s, 80 + 0.3 * s)  # between: like neither
        _fake_run(tmp_path, "element-h176-default-i3", s, 64.5 + 0.3 * s)  # 1.5 below: different, not shown within 2
    for s in range(3):
        _fake_run(tmp_path, "block-h100-default-i3", s, 70)  # too few seeds: pending, judged nowhere
    rows = R.load_rows(tmp_path)
    names = ["element-h100-default-i3", "tile-h100-default-i3", "element-h176-default-i3", "block-h100-default-i3"]
    v = R.verdicts(rows, names)
    assert v["cells"]["element-h100-default-i3"]["verdict"] == "like the MLP"
    assert v["cells"]["tile-h100-default-i3"]["verdict"] == "like neither"
    assert v["cells"]["element-h176-default-i3"]["verdict"] == "like neither"  # equivalence is not "no difference found"
    assert "block-h100-default-i3" not in v["cells"] and v["pending"] == ["block-h100-default-i3"]
    assert R.answers(v, CELLS)["element"] == "pending"  # two of its four item-2 cells have no run
    text = R.distances_text(v, rows, CELLS, 1000)  # the verdict in numbers: element -1.50 to +0.20 from the MLP
    assert "element -1.50 to +0.20 from the MLP" in text and "within 10.00 points of the GRU (91.35%)" in text
    v = R.verdicts({k: r for k, r in rows.items() if k != "gru"}, names)
    assert v["cells"] == {} and "gru" in v["pending"]  # no reference, no verdict
    assert R.main(["--results", str(tmp_path), "--doc", str(tmp_path / "page.md")]) == 0
    page = (tmp_path / "page.md").read_text()
    assert "**No verdict yet.**" in page and "like the MLP" in page and "| block-h100-default-i3 |" in page
    assert "Pending (" in page and "block-h100-default-i3" in page.split("Pending (")[1].split("\n")[0]
    assert not (tmp_path / "page" / "iterations.png").exists()  # no family complete: no plot, said so
    assert "No plot yet" in page


def test_the_page_names_the_machines_that_trained_the_runs():
    R = _report()
    amd = {"cpu": "AMD EPYC", "capability": "AVX2", "torch": "2.14.1", "nproc": 2}
    intel = {**amd, "cpu": "Intel(R) Xeon(R) Processor", "capability": "AVX512"}
    rows = {"mlp": [{"machine": amd}, {"machine": intel}], "gru": [{"machine": amd}, {"machine": None}]}
    text = R.machines_text(rows)
    assert "AMD EPYC (torch CPU capability AVX2, torch 2.14.1, 2 cores): 2 run(s) in 2 cell(s)" in text
    assert "Intel(R) Xeon(R) Processor (torch CPU capability AVX512" in text and "1 run(s) in 1 cell(s)" in text
    assert "no machine record: 1 run(s) in 1 cell(s)" in text
    assert R.machines_text({}) == ""


def test_the_equivalence_p_value():
    R = _report()
    a = [66 + 0.3 * i for i in range(10)]
    assert R.equivalence_p(a, [x + 0.1 for x in a]) < 0.01  # 0.1 apart, sd 0.9: well inside +-2
    assert R.equivalence_p(a, [x + 3 for x in a]) > 0.5  # 3 apart: not within 2
    assert R.equivalence_p(a, [x + 0.1 for x in a], seed=1) < 0.01


def test_a_run_without_its_metrics_is_an_error(tmp_path):
    R = _report()
    _fake_run(tmp_path, "mlp", 0, 66, metrics=False)
    with pytest.raises(FileNotFoundError, match="metrics.jsonl is missing"):
        R.load_rows(tmp_path)
    with pytest.raises(FileNotFoundError):
        R.main(["--results", str(tmp_path), "--doc", str(tmp_path / "page.md")])
    assert not (tmp_path / "page.md").exists()
    _fake_run(tmp_path, "gru", 0, 90, epochs=3)
    (tmp_path / "gru/seed0/metrics.jsonl").write_text(json.dumps({"epoch": 1, "test_acc": 0.9}) + "\n")
    (tmp_path / "mlp/seed0/row.json").unlink()
    with pytest.raises(ValueError, match="1 test evaluations"):
        R.load_rows(tmp_path)


def test_a_complete_made_up_grid_answers_every_item(tmp_path):
    R = _report()
    fams = R.iteration_families(CELLS)
    for s in range(10):
        _fake_run(tmp_path, "mlp", s, 66 + 0.3 * s)
        _fake_run(tmp_path, "gru", s, 90 + 0.3 * s)
        for c in R.item2_cells(CELLS):
            _fake_run(tmp_path, c, s, 66.1 + 0.3 * s) if c.startswith("element") else None
            _fake_run(tmp_path, c, s, 80 + 0.3 * s) if c.startswith("tile") else None
            if c.startswith("block"):  # bimodal: 4 of 10 at chance
                _fake_run(tmp_path, c, s, 10 if s < 4 else 60 + s, input_reaches_output=s >= 4)
        for fam, by_t in fams.items():
            for t, c in by_t.items():
                if (tmp_path / c / f"seed{s}").exists():
                    continue
                if fam.startswith("trnn"):
                    _fake_run(tmp_path, c, s, 30 + t, dynamics={"family": "trnn", "iterations": t,
                                                                "recurrent_jacobian_radius": {"mean": 0.5}})
                    continue
                rho = 0.1 * (1 + s % 5)  # runs with a larger radius need more steps (made up so)
                need = min(t, 1 + s % 5)
                curve = [0.5 + 0.1 * min(k, need) / need for k in range(1, 17)]
                dyn = {"family": "random", "iterations": t, "jacobian_radius_at_horizon": {"mean": rho},
                       "jacobian_radius_at_iterations": {"mean": rho}, "dmd_spectral_radius": rho,
                       "dmd_reconstruction_error": 0.01, "test_acc_by_steps": curve}
                _fake_run(tmp_path, c, s, 100 * curve[t - 1], dynamics=dyn)
    rows = R.load_rows(tmp_path)
    v = R.verdicts(rows, R.item2_cells(CELLS))
    ans = R.answers(v, CELLS)
    assert ans["element"] == "like the MLP" and ans["tile"] == "like neither" and not v["pending"]
    sv = R.spectrum_verdict(rows, fams)
    assert sv["answer"] == "yes" and sv["spearman"] > 0.9 and sv["n"] == 60
    assert R.main(["--results", str(tmp_path), "--doc", str(tmp_path / "page.md")]) == 0
    page = (tmp_path / "page.md").read_text()
    assert "element: **like the MLP**" in page and "**yes**" in page and "No verdict" not in page
    assert (tmp_path / "page" / "iterations.png").stat().st_size > 0 and "![accuracy vs iterations](page/iterations.png)" in page
    block = next(d for d in R.counts(rows, R.item2_cells(CELLS), {}) if d["cell"] == "block-h100-default-i3")
    assert (block["chance"], block["no_walk"], block["n"]) == (4, 4, 10)
    assert block["p"] == pytest.approx(2 * 210 / 4845)  # Fisher: 4 of 10 against 0 of 10, both tails


def test_the_page_regenerates_from_a_clean_checkout(committed_tree):
    # conftest.py: the committed tree (HEAD) unpacked, what a clean checkout holds; tests/pages.py: the rule
    changed = regenerate(committed_tree, "docs/results/mnist1d.md", ["experiments/mnist1d/placement_report.py"])
    assert not changed, f"regenerating changed {changed}: run `{_report().COMMAND}` and commit the result"
