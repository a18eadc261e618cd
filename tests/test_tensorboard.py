"""TensorBoard logging (seq2d.train.tensorboard, config field ``tensorboard``, ``--tensorboard DIR``).

The event files are read back with tensorboard's own reader (EventAccumulator) and compared
with metrics.jsonl. Tiny runs: an MLP 16 -> 8 -> 4 on synthetic clusters, one thread.
Tests that need the package skip without it (CI installs the extra).
"""

import dataclasses
import json
import math
import sys

import pytest

from seq2d.train import TrainConfig, Trainer, build_model, config_hash, synthetic_data
from seq2d.train.tensorboard import SCALAR_TAGS, TensorBoardMissing, config_callbacks, require_tensorboard
from seq2d.train.vectorized import NotVectorizable, check_vectorizable

DATA = synthetic_data(16, 4, n_train=128, n_test=64)
needs_tb = pytest.mark.skipif(
    __import__("importlib").util.find_spec("tensorboard") is None,
    reason='tensorboard not installed (pip install -e ".[tensorboard]")')


def cfg_for(tmp_path, **kw):
    base = dict(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=2, batch_size=32, lr=1e-2,
                out_dir=str(tmp_path / "run"), num_threads=1, quiet=True, name="tiny",
                tensorboard=str(tmp_path / "tb"))
    base.update(kw)
    return TrainConfig(**base)


def read_events(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc) -> dict[str, list[tuple[int, float]]]:
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def metrics_rows(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def check_against_metrics(got: dict, rows: list[dict]) -> None:
    for column, tag in SCALAR_TAGS.items():
        want = [(r["update"], r[column]) for r in rows]
        assert [s for s, _ in got[tag]] == [s for s, _ in want], tag
        for (_, v), (_, w) in zip(got[tag], want):
            assert v == pytest.approx(w, rel=1e-6), (tag, v, w)  # events hold float32


@needs_tb
def test_events_match_metrics_and_hold_config_and_pictures(tmp_path):
    from tensorboard.plugins.hparams import metadata

    class Extra:  # a callback before the logger: its extra metric reaches TensorBoard too
        def on_epoch_end(self, trainer, epoch, row):
            return {"my_metric": 0.5 * epoch}

    cfg = cfg_for(tmp_path)
    trainer = Trainer(cfg, build_model(cfg), DATA, callbacks=[Extra()])
    summary = trainer.fit()
    assert summary["status"] == "complete"
    acc = read_events(tmp_path / "tb" / "tiny")  # <tensorboard>/<name>
    got = scalars(acc)
    rows = metrics_rows(tmp_path / "run")
    assert len(rows) == 2
    check_against_metrics(got, rows)
    assert got["my_metric"] == [(rows[0]["update"], 0.5), (rows[1]["update"], 1.0)]
    for tag in ("grad_norm/mean", "grad_norm/max"):
        assert [s for s, _ in got[tag]] == [r["update"] for r in rows]
        assert all(math.isfinite(v) and v > 0 for _, v in got[tag])
    assert all(m <= x * (1 + 1e-6) for (_, m), (_, x) in zip(got["grad_norm/mean"], got["grad_norm/max"]))
    # once per run: the pictures, the config as text and as hparams
    assert sorted(acc.Tags()["images"]) == ["model/graph", "model/spy"]
    assert acc.Images("model/spy")[0].width > 100
    assert "config/text_summary" in acc.Tags()["tensors"]
    content = acc.PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(content["_hparams_/session_start_info"])
    assert start.hparams["lr"].number_value == pytest.approx(1e-2)
    assert start.hparams["sizes"].string_value == "[16, 8, 4]"
    assert "tensorboard" not in start.hparams and "out_dir" not in start.hparams  # output fields are not hparams
    experiment = metadata.parse_experiment_plugin_data(content["_hparams_/experiment"])
    assert {m.name.tag for m in experiment.metric_infos} == {"accuracy/test", "loss/test"}
    assert "_hparams_/session_end_info" in content  # a complete run


@needs_tb
def test_max_updates_stop_then_resume_logs_each_row_once(tmp_path):
    cfg = cfg_for(tmp_path, max_updates=3)
    Trainer(cfg, build_model(cfg), DATA).fit()  # 4 steps per epoch: stops inside epoch 1
    cfg2 = dataclasses.replace(cfg, max_updates=None)
    Trainer(cfg2, build_model(cfg2), DATA).fit(resume=True)
    got = scalars(read_events(tmp_path / "tb" / "tiny"))
    rows = metrics_rows(tmp_path / "run")
    assert [r["update"] for r in rows] == [4, 8]
    assert got["epoch"][0] == (3, pytest.approx(0.75))  # the partial row where max_updates stopped
    check_against_metrics({t: v[1:] for t, v in got.items()}, rows)  # then each full row once


@needs_tb
def test_cli_train_flag_end_to_end(tmp_path, capsys):
    from seq2d.cli import main

    out, tb = tmp_path / "out", tmp_path / "tb"
    code = main(["train", "--data", "synthetic", "--sizes", "16", "8", "4", "--epochs", "2", "--batch-size", "64",
                 "--max-updates", "3", "--num-threads", "1", "--quiet", "--name", "cli-run", "--out-dir", str(out),
                 "--tensorboard", str(tb)])
    assert code == 0
    assert "partial run" in capsys.readouterr().out
    got = scalars(read_events(tb / "cli-run"))
    (row,) = metrics_rows(out)  # the partial row of the max_updates stop
    assert got["accuracy/test"] == [(3, pytest.approx(row["test_acc"]))]
    assert set(SCALAR_TAGS.values()) | {"grad_norm/mean", "grad_norm/max"} <= set(got)
    assert "tensorboard = " in (out / "config.toml").read_text()


def test_cli_flags_exist():
    from seq2d.cli import build_parser
    from seq2d.train.__main__ import build_parser as module_parser

    for parser, argv in ((build_parser("train"), ["train", "--tensorboard", "tb"]),
                         (build_parser("mnist"), ["mnist", "--tensorboard", "tb"]),
                         (module_parser(), ["--tensorboard", "tb"])):
        args = parser.parse_args(argv)
        assert getattr(args, "cfg_tensorboard", None) == "tb" or getattr(args, "tensorboard", None) == "tb"


def test_log_dir_is_not_part_of_the_run_identity(tmp_path):
    a = cfg_for(tmp_path, tensorboard=None)
    b = cfg_for(tmp_path, tensorboard=str(tmp_path / "elsewhere"))
    assert config_hash(a) == config_hash(b)
    assert config_callbacks(a) == ()


def test_vectorized_seeds_refuse_tensorboard(tmp_path):
    cfgs = [cfg_for(tmp_path, seed=s, out_dir=str(tmp_path / f"s{s}")) for s in (0, 1)]
    with pytest.raises(NotVectorizable, match="TensorBoard"):
        check_vectorizable(cfgs)


def test_missing_package_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    with pytest.raises(TensorBoardMissing, match=r'pip install -e "\.\[tensorboard\]"'):
        require_tensorboard()
    cfg = cfg_for(tmp_path)
    with pytest.raises(TensorBoardMissing, match="optional extra"):
        Trainer(cfg, build_model(cfg), DATA)  # before anything is trained or written
    assert not (tmp_path / "run").exists()


def test_write_rows_puts_each_row_at_its_update(tmp_path, monkeypatch):
    """write_rows's x axis is each row's ``update`` (train_lm's rows), a row written before issue 36 read
    with its ``step`` as ``update``; the final scalars at the last row's. A stand-in writer records the
    calls, so this runs without the package."""
    import seq2d.train.tensorboard as tb

    calls = []

    class Writer:
        def __init__(self, log_dir):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def add_scalar(self, tag, value, step):
            calls.append((tag, step))

    monkeypatch.setattr(tb, "require_tensorboard", lambda what=None: Writer)
    tb.write_rows(tmp_path, [{"epoch": 1, "update": 3, "valid_loss": 2.0}, {"epoch": 2, "step": 6, "valid_loss": 1.5}],
                  final={"lambda/certified": 0.9})
    assert calls == [("epoch", 3), ("loss/valid", 3), ("epoch", 6), ("loss/valid", 6), ("lambda/certified", 6)]


@needs_tb
def test_write_rows_and_the_stable_rnn_lambdas(tmp_path):
    """experiments/stable_rnn/truncated_training.py --tensorboard: each model's epochs, then its lambda
    estimates (the ones results.json holds) at its last step."""
    import importlib.util
    import pathlib

    tests = pathlib.Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("stable_rnn_truncated_training",
                                                  tests.parent / "experiments" / "stable_rnn" / "truncated_training.py")
    exp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exp)
    sys.path.insert(0, str(tests))
    try:
        from test_stable_rnn_experiments import _tiny_corpus
    finally:
        sys.path.remove(str(tests))
    root = _tiny_corpus(tmp_path / "data")
    exp.main(["--quick", "--data-root", str(root), "--tokens", "4000", "--eval-tokens", "300", "--emb", "8",
              "--hidden", "8", "--ks", "2", "--batch-size", "5", "--runs", "stable", "--max-batches", "3",
              "--carried-segments", "1", "--lambda-rows", "2", "--grad-distance", "3", "--control-eps", "0",
              "--threads", "1", "--cutoffs", "", "--out", str(tmp_path / "o"), "--tensorboard", str(tmp_path / "tb")])
    res = json.loads((tmp_path / "o" / "results.json").read_text())["runs"]["stable"]["models"]
    for name in ("recurrent", "k=2"):
        got = scalars(read_events(tmp_path / "tb" / "stable" / name))
        model = res[name]
        last = model["updates"]
        assert got["lambda/certified"] == [(last, pytest.approx(model["certified_lambda"], rel=1e-6))]
        assert got["lambda/data_max"] == [(last, pytest.approx(model["data_lambda"]["max"], rel=1e-6))]
        assert got["ppl/test_recurrent"] == [(last, pytest.approx(model["test_ppl_recurrent"], rel=1e-6))]
        assert [s for s, _ in got["loss/valid"]] == [last] and "ppl/train" in got
    assert "ppl/test_truncated" in scalars(read_events(tmp_path / "tb" / "stable" / "k=2"))


@needs_tb
@pytest.mark.slow
def test_torchrun_rank0_alone_writes_events(tmp_path):
    import os
    import subprocess

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "seq2d.train",
           "--data", "synthetic", "--sizes", "16", "8", "4", "--epochs", "2", "--batch-size", "32", "--device", "cpu",
           "--num-threads", "1", "--quiet", "--name", "ddp", "--out-dir", str(tmp_path / "out"),
           "--tensorboard", str(tmp_path / "tb")]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list((tmp_path / "tb" / "ddp").iterdir())) == 1  # one event file: rank 0's
    rows = metrics_rows(tmp_path / "out")
    assert [r["world_size"] for r in rows] == [2, 2]
    check_against_metrics(scalars(read_events(tmp_path / "tb" / "ddp")), rows)


@needs_tb
@pytest.mark.slow
def test_cli_mnist_flag_writes_one_folder_per_run(tmp_path):
    from seq2d.cli import main

    tb = tmp_path / "tb"
    assert main(["mnist", "--models", "mlp", "--seeds", "0,1", "--epochs", "1", "--max-updates", "2", "--jobs", "1",
                 "--vectorize-seeds", "--quiet", "--out", str(tmp_path / "out"), "--tensorboard", str(tb)]) == 0
    assert sorted(p.name for p in tb.iterdir()) == ["mlp-s0", "mlp-s1"]  # trained one seed at a time
    for seed in (0, 1):
        got = scalars(read_events(tb / f"mlp-s{seed}"))
        (row,) = metrics_rows(tmp_path / "out" / "mlp" / f"seed{seed}")
        assert got["accuracy/test"] == [(2, pytest.approx(row["test_acc"]))]
