"""Data-parallel training: a real 2-process torchrun run (gloo, CPU) against one process.

The data are the bundled MNIST subset (2,500 train / 1,000 test images, 50 x 50) when
``seq2d.data`` is importable, else synthetic clusters.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import seq2d
from seq2d.train import TrainConfig, load_checkpoint, read_metrics, run, save_config
from seq2d.train.distributed import DistContext, unused_parameters, wrap_model

try:
    import seq2d.data  # noqa: F401

    HAVE_DATA = True
except ImportError:  # pragma: no cover - the data module ships with the package
    HAVE_DATA = False


def ddp_config(out_dir) -> TrainConfig:
    if HAVE_DATA:
        kw = dict(data="subset", sizes=[2500, 64, 10], batch_size=64)
    else:  # pragma: no cover
        kw = dict(data="synthetic", sizes=[16, 16, 4], batch_size=32, lr=1e-2)
    return TrainConfig(model="mlp", epochs=1, device="cpu", num_threads=1, quiet=True, out_dir=str(out_dir), **kw)


@pytest.mark.slow
@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available")
def test_two_process_torchrun_matches_one_process(tmp_path):
    cfg = ddp_config(tmp_path / "ddp")
    save_config(cfg, tmp_path / "ddp.toml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "seq2d.train", "--config", str(tmp_path / "ddp.toml")]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"torchrun failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"

    single = run(ddp_config(tmp_path / "single"))  # in this process, no torch.distributed
    assert single["world_size"] == 1 and not dist.is_initialized()

    # rank 0 alone wrote the outputs: one row for one epoch (a second writer would add one or
    # leave a temporary file), tagged with the world size
    out = tmp_path / "ddp"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "config.toml", "metrics.csv", "metrics.jsonl",
                                                     "run.json", "test_predictions.npz"]  # and rank 0's lock is gone
    rows = read_metrics(out)
    assert len(rows) == 1 and rows[0]["world_size"] == 2 and rows[0]["epoch"] == 1
    assert rows[0]["update"] == single["updates"]  # the global batch is the same, so is the update count
    ck = load_checkpoint(out / "checkpoint.pt")
    assert ck["epoch"] == 1

    # Tolerance. Both runs take the same optimizer steps on the same global batches (rank r
    # takes slice r of each batch and its summed loss is scaled so DDP's gradient average is
    # the global-batch mean); they differ only in the order of floating-point sums (gradient
    # all-reduce, per-rank partial sums), ~1e-7 relative per step. After one epoch the weights
    # agree to ~1e-5 (measured: 8e-6), so a test prediction can flip only for an image that close to a
    # decision boundary. We allow 1e-4 on the weights and 0.5 percentage points (5 of 1,000
    # test images) on the accuracy: a noise margin, far below any real sharding bug (a rank
    # training on the wrong slice, a doubled learning rate, or unsynchronised weights move
    # the weights by >1e-2 and the accuracy by points).
    ref = load_checkpoint(tmp_path / "single" / "checkpoint.pt")["model"]
    worst = max((ck["model"][k] - ref[k]).abs().max().item() for k in ref)
    assert worst <= 1e-4, f"DDP weights differ from the single-process run by {worst:.3g}"
    acc_ddp, acc_single = rows[0]["test_acc"], single["final_test_acc"]
    assert abs(acc_ddp - acc_single) <= 0.005, (acc_ddp, acc_single)
    assert acc_single > 0.5  # and the run learned something (10 classes)


def test_unused_parameters_are_found():
    """DDP needs every trainable parameter in each backward; a module block whose input slot
    is still None is skipped, so its parameters take no part (and the probe says which).
    Linear blocks live in the store and always take part (a None slot is zeros there)."""
    model = seq2d.mlp([6, 5, 4, 3])
    x = torch.randn(2, 6)
    assert unused_parameters(model, x) == []
    model.steps = 2  # fewer steps than the depth: the store still takes part in full
    assert unused_parameters(model, x) == []
    model = seq2d.Sequential2D([6, 5, 3], {(1, 0): seq2d.LinearBlock(6, 5), (2, 1): torch.nn.Linear(5, 3)}, steps=1)
    # one Jacobi step from the input alone: slot 1 is None when row 2 reads it
    assert sorted(unused_parameters(model, x)) == ["blocks.2_1.bias", "blocks.2_1.weight"]
    assert all(p.grad is None for p in model.parameters())  # the probe leaves no gradients behind
    assert wrap_model(model, DistContext()) is model  # one process: no DDP at all


def test_one_process_calls_nothing_in_distributed(tmp_path, monkeypatch):
    """A run in one process (no WORLD_SIZE) trains in a OneProcess and never calls into
    seq2d.train.distributed; each of its entry points is made to fail here."""
    import seq2d.train.distributed as D
    import seq2d.train.trainer as T

    def refuse(*a, **k):
        raise AssertionError("a one-process run called into seq2d.train.distributed")

    for name in ("init_distributed", "cleanup", "wrap_model", "all_reduce_sum", "barrier", "unused_parameters"):
        monkeypatch.setattr(D, name, refuse)
        if hasattr(T, name):
            monkeypatch.setattr(T, name, refuse)
    for name in ("current", "barrier", "all_reduce_sum", "wrap", "close"):
        monkeypatch.setattr(D.DistContext, name, refuse)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = TrainConfig(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=1, batch_size=32, device="cpu",
                      num_threads=1, quiet=True, out_dir=str(tmp_path / "one"), tensorboard=None)
    summary = run(cfg)
    assert summary["world_size"] == 1 and summary["complete"]
    from seq2d.train import Trainer, build_model, load_data

    trainer = Trainer(cfg, build_model(cfg), load_data(cfg))  # no context given, no process group: OneProcess
    assert isinstance(trainer.dist, T.OneProcess) and trainer.evaluate()["loss"] > 0
