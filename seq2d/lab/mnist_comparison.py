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
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InvalidValue, did_you_mean
from ..fileio import atomic_write
from ..renames import migrate_record, now_called, old_model_name
from ..train.config import TrainConfig, load_config

__all__ = ["MODELS", "SCALES", "PROTOCOLS", "PLOTS", "SEED_SUMMARY", "Protocol", "protocol_config", "protocol_table",
           "protocols_section", "configs_for", "compare", "plan_runs", "run_plan",
           "train_one", "run_memory", "summarize", "difference", "format_table", "epoch_histories", "write_plots",
           "write_results", "plot_note"]

# The models of the comparison, as named configurations: each is a registered model name
# (seq2d.list_models(), the one table of model names) plus config fields, on top of the protocol;
# none defines a model of its own (tests/test_run_identity.py checks both).
MODELS: dict[str, dict] = {
    "mlp": {"model": "mlp"},
    "random_element": {"model": "random_model", "granularity": "element"},
    "random_tile": {"model": "random_model", "granularity": "tile"},
    "random_block": {"model": "random_model", "granularity": "block"},
    # our reading of the MS-thesis randomized model (seq2d.models.random.random_blocks_density)
    "random_density": {"model": "random_blocks_density"},
    # controls: the linear softmax classifier at 50x50 and at MNIST's own 28x28 (the level the
    # summary's 92.7% may be), and random element placement restricted to the strictly lower
    # block triangle (region "feedforward": acyclic, skip blocks allowed) at the MLP's count
    "linear": {"model": "mlp", "sizes": [2500, 10]},
    "linear_28": {"model": "mlp", "sizes": [784, 10], "image_size": 28},
    "random_element_feedforward": {"model": "random_model", "granularity": "element", "region": "feedforward"},
}

# Scales: how much data and how many epochs (`seq2d mnist` default "quick"; --full: "full").
SCALES: dict[str, dict] = {
    # Adam, lr 1e-3, batch 64, 100 epochs, 50x50 inputs, MLP [2500, 500, 200, 100, 10];
    # the randomized models run 4 steps (the MLP's depth).
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


# Where the recipes come from: the summary of the paper in the project's seeds (path from the
# repository root), "Method Summary": Adam, lr 1e-3, batch 64, 100 epochs, 50x50 inputs normalised
# with (0.1307, 0.3081), and "optional transformations like random erasing and perspective transformations".
# a citation of the project's source document by name (shared/seeds/ in the workspace), never read as a path
SEED_SUMMARY = "seeds/003_5467b9de8681185d.txt"

PROTOCOLS: dict[str, Protocol] = {
    "ours": Protocol({}, ("mlp", "random_element", "random_tile"),
                     "inputs 50x50 normalised (0.1307, 0.3081), Adam lr 1e-3, batch 64, no augmentation; randomized "
                     "models with exactly the MLP's trainable-parameter count, 4 steps, ReLU on hidden slots only",
                     f"the recipe of the paper's summary ({SEED_SUMMARY}, Method Summary) without its optional "
                     "transformations (the default); the randomized models' details are our choices"),
    "paper": Protocol({"erasing_p": 0.5, "perspective_p": 0.5}, ("mlp", "random_element", "random_tile"),
                      "ours plus, on the training images only, random perspective (p 0.5, distortion 0.5) then random "
                      "erasing (p 0.5, scale (0.02, 0.33), ratio (0.3, 3.3), value 0 in normalised space, as after "
                      "Normalize): torchvision's defaults",
                      "our reading of the summary's optional random erasing and perspective transformations: which "
                      "parameters, in what order, on which images are not stated there; torchvision's defaults on the "
                      "training images are our choice"),
    "ms-thesis": Protocol({"lr": 1e-4, "normalize": False}, ("mlp", "random_density"),
                          "Resize(50) + ToTensor without normalisation, Adam lr 1e-4; randomized model random_density: "
                          "every block of rows 1-4 masked at density 0.5108 with one bias per block, ReLU on every "
                          "slot incl. the output, between steps and on the logits (the held input in [0, 1] is "
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


def protocols_section() -> str:
    """The "Protocols" section of docs/results/mnist.md (written by ``run.py --doc``): what each
    protocol takes from the paper's summary, what is our choice, and :func:`protocol_table`."""
    import textwrap

    def para(text: str) -> str:
        return textwrap.fill(text, 100, break_on_hyphens=False, break_long_words=False)

    return "\n".join([
        "## Protocols (`seq2d mnist --protocol NAME`)",
        "",
        para("Each protocol is a set of config fields (`seq2d.lab.mnist_comparison.PROTOCOLS`, `protocol_config(name, scale)`) "
        "on top of the scale (`quick`: bundled subset, 4 epochs; `--full`: full MNIST, 100 epochs). `ours` is the "
        f"recipe of the summary of arXiv 2404.00880 (`{SEED_SUMMARY}`, \"Method Summary\": Adam, learning rate 1e-3, "
        "batch size 64, 100 epochs, inputs 50x50 normalised with (0.1307, 0.3081)) without its \"optional "
        "transformations like random erasing and perspective transformations\". `paper` adds those two; their "
        "parameters, order, and whether they apply to the test set are not stated in the summary, so torchvision's "
        "defaults on the training images are our choice. `--augment-test` (off by default; config field "
        "`augment_test`) also applies the protocol's augmentation to the test set: one draw per run, seeded by the "
        "run's seed, the same images every epoch (torchvision would draw anew on each pass); with a protocol that has "
        "no augmentation it is refused. In every protocol the randomized models (exactly the MLP's trainable-parameter "
        "count, element or 64 x 64 tile placement, 4 steps, ReLU on hidden slots) and the 5 seeds of `--full` are "
        "our choices. The `ms-thesis` row is our audit's description of the MS-thesis scripts, not re-read: we have "
        "not read the MS-thesis scripts themselves."),
        "",
        protocol_table(),
        "",
        para("`python experiments/mnist_sparsity/run.py --protocol NAME` takes the same names (and writes this section "
             "with `--doc`)."),
    ])


def configs_for(base: TrainConfig | Mapping | str | None, models: Sequence[str],
                overrides: Mapping | None = None) -> dict[str, TrainConfig]:
    """One config per model name of :data:`MODELS` on top of ``base`` (and ``overrides``)."""
    base_cfg = base if isinstance(base, TrainConfig) else load_config(base)
    out = {}
    for name in models:
        now_called("seq2d mnist: model", name, "mnist_model")  # an old spelling ("random-element")
        if name not in MODELS:
            raise InvalidValue(f"Unknown model {name!r}{did_you_mean(name, list(MODELS))}. Select from "
                               + ", ".join(repr(m) for m in MODELS))
        out[name] = dataclasses.replace(base_cfg, **MODELS[name], **(overrides or {}))
    return out


def compare(configs: Mapping[str, TrainConfig], seeds: Sequence[int], out_dir: str | Path, *,
            resume: bool = True, log=print, jobs: int | str = 1, vectorize_seeds: bool = False,
            launcher=None) -> list[dict]:
    """Train every named config for every seed, one run per (model, seed) in
    ``out_dir/<model>/seed<seed>``; one row per run, in the order models, then seeds.

    With ``resume`` (the default), a run folder is used again only when its config matches:

    - its ``summary.json`` is reused when it records a **complete** run of the same effective
      config (equal :func:`~seq2d.train.config.config_hash`) and, where its ``run.json`` records
      a fingerprint, of the model the config builds now (:mod:`seq2d.train.fingerprint`); a
      partial run (stopped by ``max_updates``), a different config or model is never reused as
      finished, and an unreadable ``summary.json`` is named on one line;
    - else its checkpoint is continued when the config differs at most in ``epochs`` /
      ``max_updates`` (a longer or shorter run of the same thing);
    - else the folder is trained afresh, and the log line names the fields that differ.

    A run stopped by ``max_updates`` gives a row with ``complete`` False and the accuracy
    where it stopped (``format_table`` marks it).

    ``jobs`` (an int, or ``"auto"``: as many as idle cores, :func:`seq2d.lab.launch.resolve_jobs`):
    the runs still to train go to that many worker processes (:func:`seq2d.lab.launch.run_jobs`),
    each run exactly as here (:func:`train_one`; the trainer locks its folder), its output lines
    prefixed with its ``[model seed k]`` tag. With one job (or one run to train) they run here,
    one after the other, and the first error stops the call; with several, a failed run is
    logged, the others finish, and then :class:`~seq2d.lab.launch.JobsFailedError` (a
    Seq2DError: the failures were the user's to fix) or ``RuntimeError`` (a bug) is raised.

    ``vectorize_seeds``: first, each model's runs to train afresh (no checkpoint in their folder,
    or ``resume`` off) are trained as one batched computation in this process
    (:func:`_train_vectorized`, :mod:`seq2d.train.vectorized`: each seed's run and folder as a
    single run's); a model that cannot be batched (random_tile) and the runs with a checkpoint to
    continue go the usual way.

    ``launcher`` (a :class:`seq2d.lab.launch.Launcher`; default: local processes, ``jobs`` of them):
    where the runs still to train execute, e.g. each one task of a SLURM job array
    (``Launcher("slurm", ...)``) or submitit's local executor; the rows are merged the same way."""
    return run_plan(plan_runs(configs, seeds, out_dir), folder=out_dir, resume=resume, log=log, jobs=jobs,
                    vectorize_seeds=vectorize_seeds, launcher=launcher)


def plan_runs(configs: Mapping[str, TrainConfig], seeds: Sequence[int], out_dir: str | Path) -> list[tuple]:
    """The runs of :func:`compare`: ``(name, seed, config)`` with the config's seed, name
    (``<name>-s<seed>``) and folder (``out_dir/<name>/seed<seed>``) set, models then seeds."""
    out_dir = Path(out_dir)
    return [(name, seed, dataclasses.replace(base_cfg, seed=seed, name=f"{name}-s{seed}",
                                             out_dir=str(run_folder(out_dir, name, seed))))
            for name, base_cfg in configs.items() for seed in seeds]


def run_folder(out_dir: Path, name: str, seed: int) -> Path:
    """``out_dir/<name>/seed<seed>``, or the folder an earlier version wrote under the old spelling
    of ``name`` (``random-element``, seq2d.renames.OLD_NAMES) when only it exists."""
    new, old = (out_dir / n / f"seed{seed}" for n in (name, old_model_name(name, "mnist_model")))
    return old if old.is_dir() and not new.exists() else new


def run_plan(plan: Sequence[tuple], *, folder: str | Path, resume: bool = True, log=print, jobs: int | str = 1,
             vectorize_seeds: bool = False, launcher=None, tags: Sequence[str] | None = None) -> list[dict]:
    """:func:`compare` for runs already planned (:func:`plan_runs`; several sweeps' runs may be
    joined, e.g. every budget of experiments/param_budget/run.py in one job array): the rows in
    the order of ``plan``. ``folder``: where submitit keeps its files (``folder/submitit``);
    ``tags``: each run's log prefix (default ``[name seed k]``)."""
    from ..train.fingerprint import config_model_diff
    from ..train.identity import config_hash
    from ..train.rundir import unreadable

    if vectorize_seeds and launcher is not None and launcher.submitit:
        raise InvalidValue(f"--vectorize-seeds trains the batched seeds in this process, --launcher {launcher.kind} "
                           "each run as its own job: use one of them")
    tags = list(tags) if tags is not None else [f"[{name} seed {seed}]" for name, seed, _ in plan]
    rows: list = [None] * len(plan)
    todo = []
    for k, (name, seed, cfg) in enumerate(plan):
        summary_path = Path(cfg.out_dir) / "summary.json"
        old = _read_json(summary_path) if resume else None
        torn = unreadable(summary_path) if resume else None
        if torn:  # named here, as every run passes here (the batched seeds never reach train_one)
            log(f"{tags[k]} not reusing the result in {cfg.out_dir}: its summary.json is unreadable ({torn}); the run "
                "is continued from its checkpoint or trained again")
        if old is not None and old.get("complete") is True and old.get("config_hash") == config_hash(cfg) \
                and not unreadable(Path(cfg.out_dir) / "run.json") and not config_model_diff(cfg):
            log(f"{tags[k]} reusing finished run in {cfg.out_dir}")
            rows[k] = {**old, "run_dir": str(cfg.out_dir)}  # where it was read: a copied run's files are here
        else:
            todo.append(k)
    if vectorize_seeds and todo:
        todo = _train_vectorized(plan, todo, rows, resume=resume, log=log)
    if not todo:
        return rows
    from .launch import JobsFailedError, Launcher

    launcher = launcher or Launcher("local", jobs=jobs)
    fixed = {plan[k][2].num_threads for k in todo}
    threads = max(t for t in fixed if isinstance(t, int)) if any(isinstance(t, int) for t in fixed) else 1
    memory = max(run_memory(plan[k][2]) for k in todo)
    if not all(isinstance(t, int) for t in fixed) and not launcher.submitit:
        from .launch import resolve_jobs
        from ..threads import cpu_limit

        n = resolve_jobs(launcher.jobs, len(todo), threads=threads, memory=memory)
        threads = max(1, cpu_limit() // n) if n > 1 else threads  # "auto"/None: each worker's share is its limit
        launcher = dataclasses.replace(launcher, jobs=n)
    results = launcher.run(_train_in_worker, [(*plan[k], resume) for k in todo], tags=[tags[k] for k in todo],
                           folder=folder, threads=threads, memory=memory, log=log,
                           inline=lambda *task: train_one(*task[:3], resume=resume, log=log))
    failures = []
    for k, res in zip(todo, results):
        if isinstance(res, dict):
            rows[k] = res
        else:
            failures.append(res)
    if failures:
        text = (f"{len(failures)} of {len(plan)} runs failed (the others finished; a new call reuses them): "
                + "; ".join(f.line() for f in failures))
        if all(f.user_error for f in failures):
            raise JobsFailedError(text, failures=failures)
        raise RuntimeError(text + " (a bug: the traceback is above)")
    return rows


# images held by a run (train + test), by data set (MNIST-1D's 5,000 x 40 floats: negligible)
_IMAGES = {"full": 70_000, "subset": 3_500, "mnist1d": 0, "synthetic": 0}


def run_memory(cfg: TrainConfig) -> int:
    """About how many bytes one run of ``cfg`` holds (for ``jobs="auto"``): its images in float32
    twice (the loaded set and its cached copy) plus 512 MiB for torch, the model and Adam. A full
    MNIST run at 50x50 comes to 1.8 GiB (measured: 1.5-1.6 GiB resident)."""
    return 2 * 4 * _IMAGES.get(cfg.data, 70_000) * cfg.image_size ** 2 + (512 << 20)


def _train_in_worker(name: str, seed: int, cfg: TrainConfig, resume: bool) -> dict:
    from .launch import worker_log

    return train_one(name, seed, cfg, resume=resume, log=worker_log)


def train_one(name: str, seed: int, cfg: TrainConfig, *, resume: bool = True, log=print) -> dict:
    """One run of :func:`compare` (``cfg`` has its seed and ``out_dir`` set), not reused as
    finished: continue its checkpoint when the config allows (and the model it trained is the one
    the config builds now), else train afresh; write
    ``summary.json`` (the row) and return the row. The same function in-process and in a worker."""
    from ..train.config import OUTPUT_FIELDS
    from ..train.identity import config_diff, format_diff
    from ..train.fingerprint import config_model_diff, format_model_diff
    from ..train.rundir import read_record, unreadable
    from ..train.trainer import run

    run_dir = Path(cfg.out_dir)
    tag = f"[{name} seed {seed}]"
    summary_path = run_dir / "summary.json"
    old = _read_json(summary_path) if resume else None
    model_diff = config_model_diff(cfg) if resume else []  # the model the folder's run trained vs cfg's
    torn = unreadable(run_dir / "run.json")
    if old is not None:
        diff = config_diff(old["config"], cfg) if isinstance(old.get("config"), dict) else None
        why = ("it is partial (stopped by max_updates after " + str(old.get("updates", "?")) + " updates)"
               if old.get("complete") is False and not diff else
               f"its config differs: {format_diff(diff)}" if diff else
               f"its model differs: {format_model_diff(model_diff)}" if model_diff else
               f"its run.json is unreadable ({torn})" if torn else "it was written by an older seq2d")
        log(f"{tag} not reusing the result in {run_dir}: {why}")
    can_resume = False
    if resume and (run_dir / "checkpoint.pt").is_file():
        record = read_record(run_dir) or {}
        saved = record.get("config")
        diff = config_diff(saved, cfg, ignore=OUTPUT_FIELDS + ("epochs", "max_updates")) if isinstance(saved, dict) else None
        can_resume = diff == {} and not model_diff
        if can_resume:
            log(f"{tag} continuing the checkpoint in {run_dir} (update {record.get('update', '?')})")
        else:
            log(f"{tag} training afresh in {run_dir}: its checkpoint " + (
                f"has another config ({format_diff(diff)})" if diff else
                f"trained another model ({format_model_diff(model_diff)})" if model_diff else
                f"has an unreadable run record (run.json: {torn})" if torn else "has no run record (run.json)"))
    summary_path.unlink(missing_ok=True)  # never left claiming a result while the run is redone
    log(f"{tag} training ({cfg.epochs} epochs, data={cfg.data}"
        + (f", max_updates={cfg.max_updates}" if cfg.max_updates is not None else "") + f") -> {run_dir}")
    return _finish_row(name, seed, cfg, run(cfg, resume=can_resume, overwrite=not can_resume), log)


def _finish_row(name: str, seed: int, cfg: TrainConfig, s: Mapping, log=print, **extra) -> dict:
    """The row of a trained run (its summary ``s``, then ``extra``), written as ``summary.json`` in its folder."""
    from ..train.config import config_to_dict
    from ..train.identity import config_hash

    run_dir, tag, digest = Path(cfg.out_dir), f"[{name} seed {seed}]", config_hash(cfg)
    summary_path = run_dir / "summary.json"
    row = {"model": name, "seed": seed, "epochs": cfg.epochs, "test_acc": s["final_test_acc"],
           "best_test_acc": s.get("best_test_acc"), "params": s.get("params"),
           "time_per_epoch_s": s.get("time_per_epoch_s"), "device": s.get("device"),
           "model_steps": cfg.steps, "granularity": cfg.granularity if cfg.model == "random_model" else None,
           "data": cfg.data, "run_dir": str(run_dir), "complete": s["complete"] and s["final_test_acc"] is not None,
           "status": s["status"], "updates": s["updates"], "config_hash": digest, "config": config_to_dict(cfg), **extra}
    if not row["complete"]:
        log(f"{tag} partial result: stopped by max_updates after {s['updates']} updates (not reused as finished; "
            "run again without --max-updates to finish it)")
    atomic_write(summary_path, json.dumps(row, indent=1))
    return row


def _train_vectorized(plan: Sequence, todo: list[int], rows: list, *, resume: bool, log=print) -> list[int]:
    """``compare(vectorize_seeds=True)``: per model, its runs in ``todo`` without a checkpoint to
    continue (any, when not ``resume``) trained as one batch (:func:`seq2d.train.vectorized.train_copies`);
    fills their ``rows`` and returns the runs left to train the usual way."""
    from ..train.vectorized import NotVectorizable, train_copies

    left = []
    groups: dict[str, list[int]] = {}
    for k in todo:
        name, _, cfg = plan[k]
        if resume and (Path(cfg.out_dir) / "checkpoint.pt").is_file():
            left.append(k)  # train_one continues it (or retrains it, saying why)
        else:
            groups.setdefault(name, []).append(k)
    for name, ks in groups.items():
        seeds, cfgs = [plan[k][1] for k in ks], [plan[k][2] for k in ks]
        for cfg in cfgs:
            (Path(cfg.out_dir) / "summary.json").unlink(missing_ok=True)
        log(f"[{name}] training seeds {', '.join(map(str, seeds))} as one batch ({cfgs[0].epochs} epochs, "
            f"data={cfgs[0].data}" + (f", max_updates={cfgs[0].max_updates}" if cfgs[0].max_updates is not None else "")
            + f") -> {Path(cfgs[0].out_dir).parent}")
        try:
            summaries = train_copies(cfgs, overwrite=True)
        except NotVectorizable as e:
            log(f"[{name}] not batched: {e}")
            left += ks
            continue
        for k, s in zip(ks, summaries):
            rows[k] = _finish_row(*plan[k], s, log, copies=len(ks))  # time_per_epoch_s: the batch's
    return sorted(left)


def _read_json(path: Path) -> dict | None:
    """A run's ``summary.json`` (None: absent or unreadable), old keys read as today's (``steps``: ``updates``)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return migrate_record(d) if isinstance(d, dict) else None


def summarize(rows: Sequence[Mapping]) -> list[dict]:
    """Per model: n, mean and std of the final test accuracy, params, mean time per epoch,
    device, and ``partial``: how many of its runs stopped before their last epoch (max_updates;
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
    from ..stats import tost, welch

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
        lines.append("partial: runs stopped by max_updates before their last epoch; their accuracy is the one where they "
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


# The pictures that write_results writes (seq2d.lab.mnist_plots draws them).
PLOTS = {"accuracy_vs_epoch": "accuracy_vs_epoch.png", "final_accuracy": "final_accuracy.png"}


def epoch_histories(rows: Sequence[Mapping]) -> dict[tuple[str, int], list[dict]]:
    """``{(model, seed): metrics rows}`` read from each row's ``run_dir`` (empty when it has none)."""
    from ..train.rundir import read_metrics

    out = {}
    for r in rows:
        try:
            out[(r["model"], r["seed"])] = read_metrics(r["run_dir"])
        except (OSError, KeyError, TypeError, ValueError):
            out[(r["model"], r["seed"])] = []
    return out


def _test_set_size(data: str) -> int | None:
    """Images in the test set of ``data`` ("subset": the bundled file's count; "full": MNIST's t10k)."""
    if data == "subset":
        from ..data.mnist import subset_info

        return subset_info()["n_test"]
    if data == "synthetic":
        from ..train.datasets import synthetic_data

        return len(synthetic_data(1, 2)["test"][1])
    return 10_000 if data == "full" else None


def plot_note(rows: Sequence[Mapping]) -> str:
    """The footer of the plots of :func:`write_plots`, from the rows drawn: the data and its
    test-set size, the image size, the epochs, the seeds, and how many runs stopped early."""
    def values(key):
        return sorted({r[key] for r in rows if r.get(key) is not None}, key=str)

    cfgs = [r["config"] for r in rows if isinstance(r.get("config"), Mapping)]
    sizes = sorted({c["image_size"] for c in cfgs if c.get("image_size")})
    parts = []
    for data in values("data"):
        n = _test_set_size(data)
        about = ([f"{n:,} test images"] if n else []) + (["augmented"] if any(c.get("augment_test") for c in cfgs) else [])
        name = {"subset": "MNIST, bundled subset", "full": "MNIST", "synthetic": "synthetic clusters"}.get(data, data)
        parts.append(name + (f" ({', '.join(about)})" if about else ""))
    text = "data: " + "; ".join(parts) + (f" at {'/'.join(f'{s}x{s}' for s in sizes)}" if sizes else "")
    epochs = values("epochs")
    text += f" | {'/'.join(map(str, epochs))} epoch{'s' if epochs != [1] else ''}"
    seeds = values("seed")
    per = {sum(1 for r in rows if r["model"] == m) for m in dict.fromkeys(r["model"] for r in rows)}
    text += (f" | seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))} ("
             + "/".join(map(str, sorted(per))) + " per model)")
    partial = sum(1 for r in rows if r.get("complete") is False)
    if partial:
        text += f" | {partial} run{'s' if partial != 1 else ''} stopped early by max_updates (partial)"
    return text


def write_plots(rows: Sequence[Mapping], out_dir: str | Path) -> dict[str, Path]:
    """``out_dir/accuracy_vs_epoch.png`` (test accuracy per epoch: each seed, the mean over
    seeds and a +- std band, per model) and ``out_dir/final_accuracy.png`` (final accuracy per
    model: seeds and mean +- std), drawn by :mod:`seq2d.lab.mnist_plots`, each with the footer
    :func:`plot_note` (what it shows: data, test-set size, epochs, seeds); ``{name: path}``."""
    from .mnist_plots import plot_accuracy_vs_epoch, plot_final_accuracy

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {k: out_dir / v for k, v in PLOTS.items()}
    note = plot_note(rows)
    plot_accuracy_vs_epoch(rows, paths["accuracy_vs_epoch"], histories=epoch_histories(rows), note=note)
    plot_final_accuracy(rows, paths["final_accuracy"], note=note)
    return paths


def write_results(rows: Sequence[Mapping], out_dir: str | Path, *, config: TrainConfig,
                  protocol: Mapping, models: Sequence[str], seeds: Sequence[int], name: str | None = None,
                  extra: Mapping | None = None, plots: bool = True) -> dict:
    """Write ``out_dir/results.json`` (``protocol``, ``models``, ``seeds``, the ``rows`` of
    :func:`compare`, then the keys of ``extra``), ``out_dir/results.md`` (the table of
    :func:`format_table`) and, with ``plots``, the pictures of :func:`write_plots`. Both fronts
    (``seq2d mnist`` and ``experiments/mnist_sparsity/run.py``) write their results here.

    Returns ``{"json": path, "md": path, "plots": {name: path}, "table": table, "text": report}``:
    ``report`` is the heading naming the protocol of ``config`` (data, epochs, MLP sizes), the
    table and the lines saying where the runs, the table and the plots are. ``name``: the
    protocol's name (of :data:`PROTOCOLS`), recorded as ``protocol_name`` and named in the heading."""
    out_dir = Path(out_dir)
    table = format_table(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    record = {"protocol": dict(protocol), "models": list(models), "seeds": list(seeds), "rows": list(rows)}
    if name is not None:
        record = {"protocol_name": name, **record}
    record.update(extra or {})
    json_path.write_text(json.dumps(record, indent=1))
    md_path.write_text(table + "\n")
    pictures = write_plots(rows, out_dir) if plots else {}
    text = "\n".join([
        "MNIST sparsity comparison" + (f" (protocol {name})" if name else "")
        + (" with the test set augmented too" if config.augment_test else "") + f": data={config.data}, "
        f"{config.epochs} epochs, seeds {list(seeds)}, MLP {config.sizes} vs randomized models with its exact "
        "parameter count" + (" (random_density: its own count, in the table)" if "random_density" in models else ""),
        table,
        f"\nper-run metrics and checkpoints under {out_dir}/<model>/seed<k>/; table in {out_dir}/results.md"
        + (f"; plots {', '.join(p.name for p in pictures.values())} in {out_dir}/" if pictures else ""),
    ])
    partial = [r for r in rows if r.get("complete") is False]
    if partial:
        text += (f"\nnote: {len(partial)} run(s) stopped by max_updates before their last epoch (partial, marked in the "
                 "table); they are continued, never reused as finished, by the next call")
    return {"json": json_path, "md": md_path, "plots": pictures, "table": table, "text": text}
