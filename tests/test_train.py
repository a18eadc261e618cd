"""seq2d.train: config, the training loop, metrics files, determinism, exact resume, NaN stops.

All runs are tiny (an MLP 16 -> 8 -> 4 on 256 synthetic Gaussian-cluster samples, one
thread) so the file takes a few seconds.
"""

import argparse
import csv
import dataclasses
import json
import tomllib

import pytest
import torch

import seq2d
from seq2d.train import (
    METRIC_COLUMNS,
    CheckpointError,
    DivergenceError,
    NonFiniteLossError,
    TrainConfig,
    Trainer,
    add_config_args,
    build_model,
    config_from_args,
    config_hash,
    config_from_dict,
    config_to_dict,
    epoch_permutation,
    load_checkpoint,
    load_config,
    read_metrics,
    save_config,
    synthetic_data,
)
from seq2d.train.builder import resolve_device

DATA = synthetic_data(16, 4, n_train=256, n_test=128)
# the device TrainConfig's default device="auto" resolves to: cuda (this process's GPU) when available
AUTO_DEVICE = str(resolve_device("auto"))


def cfg_for(tmp_path, name="run", **kw):
    base = dict(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=2, batch_size=32, lr=1e-2,
                out_dir=str(tmp_path / name), num_threads=1, quiet=True)
    base.update(kw)
    return TrainConfig(**base)


def fit(cfg, *, resume=False, augment=None, callbacks=(), data=DATA):
    model = build_model(cfg)
    trainer = Trainer(cfg, model, data, augment=augment, callbacks=callbacks)
    summary = trainer.fit(resume=resume)
    return trainer, summary


def same_state(a: dict, b: dict) -> bool:
    """Bitwise: only for one configuration (a seed, a resumed run) compared with itself."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def strip_time(rows):
    return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in rows]


def noise_augment(xb, g):
    """A batched augmentation drawing from the trainer's generator (tests its RNG stream)."""
    return xb + 0.1 * torch.randn(xb.shape, generator=g, device=xb.device)


# ---------------------------------------------------------------------- a run's outputs
def test_run_trains_and_writes_config_metrics_checkpoint(tmp_path):
    cfg = cfg_for(tmp_path)
    trainer, s = fit(cfg)
    out = cfg.run_dir()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "config.toml", "metrics.csv", "metrics.jsonl",
                                                     "run.json", "test_predictions.npz"]  # the lock is gone once the run ends
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "complete" and record["update"] == 16 and record["config_hash"] == config_hash(cfg)
    assert s["status"] == "complete" and s["complete"] is True and s["stopped_by"] is None
    rows = read_metrics(out)
    assert [r["epoch"] for r in rows] == [1, 2]
    assert [r["update"] for r in rows] == [8, 16]  # 256 samples / 32 per update
    assert all(tuple(r) == METRIC_COLUMNS for r in rows)
    with open(out / "metrics.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == METRIC_COLUMNS and len(table) == 2
    assert float(table[1]["test_acc"]) == rows[1]["test_acc"]
    assert rows[0]["device"] == AUTO_DEVICE and rows[0]["world_size"] == 1 and rows[0]["lr"] == 1e-2
    # it learned something: 4 classes, chance is 0.25
    assert rows[1]["test_acc"] > 0.5 and rows[1]["train_loss"] < rows[0]["train_loss"]
    assert load_config(out / "config.toml") == cfg
    ck = load_checkpoint(out / "checkpoint.pt")
    assert ck["epoch"] == 2 and ck["update"] == 16 and config_from_dict(ck["config"]) == cfg
    assert same_state(ck["model"], trainer.model.state_dict())
    assert s["final_test_acc"] == rows[1]["test_acc"] and s["params"] == seq2d.mlp([16, 8, 4]).num_parameters()
    assert s["best_test_acc"] == max(r["test_acc"] for r in rows) and s["epochs"] == 2 and s["device"] == AUTO_DEVICE


def test_the_last_epoch_writes_per_example_test_predictions(tmp_path):
    import numpy as np
    import torch.nn.functional as F

    cfg = cfg_for(tmp_path)
    trainer, s = fit(cfg)
    d = np.load(cfg.run_dir() / "test_predictions.npz")
    assert d["pred"].shape == d["target"].shape == d["nll"].shape == (128,) and int(d["epoch"]) == 2
    assert (d["target"] == DATA["test"][1].numpy()).all()
    assert (d["pred"] == d["target"]).mean() == s["final_test_acc"]  # the same evaluation as the metrics row
    assert abs(float(d["nll"].astype("float64").mean()) - s["final_test_loss"]) < 1e-6
    X, y = DATA["test"]
    with torch.no_grad():
        out = trainer.model(X)
    assert (d["pred"] == out.argmax(-1).numpy()).all()
    torch.testing.assert_close(torch.from_numpy(d["nll"]), F.cross_entropy(out, y, reduction="none"), atol=1e-5, rtol=1e-5)
    # a stop by max_updates is not the last epoch: nothing written
    cfg2 = cfg_for(tmp_path, "partial", max_updates=3)
    fit(cfg2)
    assert not (cfg2.run_dir() / "test_predictions.npz").exists()


def test_callbacks_see_every_step_and_add_metrics(tmp_path):
    class Probe:
        def __init__(self):
            self.steps, self.epochs = [], []

        def on_update_end(self, trainer, update):
            self.steps.append(update)

        def on_epoch_end(self, trainer, epoch, row):
            self.epochs.append(epoch)
            return {"weight_norm": float(trainer.model.block(1, 0).weight.detach().norm())}

    probe = Probe()
    cfg = cfg_for(tmp_path)
    fit(cfg, callbacks=[probe])
    assert probe.steps == list(range(1, 17)) and probe.epochs == [1, 2]
    rows = read_metrics(cfg.run_dir())
    assert all("weight_norm" in r for r in rows)
    with open(cfg.run_dir() / "metrics.csv") as f:
        assert next(csv.reader(f))[-1] == "weight_norm"


def test_refuses_to_overwrite_a_run_unless_told(tmp_path):
    cfg = cfg_for(tmp_path, epochs=1)
    fit(cfg)
    with pytest.raises(FileExistsError, match="resume=True"):
        fit(cfg_for(tmp_path, epochs=1, lr=0.5))  # another config (the same one is reused)
    model = build_model(cfg)
    Trainer(cfg, model, DATA).fit(overwrite=True)
    assert len(read_metrics(cfg.run_dir())) == 1


def test_epoch_order_depends_on_seed_and_epoch_only():
    a, b = epoch_permutation(100, 0, 3), epoch_permutation(100, 0, 3)
    assert torch.equal(a, b) and sorted(a.tolist()) == list(range(100))
    assert not torch.equal(a, epoch_permutation(100, 0, 4))
    assert not torch.equal(a, epoch_permutation(100, 1, 3))


# ---------------------------------------------------------------------- determinism and resume
def test_same_seed_gives_bitwise_identical_weights(tmp_path):
    t1, _ = fit(cfg_for(tmp_path, "a", seed=3))
    torch.manual_seed(12345)  # the global RNG state before the run must not matter
    t2, _ = fit(cfg_for(tmp_path, "b", seed=3))
    t3, _ = fit(cfg_for(tmp_path, "c", seed=4))
    assert same_state(t1.model.state_dict(), t2.model.state_dict())
    assert not same_state(t1.model.state_dict(), t3.model.state_dict())
    assert strip_time(t1.history) == strip_time(t2.history)


def test_resume_after_an_epoch_is_bitwise_exact(tmp_path):
    straight, _ = fit(cfg_for(tmp_path, "straight"))
    fit(cfg_for(tmp_path, "split", epochs=1))
    resumed, _ = fit(cfg_for(tmp_path, "split", epochs=2), resume=True)
    assert same_state(straight.model.state_dict(), resumed.model.state_dict())
    a, b = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert all(same_state(a["state"][k], b["state"][k]) for k in a["state"])
    assert strip_time(read_metrics(tmp_path / "straight")) == strip_time(read_metrics(tmp_path / "split"))
    assert resumed.updates == straight.updates == 16


def test_resume_in_the_middle_of_an_epoch_with_augmentation_is_exact(tmp_path):
    straight, _ = fit(cfg_for(tmp_path, "straight"), augment=noise_augment)
    part, _ = fit(cfg_for(tmp_path, "split", max_updates=11), augment=noise_augment)  # epoch 2, batch 3 of 8
    assert part.updates == 11 and part.epoch == 1
    ck = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert ck["epoch"] == 1 and ck["update"] == 11 and ck["extra"]["batch"] == 3
    rows = read_metrics(tmp_path / "split")
    assert [r["epoch"] for r in rows] == [1, 1.375]  # the partial epoch is shown, not kept in the history
    resumed, _ = fit(cfg_for(tmp_path, "split"), resume=True, augment=noise_augment)
    assert same_state(straight.model.state_dict(), resumed.model.state_dict())
    assert strip_time(read_metrics(tmp_path / "straight")) == strip_time(read_metrics(tmp_path / "split"))


def test_resume_without_a_checkpoint_never_starts_fresh(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        fit(cfg_for(tmp_path), resume=True)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_resume_with_a_changed_training_field_is_refused(tmp_path):
    fit(cfg_for(tmp_path, epochs=1))
    with pytest.raises(CheckpointError, match=r"lr: checkpoint 0\.01, now 0\.5"):
        fit(cfg_for(tmp_path, epochs=2, lr=0.5), resume=True)


def test_resume_into_a_different_model_object_is_refused(tmp_path):
    cfg = cfg_for(tmp_path, epochs=1)
    fit(cfg)
    other = seq2d.mlp([16, 5, 4])  # the caller's own model, not the one the config describes
    # refused before anything is loaded, as another model (a CheckpointError too)
    with pytest.raises(CheckpointError, match=r"the model differs from the one it trained: sizes \[16, 8, 4\] -> \[16, 5, 4\]"):
        Trainer(dataclasses.replace(cfg, epochs=2), other, DATA).fit(resume=True)


# ---------------------------------------------------------------------- NaN / inf
class PoisonAt:
    """Sets one weight to NaN after optimizer step ``step`` (the next forward gives a NaN loss)."""

    def __init__(self, step):
        self.at = step

    def on_update_end(self, trainer, update):
        if update == self.at:
            with torch.no_grad():
                trainer.model.block(1, 0).weight[0, 0] = float("nan")


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    cfg = cfg_for(tmp_path, epochs=3)
    before = None

    class Snapshot:
        def on_epoch_end(self, trainer, epoch, row):
            nonlocal before
            before = {k: v.clone() for k, v in trainer.model.state_dict().items()}

    with pytest.raises(NonFiniteLossError) as info:
        fit(cfg, callbacks=[Snapshot(), PoisonAt(11)])  # epoch 2 has steps 9..16
    err = info.value
    msg = str(err)
    assert "training loss is nan at epoch 2, update 12" in msg
    assert str(cfg.run_dir() / "checkpoint.pt") in msg and "after 1 epochs" in msg
    assert err.epoch == 2 and err.update == 12 and err.checkpoint == cfg.run_dir() / "checkpoint.pt"
    ck = load_checkpoint(err.checkpoint)
    assert ck["epoch"] == 1 and ck["update"] == 8
    assert all(torch.isfinite(v).all() for v in ck["model"].values())
    assert same_state(ck["model"], before)
    assert [r["epoch"] for r in read_metrics(cfg.run_dir())] == [1]


def test_nan_in_the_first_epoch_says_there_is_no_checkpoint(tmp_path):
    cfg = cfg_for(tmp_path)
    with pytest.raises(NonFiniteLossError, match="No checkpoint was written yet") as info:
        fit(cfg, callbacks=[PoisonAt(2)])
    assert info.value.checkpoint is None and not (cfg.run_dir() / "checkpoint.pt").exists()


def test_diverging_lr_is_caught(tmp_path):
    # a huge SGD step on an unnormalised input blows the weights up to inf within the first epoch
    data = {"train": (DATA["train"][0] * 1e4, DATA["train"][1]), "test": DATA["test"]}
    cfg = cfg_for(tmp_path, lr=1e12, optimizer="sgd", epochs=1, divergence_factor=None)  # NaN/inf only
    with pytest.raises(NonFiniteLossError, match="loss is (nan|inf)"):
        fit(cfg, data=data)
    # by default the explosion is caught earlier, while the loss is still finite
    cfg = cfg_for(tmp_path, "default", lr=1e12, optimizer="sgd", epochs=1)
    with pytest.raises(DivergenceError, match=r"smoothed training loss .* exceeds divergence_factor x its lowest value "
                                              r"\(1000 x .*at epoch 1, update 2 \(batch 2 of 8\)") as info:
        fit(cfg, data=data)
    assert not isinstance(info.value, NonFiniteLossError) and info.value.update == 2
    assert json.loads((tmp_path / "default" / "run.json").read_text())["status"] == "diverged"


# ---------------------------------------------------------------------- config
def test_unknown_key_is_rejected_with_the_valid_list(tmp_path):
    with pytest.raises(ValueError, match=r"unknown key 'epoch' \(did you mean 'epochs'\?\)\. Valid keys: model, sizes"):
        load_config({"epoch": 3})
    p = tmp_path / "c.toml"
    p.write_text('epochs = 2\nbatchsize = 8\n')
    with pytest.raises(ValueError, match=r"c\.toml: unknown key 'batchsize' \(did you mean 'batch_size'\?\)"):
        load_config(p)
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        load_config(None, ["nope=1"])
    p.write_text('[train]\nepochs = 2\n')
    with pytest.raises(ValueError, match="flat"):
        load_config(p)


def test_bad_types_and_values_are_rejected():
    with pytest.raises(TypeError, match=r"config field 'epochs': expected int, got str '3'"):
        load_config({"epochs": "3"})
    with pytest.raises(TypeError, match=r"'lr': expected float, got bool True"):
        TrainConfig(lr=True)
    with pytest.raises(TypeError, match=r"'sizes\[1\]': expected int, got float 2\.5"):
        load_config({"sizes": [4, 2.5]})
    with pytest.raises(TypeError, match="'steps': expected int or None"):
        load_config({"steps": "x"})
    with pytest.raises(ValueError, match=r"'optimizer': unknown value 'adamw' \(did you mean 'adam'\?\)\. Select from 'adam', 'sgd'"):
        load_config({"optimizer": "adamw"})
    with pytest.raises(ValueError, match="'batch_size': expected a positive int, got 0"):
        load_config({"batch_size": 0})
    with pytest.raises(ValueError, match=r"probability in \[0, 1\]"):
        load_config({"erasing_p": 1.5})
    with pytest.raises(TypeError, match=r"'epochs': expected int, got the string 'two'"):
        load_config(None, ["epochs=two"])


def test_overrides_are_parsed_to_the_field_types():
    cfg = load_config({"epochs": 5}, ["sizes=784,100,10", "lr=3e-4", "download=true", "model_seed=none",
                                      "steps=2", "batch-size=128", "name=x"])
    assert cfg.sizes == [784, 100, 10] and cfg.lr == 3e-4 and cfg.download is True
    assert cfg.model_seed is None and cfg.steps == 2 and cfg.batch_size == 128 and cfg.epochs == 5
    assert load_config(None, {"lr": 1}).lr == 1.0 and isinstance(load_config(None, {"lr": 1}).lr, float)
    assert load_config(None, ["sizes=[4, 3]"]).sizes == [4, 3]


def test_toml_and_dict_round_trip(tmp_path):
    cfg = TrainConfig(sizes=[9, 5, 3], steps=4, lr=0.25, data_root=None, model_seed=7, name="x", download=True)
    save_config(cfg, tmp_path / "c.toml")
    text = (tmp_path / "c.toml").read_text()
    assert "sizes = [9, 5, 3]" in text and "# data_root = (None)" in text and "# passes over the training set" in text
    assert load_config(tmp_path / "c.toml") == cfg
    assert tomllib.loads(text)["lr"] == 0.25
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert json.loads(json.dumps(config_to_dict(cfg))) == config_to_dict(cfg)


def test_command_line_flags(tmp_path):
    (tmp_path / "c.toml").write_text("epochs = 7\nlr = 0.5\nbatch_size = 16\n")
    ap = add_config_args(argparse.ArgumentParser())
    args = ap.parse_args(["--config", str(tmp_path / "c.toml"), "--set", "lr=0.1", "--batch-size", "8",
                          "--sizes", "16", "8", "4", "--download", "--model-seed", "none"])
    cfg = config_from_args(args)
    assert (cfg.epochs, cfg.lr, cfg.batch_size, cfg.sizes, cfg.download, cfg.model_seed) == (7, 0.1, 8, [16, 8, 4], True, None)
    assert config_from_args(ap.parse_args([])) == TrainConfig()
    assert config_from_args(ap.parse_args(["--no-download"]), base={"download": True}).download is False
    # layers: base < --config file < --set < flags
    layered = config_from_args(ap.parse_args(["--config", str(tmp_path / "c.toml")]), base={"epochs": 1, "seed": 5})
    assert (layered.epochs, layered.seed, layered.lr) == (7, 5, 0.5)
    assert "(default: 64)" in ap.format_help()  # the dataclass default is the flag's help
    with pytest.raises(TypeError, match="'epochs'"):
        config_from_args(ap.parse_args(["--epochs", "1.5"]))



# ---------------------------------------------------------------------- a model that cannot see its input
def test_a_model_whose_output_cannot_see_its_input_is_refused_before_training(tmp_path):
    """Issue 31: steps=1 on the MLP 16 -> 8 -> 4 (output 2 blocks from the input) trained a
    constant predictor to the end with only a warning; now the Trainer refuses it before anything
    is trained or written, naming the output slot, the distance and the steps it needs."""
    from seq2d.train.errors import ConstantOutputError

    cfg = cfg_for(tmp_path, steps=1)
    with pytest.raises(ConstantOutputError, match=r"refusing to train a model whose output cannot see its input "
                                                  r"\(steps=1 is smaller than the distance from the input slots \[0\] "
                                                  r"to output slot 2 \(2 blocks\).*; steps=1\): the trained model "
                                                  r"would predict a constant. Give it at least 2 steps "
                                                  r"\(steps=2;.*set allow_constant_output=True in the TrainConfig") as e:
        Trainer(cfg, build_model(cfg), DATA)
    assert isinstance(e.value, ValueError) and (e.value.slot, e.value.distance, e.value.steps) == (2, 2, 1)
    assert not (tmp_path / "run").exists()
    # no path at all: slot 2 reads only slot 1, which nothing feeds (held at zero, not an input)
    blind = seq2d.Sequential2D([16, 8, 4], {(2, 1): seq2d.LinearBlock(8, 4)}, inputs=[0], outputs=[2], steps=1)
    with pytest.raises(ConstantOutputError, match=r"output slot 2 cannot be reached from any input slot \[0\].*"
                                                  r"whatever the number of steps\): the trained model would predict a "
                                                  r"constant. Add a path of blocks from an input slot to slot 2") as e:
        Trainer(cfg_for(tmp_path), blind, DATA)
    assert e.value.distance is None
    # the explicit override trains it (and the forward call warns, as before)
    allowed = cfg_for(tmp_path, "allowed", steps=1, allow_constant_output=True)
    with pytest.warns(UserWarning, match="needs steps >= 2"):
        _, summary = fit(allowed)
    assert summary["epochs"] == 2
    fit(cfg_for(tmp_path, "two", steps=2))  # enough steps: no refusal


def test_the_override_leaves_every_config_hash_as_it_was():
    """allow_constant_output defaults to False, and fields at their default are left out of the
    hash: every existing config (and every committed run.json) hashes as before; a resume may
    change the field."""
    from seq2d.train.config import RESUME_FREE_FIELDS

    cfg = TrainConfig(sizes=[16, 8, 4], steps=3)
    before = {k: v for k, v in config_to_dict(cfg).items() if k != "allow_constant_output"}
    assert config_hash(cfg) == config_hash(before)
    assert config_hash(dataclasses.replace(cfg, allow_constant_output=True)) != config_hash(cfg)
    assert "allow_constant_output" in RESUME_FREE_FIELDS

# ---------------------------------------------------------------------- model building
def test_build_model_from_the_config():
    a = build_model(TrainConfig(sizes=[16, 8, 4]))
    b = build_model(TrainConfig(sizes=[16, 8, 4]))
    c = build_model(TrainConfig(sizes=[16, 8, 4], seed=1))
    d = build_model(TrainConfig(sizes=[16, 8, 4], seed=1, model_seed=0))
    assert same_state(a.state_dict(), b.state_dict()) and same_state(a.state_dict(), d.state_dict())
    assert not same_state(a.state_dict(), c.state_dict())
    rng = torch.get_rng_state()
    assert build_model(TrainConfig(sizes=[16, 8, 4], steps=1)).steps == 1
    assert torch.equal(rng, torch.get_rng_state())  # building leaves the global RNG alone
    assert build_model(TrainConfig(model="mlp:16,8,4")).sizes == (16, 8, 4)
    with pytest.raises(ValueError, match=r"'granularity' are set, but model 'mlp' does not use them"):
        build_model(TrainConfig(sizes=[16, 8, 4], granularity="tile"))
    with pytest.raises(ValueError, match="unknown model 'mpl'. Select from .*'mlp'"):
        build_model(TrainConfig(model="mpl"))


def test_model_and_data_sizes_must_agree(tmp_path):
    with pytest.raises(ValueError, match="the model takes 16 input features but the data has 9"):
        Trainer(cfg_for(tmp_path), seq2d.mlp([16, 8, 4]), synthetic_data(9, 4, n_train=8, n_test=8))
    with pytest.raises(ValueError, match="must divide evenly over"):
        from seq2d.train import DistContext

        Trainer(cfg_for(tmp_path, batch_size=33), seq2d.mlp([16, 8, 4]), DATA, dist=DistContext(world_size=2))


# ---------------------------------------------------------------------- partial runs, run folders (issue 11)
def test_a_max_updates_stop_is_evaluated_and_recorded_as_partial(tmp_path):
    trainer, s = fit(cfg_for(tmp_path, max_updates=3))
    assert s["status"] == "partial" and s["complete"] is False and s["stopped_by"] == "max_updates"
    assert s["final_test_acc"] == read_metrics(tmp_path / "run")[-1]["test_acc"] and s["best_epoch"] == 0.375
    assert s["time_per_epoch_s"] > 0 and s["epochs"] == 0 and s["updates"] == 3
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "partial"
    # resumed with the same max_updates: nothing to do, still partial, same numbers
    _, again = fit(cfg_for(tmp_path, max_updates=3), resume=True)
    assert again["status"] == "partial" and again["final_test_acc"] == s["final_test_acc"] and again["updates"] == 3
    _, done = fit(cfg_for(tmp_path), resume=True)
    assert done["status"] == "complete" and done["updates"] == 16


def test_seq2d_train_with_max_updates_and_with_no_epochs(tmp_path, capsys):
    from seq2d.cli import main

    args = ["train", "--data", "synthetic", "--sizes", "16,8,4", "--epochs", "2", "--num-threads", "1"]
    assert main(args + ["--max-updates", "3", "--out-dir", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "epoch 0.375/2  update 3" in out and "(stopped by max_updates)" in out
    assert "final test accuracy" in out and "partial run: stopped by max_updates after 3 updates (0 of 2 epochs finished)" in out
    assert main(["train", "--data", "synthetic", "--sizes", "16,8,4", "--epochs", "0", "--out-dir", str(tmp_path / "b")]) == 0
    assert "no epoch was trained or evaluated (epochs = 0" in capsys.readouterr().out


def test_checkpoint_every_writes_mid_epoch_and_resumes_exactly(tmp_path):
    straight, _ = fit(cfg_for(tmp_path, "straight"), augment=noise_augment)

    class Stop(Exception):
        def __str__(self):
            return "stopped at update 11"

    class KillAt:
        def on_update_end(self, trainer, update):
            if update == 11:
                raise Stop  # after update 11; the checkpoint of update 10 is the last one

    with pytest.raises(Stop):
        fit(cfg_for(tmp_path, "split", checkpoint_every=5), augment=noise_augment, callbacks=[KillAt()])
    ck = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert (ck["epoch"], ck["update"], ck["extra"]["batch"]) == (1, 10, 2)
    record = json.loads((tmp_path / "split" / "run.json").read_text())
    assert (record["status"], record["error"]) == ("failed", "Stop: stopped at update 11")
    resumed, _ = fit(cfg_for(tmp_path, "split", checkpoint_every=5), resume=True, augment=noise_augment)
    assert same_state(straight.model.state_dict(), resumed.model.state_dict())
    assert strip_time(read_metrics(tmp_path / "straight")) == strip_time(read_metrics(tmp_path / "split"))


def test_temporary_files_of_an_interrupted_write_are_removed_at_the_next_start(tmp_path, capsys):
    fit(cfg_for(tmp_path, epochs=1))
    junk = [tmp_path / "run" / n for n in (".checkpoint.pt.tmp-999999", ".metrics.csv.tmp-1", ".run.lock.new-999999")]
    for p in junk:
        p.write_bytes(b"PK\x03\x04 half")
    fit(cfg_for(tmp_path, epochs=2), resume=True)
    assert not any(p.exists() for p in junk)
    err = capsys.readouterr().err
    assert "removed 3 temporary file(s)" in err and ".checkpoint.pt.tmp-999999" in err


def test_an_existing_run_names_what_differs(tmp_path):
    from seq2d.train import RunExistsError

    fit(cfg_for(tmp_path, epochs=1))
    with pytest.raises(RunExistsError, match=r"complete at update 8; its config differs: epochs 1 -> 2, lr 0\.01 -> 0\.5\)"):
        fit(cfg_for(tmp_path, epochs=2, lr=0.5))
    fit(cfg_for(tmp_path, "p", epochs=1, max_updates=3))  # a partial run: continued, never reused
    with pytest.raises(FileExistsError, match=r"partial \(stopped by max_updates at update 3\); same config\): pass "
                                              r"resume=True to continue that run, overwrite=True to start afresh, or "
                                              r"choose another out_dir/name$"):
        fit(cfg_for(tmp_path, "p", epochs=1, max_updates=3))


def test_a_complete_run_of_the_same_config_is_reused(tmp_path, capsys):
    """Issue 18: one rule for ``seq2d train`` and ``seq2d mnist``: a complete run of the same
    config hash is reused (nothing trained, its summary returned); anything else is refused."""
    cfg = cfg_for(tmp_path, epochs=1)
    first, s1 = fit(cfg)
    files = {p.name: p.read_bytes() for p in cfg.run_dir().iterdir() if p.is_file()}
    steps = []

    class Count:
        def on_update_end(self, trainer, update):
            steps.append(update)

    capsys.readouterr()
    again, s2 = fit(cfg_for(tmp_path, epochs=1, quiet=False, log_every=7), callbacks=[Count()])  # output fields may differ
    assert steps == [] and s2["reused"] and "reused" not in s1
    assert {k: s2[k] for k in ("final_test_acc", "updates", "epochs", "config_hash", "history")} == \
        {k: s1[k] for k in ("final_test_acc", "updates", "epochs", "config_hash", "history")}
    assert same_state(again.model.state_dict(), first.model.state_dict())  # the trained weights, loaded
    out = capsys.readouterr().out
    assert f"reusing the complete run in {cfg.run_dir()} (same config, hash {s1['config_hash']}): nothing to train; " \
           "overwrite=True trains it again" in out
    assert {p.name: p.read_bytes() for p in cfg.run_dir().iterdir() if p.is_file()} == files  # nothing written


def test_progress_lines_when_not_on_a_terminal(capsys):
    from seq2d.train.loop import EpochBar

    bar = EpochBar(True, tty=False, total=10, initial=0, desc="epoch 1/2", log_every=5, heartbeat_s=0.0)
    bar.update(3, 3, {"loss": 6.0, "correct": 2, "count": 4})
    bar.close()
    assert capsys.readouterr().out.startswith("  epoch 1/2: batch 3/10, update 3, loss 1.5000 acc 0.5000, ")
    EpochBar(False, tty=False, total=10, initial=0, desc="x", log_every=5, heartbeat_s=0.0).update(1, 1, {})
    assert capsys.readouterr().out == ""


def test_config_hash_ignores_fields_at_their_default():
    """A field at its default is left out of the hash, so adding a new field (default = the old
    behaviour) keeps finished runs reusable; a non-default value or another value changes it."""
    from seq2d.train import identity

    cfg = TrainConfig(model="mlp", epochs=3)
    d = dataclasses.asdict(cfg)
    # the hash of the dict with an extra field at a default must not move: simulate a config
    # written by an older seq2d that lacked a field, by dropping one at its default
    default_field = next(k for k, v in dataclasses.asdict(TrainConfig()).items()
                         if k not in identity.OUTPUT_FIELDS and k not in ("model", "epochs") and d[k] == v)
    older = {k: v for k, v in d.items() if k != default_field}
    assert config_hash(older) == config_hash(cfg)
    assert config_hash(dataclasses.replace(cfg, epochs=4)) != config_hash(cfg)
    assert config_hash(dataclasses.replace(cfg, lr=cfg.lr * 2)) != config_hash(cfg)


def _hash_before_the_rename(d: dict) -> str:
    """config_hash as seq2d computed it while ``store`` and ``kernel`` were one field, ``backend``
    (default "auto"): the identity every committed run and checkpoint was recorded with."""
    import hashlib

    from seq2d.train import identity

    defaults = {**config_to_dict(TrainConfig()), "backend": "auto"}
    kept = {k: v for k, v in d.items() if k not in identity.OUTPUT_FIELDS and defaults.get(k, object()) != v}
    text = json.dumps({"v": identity.HASH_VERSION, **kept}, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("value,field", [("auto", "store"), ("loop", "store"), ("dense", "store"), ("cpu", "kernel"),
                                         ("cpu_bmm", "kernel")])
def test_a_config_saved_with_the_old_backend_field_loads_and_keeps_its_identity(tmp_path, value, field):
    """A config written before ``backend`` became ``store`` (a store name) or ``kernel`` (a kernel
    name) loads from a dict (run.json, a checkpoint) and from config.toml, and hashes as before:
    a resumed run finds its folder and checkpoint."""
    from seq2d.train import config_diff

    new = config_to_dict(TrainConfig(model="random_model", granularity="tile", epochs=3))
    old = {"backend" if k == "store" else k: (value if k == "store" else v) for k, v in new.items()
           if k not in ("kernel", "loop", "steps")}  # as written then: before kernel, loop and steps
    old["model"] = "random"  # and before random_model (seq2d/renames.py OLD_NAMES)
    cfg = config_from_dict(old)
    if value == "loop":  # the old store 'loop' is now the dense store's loop mode (seq2d/stores/migrate.py)
        assert (cfg.store, cfg.loop, cfg.kernel) == ("dense", True, "auto")
    else:
        assert getattr(cfg, field) == value and getattr(cfg, {"store": "kernel", "kernel": "store"}[field]) == "auto"
    assert config_hash(cfg) == config_hash(old) == _hash_before_the_rename(old)
    assert config_diff(old, cfg) == {}
    text = (tmp_path / "config.toml")
    save_config(TrainConfig(), text)
    text.write_text(text.read_text().replace('store = "auto"', f'backend = "{value}"').replace('kernel = "auto"\n', "")
                    .replace("loop = false\n", ""))
    assert getattr(load_config(text), field) == (value if value != "loop" else "dense")
    with pytest.raises(ValueError, match=r"'backend' is the old name of 'store' and 'kernel'; give 'store' only"):
        config_from_dict({"backend": value, "store": "auto"})
    with pytest.raises(ValueError, match=r"override: key 'backend' is now 'store' or 'kernel'"):
        load_config(None, [f"backend={value}"])


def test_store_and_kernel_reach_the_constructors_that_take_them():
    from seq2d.core import core_of

    cfg = TrainConfig(model="random_model", granularity="tile", tile=16, sizes=[40, 20, 10], kernel="cpu_bmm")
    assert core_of(build_model(cfg)).store.matrix.kernel == "cpu_bmm"
    with pytest.raises(ValueError, match=r"config field\(s\) 'store' are set, but model 'random_model' does not use them"):
        build_model(dataclasses.replace(cfg, store="dense"))
    assert core_of(build_model(TrainConfig(model="from_mask", sizes=[6, 4, 2], store="dense", loop=True))).loop
    assert core_of(build_model(TrainConfig(model="mlp", sizes=[6, 4, 2], loop=True))).loop  # set on the model
    with pytest.raises(ValueError, match=r"TrainConfig got store='loop'; it is now called store='dense', loop=True"):
        TrainConfig(store="loop")


def test_a_config_saved_with_store_loop_loads_and_keeps_its_identity(tmp_path):
    """``store = "loop"`` (before the per-block loop became the dense store's mode) loads as
    ``store = "dense"``, ``loop = true`` (seq2d/renames.py OLD_NAMES) from a dict and from
    config.toml, and hashes as before."""
    old = {**config_to_dict(TrainConfig(model="from_mask", epochs=3)), "store": "loop"}
    del old["loop"]
    cfg = config_from_dict(old)
    assert (cfg.store, cfg.loop) == ("dense", True)
    as_backend = {("backend" if k == "store" else k): v for k, v in old.items() if k != "kernel"}  # hashed so then
    assert config_hash(cfg) == config_hash(old) == _hash_before_the_rename(as_backend)
    path = tmp_path / "config.toml"
    save_config(TrainConfig(), path)
    path.write_text(path.read_text().replace('store = "auto"', 'store = "loop"').replace("loop = false\n", ""))
    assert (load_config(path).store, load_config(path).loop) == ("dense", True)
    with pytest.raises(ValueError, match=r"store = 'loop' is the old spelling"):
        config_from_dict({"store": "loop", "loop": True})


def test_resume_from_a_nan_checkpoint_is_refused_before_training(tmp_path):
    """Issue 18: it used to train and then call the NaN checkpoint "the last good checkpoint"."""
    cfg = cfg_for(tmp_path, epochs=1)
    fit(cfg)
    path = tmp_path / "run" / "checkpoint.pt"
    ck = torch.load(path, weights_only=True)
    for t in ck["model"].values():
        t.fill_(float("nan"))
    torch.save(ck, path)
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt': model\['.*'\] holds \d+ non-finite value\(s\) \(NaN\)"):
        fit(cfg_for(tmp_path, epochs=2), resume=True)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before


def test_a_config_saved_with_iterations_loads_as_steps_and_keeps_its_identity(tmp_path):
    """``iterations`` (the config's name for the model's ``steps=`` until issue 36) loads as ``steps``
    from a dict and from config.toml, and hashes as before (under the old name); the old key in an
    override is the "now called" error."""
    new = config_to_dict(TrainConfig(sizes=[16, 8, 4], steps=3, epochs=2))
    old = {("iterations" if k == "steps" else k): v for k, v in new.items()}
    cfg = config_from_dict(old)
    assert cfg.steps == 3
    assert config_hash(cfg) == config_hash(old) == _hash_before_the_rename(old)
    path = tmp_path / "config.toml"
    save_config(cfg, path)
    path.write_text(path.read_text().replace("steps = 3", "iterations = 3"))
    assert "iterations = 3" in path.read_text() and load_config(path).steps == 3
    with pytest.raises(ValueError, match=r"'iterations' is the old name of 'steps'; give 'steps' only"):
        config_from_dict({"iterations": 3, "steps": 3})
    with pytest.raises(ValueError, match=r"override: key 'iterations' is now 'steps'"):
        load_config(None, ["iterations=3"])
