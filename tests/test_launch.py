"""The launcher seam (seq2d.lab.launch): local processes and SLURM through submitit.

A sweep through submitit's local executor (real processes: a pickled task, ``python -m
submitit.core._submit``, the result read back from its folder: the code path of SLURM) merges
into the same table as ``--jobs 1``; ``--launcher slurm`` writes the sbatch array it should
(checked with stand-ins for ``srun`` and ``sbatch``, no cluster); a missing submitit is one clear
error. The runs are tiny (synthetic data, a 16-8-4 network, 2 epochs), as in test_parallel.py."""

import json
import os
import stat
import sys

import pytest

from seq2d.cli import main
from seq2d.lab.launch import Launcher, SubmititMissing, launcher_from_args, parse_mem, parse_time, require_submitit
from seq2d.lab.mnist_comparison import compare, configs_for, format_table

BASE = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 2, "num_threads": 1, "quiet": True}
MODELS = ["mlp", "random_element"]
TIMING = ("run_dir", "time_per_epoch_s", "config")

needs_submitit = pytest.mark.skipif(
    __import__("importlib").util.find_spec("submitit") is None,
    reason='submitit is not installed (pip install -e ".[slurm]"; .ci/run installs it)')


def _untimed(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _table_without_times(rows) -> str:
    """format_table with the time column blanked (each run's time differs from call to call)."""
    return "\n".join("|".join(c for i, c in enumerate(line.split("|")) if i != 5) if line.count("|") == 7 else line
                     for line in format_table(rows).splitlines())


@needs_submitit
def test_a_submitit_local_sweep_of_two_runs_merges_into_the_table_of_jobs_1(tmp_path):
    """Each (model, seed) one submitit job (2 at once); rows, metrics and the merged table equal
    those of the same runs one after the other in this process. A second call submits nothing."""
    ref = compare(configs_for(BASE, MODELS), [0], tmp_path / "ref", log=lambda line: None, jobs=1)
    lines = []
    out = tmp_path / "sub"
    rows = compare(configs_for(BASE, MODELS), [0], out, log=lines.append,
                   launcher=Launcher("submitit-local", jobs=2))
    text = "\n".join(lines)
    assert "2 run(s) to train through submitit's local executor, 2 at once" in text
    assert "[mlp seed 0] finished (job " in text and "[random_element seed 0] finished (job " in text
    assert _untimed(rows) == _untimed(ref)
    for a, b in zip(ref, rows):
        ma = [json.loads(line) for line in open(f"{a['run_dir']}/metrics.jsonl")]
        mb = [json.loads(line) for line in open(f"{b['run_dir']}/metrics.jsonl")]
        assert [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in ma] == \
            [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in mb]
    assert _table_without_times(rows) == _table_without_times(ref)
    assert "| mlp | 1 |" in _table_without_times(rows) and "| random_element | 1 |" in _table_without_times(rows)
    # the run folders are laid out as with local processes; submitit's own files sit apart
    assert sorted(p.parent.parent.name for p in out.glob("*/seed0/summary.json")) == sorted(MODELS)
    assert list((out / "submitit").glob("*_result.pkl"))
    lines.clear()
    again = compare(configs_for(BASE, MODELS), [0], out, log=lines.append, launcher=Launcher("submitit-local", jobs=2))
    assert again == rows and all("reusing finished run" in line for line in lines) and len(lines) == 2


@needs_submitit
def test_a_failing_submitit_job_is_reported_and_the_other_finishes(tmp_path):
    from seq2d.lab.launch import JobsFailedError

    cfgs = configs_for(BASE, ["mlp"])
    cfgs["random_element"] = configs_for({**BASE, "lr": 1e4, "optimizer": "sgd"}, ["random_element"])["random_element"]
    lines = []
    with pytest.raises(JobsFailedError, match=r"1 of 2 runs failed .*\[random_element seed 0\] failed: DivergenceError"):
        compare(cfgs, [0], tmp_path, log=lines.append, launcher=Launcher("submitit-local", jobs=2))
    assert json.loads((tmp_path / "mlp" / "seed0" / "summary.json").read_text())["complete"] is True
    assert not list(tmp_path.rglob("run.lock"))


def _fake_slurm(tmp_path, monkeypatch):
    """Stand-ins for srun (submitit looks for it) and sbatch (copies the script it is given, answers a job id)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch_script.sh"
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {record}\necho "Submitted batch job 4242"\n')
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return record


@needs_submitit
def test_launcher_slurm_submits_one_array_with_the_partition_time_and_resources(tmp_path, monkeypatch):
    record = _fake_slurm(tmp_path, monkeypatch)
    launcher = Launcher("slurm", jobs=2, partition="cpu", time=parse_time("1:30:00"), mem_gb=parse_mem("4G"),
                        cpus_per_task=1, account="lab")
    lines = []
    jobs = launcher.run(max, [(1, 2), (3, 4), (5, 6)], tags=["[a]", "[b]", "[c]"], folder=tmp_path / "sweep",
                        log=lines.append, wait=False)
    assert [j.job_id for j in jobs] == ["4242_0", "4242_1", "4242_2"]
    script = record.read_text().splitlines()
    for flag in ("--partition=cpu", "--time=90", "--mem=4GB", "--cpus-per-task=1", "--account=lab",
                 "--array=0-2%2", "--job-name=seq2d"):
        assert f"#SBATCH {flag}" in script, (flag, script)
    assert any("srun" in line and "-m submitit.core._submit" in line and str(tmp_path / "sweep" / "submitit") in line
               for line in script)
    assert lines == [f"3 run(s) submitted to SLURM as job array 4242 (2 at once); logs in {tmp_path / 'sweep' / 'submitit'}"]
    # jobs "auto": the whole array at once
    Launcher("slurm", jobs="auto").run(max, [(1, 2), (3, 4)], tags=["[a]", "[b]"], folder=tmp_path / "s2",
                                       log=lines.append, wait=False)
    assert "#SBATCH --array=0-1%2" in record.read_text().splitlines()


@needs_submitit
def test_the_cli_flags_build_the_slurm_launcher(tmp_path, monkeypatch):
    from seq2d.cli import build_parser

    ap = build_parser(only="mnist")
    args = ap.parse_args(["mnist", "--launcher", "slurm", "--partition", "gpu", "--time", "2-00:00:00", "--mem", "500M",
                          "--cpus-per-task", "4", "--gpus-per-node", "1", "--jobs", "8"])
    lau = launcher_from_args(args)
    assert lau == Launcher("slurm", jobs=8, partition="gpu", time=2880, mem_gb=500 / 1024, cpus_per_task=4,
                           gpus_per_node=1)
    assert lau.parameters(20) == {"name": "seq2d", "timeout_min": 2880, "mem_gb": 500 / 1024, "cpus_per_task": 4,
                                  "gpus_per_node": 1, "slurm_partition": "gpu", "slurm_array_parallelism": 8}
    record = _fake_slurm(tmp_path, monkeypatch)
    lau.run(max, [(1, 2)] * 20, tags=["[x]"] * 20, folder=tmp_path, log=lambda line: None, wait=False)
    script = record.read_text().splitlines()
    for flag in ("--partition=gpu", "--time=2880", "--mem=500MB", "--cpus-per-task=4", "--gpus-per-node=1",
                 "--array=0-19%8"):
        assert f"#SBATCH {flag}" in script


def test_scheduler_options_need_a_submitit_launcher_and_times_and_sizes_parse(capsys, tmp_path):
    assert main(["mnist", "--partition", "cpu", "--out", str(tmp_path)]) == 2
    assert "--partition: scheduler options need --launcher slurm" in capsys.readouterr().err
    assert main(["mnist", "--time", "10", "--out", str(tmp_path)]) == 2
    assert "--time: scheduler options need --launcher slurm" in capsys.readouterr().err
    assert [parse_time(t) for t in ("90", "30:00", "1:30:00", "2-00", "1-01:02", "0:00:01", 5)] == \
        [90, 30, 90, 2880, 1502, 1, 5]
    assert [parse_mem(m) for m in ("4", "4G", "4GB", "512M", "1T", "2.5g")] == [4, 4, 4, 0.5, 1024, 2.5]
    for bad in ("1h", "", "0", "1:2:3:4"):
        with pytest.raises(ValueError, match="--time"):
            parse_time(bad)
    for bad in ("four", "-1G", "0"):
        with pytest.raises(ValueError, match="--mem"):
            parse_mem(bad)
    with pytest.raises(ValueError, match="launcher: expected one of local, slurm, submitit-local"):
        Launcher("pbs")
    with pytest.raises(ValueError, match="--vectorize-seeds trains the batched seeds in this process"):
        compare(configs_for(BASE, MODELS), [0, 1], tmp_path, vectorize_seeds=True, launcher=Launcher("slurm"))


def test_a_missing_submitit_is_one_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    with pytest.raises(SubmititMissing, match=r'--launcher slurm needs the submitit package.*pip install -e "\.\[slurm\]"'):
        require_submitit()
    assert main(["mnist", "--launcher", "slurm", "--partition", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seq2d: error: --launcher slurm needs the submitit package") and ".[slurm]" in err
    assert not (tmp_path / "mlp").exists()  # refused before any run started


def test_the_cli_imports_submitit_only_for_its_launchers():
    import subprocess

    code = ("import sys; from seq2d.cli import main\n"
            "try:\n    main(['mnist', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('submitit' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip().splitlines()[-1] == "False"


@needs_submitit
@pytest.mark.slow
def test_seq2d_mnist_through_submitit_local_writes_the_table_of_jobs_1(tmp_path, capsys):
    """``seq2d mnist --launcher submitit-local``: 2 tiny runs (bundled subset, 2 steps each), each
    a submitit job, merged into results.json / results.md as with ``--jobs 1``."""
    common = ["mnist", "--models", "mlp,random_element", "--epochs", "1", "--max-updates", "2", "--quiet"]
    assert main([*common, "--jobs", "1", "--out", str(tmp_path / "ref")]) == 0
    assert main([*common, "--launcher", "submitit-local", "--jobs", "2", "--out", str(tmp_path / "sub")]) == 0
    out = capsys.readouterr().out
    assert "2 run(s) to train through submitit's local executor, 2 at once" in out
    ref, sub = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("ref", "sub"))
    assert [r["model"] for r in sub["rows"]] == ["mlp", "random_element"]
    assert _untimed(sub["rows"]) == _untimed(ref["rows"])
    assert _table_without_times(sub["rows"]) == _table_without_times(ref["rows"])


@needs_submitit
@pytest.mark.slow
def test_param_budget_sends_every_run_through_the_launcher(tmp_path, capsys):
    """experiments/param_budget/run.py --launcher submitit-local: the 4 runs of 2 budgets x 2
    placements as submitit jobs, then the same rows (accuracy, parameters) as the run in process."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "param_budget" / "run.py"
    spec = importlib.util.spec_from_file_location("param_budget_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    common = ["--quick", "--models", "mlp,random_element", "--data", "synthetic"]
    assert mod.main([*common, "--out", str(tmp_path / "ref")]) == 0
    assert mod.main([*common, "--launcher", "submitit-local", "--jobs", "2", "--out", str(tmp_path / "sub")]) == 0
    out = capsys.readouterr().out
    assert "4 run(s) to train through submitit's local executor, 2 at once" in out
    assert "[h=8] [random_element seed 0] finished (job " in out
    keep = ("model", "budget", "seed", "params", "test_acc", "epochs", "complete")
    ref, sub = (json.loads((tmp_path / d / "results.json").read_text())["rows"] for d in ("ref", "sub"))
    assert len(sub) == 4 and [{k: r[k] for k in keep} for r in sub] == [{k: r[k] for k in keep} for r in ref]
