"""experiments/mnist_sparsity/collect.py: finished runs' small files are copied, nothing else."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("collect", ROOT / "experiments" / "mnist_sparsity" / "collect.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, model: str, seed: int, status: str, h: str = "abc", summary: dict | None = None):
    d = root / model / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"status": status, "config_hash": h, "epoch": 3}))
    (d / "metrics.csv").write_text("epoch,test_acc\n1,0.9\n")
    (d / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (d / "checkpoint.pt").write_bytes(b"x" * 100)
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_only_complete_runs_are_copied_and_never_checkpoints(tmp_path):
    collect = _load()
    runs, dest = tmp_path / "runs", tmp_path / "dest"
    _run(runs, "mlp", 0, "complete", summary={"complete": True, "config_hash": "abc", "test_acc": 0.98})
    _run(runs, "mlp", 1, "running")
    _run(runs, "random_element", 0, "complete", summary={"complete": False, "config_hash": "abc"})
    lines = []
    copied = collect.collect(runs, dest, log=lines.append)
    assert copied == [dest / "mlp" / "seed0"]
    assert sorted(p.name for p in (dest / "mlp" / "seed0").iterdir()) == ["machine.json", "metrics.csv", "metrics.jsonl",
                                                                          "run.json", "summary.json"]
    import torch

    assert json.loads((dest / "mlp" / "seed0" / "machine.json").read_text())["capability"] == \
        torch.backends.cpu.get_cpu_capability()
    assert not (dest / "mlp" / "seed1").exists() and not (dest / "random_element").exists()
    assert any("running" in l for l in lines) and any("partial" in l for l in lines)
    # a second pass changes nothing; a run of another config is not replaced without --force
    assert collect.collect(runs, dest, log=lines.append) == []
    (runs / "mlp" / "seed0" / "run.json").write_text(json.dumps({"status": "complete", "config_hash": "zzz"}))
    (runs / "mlp" / "seed0" / "summary.json").write_text(json.dumps({"complete": True, "config_hash": "zzz"}))
    assert collect.collect(runs, dest, log=lines.append) == []
    assert collect.collect(runs, dest, force=True, log=lines.append) == [dest / "mlp" / "seed0"]


def test_status_table_lists_every_copied_run(tmp_path):
    collect = _load()
    runs, dest = tmp_path / "runs", tmp_path / "dest"
    _run(runs, "mlp", 0, "complete", summary={"complete": True, "config_hash": "abc", "test_acc": 0.98,
                                              "best_test_acc": 0.985, "epochs": 100, "time_per_epoch_s": 12.0})
    collect.collect(runs, dest, log=lambda *_: None)
    text = collect.status(dest)
    assert "| mlp | 0 | 100 | 98.00 % | 98.50 % | 12.0 s |" in text and "1 finished run(s)" in text
