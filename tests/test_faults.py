"""Faults of a training run (issue 11): a process killed outright (kill -9, mid-step and
mid-checkpoint-write) then ``--resume``d gives bitwise the weights of an uninterrupted run;
two runs in one folder; divergence; unsafe pickles; resume without a checkpoint; a changed
lr refused unless allowed (and then logged).

The killed runs are child processes: this file run as a script (``python tests/test_faults.py
child OUT PHASE N SLEEP``) trains through ``seq2d train`` with a hook that calls
``os._exit(137)`` (what SIGKILL leaves: no handler, no cleanup) at the N-th event of PHASE,
or, for PHASE "sigkill", the parent sends a real SIGKILL after a random delay. The ten kill
points are drawn from a seeded generator (``SEQ2D_FAULT_SEED``, default 11; the test ids
show each point) so a failure reproduces.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the run every fault test kills: 512 synthetic samples, batch 64 -> 8 steps per epoch,
# 3 epochs = 24 steps; a checkpoint every 2 steps (mid-epoch) and at each epoch end (12 writes)
STEPS, WRITES = 24, 12


def train_args(out, *extra) -> list[str]:
    return ["train", "--model", "mlp", "--sizes", "16", "8", "4", "--data", "synthetic", "--epochs", "3",
            "--batch-size", "64", "--lr", "0.01", "--checkpoint-every", "2", "--num-threads", "1", "--quiet",
            "--out-dir", str(out), *extra]


# ---------------------------------------------------------------------- the child
def _child(out: str, phase: str, n: int, sleep: float) -> int:
    import torch

    import seq2d.train.rundir as metrics_mod
    import seq2d.train.trainer as trainer_mod
    from seq2d.cli import main

    count = [0]

    def hit() -> None:
        count[0] += 1
        if count[0] == n:
            os._exit(137)

    real_build = trainer_mod.build_model

    def build(cfg, **kw):
        model = real_build(cfg, **kw)

        def pre(module, inputs):
            if sleep:
                time.sleep(sleep)
            if phase == "forward" and module.training:
                hit()

        model.register_forward_pre_hook(pre)
        if phase == "backward":
            next(model.parameters()).register_hook(lambda g: hit())
        return model

    trainer_mod.build_model = build
    if phase == "optimizer":  # inside optimizer.step(), before the parameters change
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(lambda opt, args, kwargs: hit())
    if phase == "save":  # torch.save of the checkpoint torn in the middle of its temporary file
        real_save = torch.save

        def torn(obj, f, *a, **kw):
            if isinstance(obj, dict) and obj.get("format") == "seq2d-checkpoint":
                count[0] += 1
                if count[0] == n:
                    buf = io.BytesIO()
                    real_save(obj, buf, *a, **kw)
                    f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                    f.flush()
                    os._exit(137)
            return real_save(obj, f, *a, **kw)

        torch.save = torn
    if phase in ("replace", "replaced"):  # the whole temporary file written, killed before / after the rename
        real_replace = os.replace

        def replace(src, dst):
            if Path(dst).name != "checkpoint.pt":
                return real_replace(src, dst)
            count[0] += 1
            if count[0] == n and phase == "replace":
                os._exit(137)
            real_replace(src, dst)
            if count[0] == n:
                os._exit(137)

        os.replace = replace
    if phase == "metrics":  # the checkpoint is new, the metrics files still old
        real_write = metrics_mod.write_metrics

        def write(*a, **kw):
            hit()
            return real_write(*a, **kw)

        trainer_mod.write_metrics = write
    return main(train_args(out))


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    sys.exit(_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))


# ---------------------------------------------------------------------- the tests
import pytest  # noqa: E402

# Run in one process (README: ``-m serial`` after the ``-n 2`` pass): under pytest-xdist three kill
# points (save-8, replace-9, replaced-10) failed once in one worker (session 16, load 5-7); two later
# full ``-n 2`` runs (one at load 5.5) passed them, and the cause is not found.
pytestmark = pytest.mark.serial
import torch  # noqa: E402

from seq2d.cli import main  # noqa: E402
from seq2d.errors import Seq2DError  # noqa: E402
from seq2d.train import (  # noqa: E402
    CheckpointError,
    DivergenceError,
    NonFiniteLossError,
    RunDir,
    RunLockedError,
    TrainConfig,
    Trainer,
    build_model,
    load_checkpoint,
    read_metrics,
    synthetic_data,
)


def _child_cmd(out, phase, n, sleep=0.0):
    return [sys.executable, str(Path(__file__).resolve()), "child", str(out), phase, str(n), str(sleep)]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _cases() -> list[tuple[str, int, float]]:
    rng = random.Random(int(os.environ.get("SEQ2D_FAULT_SEED", "11")))
    phases = ["forward", "backward", "optimizer", "save", "replace", "replaced", "metrics", "sigkill", "forward", "save"]
    out: list[tuple[str, int, float]] = []
    for phase in phases:
        while True:  # ten distinct points
            if phase in ("forward", "backward", "optimizer"):  # mid-step, at step n
                case = (phase, rng.randint(1, STEPS), 0.0)
            elif phase == "metrics":  # between the checkpoint and the metrics files, at write n (n = 1: the start)
                case = (phase, rng.randint(1, WRITES + 1), 0.0)
            elif phase == "sigkill":  # a real SIGKILL, this long after the first checkpoint
                case = (phase, 0, round(rng.uniform(0.0, 0.4), 3))
            else:  # mid-checkpoint-write n: torn temporary file / before / after the rename
                case = (phase, rng.randint(1, WRITES), 0.0)
            if case not in out:
                break
        out.append(case)
    return out


CASES = _cases()


def strip_time(rows):
    return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(train_args(out)) == 0
    return load_checkpoint(out / "checkpoint.pt"), read_metrics(out)


@pytest.mark.slow
@pytest.mark.parametrize("phase,n,delay", CASES, ids=[f"{p}-{n}" if p != "sigkill" else f"sigkill-{d}s" for p, n, d in CASES])
def test_killed_run_resumes_bitwise_exact(phase, n, delay, reference, tmp_path, capsys):
    out = tmp_path / "run"
    if phase == "sigkill":  # a real kill -9 at a random moment after the first checkpoint
        proc = subprocess.Popen(_child_cmd(out, phase, 0, sleep=0.02), env=_env(), cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.monotonic()
        while not (out / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        rc = proc.returncode
        assert rc in (0, -signal.SIGKILL), proc.stderr.read().decode()
    else:
        res = subprocess.run(_child_cmd(out, phase, n), env=_env(), cwd=tmp_path, capture_output=True, timeout=120)
        rc = res.returncode
        assert rc == 137, f"the child was to die at {phase} #{n}: rc {rc}\n{res.stderr.decode()[-2000:]}"
    assert (out / "run.lock").exists() == (rc != 0)  # a killed run leaves its lock
    if phase in ("forward", "backward", "optimizer") and (out / "checkpoint.pt").exists():
        # killed mid-step: run.json's progress is the last checkpoint's, what a resume reports
        record = json.loads((out / "run.json").read_text())
        saved = load_checkpoint(out / "checkpoint.pt")
        assert (record["status"], record["update"]) == ("running", saved["update"]), (record, saved["update"])
    capsys.readouterr()

    if (out / "checkpoint.pt").exists():
        assert main(train_args(out, "--resume")) == 0
    else:  # killed before its first checkpoint: --resume says so, a fresh start works
        assert main(train_args(out, "--resume")) == 2
        assert "no checkpoint at" in capsys.readouterr().err
        assert main(train_args(out)) == 0
    err = capsys.readouterr().err
    if rc != 0:
        assert "taking over the stale lock" in err and "is no longer running" in err
    if phase in ("save", "replace"):
        assert "removed 1 temporary file(s)" in err and ".checkpoint.pt.tmp-" in err

    ref_ckpt, ref_rows = reference
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert (ckpt["epoch"], ckpt["update"]) == (ref_ckpt["epoch"], ref_ckpt["update"]) == (3, STEPS)
    assert ckpt["model"].keys() == ref_ckpt["model"].keys()
    assert all(torch.equal(ckpt["model"][k], ref_ckpt["model"][k]) for k in ckpt["model"])  # bitwise
    a, b = ckpt["optimizer"]["state"], ref_ckpt["optimizer"]["state"]
    assert all(torch.equal(a[i][k], b[i][k]) for i in b for k in b[i])
    assert strip_time(read_metrics(out)) == strip_time(ref_rows)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "config.toml", "metrics.csv", "metrics.jsonl", "run.json",
                                                 "test_predictions.npz"]
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


# ---------------------------------------------------------------------- two runs, one folder
@pytest.mark.slow
def test_two_concurrent_runs_in_one_folder_one_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    proc = subprocess.Popen(_child_cmd(out, "none", 0, sleep=0.2), env=_env(), cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while not (out / "run.lock").exists() and time.monotonic() - t0 < 60:
            assert proc.poll() is None, "the first run ended early"
            time.sleep(0.01)
        assert main(train_args(out, "--resume")) == 2
        err = capsys.readouterr().err
        assert f"is in use: process {proc.pid}" in err and "run.lock" in err
        with pytest.raises(RunLockedError) as info:  # the library says the same, with the holder's pid
            cfg = TrainConfig(model="mlp", sizes=[16, 8, 4], data="synthetic", out_dir=str(out), quiet=True)
            Trainer(cfg, build_model(cfg), synthetic_data(16, 4)).fit(overwrite=True)
        assert info.value.pid == proc.pid and isinstance(info.value, Seq2DError)
        assert proc.poll() is None  # the refused runs left the holder's lock and files alone
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # the holder is dead: its lock is stale, and the next run takes it over
    assert (out / "run.lock").exists()
    rc = main(train_args(out, "--resume") if (out / "checkpoint.pt").exists() else train_args(out))
    assert rc == 0
    assert f"taking over the stale lock {str(out / 'run.lock')!r}" in capsys.readouterr().err
    assert not (out / "run.lock").exists()


def test_lock_unit_behaviour(tmp_path):
    a = RunDir(tmp_path / "r", log=lambda line: None).acquire()
    holder = json.loads(a.lock_path.read_text())
    assert holder["pid"] == os.getpid() and holder["started"]
    with pytest.raises(RunLockedError, match=rf"in use: process {os.getpid()} "):
        RunDir(tmp_path / "r").acquire()
    a.release()
    assert not a.lock_path.exists()
    # a lock of a pid that has exited (reaped) is stale
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "r" / "run.lock").write_text(json.dumps({"pid": dead.pid, "host": holder["host"], "started": "then"}))
    lines = []
    b = RunDir(tmp_path / "r", log=lines.append).acquire()
    assert len(lines) == 1 and f"pid {dead.pid} is no longer running" in lines[0] and "warning" in lines[0]
    b.release()


# ---------------------------------------------------------------------- divergence
def _cfg(tmp_path, name="run", **kw):
    base = dict(model="mlp", sizes=[16, 8, 4], data="synthetic", epochs=2, batch_size=32, lr=1e-2,
                out_dir=str(tmp_path / name), num_threads=1, quiet=True)
    base.update(kw)
    return TrainConfig(**base)


DATA = synthetic_data(16, 4, n_train=256, n_test=128)


def _fit(cfg, **kw):
    t = Trainer(cfg, build_model(cfg), DATA)
    return t, t.fit(**kw)


def test_huge_lr_is_a_divergence_naming_step_and_last_good_checkpoint(tmp_path):
    with pytest.raises(DivergenceError) as info:
        _fit(_cfg(tmp_path, lr=1e4, optimizer="sgd"))
    e = info.value
    assert not isinstance(e, NonFiniteLossError) and e.epoch == 1 and e.update == 2 and e.checkpoint is None
    assert "at epoch 1, update 2 (batch 2 of 8)" in str(e) and "No checkpoint was written yet" in str(e)
    # a good epoch, then a resume with a huge lr (allowed): the epoch-1 checkpoint is the last good one
    _fit(_cfg(tmp_path, "b", epochs=1))
    path = tmp_path / "b" / "checkpoint.pt"
    before = path.read_bytes()
    with pytest.raises(DivergenceError) as info:
        _fit(_cfg(tmp_path, "b", lr=1e4), resume=True, allow_changed="lr")
    e = info.value
    assert e.epoch == 2 and e.checkpoint == path and e.update in (9, 10)
    assert f"The last good checkpoint, {str(path)!r} (after 1 epochs, update 8), is kept unchanged" in str(e)
    assert "exceeds divergence_factor x its lowest value (1000 x" in str(e) and "lr (now 10000.0)" in str(e)
    assert path.read_bytes() == before
    assert json.loads((tmp_path / "b" / "run.json").read_text())["status"] == "diverged"


def test_divergence_factor_sets_the_rule(tmp_path):
    # SGD lr 10: the smoothed loss grows ~400x within the epoch but stays finite: under the
    # default factor (1000) and with the rule off the run finishes; a factor of 100 stops it
    for name, factor in (("off", None), ("default", 1000.0)):
        _, s = _fit(_cfg(tmp_path, name, lr=10.0, optimizer="sgd", epochs=1, divergence_factor=factor))
        assert s["complete"]
    with pytest.raises(DivergenceError, match=r"\(100 x 1\.3\d*; first value 1\.3\d*\) at epoch 1, update \d"):
        _fit(_cfg(tmp_path, "on", lr=10.0, optimizer="sgd", epochs=1, divergence_factor=100.0))


# ---------------------------------------------------------------------- unsafe pickles
class _Payload:
    """Unpickling this runs exec(...), which writes the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.mark.parametrize("kind", ["whole-file", "inside-a-checkpoint", "legacy-format", "raw-pickle"])
def test_an_unsafe_pickle_is_never_executed(kind, tmp_path):
    import pickle

    marker = tmp_path / "executed"
    path = tmp_path / "run" / "checkpoint.pt"
    path.parent.mkdir()
    if kind == "whole-file":
        torch.save(_Payload(marker), path)
    elif kind == "inside-a-checkpoint":  # a real checkpoint with one poisoned entry
        _fit(_cfg(tmp_path, epochs=1))
        ck = torch.load(path, weights_only=True)
        ck["extra"]["note"] = _Payload(marker)
        torch.save(ck, path)
    elif kind == "legacy-format":
        torch.save({"format": "seq2d-checkpoint", "x": _Payload(marker)}, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and not marker.exists()
    with pytest.raises(CheckpointError):  # nor through a resume
        _fit(_cfg(tmp_path, epochs=2), resume=True)
    assert not marker.exists()
    # the payload is live: the unsafe loader would have run it
    if kind in ("whole-file", "inside-a-checkpoint"):
        torch.load(path, weights_only=False)
        assert marker.read_text() == "pwned"


# ---------------------------------------------------------------------- resume without a checkpoint
def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(CheckpointError, match=r"the run folder .*run' does not exist, so there is no checkpoint"):
        _fit(_cfg(tmp_path), resume=True)
    assert not (tmp_path / "run").exists()  # nothing was created
    (tmp_path / "run").mkdir()
    with pytest.raises(CheckpointError, match=r"no checkpoint at .*checkpoint\.pt': the file does not exist .*without resume=True"):
        _fit(_cfg(tmp_path), resume=True)
    assert sorted(os.listdir(tmp_path / "run")) == []  # no lock, no metrics left
    assert main(train_args(tmp_path / "cli", "--resume")) == 2
    err = capsys.readouterr().err
    assert err.startswith("seq2d: error: cannot resume") and "Traceback" not in err


# ---------------------------------------------------------------------- a changed lr on resume
def test_changed_lr_is_refused_without_the_flag_and_logged_with_it(tmp_path, capsys):
    _fit(_cfg(tmp_path, epochs=1))
    with pytest.raises(CheckpointError, match=r"lr: checkpoint 0\.01, now 0\.05.*pass allow_changed=\('lr',\)\. "):
        _fit(_cfg(tmp_path, lr=0.05), resume=True)
    t, s = _fit(_cfg(tmp_path, lr=0.05, quiet=False), resume=True, allow_changed=("lr",))
    assert "changed settings (allowed): lr: 0.01 -> 0.05 at update 8" in capsys.readouterr().out
    assert t.optimizer.param_groups[0]["lr"] == 0.05 and s["complete"]
    rows = read_metrics(tmp_path / "run")
    assert "changes" not in rows[0] and rows[1]["changes"] == "lr: 0.01 -> 0.05 at update 8"
    assert rows[1]["lr"] == 0.05
    with open(tmp_path / "run" / "metrics.csv") as f:
        assert f.readline().rstrip().endswith(",changes")
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["changes"] == [{"field": "lr", "old": 0.01, "new": 0.05, "update": 8}]
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ck["config"]["lr"] == 0.05 and ck["extra"]["changes"] == record["changes"]


def test_changed_optimizer_on_resume_through_the_cli(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--model", "mlp", "--sizes", "16", "8", "4", "--data", "synthetic", "--epochs", "1",
            "--num-threads", "1", "--out-dir", str(out)]
    assert main(args + ["--quiet"]) == 0
    more = args[:-4] + ["--out-dir", str(out), "--epochs", "2", "--optimizer", "sgd", "--lr", "0.1", "--resume"]
    assert main(more) == 2
    err = capsys.readouterr().err
    assert "optimizer: checkpoint 'adam', now 'sgd'" in err and "--allow-changed lr,optimizer" in err
    assert main(more + ["--allow-changed", "sizes"]) == 2
    assert "--allow-changed: field 'sizes' cannot be changed on resume" in capsys.readouterr().err
    assert main(args + ["--allow-changed", "lr"]) == 2  # without --resume
    assert "only applies when resuming" in capsys.readouterr().err
    assert main(more + ["--allow-changed", "lr,optimizer"]) == 0
    out_text = capsys.readouterr().out
    assert "optimizer: 'adam' -> 'sgd' at update 8" in out_text and "the new optimizer starts without state" in out_text
    rows = read_metrics(out)
    assert rows[1]["changes"] == "lr: 0.001 -> 0.1 at update 8; optimizer: 'adam' -> 'sgd' at update 8"
