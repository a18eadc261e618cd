"""Parallel runs (`seq2d mnist --jobs N`, seq2d.lab.launch): the same rows as one after the other,
resume and reuse of finished runs, tagged log lines, a failing run that leaves the others
alone, and the choice of the number of jobs. Worker processes are spawned (a few seconds each),
so the runs are tiny: synthetic data, a 16-8-4 network, 2 epochs."""

import json

import pytest

from seq2d.cli import main
from seq2d.lab.mnist_comparison import compare, configs_for
from seq2d.lab.launch import JobsFailedError, jobs_arg, resolve_jobs

BASE = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 2, "num_threads": 1, "quiet": False}
MODELS = ["mlp", "random_element"]
# what a row says about how the run went, apart from where it lies and how long it took
TIMING = ("run_dir", "time_per_epoch_s", "config")


def _same_run(a: dict, b: dict) -> None:
    assert {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}
    ma, mb = (json.loads(line) for line in open(f"{a['run_dir']}/metrics.jsonl")), \
        (json.loads(line) for line in open(f"{b['run_dir']}/metrics.jsonl"))
    for ra, rb in zip(ma, mb, strict=True):
        assert {k: v for k, v in ra.items() if k != "epoch_time_s"} == {k: v for k, v in rb.items() if k != "epoch_time_s"}


def test_two_jobs_give_the_rows_of_one_job_and_resume_like_it(tmp_path):
    """The reference: every run one after the other in this process. Then, in another folder, one
    run finished and one interrupted (max_updates) in this process, and the rest with --jobs 2:
    the finished run is reused, the interrupted one continued from its checkpoint, and every
    number equals the reference to the last bit. Equality, not a tolerance: each run goes through
    the same code (seq2d.lab.mnist_comparison.train_one) with the same seed, data order and thread
    count, whichever process it runs in, and the trainer's resume is exact."""
    ref = compare(configs_for(BASE, MODELS), [0, 1], tmp_path / "ref", log=lambda line: None, jobs=1)
    out = tmp_path / "par"
    compare(configs_for(BASE, ["mlp"]), [0], out, log=lambda line: None, jobs=1)
    part = compare(configs_for({**BASE, "max_updates": 3}, ["random_element"]), [0], out, log=lambda line: None, jobs=1)
    assert part[0]["complete"] is False and part[0]["updates"] == 3
    lines = []
    rows = compare(configs_for(BASE, MODELS), [0, 1], out, log=lines.append, jobs=2)
    assert [(r["model"], r["seed"]) for r in rows] == [("mlp", 0), ("mlp", 1), ("random_element", 0), ("random_element", 1)]
    for a, b in zip(ref, rows):
        _same_run(a, b)
    text = "\n".join(lines)
    assert f"[mlp seed 0] reusing finished run in {out / 'mlp' / 'seed0'}" in text
    assert "[random_element seed 0] continuing the checkpoint" in text
    assert "3 run(s) to train in 2 parallel worker processes" in text
    # every line of a worker carries its run's tag; one line per epoch, no progress bars
    tagged = [line for line in lines if "epoch " in line and "train loss" in line]
    assert len(tagged) == 6  # 2 epochs each; random_element seed 0 finishes its first epoch, then the second
    assert all(line.startswith(("[mlp seed 1] epoch", "[random_element seed 0] epoch", "[random_element seed 1] epoch"))
               for line in tagged)
    assert not any(": batch " in line or "\r" in line for line in lines)  # no heartbeat lines, no bars
    # a third call: everything is finished, nothing is trained, no worker is started
    lines.clear()
    again = compare(configs_for(BASE, MODELS), [0, 1], out, log=lines.append, jobs=2)
    assert again == rows and len(lines) == 4 and all("reusing finished run" in line for line in lines)


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path):
    cfgs = configs_for({**BASE, "quiet": True}, ["mlp"])
    cfgs["random_element"] = configs_for({**BASE, "quiet": True, "lr": 1e4, "optimizer": "sgd"}, ["random_element"])["random_element"]
    lines = []
    with pytest.raises(JobsFailedError, match=r"1 of 2 runs failed .*\[random_element seed 0\] failed: DivergenceError"):
        compare(cfgs, [0], tmp_path, log=lines.append, jobs=2)
    assert any(line.startswith("[random_element seed 0] failed: DivergenceError") for line in lines)
    assert json.loads((tmp_path / "mlp" / "seed0" / "summary.json").read_text())["complete"] is True
    assert not (tmp_path / "random_element" / "seed0" / "summary.json").exists()
    assert not list(tmp_path.rglob("run.lock"))  # both workers released their folders


def _task(k: int, sleep: float, what: str = "ok"):
    """A task of run_jobs (module level: the spawned workers import it)."""
    import os
    import time

    time.sleep(sleep)
    print(f"task {k} done")
    if what == "raise":
        raise ValueError(f"task {k} refuses")
    if what == "die":
        os._exit(3)
    return 10 * k


def test_run_jobs_keeps_the_order_reports_errors_and_survives_a_dead_worker():
    from seq2d.lab.launch import JobFailure, run_jobs

    lines = []
    # the later tasks finish first; results come back in task order, printed lines tagged
    res = run_jobs(_task, [(0, 1.5), (1, 0.0, "raise"), (2, 0.0)], tags=["[a]", "[b]", "[c]"], jobs=2, log=lines.append)
    assert res[0] == 0 and res[2] == 20
    assert isinstance(res[1], JobFailure) and res[1].type == "ValueError" and not res[1].user_error
    assert res[1].line() == "[b] failed: ValueError: task 1 refuses" and "Traceback" in res[1].traceback
    assert {"[a] task 0 done", "[b] task 1 done", "[c] task 2 done", "[b] failed: ValueError: task 1 refuses"} <= set(lines)
    # a worker that dies breaks the pool: its task and the unfinished ones fail, nothing hangs
    res = run_jobs(_task, [(0, 0.0), (1, 0.5, "die"), (2, 30.0)], tags=["[a]", "[b]", "[c]"], jobs=2, log=lines.append)
    assert res[0] == 0
    assert all(isinstance(r, JobFailure) and r.type == "BrokenProcessPool" and r.user_error for r in res[1:])


def test_resolve_jobs():
    assert resolve_jobs(4, 3) == 3 and resolve_jobs(2, 5) == 2 and resolve_jobs(3, 0) == 1
    assert resolve_jobs("auto", 10, available=0.2) == 1  # a busy machine: one job
    assert resolve_jobs("auto", 10, available=1.8) == min(2, resolve_jobs("auto", 10, available=64))
    assert resolve_jobs("auto", 1, available=64) == 1
    assert resolve_jobs("auto", 10, threads=2, available=1.0) == 1
    cores = resolve_jobs("auto", 10, available=64)
    assert resolve_jobs("auto", 10, available=64, memory=2 << 30, available_bytes=5 << 30) == min(2, cores)
    assert resolve_jobs("auto", 10, available=64, memory=2 << 30, available_bytes=1 << 30) == 1  # never 0
    assert resolve_jobs(3, 10, memory=2 << 30, available_bytes=1 << 30) == 3  # an explicit count is used as is
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises((TypeError, ValueError), match="jobs"):
            resolve_jobs(bad, 3)
    assert jobs_arg("auto") == "auto" and jobs_arg(" 3 ") == 3


def test_seq2d_mnist_jobs_2_writes_the_table_and_the_plots(tmp_path, capsys):
    """The CLI end to end with two workers (bundled subset, 2 steps per run): rows in the order
    of --models, every run tagged in the output, results and plots written by write_results."""
    import matplotlib.image

    from seq2d.lab.mnist_comparison import PLOTS

    args = ["mnist", "--models", "random_tile,mlp", "--epochs", "1", "--max-updates", "2", "--jobs", "2", "--quiet",
            "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 run(s) to train in 2 parallel worker processes" in out
    assert "[random_tile seed 0] training" in out and "[mlp seed 0] training" in out
    rec = json.loads((tmp_path / "results.json").read_text())
    assert [r["model"] for r in rec["rows"]] == ["random_tile", "mlp"] and all(r["updates"] == 2 for r in rec["rows"])
    for name in PLOTS.values():
        path = tmp_path / name
        assert path.stat().st_size > 1024 and matplotlib.image.imread(path).ndim == 3
    assert f"plots accuracy_vs_epoch.png, final_accuracy.png in {tmp_path}/" in out


@pytest.mark.parametrize("value", ["0", "x", "-2", "1.5"])
def test_cli_rejects_a_bad_jobs_value(value, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["mnist", "--jobs", value, "--out", str(tmp_path)])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


SCRIPT = """
import sys
from seq2d.lab.mnist_comparison import compare, configs_for
if __name__ == "__main__":
    base = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 100000, "num_threads": 1}
    compare(configs_for(base, ["mlp", "random_element"]), [0], sys.argv[1], jobs=2, log=lambda l: print(l, flush=True))
"""


def test_ctrl_c_stops_every_worker_and_leaves_resumable_runs(tmp_path):
    """Ctrl-C at a terminal reaches the whole process group: the parent stops the workers, each
    running trainer records its run as interrupted and releases its folder, and nothing is left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "go.py"
    script.write_text(SCRIPT)
    # A terminal's Ctrl-C reaches a process whose SIGINT is at its default. A test run started in
    # the background by a non-interactive shell (`.ci/run &`, nohup) inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler: reset it in the child, as a terminal has it.
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = set()
        deadline = time.monotonic() + 240
        while len(seen) < 2 and time.monotonic() < deadline:  # both runs are in their epochs
            line = proc.stdout.readline()
            if not line:
                break
            if " epoch 2/" in line:
                seen.add(line.split("]")[0])
        assert len(seen) == 2, "the workers did not start training"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0 and "KeyboardInterrupt" in out and "interrupted: stopping 2 worker" in out
    for model in ("mlp", "random_element"):
        run_dir = tmp_path / "out" / model / "seed0"
        record = json.loads((run_dir / "run.json").read_text())
        assert record["status"] == "interrupted", (model, record.get("error"), out)
        assert (run_dir / "checkpoint.pt").is_file() and not (run_dir / "run.lock").exists()
    # nothing of the group runs on: parent and workers are gone (a zombie waits for init); a worker
    # that is still exiting on a loaded machine gets up to 60 s
    for _ in range(60):
        time.sleep(1)
        left = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(proc.pid)], capture_output=True,
                              text=True).stdout
        if all(line.split()[1].startswith("Z") for line in left.splitlines() if line.strip()):
            break
    assert all(line.split()[1].startswith("Z") for line in left.splitlines() if line.strip()), left


def test_a_worker_acts_on_its_first_sigterm_only(monkeypatch):
    """The first SIGTERM in a task raises KeyboardInterrupt (the trainer records the run as
    interrupted); a second one (concurrent.futures' pool sends SIGTERM to the other workers once
    one has ended) returns, so it cannot interrupt that recording."""
    import signal

    from seq2d.lab import launch

    monkeypatch.setattr(launch, "_TAG", "mlp/seed0")
    monkeypatch.setattr(launch, "_STOPPING", False)
    with pytest.raises(KeyboardInterrupt):
        launch._stop(signal.SIGTERM, None)
    assert launch._stop(signal.SIGTERM, None) is None
    monkeypatch.setattr(launch, "_TAG", "")
    monkeypatch.setattr(launch, "_STOPPING", False)
    with pytest.raises(SystemExit):  # idle: the worker just ends
        launch._stop(signal.SIGTERM, None)
