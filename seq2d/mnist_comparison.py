"""The MNIST sparsity comparison (Hershey et al., arXiv 2404.00880), as library functions.

An MLP and randomized Sequential2Ds with **exactly** the MLP's trainable-parameter count
(:func:`seq2d.randomize`) are trained over several seeds with one shared protocol
(:data:`PROTOCOLS`: ``ours``, ``paper``, ``ms-thesis``, at a scale of :data:`SCALES`); the
result is a table of mean +- std test accuracy, parameters, time per epoch and device, and
the difference of each model to the MLP with its 95% interval (Welch). ``seq2d mnist``
and ``experiments/mnist_sparsity/run.py`` are thin fronts to :func:`compare`;
:func:`write_results` writes and formats what ``seq2d mnist`` reports.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import InvalidValue
from .train.config import TrainConfig, load_config

__all__ = ["MODELS", "SCALES", "PROTOCOLS", "Protocol", "protocol_config", "protocol_table", "configs_for", "compare", "summarize", "difference", "format_table",
           "write_results"]

# The models of the comparison: config overrides on top of the protocol.
MODELS: dict[str, dict] = {
    "mlp": {"model": "mlp"},
    "random-element": {"model": "random", "granularity": "element"},
    "random-tile": {"model": "random", "granularity": "tile"},
    "random-block": {"model": "random", "granularity": "block"},
    # our reading of the MS-thesis randomized model (seq2d.models.random.random_blocks_density)
    "random-density": {"model": "random_blocks_density"},
}

# Scales: how much data and how many epochs (`seq2d mnist` default "quick"; --full: "full").
SCALES: dict[str, dict] = {
    # Adam, lr 1e-3, batch 64, 100 epochs, 50x50 inputs, MLP [2500, 500, 200, 100, 10];
    # the randomized models run 4 iterations (the MLP's depth).
    "full": {"data": "full", "epochs": 100, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
             "sizes": [2500, 500, 200, 100, 10], "image_size": 50},
    # the bundled 2,500 + 1,000 digit subset, a few epochs: finishes in about a minute on 2 CPU cores
    "quick": {"data": "subset", "epochs": 4, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
              "sizes": [2500, 500, 200, 100, 10], "image_size": 50},
}


@dataclasses.dataclass(frozen=True)
class Protocol:
    """A named training recipe (`seq2d mnist --protocol NAME`): TrainConfig overrides on top of a
    scale (:data:`SCALES`), the models `seq2d mnist` trains by default, what it sets and its source."""

    config: Mapping
    models: tuple[str, ...]
    sets: str
    source: str


PROTOCOLS: dict[str, Protocol] = {
    "ours": Protocol({}, ("mlp", "random-element", "random-tile"),
                     "inputs normalised (0.1307, 0.3081), no augmentation, Adam lr 1e-3, batch 64; randomized models "
                     "with exactly the MLP's trainable-parameter count, ReLU on hidden slots only",
                     "our choice (the default; the 3-epoch full-MNIST numbers of docs/results/mnist.md)"),
    "paper": Protocol({"erasing_p": 0.5, "perspective_p": 0.5}, ("mlp", "random-element", "random-tile"),
                      "ours plus, on the training images only, random perspective (p 0.5, distortion 0.5) then random "
                      "erasing (p 0.5, scale (0.02, 0.33), ratio (0.3, 3.3), value 0 in normalised space, as after "
                      "Normalize): torchvision's defaults",
                      "our reading of the paper's summary, which mentions optional random erasing + perspective"),
    "ms-thesis": Protocol({"lr": 1e-4, "normalize": False}, ("mlp", "random-density"),
                          "Resize(50) + ToTensor without normalisation, Adam lr 1e-4; randomized model random-density: "
                          "every block of rows 1-4 masked at density 0.5108 with one bias per block, ReLU on every "
                          "slot incl. the output, between iterations and on the logits (the held input in [0, 1] is "
                          "left as is); 1,373,557 trainable parameters, not matched to the MLP's 1,371,810",
                          "our reading of the MS-thesis scripts as described in our audit, not re-read"),
}


def protocol_config(name: str = "ours", scale: str = "quick", *, augment_test: bool = False) -> dict:
    """The TrainConfig fields of protocol ``name`` at ``scale``: ``SCALES[scale]``, then
    ``PROTOCOLS[name].config``, then ``augment_test`` (apply the training augmentation to the
    test set too; only protocols with augmentation have one to apply)."""
    if name not in PROTOCOLS:
        raise InvalidValue(f"unknown protocol {name!r}. Select from " + ", ".join(repr(p) for p in PROTOCOLS))
    if scale not in SCALES:
        raise InvalidValue(f"unknown scale {scale!r}. Select from " + ", ".join(repr(p) for p in SCALES))
    out = {**SCALES[scale], **PROTOCOLS[name].config}
    if augment_test:
        out["augment_test"] = True
    return out


def protocol_table() -> str:
    """The markdown table of :data:`PROTOCOLS`: name, config fields, what it sets, source."""
    lines = ["| protocol | config fields (on top of the scale) | default models | what it sets | source |",
             "| --- | --- | --- | --- | --- |"]
    for name, p in PROTOCOLS.items():
        fields = ", ".join(f"`{k} = {v!r}`" for k, v in p.config.items()) or "(none)"
        lines.append(f"| `{name}` | {fields} | {', '.join(p.models)} | {p.sets} | {p.source} |")
    return "\n".join(lines)


def configs_for(base: TrainConfig | Mapping | str | None, models: Sequence[str],
                overrides: Mapping | None = None) -> dict[str, TrainConfig]:
    """One config per model name of :data:`MODELS` on top of ``base`` (and ``overrides``)."""
    base_cfg = base if isinstance(base, TrainConfig) else load_config(base)
    out = {}
    for name in models:
        if name not in MODELS:
            raise InvalidValue(f"Unknown model {name!r}. Select from " + ", ".join(repr(m) for m in MODELS))
        out[name] = dataclasses.replace(base_cfg, **MODELS[name], **(overrides or {}))
    return out


def compare(configs: Mapping[str, TrainConfig], seeds: Sequence[int], out_dir: str | Path, *,
            resume: bool = True, log=print) -> list[dict]:
    """Train every named config for every seed, one run per (model, seed) in
    ``out_dir/<model>/seed<seed>``; one row per run.

    With ``resume`` (the default), a run folder is used again only when its config matches:

    - its ``summary.json`` is reused when it records a **complete** run of the same effective
      config (equal :func:`~seq2d.train.config.config_hash`); a partial run (stopped by
      ``max_steps``) or a different config is never reused as finished;
    - else its checkpoint is continued when the config differs at most in ``epochs`` /
      ``max_steps`` (a longer or shorter run of the same thing);
    - else the folder is trained afresh, and the log line names the fields that differ.

    A run stopped by ``max_steps`` gives a row with ``complete`` False and the accuracy
    where it stopped (``format_table`` marks it)."""
    from .train.config import OUTPUT_FIELDS, config_to_dict
    from .train.identity import config_diff, config_hash, format_diff
    from .train.rundir import read_record
    from .train.trainer import run

    out_dir = Path(out_dir)
    rows = []
    for name, base_cfg in configs.items():
        for seed in seeds:
            run_dir = out_dir / name / f"seed{seed}"
            cfg = dataclasses.replace(base_cfg, seed=seed, name=f"{name}-s{seed}", out_dir=str(run_dir))
            tag, digest = f"[{name} seed {seed}]", config_hash(cfg)
            summary_path = run_dir / "summary.json"
            old = _read_json(summary_path) if resume else None
            if old is not None and old.get("complete") is True and old.get("config_hash") == digest:
                log(f"{tag} reusing finished run in {run_dir}")
                rows.append(old)
                continue
            if old is not None:
                diff = config_diff(old["config"], cfg) if isinstance(old.get("config"), dict) else None
                why = ("it is partial (stopped by max_steps at step " + str(old.get("steps", "?")) + ")"
                       if old.get("complete") is False and not diff else
                       f"its config differs: {format_diff(diff)}" if diff else "it was written by an older seq2d")
                log(f"{tag} not reusing the result in {run_dir}: {why}")
            can_resume = False
            if resume and (run_dir / "checkpoint.pt").is_file():
                record = read_record(run_dir) or {}
                saved = record.get("config")
                diff = config_diff(saved, cfg, ignore=OUTPUT_FIELDS + ("epochs", "max_steps")) if isinstance(saved, dict) else None
                can_resume = diff == {}
                if can_resume:
                    log(f"{tag} continuing the checkpoint in {run_dir} (step {record.get('step', '?')})")
                else:
                    log(f"{tag} training afresh in {run_dir}: its checkpoint " + (
                        f"has another config ({format_diff(diff)})" if diff else "has no run record (run.json)"))
            summary_path.unlink(missing_ok=True)  # never left claiming a result while the run is redone
            log(f"{tag} training ({cfg.epochs} epochs, data={cfg.data}"
                + (f", max_steps={cfg.max_steps}" if cfg.max_steps is not None else "") + f") -> {run_dir}")
            s = run(cfg, resume=can_resume, overwrite=not can_resume)
            row = {"model": name, "seed": seed, "epochs": cfg.epochs, "test_acc": s["final_test_acc"],
                   "best_test_acc": s.get("best_test_acc"), "params": s.get("params"),
                   "time_per_epoch_s": s.get("time_per_epoch_s"), "device": s.get("device"),
                   "iterations": cfg.iterations, "granularity": cfg.granularity if cfg.model == "random" else None,
                   "data": cfg.data, "run_dir": str(run_dir), "complete": s["complete"] and s["final_test_acc"] is not None,
                   "status": s["status"], "steps": s["steps"], "config_hash": digest, "config": config_to_dict(cfg)}
            if not row["complete"]:
                log(f"{tag} partial result: stopped by max_steps at step {s['steps']} (not reused as finished; "
                    "run again without --max-steps to finish it)")
            tmp = summary_path.with_name(f".summary.json.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(row, indent=1))
            tmp.replace(summary_path)
            rows.append(row)
    return rows


def _read_json(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def summarize(rows: Sequence[Mapping]) -> list[dict]:
    """Per model: n, mean and std of the final test accuracy, params, mean time per epoch,
    device, and ``partial``: how many of its runs stopped before their last epoch (max_steps;
    their accuracy is the one where they stopped). Runs without an evaluation are left out."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == name and r.get("test_acc") is not None]
        accs = [r["test_acc"] for r in rs]
        times = [r["time_per_epoch_s"] for r in rs if r.get("time_per_epoch_s") is not None]
        out.append({
            "model": name, "n": len(accs), "mean": statistics.fmean(accs) if accs else float("nan"),
            "std": statistics.stdev(accs) if len(accs) > 1 else float("nan"),
            "params": rs[0].get("params") if rs else None,
            "time_per_epoch_s": statistics.fmean(times) if times else float("nan"),
            "device": rs[0].get("device") if rs else None, "epochs": rs[0].get("epochs") if rs else None,
            "partial": sum(1 for r in rs if r.get("complete") is False),
        })
    return out


EQUIVALENCE_MARGIN = 0.01  # accuracy (1 point): the largest difference the table calls "equivalent"


def difference(rows: Sequence[Mapping], a: str, b: str, margin: float = EQUIVALENCE_MARGIN) -> dict:
    """mean(a) - mean(b) of the final test accuracy: a 95% Welch interval (exact t quantile,
    :func:`seq2d.stats.welch`) and a TOST equivalence test within ``margin``
    (:func:`seq2d.stats.tost`, alpha 0.05): ``equivalent`` is True only when the 90% interval lies
    inside (-margin, margin). An interval that contains 0 alone is not evidence of equality."""
    from .stats import tost, welch

    xa = [r["test_acc"] for r in rows if r["model"] == a and r.get("test_acc") is not None]
    xb = [r["test_acc"] for r in rows if r["model"] == b and r.get("test_acc") is not None]
    nan = float("nan")
    out = {"a": a, "b": b, "diff": nan, "lo": nan, "hi": nan, "df": nan, "margin": margin, "equivalent": None,
           "tost_p": nan}
    if not xa or not xb:
        return out
    out["diff"] = statistics.fmean(xa) - statistics.fmean(xb)
    if len(xa) < 2 or len(xb) < 2:
        return out
    w, t = welch(xb, xa), tost(xb, xa, margin)
    out.update(diff=w.diff, lo=w.low, hi=w.high, df=w.df, equivalent=t.equivalent, tost_p=t.p)
    return out


def format_table(rows: Sequence[Mapping], reference: str = "mlp") -> str:
    """The results table (markdown) and the differences to ``reference``."""
    summ = summarize(rows)
    lines = ["| model | runs | test accuracy (mean +- std) | trainable params | time / epoch | device |",
             "| --- | --- | --- | --- | --- | --- |"]
    for s in summ:
        std = "n/a" if math.isnan(s["std"]) else f"{100 * s['std']:.2f}"
        params = f"{s['params']:,}" if s["params"] is not None else "?"
        label = s["model"] + (f" (partial: {s['partial']} of {s['n']})" if s["partial"] else "")
        lines.append(f"| {label} | {s['n']} | {100 * s['mean']:.2f} +- {std} % | {params} | "
                     f"{s['time_per_epoch_s']:.2f} s | {s['device']} |")
    if any(s["partial"] for s in summ):
        lines.append("")
        lines.append("partial: runs stopped by max_steps before their last epoch; their accuracy is the one where they "
                     "stopped and their time per epoch is extrapolated")
    names = [s["model"] for s in summ]
    if reference in names and len(names) > 1:
        lines.append("")
        m = 100 * EQUIVALENCE_MARGIN
        lines.append(f"| difference to {reference} | mean (points) | 95% interval (Welch) | "
                     f"equivalent within +-{m:g} points (TOST, alpha 0.05) |")
        lines.append("| --- | --- | --- | --- |")
        for other in names:
            if other == reference:
                continue
            d = difference(rows, other, reference)
            ci = "n/a (one run each)" if math.isnan(d["lo"]) else f"[{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]"
            eq = "n/a" if d["equivalent"] is None else f"{'yes' if d['equivalent'] else 'no'} (p = {d['tost_p']:.3f})"
            lines.append(f"| {other} - {reference} | {100 * d['diff']:+.2f} | {ci} | {eq} |")
    return "\n".join(lines)


def write_results(rows: Sequence[Mapping], out_dir: str | Path, *, config: TrainConfig,
                  protocol: Mapping, models: Sequence[str], seeds: Sequence[int], name: str | None = None) -> dict:
    """Write ``out_dir/results.json`` (``protocol``, ``models``, ``seeds`` and the ``rows`` of
    :func:`compare`) and ``out_dir/results.md`` (the table of :func:`format_table`).

    Returns ``{"json": path, "md": path, "table": table, "text": report}``: ``report`` is the
    heading naming the protocol of ``config`` (data, epochs, MLP sizes), the table and the
    line saying where the runs and the table are. ``name``: the protocol's name (of
    :data:`PROTOCOLS`), recorded as ``protocol_name`` and named in the heading."""
    out_dir = Path(out_dir)
    table = format_table(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    record = {"protocol": dict(protocol), "models": list(models), "seeds": list(seeds), "rows": list(rows)}
    if name is not None:
        record = {"protocol_name": name, **record}
    json_path.write_text(json.dumps(record, indent=1))
    md_path.write_text(table + "\n")
    text = "\n".join([
        "MNIST sparsity comparison" + (f" (protocol {name})" if name else "")
        + (" with the test set augmented too" if config.augment_test else "") + f": data={config.data}, "
        f"{config.epochs} epochs, seeds {list(seeds)}, MLP {config.sizes} vs randomized models with its exact "
        "parameter count" + (" (random-density: its own count, in the table)" if "random-density" in models else ""),
        table,
        f"\nper-run metrics and checkpoints under {out_dir}/<model>/seed<k>/; table in {out_dir}/results.md",
    ])
    partial = [r for r in rows if r.get("complete") is False]
    if partial:
        text += (f"\nnote: {len(partial)} run(s) stopped by max_steps before their last epoch (partial, marked in the "
                 "table); they are continued, never reused as finished, by the next call")
    return {"json": json_path, "md": md_path, "table": table, "text": text}
