"""The MNIST comparison: table statistics, the Welch interval, and the CLI fronts."""

import json
import math

import pytest

from seq2d.cli import main
from seq2d.mnist_comparison import MODELS, configs_for, difference, format_table, summarize, write_results

ROWS = [
    {"model": "mlp", "seed": s, "test_acc": a, "params": 10, "time_per_epoch_s": 1.0, "device": "cpu", "epochs": 1}
    for s, a in enumerate([0.90, 0.92, 0.91])
] + [
    {"model": "random-element", "seed": s, "test_acc": a, "params": 10, "time_per_epoch_s": 2.0, "device": "cpu", "epochs": 1}
    for s, a in enumerate([0.93, 0.95, 0.94, 0.92])
]


def test_summarize_mean_std():
    s = {r["model"]: r for r in summarize(ROWS)}
    assert s["mlp"]["n"] == 3 and math.isclose(s["mlp"]["mean"], 0.91)
    assert math.isclose(s["mlp"]["std"], 0.01)
    assert math.isclose(s["random-element"]["mean"], 0.935)


def test_welch_interval_by_hand():
    d = difference(ROWS, "random-element", "mlp")
    va, vb = (0.0166666667e-2) / 4, 0.0001 / 3  # sample variances / n
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    assert math.isclose(d["diff"], 0.025, abs_tol=1e-12)
    assert math.isclose(d["df"], df, rel_tol=1e-6)
    # t quantile for df ~ 4.9 from the table (df <= 5 -> 2.571)
    assert math.isclose(d["hi"] - d["diff"], 2.571 * se, rel_tol=1e-6)


def test_format_table_has_rows_and_difference():
    text = format_table(ROWS)
    assert "| mlp | 3 | 91.00 +- 1.00 % | 10 | 1.00 s | cpu |" in text
    assert "random-element - mlp | +2.50 |" in text


def test_configs_for_rejects_unknown_model():
    with pytest.raises(ValueError, match="Unknown model 'cnn'. Select from 'mlp'"):
        configs_for({"data": "synthetic"}, ["cnn"])
    cfgs = configs_for({"data": "synthetic"}, list(MODELS))
    assert cfgs["random-tile"].granularity == "tile" and cfgs["mlp"].model == "mlp"


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
    assert lines[-1].endswith(f"table in {tmp_path / 'out'}/results.md")


def test_seq2d_mnist_cli_quick(tmp_path, capsys):
    rc = main(["mnist", "--models", "mlp,random-tile", "--epochs", "1", "--out", str(tmp_path), "--num-threads", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| mlp | 1 |" in out and "| random-tile | 1 |" in out and "1,371,810" in out
    res = json.loads((tmp_path / "results.json").read_text())
    assert {r["model"] for r in res["rows"]} == {"mlp", "random-tile"}
    assert all(r["params"] == 1_371_810 for r in res["rows"])
    # a second call reuses the finished runs
    rc = main(["mnist", "--models", "mlp", "--epochs", "1", "--out", str(tmp_path)])
    assert rc == 0 and "reusing finished run" in capsys.readouterr().out


def test_seq2d_mnist_rejects_unknown_model(tmp_path, capsys):
    assert main(["mnist", "--models", "cnn", "--out", str(tmp_path)]) == 2
    assert "unknown model" in capsys.readouterr().err


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
