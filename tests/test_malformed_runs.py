"""Malformed training inputs (issue 11): every bad config value/type/key, command-line flag
and checkpoint gets a :class:`~seq2d.errors.Seq2DError` whose message names the config
field, the flag or the file (and the checkpoint entry). Each case is tiny (a 16 -> 8 -> 4 MLP
on synthetic data)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import seq2d
from seq2d.cli import main
from seq2d.errors import Seq2DError
from seq2d.train import (
    CheckpointError,
    TrainConfig,
    Trainer,
    build_model,
    load_checkpoint,
    load_config,
    synthetic_data,
)

DATA = synthetic_data(16, 4, n_train=256, n_test=128)


# ---------------------------------------------------------------------- config values and types
CONFIG_CASES = [
    # (id, fields, what the message must name)
    ("epochs-str", {"epochs": "3"}, "'epochs'"),
    ("epochs-negative", {"epochs": -1}, "'epochs'"),
    ("epochs-float", {"epochs": 2.5}, "'epochs'"),
    ("lr-bool", {"lr": True}, "'lr'"),
    ("lr-nan", {"lr": math.nan}, "'lr'"),
    ("lr-negative", {"lr": -1.0}, "'lr'"),
    ("lr-zero", {"lr": 0}, "'lr'"),
    ("sizes-one", {"sizes": [16]}, "'sizes'"),
    ("sizes-zero", {"sizes": [16, 0, 4]}, "'sizes'"),
    ("sizes-str", {"sizes": "16,8,4"}, "'sizes'"),
    ("sizes-float", {"sizes": [4, 2.5]}, "'sizes[1]'"),
    ("batch-zero", {"batch_size": 0}, "'batch_size'"),
    ("optimizer-unknown", {"optimizer": "adamw"}, "'optimizer'"),
    ("data-unknown", {"data": "mnist"}, "'data'"),
    ("device-unknown", {"device": "tpu"}, "'device'"),
    ("seed-negative", {"seed": -1}, "'seed'"),
    ("name-path", {"name": "a/b"}, "'name'"),
    ("erasing-over-1", {"erasing_p": 1.5}, "'erasing_p'"),
    ("threads-word", {"num_threads": "many"}, "'num_threads'"),
    ("threads-zero", {"num_threads": 0}, "'num_threads'"),
    ("max-updates-zero", {"max_updates": 0}, "'max_updates'"),
    ("max-steps-zero", {"max_steps": 0}, "'max_updates'"),  # the old key (seq2d/renames.py), read as today's
    ("checkpoint-every-zero", {"checkpoint_every": 0}, "'checkpoint_every'"),
    ("checkpoint-every-str", {"checkpoint_every": "5"}, "'checkpoint_every'"),
    ("divergence-below-1", {"divergence_factor": 0.5}, "'divergence_factor'"),
    ("divergence-inf", {"divergence_factor": math.inf}, "'divergence_factor'"),
    ("quiet-str", {"quiet": "yes"}, "'quiet'"),
    ("unknown-epoch", {"epoch": 3}, "'epoch'"),
    ("unknown-key", {"lr_decay": 0.1}, "'lr_decay'"),
]


@pytest.mark.parametrize("fields,names", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_bad_config_fields(fields, names):
    with pytest.raises(Seq2DError) as info:
        load_config(fields)
    assert names in str(info.value)


OVERRIDE_CASES = [
    ("epochs-word", ["epochs=two"], "'epochs'"),
    ("unknown", ["nosuch=1"], "'nosuch'"),
    ("no-equals", ["epochs"], "'epochs'"),
    ("bool-word", ["quiet=maybe"], "'quiet'"),
]


@pytest.mark.parametrize("overrides,names", [c[1:] for c in OVERRIDE_CASES], ids=[c[0] for c in OVERRIDE_CASES])
def test_bad_overrides(overrides, names):
    with pytest.raises(Seq2DError) as info:
        load_config(None, overrides)
    assert names in str(info.value)


TOML_CASES = [
    ("unknown-key", "epochs = 2\nbatchsize = 8\n", "'batchsize'"),
    ("a-table", "[train]\nepochs = 2\n", "'train'"),
    ("wrong-type", 'lr = "fast"\n', "'lr'"),
]


@pytest.mark.parametrize("text,names", [c[1:] for c in TOML_CASES], ids=[c[0] for c in TOML_CASES])
def test_bad_toml_files(text, names, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(Seq2DError) as info:
        load_config(path)
    assert names in str(info.value)


FLAG_CASES = [
    ("epochs-float", ["--epochs", "1.5"], "'epochs'"),
    ("checkpoint-every-negative", ["--checkpoint-every", "-3"], "'checkpoint_every'"),
    ("divergence-word", ["--divergence-factor", "big"], "'divergence_factor'"),
    ("allow-changed-model-field", ["--resume", "--allow-changed", "sizes"], "--allow-changed: field 'sizes'"),
    ("allow-changed-unknown", ["--resume", "--allow-changed", "lrr"], "--allow-changed: unknown field 'lrr' (did you mean 'lr'?)"),
    ("allow-changed-without-resume", ["--allow-changed", "lr"], "--allow-changed only applies when resuming"),
    ("missing-config-file", ["--config", "nope.toml"], "nope.toml"),
]


@pytest.mark.parametrize("flags,names", [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_bad_command_line_flags(flags, names, tmp_path, capsys):
    rc = main(["train", "--data", "synthetic", "--sizes", "16,8,4", "--epochs", "1", "--out-dir", str(tmp_path / "r"),
               *flags])
    err = capsys.readouterr().err
    assert rc == 2 and names in err and "Traceback" not in err
    assert err.startswith("seq2d: error: ")


# ---------------------------------------------------------------------- checkpoints
def _cfg(tmp_path, **kw):
    base = dict(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=2, batch_size=32, lr=1e-2,
                out_dir=str(tmp_path / "run"), num_threads=1, quiet=True)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """The payload of a real mid-epoch checkpoint (max_updates stop: extra holds batch and partial)."""
    tmp = tmp_path_factory.mktemp("good")
    cfg = _cfg(tmp, max_updates=3)
    Trainer(cfg, build_model(cfg), DATA).fit()
    path = tmp / "run" / "checkpoint.pt"
    return torch.load(path, weights_only=True), path.read_bytes()


def _deep(payload):
    """A copy deep enough that a case's edits leave the fixture alone."""
    import copy

    return copy.deepcopy(payload)


def _set(*keys, value=None, delete=False):
    def edit(ck):
        d = ck
        for k in keys[:-1]:
            d = d[k]
        if delete:
            del d[keys[-1]]
        else:
            d[keys[-1]] = value(d[keys[-1]]) if callable(value) else value
        return ck
    return edit


def _wrong_shape_model(ck):
    other = seq2d.mlp([16, 5, 4]).state_dict()
    ck["model"] = {k: v for k, v in other.items()}
    return ck


def _bad_optimizer_moment(ck):
    st = ck["optimizer"]["state"]
    first = next(iter(st))
    st[first]["exp_avg"] = torch.zeros(3, 3)
    return ck


def _two_groups(ck):
    ck["optimizer"]["param_groups"] = ck["optimizer"]["param_groups"] * 2
    return ck


# each case: (id, edit of the payload or raw bytes, what the message must name besides the file)
PAYLOAD_CASES = [
    ("missing-model", _set("model", delete=True), "'model' is missing"),
    ("missing-optimizer", _set("optimizer", delete=True), "'optimizer' is missing"),
    ("missing-epoch", _set("epoch", delete=True), "'epoch' is missing"),
    ("missing-update", _set("update", delete=True), "'update' is missing"),
    ("missing-config", _set("config", delete=True), "'config' is missing"),
    ("missing-rng", _set("rng", delete=True), "'rng' is missing"),
    ("missing-metrics", _set("metrics", delete=True), "'metrics' is missing"),
    ("no-format-tag", _set("format", delete=True), "'format' tag"),
    ("foreign-format", _set("format", value="lightning"), "format tag is 'lightning'"),
    ("version-99", _set("version", value=99), "format version 99"),
    ("epoch-str", _set("epoch", value="1"), "entry 'epoch' should be a int"),
    ("epoch-bool", _set("epoch", value=True), "entry 'epoch' should be a int"),
    ("update-negative", _set("update", value=-4), "entry 'update' should be an int >= 0"),
    ("rng-not-dict", _set("rng", value=[1, 2]), "entry 'rng' should be a dict"),
    ("rng-no-torch", _set("rng", "torch", delete=True), "rng['torch'] is missing"),
    ("rng-torch-dtype", _set("rng", "torch", value=lambda t: t.float()), "rng['torch'] should be the uint8 tensor"),
    ("rng-torch-short", _set("rng", "torch", value=lambda t: t[:100]), "rng['torch'] should be the uint8 tensor"),
    ("rng-python-no-state", _set("rng", "python", "state", delete=True), "rng['python']['state'] is missing"),
    ("rng-python-short", _set("rng", "python", "state", value=lambda s: s[:10]), "rng['python']['state'] should be"),
    ("rng-numpy-no-key", _set("rng", "numpy", "key", delete=True), "rng['numpy']['key'] is missing"),
    ("rng-generators-list", _set("rng", "generators", value=[1]), "rng['generators'] should be a dict"),
    ("model-wrong-shapes", _wrong_shape_model, "does not fit this model"),
    ("model-missing-key", lambda ck: _set("model", next(iter(ck["model"])), delete=True)(ck), "does not fit this model"),
    ("optimizer-moment-shape", _bad_optimizer_moment, "'exp_avg'] has shape (3, 3)"),
    ("optimizer-two-groups", _two_groups, "does not fit this optimizer: it has 2 parameter group(s)"),
    ("optimizer-not-a-state", _set("optimizer", value={"x": 1}), "entry 'optimizer' is not an optimizer state_dict"),
    ("config-unknown-key", _set("config", "lr_decay", value=0.5), "unknown key 'lr_decay'"),
    ("config-bad-type", _set("config", "epochs", value="x"), "config field 'epochs'"),
    ("config-other-model", _set("config", "sizes", value=[16, 5, 4]), "sizes: checkpoint [16, 5, 4], now [16, 8, 4]"),
    ("config-other-lr", _set("config", "lr", value=0.5), "lr: checkpoint 0.5, now 0.01"),
    ("extra-not-dict", _set("extra", value=[0]), "entry 'extra' should be a dict"),
    ("extra-batch-out-of-range", _set("extra", "batch", value=99), "extra['batch'] should be an int in [0, 8)"),
    ("extra-batch-str", _set("extra", "batch", value="3"), "extra['batch'] should be an int"),
    ("extra-no-partial", _set("extra", "partial", delete=True), "extra['partial']"),
    ("extra-partial-keys", _set("extra", "partial", "count", delete=True), "extra['partial']['count']"),
    ("history-not-list", _set("metrics", "history", value={"epoch": 1}), "metrics['history'] should be a list"),
    ("not-a-dict", lambda ck: [1, 2, 3], "holds a list"),
    ("plain-state-dict", lambda ck: ck["model"], "plain state_dict"),
]


@pytest.mark.parametrize("edit,names", [c[1:] for c in PAYLOAD_CASES], ids=[c[0] for c in PAYLOAD_CASES])
def test_bad_checkpoints_on_resume(edit, names, good, tmp_path):
    payload, _ = good
    path = tmp_path / "run" / "checkpoint.pt"
    path.parent.mkdir()
    torch.save(edit(_deep(payload)), path)
    cfg = _cfg(tmp_path)
    state = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    model = build_model(cfg)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        Trainer(cfg, model, DATA).fit(resume=True)
    msg = str(info.value)
    assert str(path) in msg and names in msg, msg
    assert isinstance(info.value, Seq2DError)
    assert not (tmp_path / "run" / "run.lock").exists()  # the lock is released after the error
    # nothing was half-restored: the weights and the global RNG states are as before
    assert torch.equal(state[0], torch.get_rng_state()) and state[1] == random.getstate()
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


BYTES_CASES = [
    ("empty", lambda b: b"", "empty (0 bytes)"),
    ("truncated", lambda b: b[: len(b) // 2], "truncated or corrupt"),
    ("header-only", lambda b: b[:4], "truncated or corrupt"),
    ("random-bytes", lambda b: np.random.default_rng(0).bytes(2048), "not a torch checkpoint"),
    ("text", lambda b: b"epochs = 3\n", "not a torch checkpoint"),
    ("flipped-pickle", lambda b: b[: b.find(b"data.pkl") + 100] + b"\xff" * 64 + b[b.find(b"data.pkl") + 164:], "corrupt"),
]


@pytest.mark.parametrize("mangle,names", [c[1:] for c in BYTES_CASES], ids=[c[0] for c in BYTES_CASES])
def test_damaged_checkpoint_files(mangle, names, good, tmp_path):
    _, raw = good
    path = tmp_path / "run" / "checkpoint.pt"
    path.parent.mkdir()
    path.write_bytes(mangle(raw))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and names in str(info.value)
    cfg = _cfg(tmp_path)
    with pytest.raises(CheckpointError, match="checkpoint"):
        Trainer(cfg, build_model(cfg), DATA).fit(resume=True)


def test_a_folder_where_the_checkpoint_should_be(tmp_path):
    (tmp_path / "run" / "checkpoint.pt").mkdir(parents=True)
    cfg = _cfg(tmp_path)
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt' is a folder"):
        Trainer(cfg, build_model(cfg), DATA).fit(resume=True)


def test_an_out_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("not a folder")
    rc = main(["train", "--data", "synthetic", "--sizes", "16,8,4", "--epochs", "1", "--out-dir", str(tmp_path / "taken")])
    err = capsys.readouterr().err
    assert rc == 2 and "config field 'out_dir': cannot use" in err and "taken" in err and "Traceback" not in err


def test_there_are_at_least_forty_malformed_cases():
    n = len(CONFIG_CASES) + len(OVERRIDE_CASES) + len(TOML_CASES) + len(FLAG_CASES) + len(PAYLOAD_CASES) + len(BYTES_CASES)
    assert n >= 40, n


@pytest.mark.parametrize("data", ["synthetic", "subset"])
def test_data_root_with_a_source_that_reads_no_files_is_refused(data):
    from seq2d.errors import InvalidValue
    from seq2d.train import TrainConfig

    with pytest.raises(InvalidValue, match=rf"config field 'data_root' is set, but data = '{data}' reads no MNIST files"):
        TrainConfig(data=data, data_root="/nonexistent")
