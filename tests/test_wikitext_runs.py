"""experiments/stable_rnn/wikitext_runs.py: one folder per (condition, seed), finished runs skipped, a
folder of another config refused, a run killed outright (SIGKILL) continued bitwise, the lr search's
summary, and the collected results (never a checkpoint). A tiny synthetic corpus, 1 thread."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "stable_rnn" / "wikitext_runs.py"


def _load():
    spec = importlib.util.spec_from_file_location("stable_rnn_wikitext_runs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _corpus(root: pathlib.Path, n_lines=(700, 60, 60), words=30) -> pathlib.Path:
    g = torch.Generator().manual_seed(0)
    d = root / "wikitext-2"
    d.mkdir(parents=True)
    for split, n in zip(("train", "valid", "test"), n_lines):
        lines = []
        for _ in range(n):
            s, k = (int(v) for v in torch.randint(0, words, (2,), generator=g))
            lines.append(" ".join(f"w{(s + i) % words}" for i in range(1 + k % 12)))
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def _tiny(root) -> list[str]:
    return ["--quick", "--data-root", str(root), "--tokens", "4000", "--eval-tokens", "400", "--emb", "8",
            "--hidden", "8", "--batch-size", "5", "--bptt", "10", "--cutoffs", "5,12", "--div-value", "2"]


def _stable_fields(r: dict) -> dict:
    """A result without what legitimately differs between two runs of one config (times, the command,
    where it was resumed)."""
    drop = {"command", "date", "resumes", "session_time_s", "train_time_s", "epoch_time_s"}

    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if k not in drop}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v
    return clean(r)


def test_runs_are_skipped_when_finished_refused_under_another_config_and_collected(tmp_path, capsys):
    exp = _load()
    root = _corpus(tmp_path / "data")
    out, dest = tmp_path / "runs", tmp_path / "results"
    argv = ["train", *_tiny(root), "--lr", "4", "--conditions", "tanh-stable,lstm-unstable", "--seeds", "0,1", "--out", str(out)]
    first = exp.main(argv)
    assert sorted(first) == ["lstm-unstable/seed0", "lstm-unstable/seed1", "tanh-stable/seed0", "tanh-stable/seed1"]
    r = first["tanh-stable/seed1"]
    assert r["status"] == "complete" and r["seed"] == 1 and r["config"]["adaptive_cutoffs"] == [5, 12]
    assert len(r["history"]) == r["epochs_run"] == len(r["lr_history"]) and all("test_ppl" in h for h in r["history"])
    assert r["certified_lambda"] <= 0.99 * (1 + 1e-6) and r["env"]["threads"] == 1 and r["env"]["torch"]
    assert first["tanh-stable/seed0"]["test_ppl"] != r["test_ppl"]  # the seed reaches the run
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    again = exp.main(argv)
    assert capsys.readouterr().out.count("finished before (complete), skipped") == 4
    assert again == first and stamp == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit, match=r"tanh-stable/seed0 holds a run of another config \(lr 4\.0 -> 2\.0; "
                                         r"status complete\): run it with its own settings, or use another --out"):
        exp.main([*argv, "--lr", "2"])
    copied = exp.main(["collect", "--runs", str(out), "--dest", str(dest)])
    assert len(copied) == 4 and {p.name for p in dest.rglob("*") if p.is_file()} == {"result.json"}
    assert json.loads((dest / "tanh-stable" / "seed1" / "result.json").read_text()) == json.loads(json.dumps(r))
    assert exp.main(["collect", "--runs", str(out), "--dest", str(dest)]) == []  # unchanged
    # the search: each lr its own folder, the rule's choice recorded; then a training run takes it
    search = exp.main(["search", *_tiny(root), "--conditions", "tanh-unstable", "--lrs", "0.5,4", "--epochs", "2", "--max-batches", "60",
                       "--out", str(tmp_path / "lr")])
    assert sorted(search) == ["tanh-unstable/lr0.5/seed0", "tanh-unstable/lr4/seed0"]
    summary = json.loads((tmp_path / "lr" / "lr_search.json").read_text())["conditions"]["tanh-unstable"]
    best = min(search.values(), key=lambda r: r["best_valid_ppl"])["config"]["lr"]
    assert summary["grid"] == [0.5, 4.0] and summary["chosen_lr"] == best and summary["chosen_at_grid_edge"]
    chosen = exp.main(["train", *_tiny(root), "--conditions", "tanh-stable", "--epochs", "1",
                       "--lr-from", str(tmp_path / "lr" / "lr_search.json"), "--out", str(tmp_path / "main2")])
    assert chosen["tanh-stable/seed0"]["config"]["lr"] == best
    with pytest.raises(SystemExit, match="Unknown condition 'lstm-stabel'"):
        exp.main(["train", *_tiny(root), "--conditions", "lstm-stabel", "--out", str(tmp_path / "x")])


def test_a_killed_run_continues_bitwise(tmp_path):
    """SIGKILL as soon as the run's first checkpoint exists (mid-epoch 1), then the same command again:
    the run takes over the dead process's lock, continues from its checkpoint and ends with bitwise the
    results and weights of a run that was never stopped (one code path on one machine and thread count)."""
    exp = _load()
    root = _corpus(tmp_path / "data", n_lines=(1500, 60, 60))
    args = ["train", *_tiny(root), "--lr", "4", "--hidden", "32", "--emb", "32", "--tokens", "9000", "--conditions", "lstm-unstable",
            "--epochs", "2", "--max-batches", "50", "--checkpoint-every", "10"]
    ref = exp.main([*args, "--out", str(tmp_path / "ref")])["lstm-unstable/seed0"]
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = out / "lstm-unstable" / "seed0" / "checkpoint.pt"
    deadline = time.monotonic() + 300
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert ckpt.exists() and not (out / "lstm-unstable" / "seed0" / "result.json").exists()
    rows = exp.main(["status", "--runs", str(out)])
    assert rows[0]["status"].startswith("stopped (killed")
    got = exp.main([*args, "--out", str(out)])["lstm-unstable/seed0"]
    assert got["resumes"] and got["resumes"][0]["batch"] > 0  # it did continue mid-epoch
    assert _stable_fields(got) == _stable_fields(ref)  # == on floats: bitwise test/valid losses, lr history
    a = torch.load(ckpt, weights_only=True)["model"]
    b = torch.load(tmp_path / "ref" / "lstm-unstable" / "seed0" / "checkpoint.pt", weights_only=True)["model"]
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_wikitext_py_adaptive_softmax_option():
    """wikitext.py --adaptive-softmax: the decoder is torch's adaptive softmax with the cutoffs below the
    vocabulary (a corpus slice may have fewer words); without it the model is the full-softmax one."""
    from torch import nn

    wx = _load().wx
    args = wx.build_parser().parse_args(["--emb", "8", "--hidden", "8", "--layers", "1", "--dropout", "0",
                                         "--adaptive-softmax", "--cutoffs", "5,12,50", "--div-value", "2"])
    model, _ = wx.build_model("lstm-unstable", 40, args)
    assert isinstance(model.decoder, nn.AdaptiveLogSoftmaxWithLoss) and model.adaptive_cutoffs == [5, 12]
    args.adaptive_softmax = False
    assert isinstance(wx.build_model("lstm-unstable", 40, args)[0].decoder, nn.Linear)


def _in_old_words(r: dict) -> dict:
    """A result as the loop wrote it before issue 36: ``steps``, and ``step`` in its history rows and resumes."""
    old = {("steps" if k == "updates" else k): v for k, v in r.items()}
    for key in ("history", "resumes"):
        old[key] = [{("step" if k == "update" else k): v for k, v in row.items()} for row in r[key]]
    return old


def test_result_files_in_the_old_words_are_read_in_todays(tmp_path):
    """result.json files written before issue 36 (the committed results, and runs still going under the old
    code) say ``steps``, and ``step`` in their rows: every reader (wikitext_runs.read_result, which run_one,
    search_summary, collect, fig2.py and report_wikitext.load_results use) takes them as ``updates`` /
    ``update``, and collect copies them byte for byte."""
    exp = _load()
    committed = REPO / "experiments" / "stable_rnn" / "results" / "wikitext"
    for f in sorted(committed.glob("**/result.json")):  # whichever words each was written in
        r = exp.read_result(f)
        assert "steps" not in r and all("step" not in row for row in r["history"] + r["resumes"]), f
        assert r["updates"] >= (r["history"][-1]["update"] if r["history"] else 0) and r["history"][0]["update"] > 0
    new = exp.read_result(committed / "tanh-unstable" / "seed0" / "result.json")
    runs, dest = tmp_path / "runs", tmp_path / "results"
    folder = runs / "tanh-unstable" / "seed0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(_in_old_words(new), indent=1) + "\n")
    (folder / "run.json").write_text(json.dumps({"status": "complete", "config_hash": new["config_hash"],
                                                 "epoch": new["epochs_run"], "step": new["updates"], "config": new["config"]}))
    assert exp.read_result(folder / "result.json") == new
    assert exp.read_record(folder)["update"] == new["updates"]
    assert exp.collect(runs, dest, log=lambda m: None) == [dest / "tanh-unstable" / "seed0" / "result.json"]
    assert (dest / "tanh-unstable" / "seed0" / "result.json").read_bytes() == (folder / "result.json").read_bytes()
    rw_spec = importlib.util.spec_from_file_location("stable_rnn_report_wikitext", SCRIPT.with_name("report_wikitext.py"))
    rw = importlib.util.module_from_spec(rw_spec)
    rw_spec.loader.exec_module(rw)
    assert rw.load_results(dest)["runs"] == {"tanh-unstable": [new]}
