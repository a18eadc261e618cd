"""CPU checks of the training code paths that matter on a GPU.

No GPU is needed: a GPU tensor is imitated by :class:`FakeCuda` (data on the "meta" device,
so ``.numpy()`` and ``Generator.set_state`` refuse it exactly as they refuse a CUDA tensor,
and ``.cpu()`` gives the real values back); host synchronisations are found by running on
"meta" tensors (whose ``.item()``/``bool()`` raise) or by counting ``tolist``/``item`` calls;
DDP is a monkeypatched stand-in class.
"""

import random
import sys

import numpy as np
import pytest
import torch

import seq2d.train.trainer as trainer_mod
from seq2d.data.augment import Augment
from seq2d.train import NonFiniteLossError, TrainConfig, Trainer, build_model, load_checkpoint, read_metrics
from seq2d.train.checkpoint import capture_rng_state, restore_rng_state
from seq2d.train.distributed import DistContext, wrap_model
from seq2d.train.loop import EpochBar
from seq2d.train.trainer import classification_loss
from seq2d.train.datasets import epoch_permutation, seed_everything
from seq2d.train.datasets import synthetic_data

DATA = synthetic_data(16, 4, n_train=256, n_test=128)


def cfg_for(tmp_path, name="run", **kw):
    base = dict(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=2, batch_size=32, lr=1e-2,
                out_dir=str(tmp_path / name), num_threads=1, quiet=True)
    base.update(kw)
    return TrainConfig(**base)


def fit(cfg, *, resume=False, augment=None, callbacks=(), sync_every=None):
    trainer = Trainer(cfg, build_model(cfg), DATA, augment=augment, callbacks=callbacks)
    trainer.host_sync_every = sync_every
    summary = trainer.fit(resume=resume)
    return trainer, summary


def noise_augment(xb, g):
    return xb + 0.1 * torch.randn(xb.shape, generator=g, device=xb.device)


def strip_time(rows):
    return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in rows]


def same_state(a, b):
    """Bitwise: only for one configuration run twice (straight vs resumed, deferred host reads)."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------- a stand-in GPU tensor
class FakeCuda(torch.Tensor):
    """A tensor as ``torch.load(map_location="cuda")`` returns it, as far as the RNG code can
    tell: no host data (``.numpy()`` and ``set_state`` refuse it), ``.cpu()`` gives the values."""

    def cpu(self, *args, **kwargs):
        return self._real

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() first.")


def on_fake_gpu(t: torch.Tensor) -> FakeCuda:
    f = torch.empty(t.shape, dtype=t.dtype, device="meta").as_subclass(FakeCuda)
    f._real = t.clone()
    return f


def rng_to_fake_gpu(obj):
    """Every tensor in (nested dicts/lists of) ``obj`` replaced by a FakeCuda."""
    if isinstance(obj, torch.Tensor):
        return on_fake_gpu(obj)
    if isinstance(obj, dict):
        return {k: rng_to_fake_gpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rng_to_fake_gpu(v) for v in obj]
    return obj


def test_fake_gpu_tensor_is_refused_where_a_cuda_tensor_would_be():
    f = on_fake_gpu(torch.Generator().get_state())
    with pytest.raises(TypeError):
        torch.Generator().set_state(f)
    with pytest.raises(TypeError):
        f.numpy()
    torch.Generator().set_state(f.cpu())


# ---------------------------------------------------------------------- 1. checkpoint RNG restore
def test_restore_rng_state_from_gpu_loaded_tensors():
    g = torch.Generator().manual_seed(5)
    torch.manual_seed(1)
    random.seed(2)
    np.random.seed(3)
    saved = capture_rng_state({"augment": g})
    expect = (torch.rand(3), random.random(), np.random.rand(3), torch.rand(3, generator=g))
    gpu_state = rng_to_fake_gpu(saved)
    assert isinstance(gpu_state["numpy"]["key"], FakeCuda) and isinstance(gpu_state["generators"]["augment"], FakeCuda)
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    g2 = torch.Generator().manual_seed(99)
    restore_rng_state(gpu_state, {"augment": g2})
    got = (torch.rand(3), random.random(), np.random.rand(3), torch.rand(3, generator=g2))
    # bitwise: the same generator states replayed
    assert torch.equal(got[0], expect[0]) and got[1] == expect[1]
    assert np.array_equal(got[2], expect[2]) and torch.equal(got[3], expect[3])


# ---------------------------------------------------------------------- 2. trainer resume
def test_mid_epoch_resume_from_a_gpu_loaded_checkpoint_is_exact(tmp_path, monkeypatch):
    """The augmentation generator's state comes back from torch.load on the run's device; the
    trainer must hand Generator.set_state a CPU ByteTensor."""
    straight, _ = fit(cfg_for(tmp_path, "straight"), augment=noise_augment)
    fit(cfg_for(tmp_path, "split", max_updates=11), augment=noise_augment)  # stops in epoch 2, batch 3

    real_load = trainer_mod.load_checkpoint

    def load_on_gpu(path, map_location=None):
        ckpt = real_load(path, map_location=map_location)
        ckpt["rng"] = rng_to_fake_gpu(ckpt["rng"])
        return ckpt

    monkeypatch.setattr(trainer_mod, "load_checkpoint", load_on_gpu)
    resumed, _ = fit(cfg_for(tmp_path, "split"), resume=True, augment=noise_augment)
    assert same_state(straight.model.state_dict(), resumed.model.state_dict())
    assert strip_time(read_metrics(tmp_path / "straight")) == strip_time(read_metrics(tmp_path / "split"))


# ---------------------------------------------------------------------- 3. DDP keyword
class _FakeDDP:
    calls: list = []

    def __init__(self, module, device_ids=None, broadcast_buffers=None, find_unused_parameters=False):  # torch <= 2.12
        type(self).calls.append({"broadcast_buffers": broadcast_buffers, "find_unused_parameters": find_unused_parameters})
        self.module = module


class _FakeNewDDP:
    calls: list = []

    def __init__(self, module, device_ids=None, broadcast_buffers=None, find_unused_parameters=False,
                 forward_sync_buffers=None):
        type(self).calls.append({"broadcast_buffers": broadcast_buffers, "forward_sync_buffers": forward_sync_buffers})
        self.module = module


class WithBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("mask", torch.ones(3, 3))
        self.register_buffer("strided", torch.ones(4, 3).t())  # not contiguous


@pytest.mark.parametrize("cls", [_FakeDDP, _FakeNewDDP])
def test_wrap_model_passes_forward_sync_buffers_only_when_ddp_takes_it(cls, monkeypatch):
    import torch.distributed as dist

    cls.calls = []
    sent = []

    def fake_broadcast(t, src=0, **kw):
        assert t.is_contiguous()
        sent.append((tuple(t.shape), src))
        t.fill_(7.0)  # as if rank 0 held 7s

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", cls)
    monkeypatch.setattr(dist, "broadcast", fake_broadcast)
    model = WithBuffers()
    wrapped = wrap_model(model, DistContext(rank=1, world_size=2), None)
    assert isinstance(wrapped, cls) and wrapped.module is model
    if cls is _FakeDDP:  # old torch: no per-forward buffer sync, and the wrap-time sync done by hand
        assert cls.calls == [{"broadcast_buffers": False, "find_unused_parameters": False}]
        assert sorted(sent) == [((3, 3), 0), ((3, 4), 0)]
        assert (model.mask == 7).all() and (model.strided == 7).all()
    else:  # torch >= 2.13: the new keyword; DDP syncs buffers once itself
        assert cls.calls == [{"broadcast_buffers": None, "forward_sync_buffers": False}]
        assert sent == [] and (model.mask == 1).all()


def test_this_torchs_ddp_keyword_is_detected():
    import inspect

    from seq2d.train.distributed import _accepts_keyword

    ddp = torch.nn.parallel.DistributedDataParallel
    assert _accepts_keyword(ddp, "forward_sync_buffers") == ("forward_sync_buffers" in inspect.signature(ddp.__init__).parameters)
    assert _accepts_keyword(ddp, "find_unused_parameters") and not _accepts_keyword(ddp, "no_such_keyword")


# ---------------------------------------------------------------------- 5. host syncs, same metrics
def reference_run(cfg, *, weights=False):
    """The training loop written the straightforward way: read every step's loss with .item()
    (with ``weights``: also the final model and optimizer states)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.num_threads)
    try:
        seed_everything(cfg.seed)
        model = build_model(cfg)
        impl = {"fused": True} if cfg.optimizer_impl == "fused" else {"foreach": cfg.optimizer_impl == "foreach"}
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                               weight_decay=cfg.weight_decay, **impl)  # the Trainer's implementation (one path)
        (X, y), (Xt, yt) = DATA["train"], DATA["test"]
        rows = []
        for epoch in range(cfg.epochs):
            perm = epoch_permutation(X.shape[0], cfg.seed, epoch)
            loss_sum, correct_sum, count_sum = 0.0, 0, 0
            for k in range(0, X.shape[0], cfg.batch_size):
                idx = perm[k:k + cfg.batch_size]
                ls, c = classification_loss(model(X[idx]), y[idx])
                count = idx.numel()
                loss_sum += ls.double().item()
                correct_sum += int(c.double().item())
                count_sum += count
                opt.zero_grad(set_to_none=True)
                (ls * (1 / count)).backward()
                opt.step()
            with torch.no_grad():
                tl, tc = 0.0, 0.0
                for i in range(0, Xt.shape[0], cfg.eval_batch_size):
                    ls, c = classification_loss(model(Xt[i:i + cfg.eval_batch_size]), yt[i:i + cfg.eval_batch_size])
                    tl, tc = tl + ls.double(), tc + c.double()
            n = Xt.shape[0]
            rows.append({"train_loss": loss_sum / count_sum, "train_acc": correct_sum / count_sum,
                         "test_loss": float(tl) / n, "test_acc": float(tc) / n})
        return (rows, model.state_dict(), opt.state_dict()["state"]) if weights else rows
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("sync_every", [None, 1, 3, 100])
def test_metrics_do_not_depend_on_how_often_the_host_reads_them(tmp_path, sync_every):
    cfg = cfg_for(tmp_path, device="cpu")
    trainer, _ = fit(cfg, sync_every=sync_every)
    rows = read_metrics(cfg.run_dir())
    got = [{k: r[k] for k in ("train_loss", "train_acc", "test_loss", "test_acc")} for r in rows]
    assert got == reference_run(cfg)  # bitwise: the same float64 sums in the same order


@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_the_trainers_step_is_the_plain_step(tmp_path, impl):
    """The Trainer's step (seq2d.train.loop.train_update, shared with the seed-vectorised loop) gives
    the weights and Adam's moments of the plain loop above, bitwise: forward, summed loss, zero_grad,
    backward of the batch mean, optimizer step, nothing more (no clipping, no extra scaling)."""
    cfg = cfg_for(tmp_path, optimizer_impl=impl)
    trainer, _ = fit(cfg)
    rows, model, opt = reference_run(cfg, weights=True)
    assert same_state(trainer.model.state_dict(), model)
    mine = trainer.optimizer.state_dict()["state"]
    assert mine.keys() == opt.keys()
    for i in mine:
        assert same_state(mine[i], opt[i]), i


def test_deferred_host_reads_keep_checkpoints_and_resume_exact(tmp_path):
    ref, _ = fit(cfg_for(tmp_path, "ref", checkpoint_every=5), augment=noise_augment)
    lazy, _ = fit(cfg_for(tmp_path, "lazy", checkpoint_every=5), augment=noise_augment, sync_every=7)
    assert same_state(ref.model.state_dict(), lazy.model.state_dict())
    assert strip_time(read_metrics(tmp_path / "ref")) == strip_time(read_metrics(tmp_path / "lazy"))
    # a mid-epoch stop stores the partial sums and the divergence monitor read up to its step
    fit(cfg_for(tmp_path, "a", max_updates=11), augment=noise_augment)
    fit(cfg_for(tmp_path, "b", max_updates=11), augment=noise_augment, sync_every=100)
    ca, cb = load_checkpoint(tmp_path / "a" / "checkpoint.pt"), load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    pa, pb = dict(ca["extra"]["partial"]), dict(cb["extra"]["partial"])
    pa.pop("time"), pb.pop("time")
    assert pa == pb and ca["extra"]["divergence"] == cb["extra"]["divergence"]
    resumed, _ = fit(cfg_for(tmp_path, "b"), resume=True, augment=noise_augment, sync_every=100)
    assert same_state(ref.model.state_dict(), resumed.model.state_dict())
    assert strip_time(read_metrics(tmp_path / "ref")) == strip_time(read_metrics(tmp_path / "b"))


def test_host_reads_are_batched(tmp_path, monkeypatch):
    """Count the reads of tensor values into Python made by seq2d's code (torch's own, such as
    Adam's CPU step counter, are not GPU synchronisations)."""
    reads = {"n": 0}
    real_tolist, real_item = torch.Tensor.tolist, torch.Tensor.item

    def count():
        if sys._getframe(2).f_globals.get("__name__", "").startswith("seq2d"):
            reads["n"] += 1

    def tolist(self):
        count()
        return real_tolist(self)

    def item(self):
        count()
        return real_item(self)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    monkeypatch.setattr(torch.Tensor, "item", item)
    fit(cfg_for(tmp_path, "every", device="cpu"))  # CPU default: every step (free there), 8 steps per epoch
    per_step = reads["n"]
    reads["n"] = 0
    fit(cfg_for(tmp_path, "lazy", device="cpu"), sync_every=100)
    assert per_step == 2 * (8 + 1)  # 8 steps + 1 evaluation, 2 epochs
    assert reads["n"] == 2 * (1 + 1)  # one read of the epoch's steps + 1 evaluation


def test_deferred_nan_check_names_the_first_bad_step_and_keeps_the_checkpoint(tmp_path):
    class PoisonAt:
        def on_update_end(self, trainer, update):
            if update == 11:
                with torch.no_grad():
                    trainer.model.block(1, 0).weight[0, 0] = float("nan")

    cfg = cfg_for(tmp_path, epochs=3)
    with pytest.raises(NonFiniteLossError) as info:
        fit(cfg, callbacks=[PoisonAt()], sync_every=100)
    err = info.value
    assert "training loss is nan at epoch 2, update 12 (batch 4 of 8)" in str(err)
    assert err.epoch == 2 and err.update == 12 and err.checkpoint == cfg.run_dir() / "checkpoint.pt"
    ck = load_checkpoint(err.checkpoint)
    assert ck["epoch"] == 1 and ck["update"] == 8 and all(torch.isfinite(v).all() for v in ck["model"].values())


def test_host_sync_every_is_checked(tmp_path):
    with pytest.raises(ValueError, match="host_sync_every"):
        fit(cfg_for(tmp_path), sync_every=0)


def test_progress_bar_reads_the_sums_only_when_it_shows_them(capsys):
    calls = []

    def sums():
        calls.append(1)
        return {"loss": 6.0, "correct": 2, "count": 4}

    bar = EpochBar(True, tty=False, total=10, initial=0, desc="e", log_every=5, heartbeat_s=1e9)
    bar.update(1, 1, sums)
    assert calls == [] and capsys.readouterr().out == ""
    bar = EpochBar(True, tty=False, total=10, initial=0, desc="e", log_every=5, heartbeat_s=0.0)
    bar.update(3, 3, sums)
    assert calls == [1] and "loss 1.5000 acc 0.5000" in capsys.readouterr().out


# ---------------------------------------------------------------------- 6. augmentation
def test_augment_runs_without_host_sync():
    """On "meta" tensors any .item()/bool() raises: the batched augmentation never reads a
    device value on the host (a GPU synchronisation per batch)."""
    x = torch.empty(8, 1, 12, 12, device="meta")
    aug = Augment(erasing_p=0.5, perspective_p=0.7)
    assert aug(x).shape == x.shape and aug(x).device.type == "meta"
    assert aug(x.reshape(8, 144)).shape == (8, 144)


def test_augment_builds_its_constant_tensors_once_per_size_and_device(monkeypatch):
    made = []
    real = torch.tensor

    def counting(*args, **kwargs):
        made.append(kwargs.get("device"))
        return real(*args, **kwargs)

    aug = Augment(erasing_p=0.5, perspective_p=1.0, perspective_scale=1.0)
    x = torch.randn(6, 1, 13, 11)  # a size no other test uses, so the cache starts empty for it
    g = torch.Generator().manual_seed(0)
    first = aug(x, g)
    monkeypatch.setattr(torch, "tensor", counting)
    g.manual_seed(0)
    again = aug(x, g)
    assert made == []  # nothing built from Python lists (a host-to-device copy each on a GPU)
    assert torch.equal(first, again)  # bitwise: one augmentation, the same draws


def test_deferred_reads_happen_at_multiples_of_host_sync_every(tmp_path):
    """The reads are tied to the step number (so every DDP rank checks at the same steps): with
    host_sync_every=5 the NaN of step 12 is found when step 15 is queued, before its backward."""
    seen = []

    class PoisonAt:
        def on_update_end(self, trainer, update):
            seen.append(update)
            if update == 11:
                with torch.no_grad():
                    trainer.model.block(1, 0).weight[0, 0] = float("nan")

    cfg = cfg_for(tmp_path, epochs=3)
    with pytest.raises(NonFiniteLossError) as info:
        fit(cfg, callbacks=[PoisonAt()], sync_every=5)
    assert info.value.update == 12 and seen[-1] == 14


def test_resume_reads_the_checkpoint_onto_the_cpu(tmp_path, monkeypatch):
    """Trainer.load maps the checkpoint to the CPU: load_state_dict moves weights and moments to
    the parameters' device, and Adam's step counters stay on the CPU as in a fresh run (on the
    GPU each would cost a host sync per parameter and step)."""
    fit(cfg_for(tmp_path, epochs=1))
    asked = []
    real_load = trainer_mod.load_checkpoint

    def spy(path, map_location=None):
        asked.append(map_location)
        return real_load(path, map_location=map_location)

    monkeypatch.setattr(trainer_mod, "load_checkpoint", spy)
    resumed, _ = fit(cfg_for(tmp_path, epochs=2), resume=True)
    assert asked == ["cpu"]
    steps = [st["step"] for st in resumed.optimizer.state.values()]
    assert steps and all(s.device.type == "cpu" for s in steps)
    assert all(st["exp_avg"].device == p.device for p, st in resumed.optimizer.state.items())
