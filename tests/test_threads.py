"""seq2d.threads: the "auto" thread count, its validation, and "auto" in the config and CLIs."""

from __future__ import annotations

import argparse
import dataclasses
import os

import pytest
import torch

from seq2d import threads
from seq2d.cli import build_parser
from seq2d.cli import main as cli_main
from seq2d.threads import auto_threads, available_cores, cpu_limit, resolve_threads, threads_arg
from seq2d.train.config import TrainConfig, config_to_toml, load_config, parse_value
from seq2d.train.trainer import read_metrics, run


def _fake_stat(busy: dict[int, float], step: int = 100):
    """A /proc/stat reader whose CPUs advance ``step`` jiffies per call, ``busy[c]`` of them busy."""
    calls = {"n": 0}

    def reader():
        k = calls["n"]
        calls["n"] += 1
        return {c: (int(k * step * (1 - b)), k * step) for c, b in busy.items()}

    return reader


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(threads, "_affinity", lambda: {0, 1})
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: None)
    monkeypatch.setattr(threads, "_own_cpu_seconds", lambda: 0.0)


# ---------------------------------------------------------------------- resolve_threads
@pytest.mark.parametrize("value, exc, text", [
    (0, ValueError, "expected a positive int, 'auto' or None, got 0"),
    (-2, ValueError, "got -2"),
    ("fast", ValueError, "got the string 'fast'"),
    ("0", ValueError, "got the string '0'"),
    ("", ValueError, "got the string ''"),
    (True, TypeError, "got bool True"),
    (2.0, TypeError, "got float 2.0"),
    ([2], TypeError, "got list [2]"),
])
def test_resolve_threads_rejects_bad_values(value, exc, text):
    with pytest.raises(exc, match="num_threads: expected a positive int, 'auto' or None") as e:
        resolve_threads(value)
    assert text in str(e.value)


def test_resolve_threads_passes_none_and_ints(monkeypatch):
    assert resolve_threads(None) is None
    assert resolve_threads(3) == 3 and resolve_threads("4") == 4  # an explicit count is used as is
    monkeypatch.setattr(threads, "auto_threads", lambda *a, **k: 7)
    assert resolve_threads("auto") == 7 and resolve_threads(" AUTO ") == 7


def test_threads_arg_for_argparse():
    assert threads_arg("auto") == "auto" and threads_arg("3") == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a positive int or 'auto'"):
            threads_arg(bad)


# ---------------------------------------------------------------------- auto_threads
def test_auto_threads_bounds_on_this_machine():
    n = auto_threads(sample_s=0.05)
    assert 1 <= n <= cpu_limit() <= len(os.sched_getaffinity(0))
    assert 0 <= available_cores(sample_s=0.05) <= cpu_limit()
    assert auto_threads(sample_s=0.05, limit=1) == 1


def test_one_busy_core_of_two_gives_one_thread(two_cores):
    reader = _fake_stat({0: 1.0, 1: 0.0})  # another process keeps cpu0 busy
    assert available_cores(0, reader=reader) == pytest.approx(1.0)
    assert auto_threads(0, reader=_fake_stat({0: 1.0, 1: 0.0})) == 1
    assert auto_threads(0, reader=_fake_stat({0: 0.97, 1: 0.05})) == 1  # noise does not tip it


def test_quiet_machine_gives_every_core_and_busy_machine_one(two_cores):
    assert auto_threads(0, reader=_fake_stat({0: 0.0, 1: 0.0})) == 2
    assert auto_threads(0, reader=_fake_stat({0: 0.1, 1: 0.05})) == 2  # a little background load
    assert auto_threads(0, reader=_fake_stat({0: 1.0, 1: 1.0})) == 1  # never below 1
    assert auto_threads(0, reader=_fake_stat({0: 0.0, 1: 0.0}), limit=1) == 1
    assert auto_threads(0, reader=_fake_stat({0: 0.0, 1: 0.0}), share=2) == 1  # two ranks share two cores


def test_only_cpus_in_the_affinity_count(two_cores, monkeypatch):
    monkeypatch.setattr(threads, "_affinity", lambda: {1})
    reader = _fake_stat({0: 0.0, 1: 1.0, 2: 0.0, 3: 0.0})  # idle CPUs we may not run on
    assert available_cores(0, reader=reader) == pytest.approx(0.0)
    assert auto_threads(0, reader=_fake_stat({0: 0.0, 1: 0.0, 2: 0.0})) == 1  # at most the affinity count


def test_own_cpu_use_counts_as_available(two_cores, monkeypatch):
    t = iter([0.0, 0.2])  # this process used 0.2 s of CPU over a 0.2 s window: a whole core
    monkeypatch.setattr(threads, "_own_cpu_seconds", lambda: next(t))
    monkeypatch.setattr(threads.time, "monotonic", iter([10.0, 10.2]).__next__)
    reader = _fake_stat({0: 1.0, 1: 0.0})
    assert available_cores(0, reader=reader) == pytest.approx(2.0)


def test_without_proc_stat_auto_keeps_the_limit(two_cores, monkeypatch):
    assert available_cores(0, reader=lambda: None) == 2.0
    assert auto_threads(0, reader=lambda: None) == 2
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1.5)  # a container allowed 1.5 CPUs
    assert cpu_limit() == 1 and auto_threads(0, reader=lambda: None) == 1


def test_read_proc_stat_parses_per_cpu_lines(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 10 100 5 0 0 0 0 0\ncpu0 4 0 6 50 2 0 0 1 0 0\ncpu1 6 0 4 50 3 0 0 0 0 0\nintr 1 2\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(stat if p == "/proc/stat" else p, *a, **k))
    assert threads.read_proc_stat() == {0: (52, 63), 1: (53, 63)}


# ---------------------------------------------------------------------- config and CLIs
def test_config_accepts_auto_everywhere(tmp_path):
    assert TrainConfig(num_threads="auto").num_threads == "auto"
    assert TrainConfig(num_threads=2).num_threads == 2 and TrainConfig().num_threads is None
    assert parse_value("num_threads", "auto") == "auto" and parse_value("num_threads", "3") == 3
    assert parse_value("num_threads", "none") is None
    toml = tmp_path / "run.toml"
    toml.write_text('num_threads = "auto"\n')
    assert load_config(toml).num_threads == "auto"
    assert load_config(toml, ["num_threads=2"]).num_threads == 2
    saved = tmp_path / "saved.toml"
    saved.write_text(config_to_toml(TrainConfig(num_threads="auto")))
    assert load_config(saved).num_threads == "auto"  # round trip


@pytest.mark.parametrize("value, exc", [("fast", ValueError), ("2", ValueError), (0, ValueError), (True, TypeError), (1.5, TypeError)])
def test_config_rejects_bad_thread_values(value, exc):
    with pytest.raises(exc, match="config field 'num_threads': expected a positive int"):
        TrainConfig(num_threads=value)
    with pytest.raises(ValueError, match="config field 'num_threads': expected a positive int, 'auto' or None, got the string 'fast'"):
        load_config(None, ["num_threads=fast"])


def test_cli_defaults_and_keeps_ints():
    ap = build_parser()
    # seq2d mnist: 1 thread per run, runs in parallel processes (--jobs auto); auto on request
    assert ap.parse_args(["mnist"]).num_threads == 1 and ap.parse_args(["mnist"]).jobs == "auto"
    assert ap.parse_args(["mnist", "--num-threads", "auto"]).num_threads == "auto"
    assert ap.parse_args(["mnist", "--num-threads", "1"]).num_threads == 1
    from seq2d.train.command import TRAIN_DEFAULTS as _TRAIN_DEFAULTS  # seq2d train and python -m seq2d.train
    from seq2d.train.config import config_from_args

    assert config_from_args(ap.parse_args(["train"]), base=_TRAIN_DEFAULTS).num_threads == "auto"
    assert config_from_args(ap.parse_args(["train", "--num-threads", "2"]), base=_TRAIN_DEFAULTS).num_threads == 2
    assert config_from_args(ap.parse_args(["train", "--num-threads", "none"]), base=_TRAIN_DEFAULTS).num_threads is None
    with pytest.raises(SystemExit):
        ap.parse_args(["mnist", "--num-threads", "many"])


def test_run_records_the_thread_count(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(threads, "available_cores", lambda *a, **k: 1.0)
    before = torch.get_num_threads()
    cfg = TrainConfig(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=1, num_threads="auto",
                      out_dir=str(tmp_path / "r"))
    summary = run(cfg)
    assert summary["num_threads"] == 1 and read_metrics(tmp_path / "r")[0]["num_threads"] == 1
    assert "torch threads: 1 (auto: 1.0 of" in capsys.readouterr().out  # printed once, when not quiet
    assert torch.get_num_threads() == before  # restored after the run
    summary = run(TrainConfig(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=1, num_threads=1, quiet=True,
                              out_dir=str(tmp_path / "r1")))
    assert summary["num_threads"] == 1


def test_the_api_chooses_threads_as_the_cli_does(tmp_path, monkeypatch, capsys):
    """Issue 31: Trainer(TrainConfig(...)) used torch's thread count (2 here) where `seq2d train`
    chooses "auto" (1 with one core idle). The config's default stays None, so no config hash
    changes (tests/test_run_identity.py); None now chooses as "auto" does."""
    monkeypatch.setattr(threads, "available_cores", lambda *a, **k: 1.0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = TrainConfig(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=1, out_dir=str(tmp_path / "api"))
        assert cfg.num_threads is None
        summary = run(cfg)
        api_line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("torch threads:"))
        assert summary["num_threads"] == 1 and api_line.startswith("torch threads: 1 (auto: 1.0 of")
        assert torch.get_num_threads() == 2  # restored after the run
        auto = run(dataclasses.replace(cfg, num_threads="auto", out_dir=str(tmp_path / "auto")))  # what the CLI passes
        assert auto["num_threads"] == summary["num_threads"]
        assert next(s for s in capsys.readouterr().out.splitlines() if s.startswith("torch threads:")) == api_line
        assert run(dataclasses.replace(cfg, num_threads=2, quiet=True, out_dir=str(tmp_path / "two")))["num_threads"] == 2
    finally:
        torch.set_num_threads(before)

def test_seq2d_train_cli_prints_threads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(threads, "available_cores", lambda *a, **k: 1.0)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'model = "mlp"\nsizes = [16, 8, 4]\ndata = "synthetic"\nepochs = 1\nquiet = true\nout_dir = "{tmp_path / "run"}"\n')
    assert cli_main(["train", str(cfg)]) == 0
    assert "on cpu (1 thread);" in capsys.readouterr().out
    assert 'num_threads = "auto"' in (tmp_path / "run" / "config.toml").read_text()
    assert read_metrics(tmp_path / "run")[0]["num_threads"] == 1


# ---------------------------------------------------------------------- LoadFollower (the CPU kernels)
class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _follower(busy, clock, **kw):
    return threads.LoadFollower(reader=_fake_stat(busy), clock=clock, own=lambda: 0.0, **kw)


def test_follower_answers_the_request_until_a_window_is_measured(two_cores):
    clock = _Clock()
    f = _follower({0: 1.0, 1: 0.0}, clock, interval=0.1)
    assert f.threads(2) == 2  # first reading only starts a window
    clock.t = 0.05
    assert f.threads(2) == 2 and f.available is None  # inside the interval: no new reading
    clock.t = 0.2
    assert f.threads(2) == 1 and f.available == pytest.approx(1.0)  # one core busy over the window
    assert f.threads(1) == 1


def test_follower_follows_load_that_comes_and_goes(two_cores, monkeypatch):
    clock = _Clock()
    state = {"busy": 1.0}
    k = {"n": 0}

    def reader():  # cpu 0 busy or not per call, cpu 1 idle
        k["n"] += 1
        n = k["n"]
        reader.idle0 = getattr(reader, "idle0", 0) + int(100 * (1 - state["busy"]))
        return {0: (reader.idle0, 100 * n), 1: (100 * n, 100 * n)}

    f = threads.LoadFollower(reader=reader, clock=clock, own=lambda: 0.0, interval=0.1)
    f.threads(2)
    clock.t = 0.2
    assert f.threads(2) == 1
    state["busy"] = 0.0
    clock.t = 0.4
    assert f.threads(2) == 2
    # a stale window (the program did something else for a while) only starts a new one
    state["busy"] = 1.0
    clock.t = 10.0
    assert f.threads(2) == 2
    clock.t = 10.2
    assert f.threads(2) == 1


def test_follow_load_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("SEQ2D_FOLLOW_LOAD", "0")
    monkeypatch.setattr(threads._FOLLOWER, "threads", lambda want: 1)
    assert threads.follow_load_threads(2) == 2
    monkeypatch.setenv("SEQ2D_FOLLOW_LOAD", "1")
    assert threads.follow_load_threads(2) == 1


@pytest.mark.parametrize("kernel", ["cpu", "cpu_gather", "cpu_panels", "cpu_fmruns"])
def test_cpu_kernels_under_load_give_the_same_product_and_restore_torch(monkeypatch, kernel):
    """With the follower saying one core is free, the runs/gather kernels (run with 1 thread)
    give the reference product and gradients, and leave torch's thread count as it was."""
    import seq2d.sparse.kernels.cpu as cpu
    from seq2d.sparse import bsmm
    from seq2d.sparse.layout import BlockSparseLayout

    g = torch.Generator().manual_seed(0)
    L = BlockSparseLayout(16, (3, 4), [0, 0, 1, 2, 2], [0, 2, 1, 0, 3])
    x = torch.randn(5, 64, generator=g, dtype=torch.float64, requires_grad=True)
    wp = torch.randn(L.nnz, 16, 16, generator=g, dtype=torch.float64, requires_grad=True)
    W = L.to_dense(wp.detach()).requires_grad_()
    xr = x.detach().clone().requires_grad_()
    (xr @ W.T).sum().backward()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(cpu, "follow_load_threads", lambda want: 1)
        y = bsmm(x, wp, L, kernel)
        y.sum().backward()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert torch.allclose(y, xr.detach() @ W.detach().T)
    assert torch.allclose(x.grad, xr.grad)
    assert torch.allclose(L.to_dense(wp.grad), W.grad * L.to_dense(torch.ones_like(wp)))


def test_cpu_kernel_sets_one_thread_inside_the_loop(monkeypatch):
    import seq2d.sparse.kernels.cpu as cpu

    calls = []
    monkeypatch.setattr(cpu, "follow_load_threads", lambda want: 1)
    monkeypatch.setattr(cpu.torch, "set_num_threads", lambda n: calls.append(n))
    monkeypatch.setattr(cpu.torch, "get_num_threads", lambda: 2)
    with cpu._threads_for_load():
        calls.append("body")
    assert calls == [1, "body", 2]
