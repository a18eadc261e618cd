"""seq2d/renames.py OLD_NAMES, the one table of renamed words: every model-name entry loads from a
saved file under today's spelling (keeping the config hash it was recorded with), and code or a
command line that passes the old spelling gets the "now called" error. The store words are
checked in tests/test_store.py (test_old_names_in_saved_files_load)."""

import importlib.util
import json
from pathlib import Path

import pytest

import seq2d
from seq2d.lab.mnist_comparison import MODELS, configs_for, plan_runs, run_folder
from seq2d.renames import FORMER_PRESETS, OLD_NAMES, migrate_model_name, old_model_name
from seq2d.train.config import TrainConfig, config_from_dict, load_config
from seq2d.train.identity import config_hash

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("old,new", OLD_NAMES["model"].items())
def test_renamed_model_loads_and_keeps_its_hash(old, new, tmp_path):
    assert new in seq2d.list_models() and old not in seq2d.list_models()
    saved = {"model": old, "granularity": "element", "sizes": [12, 8, 4], "optimizer_impl": "foreach"}
    cfg = config_from_dict(saved)
    assert cfg.model == new
    assert config_hash(cfg) == config_hash(saved)
    # the hash is the one the old spelling had: computed by hand from the recorded fields
    assert config_hash(cfg) != config_hash(config_from_dict({**saved, "granularity": "tile"}))
    (tmp_path / "c.toml").write_text(f'model = "{old}"\n')
    assert load_config(tmp_path / "c.toml").model == new
    with pytest.raises(ValueError, match=rf"config field 'model': '{old}' is now called '{new}'"):
        TrainConfig(model=old)
    with pytest.raises(ValueError, match=rf"renamed: did you mean '{new}'"):
        seq2d.models.build_preset(f"{old}:12,8,4")
    assert FORMER_PRESETS[old] == repr(new)


def test_committed_runs_hash_under_the_old_name():
    """A committed run recorded with model = "random" hashes the same under today's spelling (the
    hash-level alias); without the alias the hashes would differ (checked by hashing the new
    spelling as if it were a name of its own)."""
    rec = json.loads(next((ROOT / "experiments/mnist_sparsity/results/full-ours/random_element").glob(
        "seed*/run.json")).read_text())
    assert rec["config"]["model"] == "random"
    today = config_from_dict(rec["config"])
    assert today.model == "random_model" and config_hash(today) == rec["config_hash"]
    assert old_model_name("random_model") == "random" and migrate_model_name("random") == "random_model"
    from seq2d.train import identity

    alias, OLD_NAMES["model"] = OLD_NAMES["model"], {}
    try:
        assert identity.config_hash(today) != rec["config_hash"]  # the alias is what keeps it
    finally:
        OLD_NAMES["model"] = alias


@pytest.mark.parametrize("old,new", OLD_NAMES["mnist_model"].items())
def test_renamed_mnist_name(old, new, tmp_path):
    assert new in MODELS and old not in MODELS
    with pytest.raises(ValueError, match=rf"seq2d mnist: model: '{old}' is now called '{new}'"):
        configs_for({"data": "synthetic"}, [old])
    # a run folder an earlier version wrote under the old spelling is the one used while it alone exists
    assert run_folder(tmp_path, new, 0) == tmp_path / new / "seed0"
    (tmp_path / old / "seed0").mkdir(parents=True)
    assert run_folder(tmp_path, new, 0) == tmp_path / old / "seed0"
    (_, _, cfg), = plan_runs(configs_for({"data": "synthetic"}, [new]), [0], tmp_path)
    assert cfg.out_dir == str(tmp_path / old / "seed0") and cfg.name == f"{new}-s0"
    (tmp_path / new / "seed0").mkdir(parents=True)
    assert run_folder(tmp_path, new, 0) == tmp_path / new / "seed0"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_saved_results_read_under_todays_names(tmp_path):
    """The committed MNIST summaries say "random-element" (written before the rename); the report
    reads them as random_element; the parameter-budget results.json likewise."""
    import sys

    sys.path.insert(0, str(ROOT / "experiments" / "mnist_sparsity"))
    try:
        report = _load(ROOT / "experiments/mnist_sparsity/report.py", "mnist_report_renames")
    finally:
        sys.path.pop(0)
    folder = ROOT / "experiments/mnist_sparsity/results/full-paper-test"
    assert json.loads(next(folder.glob("random_element/seed*/summary.json")).read_text())["model"] == "random-element"
    runs = report.load_group(folder)
    assert {r["model"] for r in runs} == {"mlp", "random_element"}
    pb = _load(ROOT / "experiments/param_budget/run.py", "param_budget_renames")
    res = json.loads((ROOT / "docs/results/param_budget/results.json").read_text())
    assert "random-block" in {r["model"] for r in res["rows"]}
    today = pb.todays_names(res)
    assert {r["model"] for r in today["rows"]} == {"mlp", "random_element", "random_tile", "random_block"}
    assert today["rows"][0]["sizes"] == res["rows"][0]["sizes"]


def test_collect_copies_an_old_folder_under_todays_name(tmp_path):
    collect = _load(ROOT / "experiments/mnist_sparsity/collect.py", "mnist_collect_renames")
    run = tmp_path / "runs" / "random-tile" / "seed3"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "complete", "config_hash": "ab"}))
    (run / "metrics.csv").write_text("epoch\n1\n")
    copied = collect.collect(tmp_path / "runs", tmp_path / "dest", log=lambda s: None)
    assert copied == [tmp_path / "dest" / "random_tile" / "seed3"]
    assert (tmp_path / "dest" / "random_tile" / "seed3" / "metrics.csv").is_file()
