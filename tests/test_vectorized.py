"""seq2d.train.vectorized: k seeds trained as one batched computation equal k single-seed runs.

Float64, tiny models (64 -> 32 -> 10 on 200 synthetic 8x8 "images", 4 steps an epoch), one
thread: each copy's metrics, final weights and optimizer state are compared with the run
``Trainer`` makes for the same seed (different computation paths: batched vs single, so a
tolerance), and its checkpoint is checked to continue under the Trainer.
"""

import dataclasses

import pytest
import torch

from seq2d.train import Trainer, TrainConfig, build_model, load_checkpoint, make_augment, synthetic_data
from seq2d.train.vectorized import NotVectorizable, _Batch, check_vectorizable, seed_configs, train_copies, train_seeds

SEEDS = [0, 1, 2]
_D = synthetic_data(64, 10, n_train=200, n_test=100)  # 200 = 3 full batches of 64 and one of 8
DATA = {"train": (_D["train"][0].double(), _D["train"][1]), "test": (_D["test"][0].double(), _D["test"][1])}
METRICS = ("train_loss", "train_acc", "test_loss", "test_acc")
CASES = {
    "mlp": {"model": "mlp"},
    "random_element": {"model": "random_model", "granularity": "element"},
    "mlp-augmented": {"model": "mlp", "erasing_p": 0.5, "perspective_p": 0.5},
}


def base(tmp_path, **kw):
    d = dict(model="mlp", sizes=[64, 32, 10], data="synthetic", epochs=2, batch_size=64, lr=1e-2, num_threads=1,
             quiet=True, out_dir=str(tmp_path / "vec"))
    return TrainConfig(**{**d, **kw})


def build64(cfg):
    return build_model(cfg).double()


def single(cfg, tmp_path, **fit):
    cfg = dataclasses.replace(cfg, out_dir=str(tmp_path / "single" / f"seed{cfg.seed}"))
    return cfg, Trainer(cfg, build64(cfg), DATA, augment=make_augment(cfg)).fit(**fit)


def close_states(a: dict, b: dict, tol=1e-12):
    assert a.keys() == b.keys()
    for k in a:
        if torch.is_tensor(a[k]):
            torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, msg=k)


def assert_same_run(vec_dir, one_dir, vs, ss):
    assert set(vs) == set(ss)  # the format of Trainer.fit()'s summary
    assert (vs["status"], vs["epochs"], vs["updates"], vs["config_hash"]) == (ss["status"], ss["epochs"], ss["updates"],
                                                                             ss["config_hash"])
    assert len(vs["history"]) == len(ss["history"])
    for a, b in zip(vs["history"], ss["history"]):
        assert a["copies"] == len(SEEDS)
        for k in METRICS:
            assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-12), k
    A, B = load_checkpoint(vec_dir / "checkpoint.pt"), load_checkpoint(one_dir / "checkpoint.pt")
    close_states(A["model"], B["model"])
    for i in B["optimizer"]["state"]:
        close_states(A["optimizer"]["state"][i], B["optimizer"]["state"][i])
    assert (A["epoch"], A["update"]) == (B["epoch"], B["update"])
    assert torch.equal(A["rng"]["torch"], B["rng"]["torch"])


@pytest.mark.parametrize("case", list(CASES))
def test_copies_equal_single_seed_runs(tmp_path, case):
    cfg = base(tmp_path, **CASES[case])
    configs = seed_configs(cfg, SEEDS)
    summaries = train_copies(configs, build=build64, data=DATA)
    for c, vs in zip(configs, summaries):
        one, ss = single(c, tmp_path)
        assert_same_run(c.run_dir(), one.run_dir(), vs, ss)
    if case == "random_element":  # each seed places its own entries: the masks are stacked, not shared
        batch = _Batch([Trainer(c, build64(c), DATA) for c in configs])
        assert 0 in batch.buffer_dims.values()


def test_max_updates_stop_and_trainer_resume(tmp_path):
    """A copy stopped by max_updates mid-epoch is partial like a single run, and the Trainer
    continues its checkpoint to the end exactly as it continues the single run's."""
    cfg = base(tmp_path, max_updates=6, erasing_p=0.5)
    configs = seed_configs(cfg, SEEDS)
    summaries = train_seeds(cfg, SEEDS, build=build64, data=DATA)
    for c, vs in zip(configs, summaries):
        one, ss = single(c, tmp_path)
        assert vs["status"] == ss["status"] == "partial"
        assert_same_run(c.run_dir(), one.run_dir(), vs, ss)
    c = dataclasses.replace(configs[1], max_updates=None)
    vs = Trainer(c, build64(c), DATA, augment=make_augment(c)).fit(resume=True)
    _, ss = single(dataclasses.replace(c, out_dir=None), tmp_path, resume=True)
    assert vs["status"] == "complete" and vs["updates"] == ss["updates"] == 8
    for a, b in zip(vs["history"], ss["history"]):
        for k in METRICS:
            assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-12), k


def test_stacked_optimizer_equals_separate_optimizers():
    """One fused Adam (the Trainer's default) over stacked tensors updates each copy as its own Adam would."""
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    grads = [[torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in ws] for _ in range(4)]
    for impl in ({"fused": True}, {"foreach": True}, {"foreach": False}):
        stacked = torch.stack([w.detach() for w in ws]).requires_grad_()
        sep = [w.detach().clone().requires_grad_() for w in ws]
        opt = torch.optim.Adam([stacked], lr=1e-2, weight_decay=0.1, **impl)
        opts = [torch.optim.Adam([w], lr=1e-2, weight_decay=0.1, **impl) for w in sep]
        for step in grads:
            stacked.grad = torch.stack(step)
            opt.step()
            for w, o, gr in zip(sep, opts, step):
                w.grad = gr
                o.step()
        torch.testing.assert_close(stacked.detach(), torch.stack([w.detach() for w in sep]), rtol=1e-14, atol=1e-15)


def test_refusals(tmp_path):
    cfg = base(tmp_path, model="random_model", granularity="tile", tile=16)
    with pytest.raises(NotVectorizable, match="vmap"):
        train_seeds(cfg, SEEDS, build=build64, data=DATA)
    a, b = seed_configs(base(tmp_path), [0, 1])
    with pytest.raises(NotVectorizable, match=r"lr 0\.01 -> 0\.1"):
        check_vectorizable([a, dataclasses.replace(b, lr=0.1)])
    with pytest.raises(ValueError, match="one run folder each"):
        check_vectorizable([a, dataclasses.replace(b, out_dir=a.out_dir)])
    with pytest.raises(ValueError, match="non-empty list of ints"):
        seed_configs(cfg, [])
    # a complete copy is reused, as Trainer.fit() reuses a complete run
    configs = seed_configs(base(tmp_path, epochs=1), [0, 1])
    first = train_copies(configs, build=build64, data=DATA)
    again = train_copies(configs, build=build64, data=DATA)
    assert all(s.get("reused") for s in again) and [s["history"] for s in again] == [s["history"] for s in first]


def test_compare_vectorize_seeds_batches_what_it_can(tmp_path):
    """compare(vectorize_seeds=True): mlp's seeds as one batch; random_tile refused, so trained one
    seed at a time; every folder then reused as a finished run, as after single-seed runs."""
    from seq2d.lab.mnist_comparison import compare, configs_for

    base = {"data": "synthetic", "sizes": [64, 32, 10], "epochs": 1, "num_threads": 1, "quiet": True}
    configs = {**configs_for(base, ["mlp"]), **configs_for({**base, "tile": 16}, ["random_tile"])}
    lines = []
    rows = compare(configs, [0, 1], tmp_path, log=lines.append, vectorize_seeds=True)
    assert [(r["model"], r["seed"], r.get("copies")) for r in rows] == [
        ("mlp", 0, 2), ("mlp", 1, 2), ("random_tile", 0, None), ("random_tile", 1, None)]
    assert all(r["complete"] for r in rows)
    assert any(line.startswith("[mlp] training seeds 0, 1 as one batch") for line in lines)
    assert any(line.startswith("[random_tile] not batched:") and "vmap" in line for line in lines)
    lines.clear()
    again = compare(configs, [0, 1], tmp_path, log=lines.append, vectorize_seeds=True)
    assert again == rows and all("reusing finished run" in line for line in lines) and len(lines) == 4


def test_seq2d_mnist_vectorize_seeds(tmp_path, capsys):
    from seq2d.cli import main

    rc = main(["mnist", "--models", "mlp", "--seeds", "0,1", "--epochs", "1", "--max-updates", "2", "--num-threads", "1",
               "--vectorize-seeds", "--quiet", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "training seeds 0, 1 as one batch" in out and "| mlp (partial: 2 of 2) | 2 |" in out


def test_a_diverging_copy_stops_the_batch(tmp_path):
    import json

    from seq2d.train import DivergenceError

    cfg = base(tmp_path, optimizer="sgd", lr=1e4, epochs=3)
    configs = seed_configs(cfg, SEEDS)
    with pytest.raises(DivergenceError, match=r"of seed 0 at epoch \d+, update \d+") as info:
        train_copies(configs, build=build64, data=DATA)
    assert info.value.update >= 1
    status = [json.loads((c.run_dir() / "run.json").read_text())["status"] for c in configs]
    assert status == ["diverged", "interrupted", "interrupted"]
