"""The MNIST comparison: table statistics, the Welch interval, and the CLI fronts."""

import json
import math
from pathlib import Path

import pytest

from seq2d.cli import main
from seq2d.lab.mnist_comparison import MODELS, compare, configs_for, difference, format_table, summarize, write_results

ROOT = Path(__file__).resolve().parents[1]

ROWS = [
    {"model": "mlp", "seed": s, "test_acc": a, "params": 10, "time_per_epoch_s": 1.0, "device": "cpu", "epochs": 1}
    for s, a in enumerate([0.90, 0.92, 0.91])
] + [
    {"model": "random_element", "seed": s, "test_acc": a, "params": 10, "time_per_epoch_s": 2.0, "device": "cpu", "epochs": 1}
    for s, a in enumerate([0.93, 0.95, 0.94, 0.92])
]


def test_summarize_mean_std():
    s = {r["model"]: r for r in summarize(ROWS)}
    assert s["mlp"]["n"] == 3 and math.isclose(s["mlp"]["mean"], 0.91)
    assert math.isclose(s["mlp"]["std"], 0.01)
    assert math.isclose(s["random_element"]["mean"], 0.935)


def test_welch_interval_by_hand():
    d = difference(ROWS, "random_element", "mlp")
    va, vb = (0.0166666667e-2) / 4, 0.0001 / 3  # sample variances / n
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    assert math.isclose(d["diff"], 0.025, abs_tol=1e-12)
    assert math.isclose(d["df"], df, rel_tol=1e-6)
    # the exact t quantile at this fractional df (the old table rounded df up to 5: 2.571)
    from seq2d.stats import t_quantile

    assert math.isclose(d["hi"] - d["diff"], t_quantile(0.975, df) * se, rel_tol=1e-6)
    assert t_quantile(0.975, df) > 2.571
    assert d["equivalent"] is False and d["margin"] == 0.01  # +2.5 points is not within 1 point


def test_format_table_has_rows_and_difference():
    text = format_table(ROWS)
    assert "| mlp | 3 | 91.00 +- 1.00 % | 10 | 1.00 s | cpu |" in text
    assert "random_element - mlp | +2.50 |" in text


def test_configs_for_rejects_unknown_model():
    with pytest.raises(ValueError, match="Unknown model 'cnn'. Select from 'mlp'"):
        configs_for({"data": "synthetic"}, ["cnn"])
    cfgs = configs_for({"data": "synthetic"}, list(MODELS))
    assert cfgs["random_tile"].granularity == "tile" and cfgs["mlp"].model == "mlp"


def test_write_results_files_and_text(tmp_path):
    cfg = configs_for({"data": "synthetic", "epochs": 1, "sizes": [4, 3, 2]}, ["mlp"])["mlp"]
    w = write_results(ROWS, tmp_path / "out", config=cfg, protocol={"data": "synthetic"}, models=["mlp"], seeds=[0, 1])
    assert w["md"].read_text() == format_table(ROWS) + "\n"
    assert json.loads(w["json"].read_text()) == {"protocol": {"data": "synthetic"}, "models": ["mlp"], "seeds": [0, 1],
                                                 "rows": ROWS}
    lines = w["text"].splitlines()
    assert lines[0] == ("MNIST sparsity comparison: data=synthetic, 1 epochs, seeds [0, 1], MLP [4, 3, 2] "
                        "vs randomized models with its exact parameter count")
    assert w["table"] in w["text"] and lines[-2] == ""
    out = tmp_path / "out"
    assert lines[-1].endswith(f"table in {out}/results.md; plots accuracy_vs_epoch.png, final_accuracy.png in {out}/")
    assert w["plots"] == {"accuracy_vs_epoch": out / "accuracy_vs_epoch.png", "final_accuracy": out / "final_accuracy.png"}
    for path in w["plots"].values():  # rows without run folders: the final-accuracy plot, an empty curve plot
        _check_png(path)


@pytest.mark.parametrize("epochs", [1, 2, 3, 7, 100])
def test_accuracy_vs_epoch_has_integer_epoch_ticks(epochs, tmp_path):
    """No 0.5 / 1.25 ticks for short runs; each seed, the mean and the band are drawn."""
    from seq2d.lab.mnist_plots import plot_accuracy_vs_epoch

    hist = {(r["model"], r["seed"]): [{"epoch": e, "test_acc": 0.9 + 0.001 * e * (r["seed"] + 1)}
                                      for e in range(1, epochs + 1)] for r in ROWS}
    fig = plot_accuracy_vs_epoch(ROWS, tmp_path / "acc.png", histories=hist)
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert len(ax.lines) == len(ROWS) + 2  # a line per seed, a mean line per model
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["mlp (mean of 3 seeds)", "random_element (mean of 4 seeds)"]
    _check_png(tmp_path / "acc.png")


def _figure_text(fig) -> str:
    """Every text of a Figure: its titles, footer, legend and tick labels."""
    from matplotlib.text import Text

    return "\n".join(t.get_text() for t in fig.findobj(Text))


@pytest.mark.parametrize("seeds", [[0], [0, 1, 2]], ids=["one-seed", "three-seeds"])
def test_plots_carry_their_provenance_and_titles_match_what_is_drawn(seeds, tmp_path, monkeypatch):
    """Issue 31: a pasted figure must say what it shows (data, test-set size, epochs, seeds), and
    with one seed its titles must not describe per-seed lines, means or bands that are not drawn."""
    import seq2d.lab.mnist_plots as comparison
    from seq2d.lab.mnist_comparison import write_plots

    rows = []
    for m, model in enumerate(["mlp", "random_element"]):
        for seed in seeds:
            run = tmp_path / model / f"seed{seed}"
            run.mkdir(parents=True)
            accs = [0.5 + 0.1 * e + 0.01 * seed + 0.02 * m for e in (1, 2)]
            (run / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e, "test_acc": a}) + "\n"
                                                       for e, a in zip((1, 2), accs)))
            rows.append({"model": model, "seed": seed, "test_acc": accs[-1], "data": "subset", "epochs": 2,
                         "complete": True, "run_dir": str(run), "config": {"image_size": 50}})
    saved = {}
    real = comparison.save_figure
    monkeypatch.setattr(comparison, "save_figure", lambda fig, path, *a, **k: (saved.__setitem__(path.name, fig),
                                                                                real(fig, path, *a, **k)))
    paths = write_plots(rows, tmp_path / "plots")
    assert sorted(saved) == sorted(p.name for p in paths.values())
    for name, fig in saved.items():
        text = _figure_text(fig)
        for needle in ("MNIST, bundled subset (1,000 test images) at 50x50", "2 epochs",
                       f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} ({len(seeds)} per model)"):
            assert needle in text, (name, needle, text)
        if len(seeds) == 1:
            for word in ("band", "mean", "thin", "thick", "diamond", "std"):
                assert word not in text, (name, word, text)
            assert "one seed" in fig.axes[0].get_title()
        else:
            assert "mean" in fig.axes[0].get_title() and "std" in fig.axes[0].get_title()
        _check_png(paths[name.split(".")[0]])
    ax = saved["accuracy_vs_epoch.png"].axes[0]
    assert len(ax.lines) == (2 if len(seeds) == 1 else 2 * len(seeds) + 2)  # one line per run, plus means
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == (["mlp (seed 0)", "random_element (seed 0)"] if len(seeds) == 1 else
                      ["mlp (mean of 3 seeds)", "random_element (mean of 3 seeds)"])


def _check_png(path):
    """Written, not empty, and an image matplotlib reads back."""
    import matplotlib.image

    assert path.is_file() and path.stat().st_size > 1024, path
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_seq2d_mnist_cli_quick(tmp_path, capsys):
    rc = main(["mnist", "--models", "mlp,random_tile", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| mlp | 1 |" in out and "| random_tile | 1 |" in out and "1,371,810" in out
    assert out.count("epoch 1/1  update 40  train loss") == 2  # progress by default: a line per epoch and run
    res = json.loads((tmp_path / "results.json").read_text())
    assert {r["model"] for r in res["rows"]} == {"mlp", "random_tile"}
    assert all(r["params"] == 1_371_810 and r["complete"] for r in res["rows"])
    # a second call reuses the finished runs (same effective config; --quiet only changes the output)
    rc = main(["mnist", "--models", "mlp", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "1", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0 and "reusing finished run" in out and "epoch 1/1" not in out
    # another thread setting is another effective config: not reused, and the log says why
    # (max_updates 1 keeps the retraining short)
    rc = main(["mnist", "--models", "mlp", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "2", "--quiet",
               "--max-updates", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "not reusing the result" in out and "its config differs: num_threads 1 -> 2, max_updates None -> 1" in out
    assert "training afresh" in out


def test_seq2d_mnist_prints_one_thread_line(tmp_path, capsys):
    """Issue 31: the command's own line and the run's repeated each other ("torch threads: 1", then
    "torch threads: 1 (num_threads)"). Without --quiet the run's line is the one; with --quiet
    (the runs print nothing) the command's."""
    args = ["mnist", "--models", "mlp", "--epochs", "1", "--max-updates", "2", "--num-threads", "1", "--jobs", "1"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "torch threads" in line]
    assert len(lines) == 1 and lines[0].startswith("torch threads: 1 ("), out  # the run's: the count and why
    assert main(args + ["--out", str(tmp_path / "b"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if "torch threads" in line] == ["torch threads: 1"], out


def test_seq2d_mnist_max_updates_is_partial_and_never_reused_as_finished(tmp_path, capsys):
    args = ["mnist", "--models", "mlp", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "1", "--quiet"]
    assert main(args + ["--max-updates", "2"]) == 0
    out = capsys.readouterr().out
    assert "| mlp (partial: 1 of 1) | 1 |" in out and "stopped by max_updates after 2 updates" in out
    summary = json.loads((tmp_path / "mlp" / "seed0" / "summary.json").read_text())
    assert summary["complete"] is False and summary["status"] == "partial" and 0 <= summary["test_acc"] <= 1
    assert summary["time_per_epoch_s"] > 0 and summary["updates"] == 2
    record = json.loads((tmp_path / "mlp" / "seed0" / "run.json").read_text())
    assert record["status"] == "partial" and record["update"] == 2
    assert main(args + ["--max-updates", "2"]) == 0  # the same call again: continued (nothing to do), not reused
    out = capsys.readouterr().out
    assert "not reusing the result" in out and "it is partial" in out and "reusing finished run" not in out
    assert main(args) == 0  # without max_updates: the checkpoint is continued to the end
    out = capsys.readouterr().out
    assert "continuing the checkpoint" in out and "| mlp | 1 |" in out and "partial" not in out.split("continuing")[1]
    rows = [json.loads(line) for line in (tmp_path / "mlp" / "seed0" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [40]
    assert main(args) == 0 and "reusing finished run" in capsys.readouterr().out


def test_a_result_from_an_older_seq2d_is_not_reused(tmp_path, capsys):
    run_dir = tmp_path / "mlp" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"model": "mlp", "seed": 0, "epochs": 1, "test_acc": None}))
    cfgs = configs_for({"data": "synthetic", "sizes": [16, 8, 4], "epochs": 1, "num_threads": 1, "quiet": True}, ["mlp"])
    lines = []
    rows = compare(cfgs, [0], tmp_path, log=lines.append)
    assert rows[0]["complete"] and rows[0]["test_acc"] is not None
    assert any("not reusing the result" in line for line in lines)


def test_compare_reuses_continues_or_restarts_by_config(tmp_path):
    base = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 1, "num_threads": 1, "quiet": True, "lr": 0.01}
    lines = []
    first = compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lines.append)[0]
    lines.clear()
    assert compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lines.append)[0] == first
    assert lines == [f"[mlp seed 0] reusing finished run in {tmp_path / 'mlp' / 'seed0'}"]
    lines.clear()  # more epochs of the same run: its checkpoint is continued
    row = compare(configs_for({**base, "epochs": 2}, ["mlp"]), [0], tmp_path, log=lines.append)[0]
    assert "its config differs: epochs 1 -> 2" in lines[0] and "continuing the checkpoint" in lines[1]
    assert row["complete"] and row["updates"] == 16  # the optimizer's updates
    assert row["model_steps"] == configs_for(base, ["mlp"])["mlp"].steps  # the Sequential2D's steps, its own key
    lines.clear()  # another lr: another run, trained afresh
    row = compare(configs_for({**base, "epochs": 2, "lr": 0.02}, ["mlp"]), [0], tmp_path, log=lines.append)[0]
    assert "its config differs: lr 0.01 -> 0.02" in lines[0]
    assert "training afresh" in lines[1] and "has another config (lr 0.01 -> 0.02)" in lines[1]
    assert row["complete"] and row["config"]["lr"] == 0.02


def test_a_failed_run_leaves_no_result_to_reuse(tmp_path):
    from seq2d.train import DivergenceError

    base = {"data": "synthetic", "sizes": [16, 8, 4], "epochs": 1, "num_threads": 1, "quiet": True}
    compare(configs_for(base, ["mlp"]), [0], tmp_path, log=lambda line: None)
    with pytest.raises(DivergenceError):
        compare(configs_for({**base, "lr": 1e4, "optimizer": "sgd"}, ["mlp"]), [0], tmp_path, log=lambda line: None)
    run_dir = tmp_path / "mlp" / "seed0"
    assert not (run_dir / "summary.json").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"


def test_seq2d_mnist_rejects_unknown_model(tmp_path, capsys):
    assert main(["mnist", "--models", "cnn", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Unknown model 'cnn'. Select from 'mlp'" in err and not list((tmp_path).iterdir())  # before any run starts


def test_seq2d_train_from_toml(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('model = "mlp"\nsizes = [16, 8, 4]\ndata = "synthetic"\nepochs = 2\nquiet = true\n'
                   f'out_dir = "{tmp_path / "run"}"\nnum_threads = 1\n')
    assert main(["train", str(cfg)]) == 0
    assert "final test accuracy" in capsys.readouterr().out
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert main(["train", str(cfg), "--epochs", "3", "--resume"]) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().strip().splitlines()
    assert len(lines) == 3
    with pytest.raises(SystemExit):  # no abbreviations: "--epoch" is not "--epochs"
        main(["train", str(cfg), "--epoch", "3"])


def test_the_readme_train_command_works(tmp_path, capsys, monkeypatch):
    config = str(ROOT / "experiments" / "mnist_sparsity" / "configs" / "mlp.toml")
    readme = (ROOT / "README.md").read_text()
    assert "seq2d train experiments/mnist_sparsity/configs/mlp.toml --data subset --epochs 4" in readme
    args = ["train", config, "--data", "subset", "--epochs", "1", "--max-updates", "5", "--num-threads", "1",
            "--out-dir", str(tmp_path / "run")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "update 5" in out and "final test accuracy" in out and "partial run: stopped by max_updates after 5 updates" in out
    # the config as it stands wants full MNIST: without it, the hint names the real flags
    monkeypatch.setenv("SEQ2D_DATA", str(tmp_path / "no-mnist-here"))
    assert main(["train", config, "--epochs", "1", "--max-updates", "5", "--out-dir", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err
    assert "--data-root ROOT (config field 'data_root')" in err and "--data ROOT" not in err
    assert "--data subset trains on the bundled MNIST subset" in err


def test_run_py_doc_rewrites_only_its_sections(tmp_path):
    """experiments/mnist_sparsity/run.py --doc writes its generated sections between markers and
    leaves hand-written text (deviation table, corrections, ablations) as it is."""
    run = _run_py()
    doc = tmp_path / "mnist.md"
    doc.write_text("# MNIST\n\nhand-written deviations\n\n<!-- mnist-run:begin -->\nold numbers\n<!-- mnist-run:end -->\n\n"
                   "a correction by hand\n")
    assert run.main(["--quick", "--models", "mlp", "--sweep-steps", "1", "--num-threads", "1",
                     "--out", str(tmp_path / "out"), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# MNIST\n\nhand-written deviations\n\n<!-- mnist-run:begin -->\n")
    assert "old numbers" not in text and "a correction by hand\n" in text
    run_part = text.split("<!-- mnist-run:begin -->")[1].split("<!-- mnist-run:end -->")[0]
    assert "protocol `ours`" in run_part and "| mlp |" in run_part and "command: `" in run_part
    assert "mnist-verdict" not in text  # a verdict only for the 100-epoch protocol
    for name in ("mnist-protocols", "mnist-sweep"):  # appended once, then replaced in place
        assert text.count(f"<!-- {name}:begin -->") == 1 and text.count(f"<!-- {name}:end -->") == 1
    assert (tmp_path / "mnist" / "accuracy_vs_epoch.png").is_file()
    from seq2d.lab.mnist_comparison import PLOTS, protocols_section

    assert protocols_section() in text
    for name in [*PLOTS.values(), "accuracy_vs_steps.png"]:  # the plots of seq2d mnist, plus the sweep's
        _check_png(tmp_path / "out" / name)


def _run_py():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mnist_run", ROOT / "experiments" / "mnist_sparsity" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    return run


@pytest.mark.parametrize("shift, expect", [(0.001, "**The claim holds here**"), (0.05, "**The claim is not shown here**")])
def test_verdict_follows_the_tost_of_each_randomized_model(shift, expect):
    """The verdict paragraph is computed from the rows: differences, Welch intervals, TOST, the
    distance to 92.7%; it quotes the summary's claim exactly."""
    from seq2d.lab.mnist_comparison import difference

    run = _run_py()
    accs = [0.981, 0.984, 0.983, 0.982, 0.985]
    rows = [{"model": "mlp", "seed": k, "test_acc": a} for k, a in enumerate(accs)]
    rows += [{"model": "random_element", "seed": k, "test_acc": a - shift + 0.001 * (k % 2)} for k, a in enumerate(accs)]
    env = {"protocol_name": "ours", "protocol": {"epochs": 100}}
    text = run.verdict(rows, env)
    d = difference(rows, "random_element", "mlp")
    assert expect in text and run.CLAIM in text and "seeds [0, 1, 2, 3, 4]" in text
    assert f"[{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]" in text and f"TOST p = {d['tost_p']:.3f}" in text
    assert f"mlp {100 * 0.983:.2f} +- " in text
    gaps = [100 * (0.983 - 0.927), 100 * (0.983 - shift + 0.0004 - 0.927)]
    assert f"{min(gaps):+.2f} to {max(gaps):+.2f} points from the summary's 92.7%" in text
    one = run.verdict([{"model": "mlp", "seed": 0, "test_acc": 0.98}, {"model": "random_tile", "seed": 0, "test_acc": 0.97}],
                      env)
    assert "too few runs for an interval" in one and "**The claim is not shown here**" in one
    assert run.verdict(rows[:5], env).startswith("No verdict")


def test_the_results_page_carries_the_generated_protocols_section():
    """docs/results/mnist.md holds what the generator writes now (rerun run.py --doc, or write_section
    with protocols_section(), after changing PROTOCOLS); the deviation table names the seed file."""
    from seq2d.lab.mnist_comparison import SEED_SUMMARY, protocols_section

    doc = (ROOT / "docs" / "results" / "mnist.md").read_text()
    assert protocols_section() in doc
    deviations = doc.split("## Deviations from the paper")[1].split("\n## ")[0]
    assert SEED_SUMMARY in deviations and "not stated in what we read" not in doc
    for number in ("100 epochs", "50x50", "(0.1307, 0.3081)", "Adam, learning rate 1e-3, batch size 64", "92.7%"):
        assert number in deviations, number


def test_run_py_configs_are_the_seq2d_mnist_full_configs():
    """experiments/mnist_sparsity/run.py (its TOML files) and `seq2d mnist --full` describe the same
    runs: equal config hashes, so either one reuses the other's finished runs (the 100-epoch
    results were trained by `seq2d mnist --full`; run.py --doc regenerates the page from them).
    The TOML files once set iterations = 4 where `seq2d mnist` leaves the model's default (also 4),
    and run.py would have retrained every randomized run."""
    import dataclasses

    from seq2d.lab.mnist_comparison import configs_for, protocol_config
    from seq2d.train import TrainConfig
    from seq2d.train.config import load_config
    from seq2d.train.identity import config_hash

    here = Path(__file__).resolve().parents[1] / "experiments" / "mnist_sparsity" / "configs"
    cli = configs_for(TrainConfig(**protocol_config("ours", "full")), ["mlp", "random_element", "random_tile"])
    for name, toml in (("mlp", "mlp.toml"), ("random_element", "random_element.toml"), ("random_tile", "random_tile.toml")):
        cfg = load_config(here / toml)
        assert config_hash(cfg) == config_hash(cli[name]), (name, {
            k: (v, getattr(cli[name], k)) for k, v in dataclasses.asdict(cfg).items() if v != getattr(cli[name], k)})


def test_the_steps_plot_reads_the_models_steps_not_the_optimizers(tmp_path):
    """A run row carries both counts: ``updates`` (optimizer; ``steps`` in older rows) and ``model_steps``
    (Sequential2D; ``iterations`` in older rows); the sweep's x axis is the model's."""
    from seq2d.lab.mnist_plots import plot_accuracy_vs_steps

    rows = [{"model": "r", "seed": 0, "test_acc": 0.9, "updates": 100, "model_steps": 1},
            {"model": "r", "seed": 0, "test_acc": 0.95, "updates": 100, "model_steps": 4},
            {"model": "r", "seed": 1, "test_acc": 0.93, "steps": 100, "iterations": 2}]
    fig = plot_accuracy_vs_steps(rows, tmp_path / "s.png")
    xs = sorted({float(x) for line in fig.axes[0].get_lines() for x in line.get_xdata()})
    assert xs == [1.0, 2.0, 4.0]
