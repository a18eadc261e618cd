"""The committed runs keep their identity: a run's ``config_hash`` (seq2d/train/identity.py)
recomputed from the config its ``run.json`` records equals the hash recorded there, its model is
a registered name, and its folder is the `seq2d mnist` name (seq2d.lab.mnist_comparison.MODELS) whose
fields it records. A resumed 100-epoch run finds its checkpoint only while all three hold."""

from pathlib import Path

import json

import pytest

import seq2d

from seq2d.lab.mnist_comparison import MODELS
from seq2d.models import list_models
from seq2d.train.config import config_from_dict, renamed_fields
from seq2d.train.identity import config_hash

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted((ROOT / "experiments").glob("*/results/**/run.json"))


def test_committed_runs_exist():
    assert len(RUNS) >= 5, [str(p) for p in RUNS]


def _protocol_search():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "protocol_search", ROOT / "experiments" / "mnist_sparsity" / "protocol_search.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", RUNS, ids=[str(p.relative_to(ROOT / "experiments")) for p in RUNS])
def test_committed_run_identity(path):
    record = json.loads(path.read_text())
    cfg = record["config"]
    assert config_hash(cfg) == record["config_hash"], path
    # a saved file keeps loading under today's names (seq2d.renames.OLD_NAMES: "random" is "random_model"),
    # and the config it loads as keeps the recorded hash
    assert config_hash(config_from_dict(cfg)) == record["config_hash"], path
    cfg = renamed_fields(cfg)
    assert cfg["model"] in list_models(), cfg["model"]
    folder = path.parent.parent.name  # .../<mnist model name>/seed<k>/run.json
    if path.parent.parent.parent.name.startswith("protocol-search"):  # .../<model>-<candidate>/seed<k>/
        ps = _protocol_search()
        cand = next((c for c in ps.CANDIDATES if folder.endswith("-" + c)), None)
        assert cand is not None, folder
        folder = folder[:-len(cand) - 1]
        for field, value in ps.CANDIDATES[cand].items():
            assert cfg[field] == value, (path, field)
    assert folder in MODELS, folder
    for field, value in MODELS[folder].items():
        assert cfg[field] == value, (path, field)


def test_one_names_table():
    """The registry is the only table of model names: presets are keyed by registered names,
    the MNIST comparison's named configurations and the trainer's config name registered
    constructors, and an unknown name is an error with a did-you-mean hint."""
    from seq2d.lab.mnist_comparison import MODELS
    from seq2d.models.presets import PRESETS
    from seq2d.train.builder import build_model
    from seq2d.train.config import TrainConfig

    assert set(PRESETS) <= set(list_models())
    assert all(cfg["model"] in list_models() for cfg in MODELS.values()), MODELS
    with pytest.raises(ValueError, match=r"unknown model 'truncated-rnn' \(did you mean 'truncated_rnn'\?\)"):
        build_model(TrainConfig(model="truncated-rnn"))
    with pytest.raises(ValueError, match=r"Unknown model 'random_tile' \(did you mean 'random_tiles'\?\)"):
        seq2d.resolve_model("random_tile")
    from seq2d.lab.mnist_comparison import configs_for

    with pytest.raises(ValueError, match=r"Unknown model 'random_tiles' \(did you mean 'random_tile'\?\)"):
        configs_for({"data": "synthetic"}, ["random_tiles"])
    with pytest.raises(ValueError, match=r"'random-tile' is now called 'random_tile'"):
        configs_for({"data": "synthetic"}, ["random-tile"])
