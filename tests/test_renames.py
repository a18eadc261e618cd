"""seq2d/renames.py OLD_NAMES, the one table of renamed words: every model-name entry loads from a
saved file under today's spelling (keeping the config hash it was recorded with), and code or a
command line that passes the old spelling gets the "now called" error; likewise the record keys
(optimizer updates were "steps": run.json, metrics, checkpoints, summaries) and the config field
max_steps (now max_updates). The store words are
checked in tests/test_store.py (test_old_names_in_saved_files_load)."""

import importlib.util
import json
from pathlib import Path

import pytest

import seq2d
from seq2d.lab.mnist_comparison import MODELS, configs_for, plan_runs, run_folder
from seq2d.renames import FORMER_PRESETS, OLD_NAMES, migrate_model_name, old_model_name
from seq2d.train.config import TrainConfig, config_from_dict, config_to_dict, load_config
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


# ---------------------------------------------------------------------- record keys (optimizer updates)
COMMITTED_RUN = ROOT / "experiments/mnist_sparsity/results/full-ours/mlp/seed0"  # written with "step" / "steps"


def test_the_record_table_is_what_the_readers_use():
    from seq2d.renames import migrate_record

    assert OLD_NAMES["record"] == {"step": "update", "steps": "updates"}
    assert migrate_record({"epoch": 1, "step": 8, "steps": 8}) == {"epoch": 1, "update": 8, "updates": 8}
    # a record that has both keeps today's key as it is (and the old one untouched); a config is never passed
    assert migrate_record({"step": 1, "update": 2}) == {"step": 1, "update": 2}
    assert migrate_record(None) is None and migrate_record([1]) == [1]


def test_a_committed_run_folder_reads_step_as_update():
    """run.json, metrics.jsonl and summary.json of a committed run (left as written: "step", "steps",
    "max_steps") read under today's keys; metrics.csv keeps its "step" column, with the same values."""
    import csv

    from seq2d.lab.mnist_comparison import _read_json
    from seq2d.train.rundir import describe_record, read_metrics, read_record

    raw = json.loads((COMMITTED_RUN / "run.json").read_text())
    assert "step" in raw and "update" not in raw and "max_steps" in raw["config"]
    rec = read_record(COMMITTED_RUN)
    assert rec["update"] == raw["step"] == 93800 and "step" not in rec
    assert describe_record(rec) == "complete at update 93800"
    assert config_from_dict(rec["config"]).max_updates is None and config_hash(rec["config"]) == rec["config_hash"]
    rows = read_metrics(COMMITTED_RUN)
    assert [r["update"] for r in rows][:2] == [938, 1876] and not any("step" in r for r in rows)
    with open(COMMITTED_RUN / "metrics.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(r["step"]) for r in table] == [r["update"] for r in rows]  # the file as written
    summary = _read_json(COMMITTED_RUN / "summary.json")
    assert summary["updates"] == 93800 and "steps" not in summary
    assert "steps" in json.loads((COMMITTED_RUN / "summary.json").read_text())


def test_an_old_checkpoint_loads_and_a_new_one_says_update(tmp_path):
    """The fixture checkpoint (written with "step"; its resume is tests/test_compact_store.py's
    test_a_checkpoint_saved_with_the_dense_box_resumes_as_it_would_have) loads with "update";
    a checkpoint written now holds "update" only, and save_checkpoint's old keyword is refused."""
    import torch

    from seq2d.train.checkpoint import load_checkpoint, save_checkpoint

    path = ROOT / "tests/fixtures/dense_box/run/checkpoint.pt"
    assert torch.load(path, weights_only=True)["step"] == 4
    ck = load_checkpoint(path)
    assert ck["update"] == 4 and "step" not in ck
    model = seq2d.mlp([3, 2])
    save_checkpoint(tmp_path / "c.pt", model=model, optimizer=None, epoch=1, update=5, config=TrainConfig(sizes=[3, 2]))
    saved = torch.load(tmp_path / "c.pt", weights_only=True)
    assert saved["update"] == 5 and "step" not in saved
    with pytest.raises(TypeError, match="step"):
        save_checkpoint(tmp_path / "d.pt", model=model, optimizer=None, epoch=1, step=5, config=TrainConfig(sizes=[3, 2]))


def test_max_steps_loads_as_max_updates_and_keeps_its_hash(tmp_path):
    """The config field: a saved config with max_steps loads (dict, config.toml), hashes as recorded;
    the old keyword, key and flag get the "now called" error."""
    from seq2d.cli import main
    from seq2d.train.config import save_config

    new = TrainConfig(sizes=[16, 8, 4], epochs=2, max_updates=7)
    old = {("max_steps" if k == "max_updates" else k): v for k, v in config_to_dict(new).items()}
    assert config_from_dict(old) == new and config_hash(old) == config_hash(new)
    path = tmp_path / "config.toml"
    save_config(new, path)
    path.write_text(path.read_text().replace("max_updates = 7", "max_steps = 7"))
    assert "max_steps = 7" in path.read_text() and load_config(path).max_updates == 7
    with pytest.raises(TypeError, match=r"^TrainConfig got max_steps=7; it is now called max_updates=7$"):
        TrainConfig(max_steps=7)
    with pytest.raises(ValueError, match=r"'max_steps' is the old name of 'max_updates'; give 'max_updates' only"):
        config_from_dict({"max_steps": 3, "max_updates": 3})
    with pytest.raises(ValueError, match=r"override: key 'max_steps' is now 'max_updates'"):
        load_config(None, ["max_steps=3"])
    for command in ("train", "mnist"):
        with pytest.raises(SystemExit):
            main([command, "--max-steps", "2"])


def test_a_run_written_now_says_update_everywhere(tmp_path):
    """The other way round: what a run writes today uses the new words only."""
    from seq2d.train.trainer import Trainer, build_model, synthetic_data

    cfg = TrainConfig(sizes=[16, 8, 4], data="synthetic", epochs=1, batch_size=32, max_updates=3, num_threads=1,
                      quiet=True, out_dir=str(tmp_path / "run"))
    s = Trainer(cfg, build_model(cfg), synthetic_data(16, 4, n_train=128, n_test=64)).fit()
    assert s["updates"] == 3 and s["stopped_by"] == "max_updates" and "steps" not in s
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["update"] == 3 and "step" not in rec and "max_updates" in rec["config"]
    assert (tmp_path / "run" / "metrics.csv").read_text().startswith("epoch,update,")
    assert '"update": 3' in (tmp_path / "run" / "metrics.jsonl").read_text()


def test_a_callback_with_the_old_hook_name_is_refused(tmp_path):
    """A callback that still defines on_step_end (its hook before issue 36) would never be called:
    the Trainer refuses it and names the new hook; one that defines both is accepted."""
    from seq2d.errors import InvalidValue
    from seq2d.train import Trainer, TrainConfig, build_model, load_data

    class Old:
        def on_step_end(self, trainer, step):
            pass

    class Both(Old):
        def on_update_end(self, trainer, update):
            pass

    assert OLD_NAMES["hook"] == {"on_step_end": "on_update_end"}
    cfg = TrainConfig(data="synthetic", sizes=[16, 8, 4], epochs=1, quiet=True, out_dir=str(tmp_path / "run"))
    model, data = build_model(cfg), load_data(cfg)
    with pytest.raises(InvalidValue, match=r"callback Old defines on_step_end\(trainer, step\); the hook is now "
                                           r"called on_update_end\(trainer, update\)"):
        Trainer(cfg, model, data, callbacks=[Old()])
    Trainer(cfg, model, data, callbacks=[Both()])
