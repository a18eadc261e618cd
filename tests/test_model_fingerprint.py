"""A finished run is never handed back for a model it did not train (issue 31).

A run records the fingerprint of its model (seq2d/train/fingerprint.py) beside its config hash;
reuse compares the structure and the initial values, resume the structure. Every path: the
Trainer, ``seq2d train`` (a spec file edited in place), the seed-vectorised loop and ``seq2d
mnist``'s summary reuse; and a torn ``summary.json`` is named. Tiny models, one thread.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import seq2d
from seq2d.cli import main
from seq2d.train import CheckpointError, ModelChangedError, RunExistsError, TrainConfig, Trainer, build_model, \
    synthetic_data
from seq2d.train.fingerprint import FINGERPRINT_KEY, fingerprint_diff, model_fingerprint

DATA = synthetic_data(16, 4, n_train=128, n_test=64)
SIZES = (16, 8, 8, 4)
SKIP = [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0]]  # a chain with a skip block F[3][1]
CHAIN = [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]


def user_model(mask=SKIP, act="tanh", seed=0, off=None):
    """The user's own model (not one a config names), drawn reproducibly from ``seed``; ``off``:
    an entry of block F[1][0] masked out (a mask of the same shapes)."""
    model = seq2d.from_mask(list(SIZES), torch.tensor(mask, dtype=torch.bool), activations=act, seed=seed)
    if off is not None:
        m = torch.ones(8, 16, dtype=torch.bool)
        m[off] = False
        model.block(1, 0).mask = m
    return model


def cfg_for(tmp_path, **kw):
    return TrainConfig(**{**dict(data="synthetic", epochs=1, batch_size=32, lr=1e-2, out_dir=str(tmp_path / "run"),
                                 num_threads=1, quiet=True), **kw})


def folder(cfg) -> dict:
    return {p.name: p.read_bytes() for p in cfg.run_dir().iterdir() if p.is_file()}


def params(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------- the Trainer (issue 31's API case)
@pytest.mark.parametrize("other,names", [
    (lambda: user_model(act="relu"), "slot 1 activation 'tanh' -> 'relu'"),
    (lambda: user_model(mask=CHAIN), "block F[3][1]: linear -> absent"),
    (lambda: user_model(seed=1), "the initial parameter values differ"),
], ids=["relu-for-tanh", "no-skip-block", "another-draw"])
def test_a_complete_run_is_not_reused_for_another_model(tmp_path, other, names):
    cfg = cfg_for(tmp_path)
    first = Trainer(cfg, user_model(), DATA).fit()
    assert first["complete"]
    before = folder(cfg)
    model = other()
    count, state = model.num_parameters(), params(model)
    with pytest.raises(ModelChangedError) as info:
        Trainer(cfg, model, DATA).fit()
    msg = str(info.value)
    assert names in msg and "the model differs from the one the complete run in" in msg
    assert "use another out_dir (or name) for this model, or overwrite=True to train it there" in msg
    assert isinstance(info.value, RunExistsError) and isinstance(info.value, FileExistsError)
    # nothing loaded into the new model (not the old mask, not the old weights), nothing written
    assert model.num_parameters() == count and all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert folder(cfg) == before
    again = Trainer(cfg, other(), DATA).fit(overwrite=True)  # what the message says to do
    assert again["complete"] and "reused" not in again


def test_the_same_model_is_still_reused(tmp_path):
    cfg = cfg_for(tmp_path)
    first = Trainer(cfg, user_model(), DATA).fit()
    again = Trainer(cfg, user_model(), DATA).fit()  # rebuilt from the same seed: the same run
    assert again["reused"] and again["final_test_acc"] == first["final_test_acc"]
    record = json.loads((cfg.run_dir() / "run.json").read_text())
    assert record[FINGERPRINT_KEY] == model_fingerprint(user_model())
    t = Trainer(cfg, user_model(), DATA)  # a second fit on one Trainer: its model's start is kept
    t.fit()
    assert t.fit()["reused"]


def test_resume_refuses_another_structure_but_not_another_draw(tmp_path):
    cfg = cfg_for(tmp_path)
    Trainer(cfg, user_model(), DATA).fit()
    longer = dataclasses.replace(cfg, epochs=2)
    model = user_model(mask=CHAIN)
    state = params(model)
    with pytest.raises(ModelChangedError, match=r"cannot resume .*checkpoint\.pt': the model differs from the one it "
                                                r"trained: block F\[3\]\[1\]: linear -> absent; trainable parameters 276 -> 244; "
                                                r"resume with the model that run was built with"):
        Trainer(longer, model, DATA).fit(resume=True)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert isinstance(pytest.raises(CheckpointError, Trainer(longer, user_model(act="relu"), DATA).fit,
                                    resume=True).value, ModelChangedError)
    # the values come from the checkpoint: another initial draw of the same structure resumes,
    # and the run keeps the record of its own start
    s = Trainer(longer, user_model(seed=5), DATA).fit(resume=True)
    assert s["complete"] and s["epochs"] == 2
    record = json.loads((cfg.run_dir() / "run.json").read_text())
    assert record[FINGERPRINT_KEY]["init"] == model_fingerprint(user_model())["init"]


def test_a_run_recorded_before_fingerprints_follows_the_config_rule(tmp_path):
    """Old records (no fingerprint in run.json or the checkpoint): today's rule, the config hash
    alone; still, a checkpoint's mask is never loaded into a model built with another."""
    cfg = cfg_for(tmp_path)
    Trainer(cfg, user_model(off=(0, 0)), DATA).fit()
    record = json.loads((cfg.run_dir() / "run.json").read_text())
    del record[FINGERPRINT_KEY]
    (cfg.run_dir() / "run.json").write_text(json.dumps(record))
    ckpt = torch.load(cfg.run_dir() / "checkpoint.pt", weights_only=True)
    del ckpt["extra"][FINGERPRINT_KEY]
    torch.save(ckpt, cfg.run_dir() / "checkpoint.pt")
    assert Trainer(cfg, user_model(seed=3, off=(0, 0)), DATA).fit()["reused"]  # another draw: not knowable, reused
    model = user_model(off=(1, 1))  # another mask of the same shapes
    count = model.num_parameters()
    with pytest.raises(ModelChangedError, match="trained with another mask than this model's"):
        Trainer(cfg, model, DATA).fit()
    assert model.num_parameters() == count


# ---------------------------------------------------------------------- the fingerprint itself
def test_the_store_is_not_part_of_the_fingerprint():
    model = seq2d.from_mask([64, 32, 16], None, activations="tanh", seed=0)
    before = model_fingerprint(model)
    model.to_blocksparse(16)
    assert model.store.kind == "tiled" and fingerprint_diff(before, model_fingerprint(model), init=True) == []


def test_generic_modules_are_fingerprinted_too():
    """A from_torch wrapper: its class, repr, parameters and the Sequential2D inside."""
    torch.manual_seed(0)
    a = model_fingerprint(seq2d.from_torch(torch.nn.RNN(4, 8, batch_first=True)))
    torch.manual_seed(0)
    b = model_fingerprint(seq2d.from_torch(torch.nn.RNN(4, 8, batch_first=True, nonlinearity="relu")))
    diff = fingerprint_diff(a, b, init=True)
    assert any("module core slot 1 activation 'tanh' -> 'relu'" in d for d in diff), diff


def test_the_fingerprint_of_a_fixed_model_is_pinned():
    """Runs recorded today must still be reused and resumed by later versions: a change in what the
    fingerprint describes or how it hashes changes these digests; then bump
    seq2d.train.fingerprint._VERSION (older fingerprints are then not compared) and pin anew."""
    f = model_fingerprint(user_model())
    assert (f["version"], f["structure_hash"], f["init"]) == (1, "ad8d5e0cc3d25268", "99666d2dfa401e79")
    torch.manual_seed(0)
    assert model_fingerprint(seq2d.from_torch(torch.nn.RNN(4, 8, batch_first=True)))["structure_hash"] == "8f760c6e58c9c20e"


def test_a_fingerprint_of_another_description_version_is_not_compared():
    a = model_fingerprint(user_model())
    b = model_fingerprint(user_model(act="relu"))
    assert fingerprint_diff({**a, "version": 0}, b, init=True) == []
    assert fingerprint_diff(None, b, init=True) == []


# ---------------------------------------------------------------------- seq2d train --model spec.toml
SPEC = """
slots = [{size = 2500}, {size = 8, activation = "tanh", bias = true}, {size = 10, bias = true}]
blocks = [{row = 1, col = 0, kind = "dense"}, {row = 2, col = 1, kind = "dense"}, {row = 2, col = 0, kind = "dense"}]
"""


@pytest.mark.parametrize("edit,names", [
    (lambda s: s.replace('"tanh"', '"relu"'), "slot 1 activation 'tanh' -> 'relu'"),
    (lambda s: s.replace(', {row = 2, col = 0, kind = "dense"}', ""), "block F[2][0]: linear -> absent"),
    (lambda s: "seed = 7\n" + s, "the initial parameter values differ"),
], ids=["activation", "mask", "another-draw"])
def test_seq2d_train_with_an_edited_spec_file_is_refused(tmp_path, capsys, edit, names):
    spec = tmp_path / "model.toml"
    spec.write_text(SPEC)
    argv = ["train", "--model", str(spec), "--data", "synthetic", "--epochs", "1", "--out-dir", str(tmp_path / "run"),
            "--num-threads", "1", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    spec.write_text(SPEC + "# a comment is not another model\n")
    assert main(argv) == 0 and capsys.readouterr().out.startswith("reusing the complete run")
    spec.write_text(edit(SPEC))
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith("seq2d: error: the model differs from the one the complete run in")
    assert names in err and "use another --out-dir/--name for this model, or --overwrite to train it there" in err
    longer = list(argv)
    longer[longer.index("--epochs") + 1] = "2"
    rc = main(longer + ["--resume"])
    err = capsys.readouterr().err
    if "initial" in names:  # the same structure: resumed from the checkpoint's values
        assert rc == 0, err
    else:
        assert rc == 2 and "cannot resume" in err and names in err
    assert main(argv + ["--overwrite"]) == 0  # what the message says to do: the folder now holds this model's run
    assert main(argv) == 0 and capsys.readouterr().out.count("reusing the complete run") == 1


# ---------------------------------------------------------------------- the vectorised seeds
def test_train_copies_does_not_reuse_another_model(tmp_path):
    from seq2d.train.vectorized import seed_configs, train_copies

    configs = seed_configs(cfg_for(tmp_path, model="mlp", sizes=[16, 8, 4]), [0, 1])
    train_copies(configs, data=DATA)
    assert all(s.get("reused") for s in train_copies(configs, data=DATA))

    def tanh(cfg):
        return seq2d.mlp([16, 8, 4], activation="tanh")

    with pytest.raises(ModelChangedError, match=r"seed0' trained: slot 1 activation 'relu' -> 'tanh'"):
        train_copies(configs, build=tanh, data=DATA)


# ---------------------------------------------------------------------- seq2d mnist
def test_seq2d_mnist_does_not_reuse_a_result_of_another_model(tmp_path):
    from seq2d.lab.mnist_comparison import compare, configs_for

    base = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 1, "num_threads": 1, "quiet": True}
    first = compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lambda line: None)[0]
    run_dir = tmp_path / "mlp" / "seed0"
    # the run as if an older seq2d had built another model from this config (tanh for relu)
    record = json.loads((run_dir / "run.json").read_text())
    fp = model_fingerprint(seq2d.mlp([16, 8, 4], activation="tanh"))
    record[FINGERPRINT_KEY] = {**fp, "init": record[FINGERPRINT_KEY]["init"]}
    (run_dir / "run.json").write_text(json.dumps(record))
    lines = []
    row = compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lines.append)[0]
    assert f"[mlp seed 0] not reusing the result in {run_dir}: its model differs: slot 1 activation 'tanh' -> " \
           "'relu'" in lines[0]
    assert "training afresh" in lines[1] and "trained another model (slot 1 activation 'tanh' -> 'relu')" in lines[1]
    assert row["complete"] and row["test_acc"] == first["test_acc"]  # the same config and model: the same result
    lines.clear()
    compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lines.append)
    assert lines == [f"[mlp seed 0] reusing finished run in {run_dir}"]


def test_seq2d_mnist_names_a_torn_summary(tmp_path, capsys):
    """Issue 31, item 3: `seq2d mnist` with a torn summary.json (it holds ``{``) names it on one
    line and does the run again (here: continued from its complete checkpoint, nothing to train)."""
    args = ["mnist", "--models", "mlp", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "1", "--quiet"]
    assert main(args) == 0
    summary = tmp_path / "mlp" / "seed0" / "summary.json"
    row = json.loads(summary.read_text())
    capsys.readouterr()
    summary.write_text("{")
    assert main(args) == 0
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if "summary.json is unreadable" in line]
    assert len(named) == 1 and named[0].startswith(f"[mlp seed 0] not reusing the result in {summary.parent}: ")
    assert "torn or damaged: JSONDecodeError" in named[0]
    assert "continuing the checkpoint" in out and "reusing finished run" not in out
    assert json.loads(summary.read_text())["test_acc"] == row["test_acc"]  # rebuilt from the run


def test_a_summary_that_is_not_an_object_is_named_too(tmp_path):
    from seq2d.lab.mnist_comparison import compare, configs_for

    base = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 1, "num_threads": 1, "quiet": True}
    compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lambda line: None)
    (tmp_path / "mlp" / "seed0" / "summary.json").write_text("[1, 2]")
    lines = []
    assert compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lines.append)[0]["complete"]
    assert "its summary.json is unreadable (it holds a JSON list, not an object)" in lines[0]
