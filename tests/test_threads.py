"""seq2d.threads: the "auto" thread count, its validation, and "auto" in the config and CLIs."""

from __future__ import annotations

import argparse
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


def test_cli_defaults_to_auto_and_keeps_ints():
    ap = build_parser()
    assert ap.parse_args(["mnist"]).num_threads == "auto"
    assert ap.parse_args(["mnist", "--num-threads", "1"]).num_threads == 1
    from seq2d.cli import _TRAIN_DEFAULTS
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


def test_seq2d_train_cli_prints_threads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(threads, "available_cores", lambda *a, **k: 1.0)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'model = "mlp"\nsizes = [16, 8, 4]\ndata = "synthetic"\nepochs = 1\nquiet = true\nout_dir = "{tmp_path / "run"}"\n')
    assert cli_main(["train", str(cfg)]) == 0
    assert "on cpu (1 thread);" in capsys.readouterr().out
    assert 'num_threads = "auto"' in (tmp_path / "run" / "config.toml").read_text()
    assert read_metrics(tmp_path / "run")[0]["num_threads"] == 1
