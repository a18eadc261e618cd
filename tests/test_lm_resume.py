"""seq2d.lab.lm.train_lm's checkpoints (seq2d.lab.lm.checkpoint.LMCheckpoint): a run stopped mid-epoch
or after an epoch and continued computes bitwise what the uninterrupted run computes (the same code
path on the same machine and thread count, so bitwise is the right test), a finished run is not
trained again, a checkpoint of another config is refused; the patience rule; the adaptive softmax
trains and its loss is the full softmax's over the same log-probabilities."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seq2d.lab.wikitext import batchify
from seq2d.lab.lm import RNNLM, evaluate, train_lm
from seq2d.train.checkpoint import CheckpointError
from seq2d.lab.lm.checkpoint import LMCheckpoint

torch.set_num_threads(1)
V = 40


def _data():
    g = torch.Generator().manual_seed(1)
    # a learnable stream (mostly counting up) so the loss moves, with noise so validation plateaus
    base = torch.arange(4000) % V
    noise = torch.randint(0, V, (4000,), generator=g)
    keep = torch.rand(4000, generator=g) < 0.7
    stream = torch.where(keep, base, noise)
    return batchify(stream[:3000], 5), batchify(stream[3000:3500], 4), batchify(stream[3500:], 4)


def _model(cell: str, seed: int = 0, adaptive: bool = True) -> RNNLM:
    torch.manual_seed(seed)
    return RNNLM(V, 8, 8, 2, 0.2, cell=cell, adaptive_cutoffs=[10, 25] if adaptive else None, div_value=2.0)


class Killed(Exception):
    """Stands for the process being killed: nothing after it runs."""


def _killer(after_steps: int):
    n = [0]

    def stabilize():
        n[0] += 1
        if n[0] == after_steps:
            raise Killed

    return stabilize


KW = dict(epochs=4, lr=6.0, bptt=10, max_batches=13, log=None)


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _history(info):
    return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in info["history"]]


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_a_stopped_run_continues_bitwise(tmp_path, cell):
    train, valid, test = _data()
    cfg = {"cell": cell}
    kw = {**KW, "lr": 10.0 if cell == "tanh" else 20.0}  # lrs at which validation stalls once in 4 epochs
    plain = _model(cell)
    ref_info = train_lm(plain, train, valid, test=test, **kw)  # no checkpoint at all
    lrs = [r["lr"] for r in ref_info["history"]]
    assert len(set(lrs)) > 1, f"the plateau rule must act in this test (lr history {lrs})"
    ref = _model(cell)
    info_ck = train_lm(ref, train, valid, test=test, checkpoint=LMCheckpoint(tmp_path / "ref.pt", cfg),
                       checkpoint_every=4, **kw)
    assert _same(_state(ref), _state(plain)) and _history(info_ck) == _history(ref_info)  # saving changes nothing
    # stopped mid-epoch (at update 6: the last save was at batch 4 of epoch 1), then after an epoch (11 updates
    # later, at batch 2 of epoch 2: the last save was the end of epoch 1), then run to the end
    path = tmp_path / "run.pt"
    for kill in (6, 11, None):
        if path.exists():  # a new process: other initial weights and generator state, all must come from the file
            m = _model(cell, seed=123)
            torch.manual_seed(999)
        else:
            m = _model(cell)
        try:
            info = train_lm(m, train, valid, test=test, checkpoint=LMCheckpoint(path, cfg), checkpoint_every=4,
                            stabilize=_killer(kill) if kill else None, **kw)
        except Killed:
            continue
    assert [(r["epoch"], r["batch"]) for r in info["resumes"]] == [(1, 4), (2, 0)]
    assert _same(_state(m), _state(ref)), "weights differ after resuming"
    assert _history(info) == _history(ref_info)  # == on floats: bitwise losses, lr history, updates
    assert info["updates"] == ref_info["updates"] and info["best_valid_loss"] == ref_info["best_valid_loss"]
    assert all("test_ppl" in r for r in info["history"])


def _in_old_words(path) -> None:
    """Rewrite the checkpoint at ``path`` in the words the loop wrote before issue 36: the file's
    ``step`` (save_checkpoint's keyword was ``step=``), ``step`` in every history row and in every
    ``resumes`` entry."""
    def old(d):
        return {("step" if k == "update" else k): v for k, v in d.items()}

    ck = old(torch.load(path, weights_only=True))
    ck["metrics"]["history"] = [old(r) for r in ck["metrics"]["history"]]
    ck["extra"]["loop"]["resumes"] = [old(r) for r in ck["extra"]["loop"]["resumes"]]
    torch.save(ck, path)


def test_a_checkpoint_in_the_old_words_continues_bitwise(tmp_path):
    """A checkpoint the loop wrote when optimizer updates were called steps (history rows and resumes
    entries with ``step``) continues bitwise as the uninterrupted run, its rows read back with ``update``
    (seq2d.renames.migrate_record)."""
    train, valid, test = _data()
    cfg, kw = {"cell": "tanh"}, {**KW, "lr": 10.0}
    ref_info = train_lm(_model("tanh"), train, valid, test=test, **kw)
    path = tmp_path / "run.pt"
    for kill, seed in ((6, 0), (11, 123)):  # stopped mid-epoch 1, then (resumed) in epoch 2: saved after epoch 1
        try:
            train_lm(_model("tanh", seed=seed), train, valid, test=test, checkpoint=LMCheckpoint(path, cfg),
                     checkpoint_every=4, stabilize=_killer(kill), **kw)
        except Killed:
            pass
    _in_old_words(path)
    ck = torch.load(path, weights_only=True)
    rows, resumes = ck["metrics"]["history"], ck["extra"]["loop"]["resumes"]
    assert "step" in ck and "update" not in ck and len(rows) == 1 and len(resumes) == 1
    assert all("step" in r and "update" not in r for r in rows + resumes)
    m = _model("tanh", seed=7)
    torch.manual_seed(999)
    info = train_lm(m, train, valid, test=test, checkpoint=LMCheckpoint(path, cfg), checkpoint_every=4, **kw)
    assert _history(info) == _history(ref_info)  # bitwise, and every row says update
    assert all("update" in r and "step" not in r for r in info["history"] + info["resumes"])
    assert [(r["epoch"], r["batch"], r["update"]) for r in info["resumes"]] == [(1, 4, 4), (2, 0, 13)]
    assert info["updates"] == ref_info["updates"] == 4 * 13


def test_a_finished_run_is_not_trained_again_and_another_config_is_refused(tmp_path):
    train, valid, test = _data()
    path = tmp_path / "run.pt"
    a = _model("lstm")
    info = train_lm(a, train, valid, checkpoint=LMCheckpoint(path, {"seed": 0}), **KW)
    assert info["stopped"] == "epochs"
    b = _model("lstm", seed=5)
    calls = []
    again = train_lm(b, train, valid, checkpoint=LMCheckpoint(path, {"seed": 0}), stabilize=lambda: calls.append(1),
                     **KW)
    assert not calls and again["history"] == info["history"] and again["resumes"] == []
    assert _same(_state(b), _state(a))  # the best-validation weights, read back
    with pytest.raises(CheckpointError, match=r"another config \(train_lm: saved .*'lr': 6\.0.*'lr': 2\.0"):
        train_lm(_model("lstm"), train, valid, checkpoint=LMCheckpoint(path, {"seed": 0}), **{**KW, "lr": 2.0})
    with pytest.raises(CheckpointError, match=r"seed: saved 0, now 1"):
        train_lm(_model("lstm"), train, valid, checkpoint=LMCheckpoint(path, {"seed": 1}), **KW)
    with pytest.raises(CheckpointError, match="does not fit this model"):
        train_lm(RNNLM(V, 8, 6, 2, 0.2, cell="lstm", adaptive_cutoffs=[10, 25], div_value=2.0), train, valid,
                 checkpoint=LMCheckpoint(path, {"seed": 0}), **KW)
    with pytest.raises(ValueError, match="checkpoint_every needs a checkpoint"):
        train_lm(_model("lstm"), train, valid, checkpoint_every=3, **KW)


def test_patience_stops_after_epochs_without_improvement():
    train, valid, _ = _data()
    info = train_lm(_model("tanh"), train, valid, **{**KW, "epochs": 30, "lr": 20.0}, patience=2)
    h = info["history"]
    best = min(range(len(h)), key=lambda i: h[i]["valid_loss"])
    assert info["stopped"] == "patience" and len(h) == best + 3 < 30  # two epochs after the best, then stop
    # (a row's lr is the one its epoch ran at: the first epoch without improvement quartered it for the second)
    assert [r["lr"] for r in h[best + 1:]] == [h[best]["lr"], h[best]["lr"] / 4]
    with pytest.raises(ValueError, match="patience must be a positive int"):
        train_lm(_model("tanh"), train, valid, patience=0, **KW)


def test_adaptive_softmax_trains_and_its_loss_is_the_full_softmax_loss():
    """Training with the adaptive softmax lowers the loss, and its loss (what evaluate() and the training
    step use) equals the cross-entropy of the full log-probability table it defines (log_prob), and
    torch's own module's loss."""
    train, valid, _ = _data()
    lm = _model("lstm")
    before = evaluate(lm, valid, 10)
    train_lm(lm, train, valid, **{**KW, "max_batches": None, "epochs": 3, "lr": 2.0})
    after = evaluate(lm, valid, 10)
    assert after < before - 0.5  # 4.52 -> 3.79 nats
    lm.eval()
    with torch.no_grad():
        x, y = valid[:-1], valid[1:]
        feats, _ = lm.features(x)
        flat_f, flat_y = feats.reshape(-1, 8).double(), y.reshape(-1)
        lm.decoder.double()
        full = F.nll_loss(lm.decoder.log_prob(flat_f), flat_y)  # the full (V-way) log-probability table
        assert torch.allclose(lm.nll(feats.double(), y, "mean"), full, rtol=1e-10, atol=0)
        assert torch.allclose(lm.decoder(flat_f, flat_y).loss, full, rtol=1e-10, atol=0)
        assert torch.allclose(lm.decoder.log_prob(flat_f).logsumexp(-1), torch.zeros(len(flat_y), dtype=torch.float64),
                              atol=1e-10)
