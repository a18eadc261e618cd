"""MNIST-1D baselines (issue 33, item 1): is the set seq2d generates the benchmark the paper
measured? A logistic regression and an MLP of the paper's size, trained with seq2d's Trainer,
against the published accuracies (Greydanus 2020; the mnist1d README's table: 32% and 68%).

Models (seq2d's registered ``mlp``, Sequential2D, ReLU):

``logistic``  sizes [40, 10]: one linear block, softmax regression (410 parameters), as the
              paper's ``LinearBase``
``mlp``       sizes [40, 100, 100, 10] (15,210 parameters): the size of the paper's ``MLPBase``
              (mnist1d repository, notebooks/models.py: hidden_size=100, three linear layers),
              which also adds its first hidden layer to the second (``h + relu(W2 h)``); seq2d's
              MLP has no such skip

Protocol, the paper's (notebooks/train.py and the benchmark notebook): Adam, learning rate 1e-2,
batch 100, no weight decay, 6,000 steps = 150 epochs of the 4,000 training signals, accuracy of
the final model on the 1,000 test signals. seq2d's Trainer reshuffles every epoch (the paper's
loop walks the same order each pass). The learning curve of every run is kept; the epoch count
is the paper's, and the curve says whether it is past the plateau: per model, the first epoch
from which the seed-mean test accuracy stays within 1 point of its final value.

    nice -n 10 python experiments/mnist1d/baselines.py                 # 10 seeds, ~15 min on 1 core
    python experiments/mnist1d/baselines.py --quick --out /tmp/m1d      # CI: 1 seed, 2 epochs, seconds

Run folders ``OUT/<model>/seed<k>/`` hold the Trainer's files (a finished run is reused, an
interrupted one resumed); the summary goes to ``RESULTS/baselines.json`` and ``baselines.md``
(``--quick``: under ``OUT/results``, never the committed results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

MODELS = {"logistic": [40, 10], "mlp": [40, 100, 100, 10]}
# the mnist1d README's table (mnist1d 0.0.2.post1 on PyPI), "MNIST-1D" row; percent test accuracy
PUBLISHED = {"logistic": 32.0, "mlp": 68.0}
PROTOCOL = {"optimizer": "adam", "lr": 1e-2, "batch_size": 100, "weight_decay": 0.0}
EPOCHS = 150  # the paper's 6,000 steps of batch 100 over 4,000 training signals
PLATEAU_POINTS = 1.0  # "within 1 point of the final value" for the plateau epoch


def config(model: str, seed: int, epochs: int, out: Path):
    from seq2d.train import TrainConfig

    return TrainConfig(model="mlp", sizes=MODELS[model], data="mnist1d", epochs=epochs, seed=seed, num_threads=1,
                       out_dir=str(out / model / f"seed{seed}"), name=f"{model}-s{seed}", quiet=True, **PROTOCOL)


def train_one(model: str, seed: int, epochs: int, out: Path) -> dict:
    """One run through the public API (``seq2d.train.run``): its final accuracy and curve."""
    from seq2d.train import read_record, run
    from seq2d.train.rundir import is_finished_run

    cfg = config(model, seed, epochs, out)
    folder = cfg.run_dir()
    unfinished = (folder / "checkpoint.pt").is_file() and not is_finished_run(read_record(folder), cfg)
    s = run(cfg, resume=unfinished)  # a finished run of this config is reused, an unfinished one continued
    h = s["history"]
    return {"seed": seed, "final_test_acc": 100 * s["final_test_acc"], "best_test_acc": 100 * s["best_test_acc"],
            "best_epoch": s["best_epoch"], "final_train_acc": 100 * h[-1]["train_acc"], "params": s["params"],
            "time_per_epoch_s": s["time_per_epoch_s"], "config_hash": s["config_hash"],
            "test_acc_curve": [round(100 * r["test_acc"], 2) for r in h],
            "train_acc_curve": [round(100 * r["train_acc"], 2) for r in h]}


def plateau_epoch(curve: list[float], points: float = PLATEAU_POINTS) -> int:
    """The first epoch (1-based) from which every value is within ``points`` of the last."""
    last = curve[-1]
    e = len(curve)
    while e > 1 and abs(curve[e - 2] - last) <= points:
        e -= 1
    return e


def summarise(model: str, runs: list[dict]) -> dict:
    from seq2d.stats import binomial_se, t_quantile

    accs = [r["final_test_acc"] for r in runs]
    n = len(accs)
    mean = sum(accs) / n
    sd = (sum((a - mean) ** 2 for a in accs) / (n - 1)) ** 0.5 if n > 1 else None
    half = t_quantile(0.975, n - 1) * sd / n ** 0.5 if n > 1 else None
    curve = [sum(c) / n for c in zip(*(r["test_acc_curve"] for r in runs))]
    return {"model": model, "sizes": MODELS[model], "params": runs[0]["params"], "seeds": [r["seed"] for r in runs],
            "final_test_acc": accs, "mean": mean, "std": sd, "ci95": [mean - half, mean + half] if half else None,
            "min": min(accs), "max": max(accs), "published": PUBLISHED[model], "mean_minus_published": mean - PUBLISHED[model],
            "test_se_one_run": 100 * binomial_se(mean / 100, 1000), "mean_final_train_acc":
            sum(r["final_train_acc"] for r in runs) / n, "mean_best_test_acc": sum(r["best_test_acc"] for r in runs) / n,
            "plateau_epoch": plateau_epoch(curve), "mean_test_acc_curve": [round(c, 3) for c in curve],
            "time_per_epoch_s": sum(r["time_per_epoch_s"] for r in runs) / n, "runs": runs}


def data_record() -> dict:
    """The generated set's record (arguments, checksum, versions) and its training-set statistics."""
    from seq2d.data.mnist1d import DEFAULT_SHA256, get_mnist1d

    d = get_mnist1d()
    info = {k: v for k, v in d["info"].items() if k not in ("path", "from_cache")}
    X = d["train"][0].double()
    return {**info, "sha256_is_default": info["data_sha256"] == DEFAULT_SHA256, "n_train": d["n_train"], "n_test": d["n_test"],
            "length": d["length"], "train_mean": X.mean().item(), "train_std": X.std().item(),
            "normalisation": "the mnist1d package's own: one mean and one std over all 5,000 x 40 values (train and "
                             "test together); nothing more in seq2d"}


def environment() -> dict:
    import numpy
    import torch

    from seq2d.envinfo import cpu_name

    return {"cpu": cpu_name(), "torch_threads_per_run": 1, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "machine": platform.machine()}


def table(result: dict) -> str:
    """The markdown table of ``result``."""
    rows = ["| model | sizes | parameters | seeds | test accuracy, mean ± std (%) | 95% CI of the mean | range | "
            "published | mean - published | published within the CI / the range | plateau epoch |",
            "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | --- | ---: |"]
    for m in result["models"].values():
        sd = f" ± {m['std']:.2f}" if m["std"] is not None else ""
        ci = f"{m['ci95'][0]:.2f} to {m['ci95'][1]:.2f}" if m["ci95"] else "-"
        rows.append(f"| {m['model']} | {m['sizes']} | {m['params']:,} | {len(m['seeds'])} | {m['mean']:.2f}{sd} | {ci} | "
                    f"{m['min']:.1f} to {m['max']:.1f} | {m['published']:.0f} | {m['mean_minus_published']:+.2f} | "
                    f"{_yes(m['ci95'] and m['ci95'][0] <= m['published'] <= m['ci95'][1])} / "
                    f"{_yes(m['min'] <= m['published'] <= m['max'])} | {m['plateau_epoch']} of {result['epochs']} |")
    d = result["data"]
    return ("\n".join(rows) + "\n\n"
            f"MNIST-1D generated by mnist1d {d['mnist1d_version']} (numpy {d['numpy_version']}, scipy "
            f"{d['scipy_version']}) with the package's default arguments (seed {d['args']['seed']}): {d['n_train']:,} "
            f"train / {d['n_test']:,} test signals of {d['length']} samples, SHA-256 `{d['sha256'][:16]}...`; "
            f"training-set mean {d['train_mean']:.4f}, std {d['train_std']:.4f}. Adam, lr {PROTOCOL['lr']:g}, batch "
            f"{PROTOCOL['batch_size']}, {result['epochs']} epochs, final-epoch test accuracy; torch {result['env']['torch']}, "
            f"{result['env']['cpu']}, 1 thread per run. Plateau epoch: the first from which the seed-mean test accuracy "
            f"stays within {PLATEAU_POINTS:g} point of its final value. Published: the mnist1d README's table (one run "
            "each; the test set's binomial standard error alone is about 1.5 points at 68%). Differences from the "
            "paper's runs: its MLP adds its first hidden layer to its second (h + relu(W2 h)), seq2d's has no skip; its "
            "loop walks the training set in one fixed order, the Trainer reshuffles every epoch; it trained on the "
            "pickle it publishes for download, this set is the package's make_dataset output (not compared: nothing "
            "is downloaded).\n")


def _yes(flag) -> str:
    return "yes" if flag else "no"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--seeds", default="0-9", help="seeds: 'a-b' or a comma list (default 0-9)")
    ap.add_argument("--epochs", type=int, default=EPOCHS, help=f"epochs per run (default {EPOCHS}: the paper's 6,000 steps)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list among {', '.join(MODELS)}")
    ap.add_argument("--out", default="runs/mnist1d_baselines", help="run folders (reused and resumed)")
    ap.add_argument("--results", default=None, help=f"where baselines.json/.md go (default {RESULTS}; --quick: OUT/results)")
    ap.add_argument("--cache", default=None, help="MNIST-1D cache folder (sets $SEQ2D_CACHE; default: its value, else "
                                                  "~/.cache/seq2d)")
    ap.add_argument("--quick", action="store_true", help="CI: seed 0, 2 epochs, results under OUT/results")
    a = ap.parse_args(argv)
    if a.cache:
        os.environ["SEQ2D_CACHE"] = a.cache
    if "-" in a.seeds:
        lo, hi = map(int, a.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in a.seeds.split(",")]
    epochs = a.epochs
    if a.quick:
        seeds, epochs = [0], 2
    models = [m.strip() for m in a.models.split(",")]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {unknown}; choose among {list(MODELS)}")
    out = Path(a.out)
    results = Path(a.results) if a.results else (out / "results" if a.quick else RESULTS)

    data = data_record()
    summary = {}
    for m in models:
        runs = []
        for s in seeds:
            r = train_one(m, s, epochs, out)
            print(f"{m} seed {s}: final test accuracy {r['final_test_acc']:.2f}% (best {r['best_test_acc']:.2f}% at "
                  f"epoch {r['best_epoch']}), train {r['final_train_acc']:.1f}%", flush=True)
            runs.append(r)
        summary[m] = summarise(m, runs)
    result = {"issue": "33 item 1", "command": "python experiments/mnist1d/baselines.py " + " ".join(
              argv if argv is not None else sys.argv[1:]), "epochs": epochs, "protocol": PROTOCOL,
              "published_source": "mnist1d README (PyPI 0.0.2.post1), table 'Comparing MNIST and MNIST-1D', row MNIST-1D",
              "data": data, "env": environment(), "models": summary}
    from seq2d.fileio import atomic_write

    results.mkdir(parents=True, exist_ok=True)
    atomic_write(results / "baselines.json", json.dumps(result, indent=1) + "\n")
    atomic_write(results / "baselines.md", "# MNIST-1D baselines (experiments/mnist1d/baselines.py)\n\n" + table(result))
    print(table(result))
    return result


if __name__ == "__main__":
    main()
