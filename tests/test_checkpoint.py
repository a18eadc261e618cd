"""seq2d.train.checkpoint: atomic writes, the safe loader, and a clear CheckpointError for
every file that cannot be resumed from (never a silent fresh start)."""

import os
import random

import numpy as np
import pytest
import torch

import seq2d
import seq2d.train.checkpoint as ckmod
from seq2d.train import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    TrainConfig,
    capture_rng_state,
    check_resume_config,
    config_to_dict,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)


def write(path, **kw):
    model = kw.pop("model", None) or seq2d.mlp([6, 5, 3])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 6)).sum().backward()
    opt.step()  # non-empty optimizer state
    args = dict(model=model, optimizer=opt, epoch=3, update=42, config=TrainConfig(sizes=[6, 5, 3]),
                metrics={"history": [{"epoch": 1, "test_acc": 0.5}]}, extra={"batch": 0})
    args.update(kw)
    return save_checkpoint(path, **args), model, opt


@pytest.fixture
def good(tmp_path):
    path, model, opt = write(tmp_path / "ck.pt")
    return path, model, opt


def test_round_trip_with_the_safe_loader(good):
    path, model, opt = good
    ck = load_checkpoint(path)
    assert ck["format"] == FORMAT and ck["version"] == FORMAT_VERSION
    assert ck["epoch"] == 3 and ck["update"] == 42 and ck["extra"] == {"batch": 0}
    assert ck["config"] == config_to_dict(TrainConfig(sizes=[6, 5, 3]))
    assert all(torch.equal(ck["model"][k], v) for k, v in model.state_dict().items())  # saved and loaded: bitwise
    opt2 = torch.optim.Adam(seq2d.mlp([6, 5, 3]).parameters())
    opt2.load_state_dict(ck["optimizer"])
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    # the file really is weights_only-readable (tensors and plain values only)
    raw = torch.load(path, weights_only=True)
    assert isinstance(raw["torch_version"], str) and isinstance(raw["rng"]["torch"], torch.Tensor)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match="is a folder"):
        load_checkpoint(tmp_path)


def test_truncated_file(good, tmp_path):
    path, _, _ = good
    data = path.read_bytes()
    cut = tmp_path / "half.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"half\.pt' is truncated or corrupt \(\d+ bytes"):
        load_checkpoint(cut)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"empty \(0 bytes\)"):
        load_checkpoint(tmp_path / "empty.pt")


def test_corrupt_bytes(good, tmp_path):
    p = tmp_path / "random.pt"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointError, match="not a torch checkpoint"):
        load_checkpoint(p)
    # a zip with its pickle damaged in the middle (a flipped region, length unchanged)
    path, _, _ = good
    data = bytearray(path.read_bytes())
    start = data.find(b"data.pkl") + 100
    data[start:start + 64] = b"\xff" * 64
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "flipped.pt")


def test_foreign_files(tmp_path):
    model = seq2d.mlp([6, 5, 3])
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(CheckpointError, match="no 'format' tag.*plain state_dict"):
        load_checkpoint(tmp_path / "sd.pt")
    torch.save({"format": "lightning", "version": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="format tag is 'lightning', expected 'seq2d-checkpoint'"):
        load_checkpoint(tmp_path / "other.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list"):
        load_checkpoint(tmp_path / "list.pt")
    torch.save({"model": model}, tmp_path / "pickled.pt")  # a whole pickled module
    with pytest.raises(CheckpointError, match="refuses"):
        load_checkpoint(tmp_path / "pickled.pt")


def test_wrong_version_and_missing_entries(good, tmp_path):
    path, _, _ = good
    ck = torch.load(path, weights_only=True)
    ck["version"] = 99
    torch.save(ck, tmp_path / "v99.pt")
    with pytest.raises(CheckpointError, match=r"format version 99; this seq2d reads version 1 only"):
        load_checkpoint(tmp_path / "v99.pt")
    ck["version"] = FORMAT_VERSION
    del ck["optimizer"]
    torch.save(ck, tmp_path / "noopt.pt")
    with pytest.raises(CheckpointError, match="required entry 'optimizer' is missing"):
        load_checkpoint(tmp_path / "noopt.pt")


def test_config_mismatch_names_the_fields():
    saved = config_to_dict(TrainConfig(sizes=[6, 5, 3], lr=0.1))
    check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.1, epochs=99, device="cpu", out_dir="x"))
    check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.1, model_seed=0))  # None = seed = 0
    with pytest.raises(CheckpointError, match=r"model-defining fields differ .*sizes: checkpoint \[6, 5, 3\], now \[6, 4, 3\]"):
        check_resume_config(saved, TrainConfig(sizes=[6, 4, 3], lr=0.1), "ck.pt")
    with pytest.raises(CheckpointError) as info:
        check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2, batch_size=8, activation="tanh"))
    msg = str(info.value)
    assert "activation: checkpoint 'relu', now 'tanh'" in msg and "training fields differ" in msg
    assert "lr: checkpoint 0.1, now 0.2" in msg and "batch_size: checkpoint 64, now 8" in msg
    assert "epochs" in msg.split("Fields that may change on resume: ")[1]
    with pytest.raises(CheckpointError, match="not a valid TrainConfig.*unknown key 'lr_decay'"):
        check_resume_config({**saved, "lr_decay": 0.5}, TrainConfig())


def test_a_crash_while_writing_keeps_the_previous_checkpoint(good, monkeypatch):
    path, model, _ = good
    before = path.read_bytes()

    def torn_save(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(ckmod.torch, "save", torn_save)
    with pytest.raises(KeyboardInterrupt):
        write(path, epoch=4)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert load_checkpoint(path)["epoch"] == 3
    assert sorted(os.listdir(path.parent)) == ["ck.pt"]  # no temporary file left behind


def test_rng_states_round_trip():
    g = torch.Generator().manual_seed(5)
    torch.manual_seed(1), random.seed(2), np.random.seed(3)
    state = capture_rng_state({"shuffle": g})
    first = (torch.rand(3), random.random(), np.random.rand(), torch.rand(2, generator=g))
    torch.manual_seed(9), random.seed(9), np.random.seed(9), g.manual_seed(9)
    restore_rng_state(state, {"shuffle": g})
    again = (torch.rand(3), random.random(), np.random.rand(), torch.rand(2, generator=g))
    assert torch.equal(first[0], again[0]) and first[1:3] == again[1:3] and torch.equal(first[3], again[3])
    with pytest.raises(CheckpointError, match="no state for generator 'augment'"):
        restore_rng_state(state, {"augment": g})


def test_save_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError, match="epoch must be an int >= 0"):
        write(tmp_path / "x.pt", epoch=-1)
    with pytest.raises(TypeError, match="config must be a TrainConfig or a dict"):
        write(tmp_path / "x.pt", config="lr=1")


def test_an_incomplete_rng_state_is_a_checkpoint_error_naming_file_and_entry(good, tmp_path):
    path, _, _ = good
    ck = torch.load(path, weights_only=True)
    del ck["rng"]["torch"]  # used to escape as KeyError: 'torch'
    torch.save(ck, tmp_path / "norng.pt")
    with pytest.raises(CheckpointError, match=r"norng\.pt': the RNG state is incomplete or malformed: rng\['torch'\] is missing"):
        load_checkpoint(tmp_path / "norng.pt")
    state = capture_rng_state()
    del state["python"]["gauss"]
    with pytest.raises(CheckpointError, match=r"run/ck\.pt: .*rng\['python'\]\['gauss'\] is missing"):
        restore_rng_state(state, where="run/ck.pt")


def test_resume_config_check_with_allowed_changes():
    saved = config_to_dict(TrainConfig(sizes=[6, 5, 3], lr=0.1))
    with pytest.raises(CheckpointError, match=r"lr: checkpoint 0\.1, now 0\.2.*pass allow_changed=\('lr',\)\.") as e:
        check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2))
    assert "--" not in str(e.value)  # the API's terms only (issue 18); the CLI's: tests/test_faults.py
    from seq2d.train.errors import cli_terms

    with cli_terms(), pytest.raises(CheckpointError, match=r"pass --allow-changed lr\.") as e:
        check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2))
    assert "allow_changed=" not in str(e.value)
    check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2), allow_changed=("lr",))
    check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2, optimizer="sgd"), allow_changed="lr,optimizer")
    with pytest.raises(CheckpointError, match="batch_size: checkpoint 64, now 8"):  # only the named fields
        check_resume_config(saved, TrainConfig(sizes=[6, 5, 3], lr=0.2, batch_size=8), allow_changed=("lr",))
    with pytest.raises(ValueError, match="field 'sizes' cannot be changed on resume"):
        check_resume_config(saved, TrainConfig(sizes=[6, 4, 3], lr=0.1), allow_changed=("sizes",))


def test_optimizer_state_shapes_are_checked(good):
    from seq2d.train.checkpoint import check_optimizer_state

    path, model, opt = good
    state = load_checkpoint(path)["optimizer"]
    check_optimizer_state(state, opt, "ck")
    state["state"][0]["exp_avg_sq"] = torch.zeros(2)
    with pytest.raises(CheckpointError, match=r"ck: optimizer\['state'\]\[0\]\['exp_avg_sq'\] has shape \(2,\), but its parameter has shape"):
        check_optimizer_state(state, opt, "ck")


def test_a_checkpoint_with_non_finite_weights_or_optimizer_state_is_refused_at_load(good, tmp_path):
    """A NaN checkpoint is not good (issue 18): load_checkpoint names the file and the first bad tensor."""
    path, _, _ = good
    ck = torch.load(path, weights_only=True)
    first = next(iter(ck["model"]))
    for name, how in (("allnan.pt", "nan"), ("oneinf.pt", "inf")):
        bad = torch.load(path, weights_only=True)
        for t in bad["model"].values():
            t.fill_(float("nan")) if how == "nan" else t.view(-1)[0].fill_(float("inf"))
        torch.save(bad, tmp_path / name)
        kind = r"NaN" if how == "nan" else r"inf"
        with pytest.raises(CheckpointError, match=rf"{name.replace('.', chr(92) + '.')}': model\['{first}'\] holds \d+ "
                                                  rf"non-finite value\(s\) \({kind}\) of \d+: .*cannot be resumed"):
            load_checkpoint(tmp_path / name)
    ck["optimizer"]["state"][1]["exp_avg_sq"].view(-1)[0] = float("nan")
    torch.save(ck, tmp_path / "optnan.pt")
    with pytest.raises(CheckpointError, match=r"optnan\.pt': optimizer\['state'\]\[1\]\['exp_avg_sq'\] holds 1 "
                                              r"non-finite value\(s\) \(NaN\)"):
        load_checkpoint(tmp_path / "optnan.pt")
