"""The plots of the MNIST comparison (:mod:`seq2d.lab.mnist_comparison`), from its rows.

- :func:`plot_accuracy_vs_epoch`: test accuracy per epoch, one colour per model: every seed as
  a thin line, the mean over the seeds as a thick line with a band of +- one standard
  deviation (where at least 2 seeds reached that epoch);
- :func:`plot_final_accuracy`: final test accuracy per model, a dot per seed and the mean
  +- std;
- :func:`plot_accuracy_vs_steps`: final accuracy against the number of Sequential2D
  steps (the sweep of ``experiments/mnist_sparsity/run.py``).

Each takes the rows of :func:`seq2d.lab.mnist_comparison.compare` (the per-epoch curves from
``histories``: :func:`seq2d.lab.mnist_comparison.epoch_histories` reads them from the run folders;
drawing reads no files), saves to ``path`` when given
(``.png`` or ``.svg``) and returns the Figure (Agg canvas, never registered with pyplot).
Epoch and iteration axes have integer ticks only. Titles say only what is drawn: with one seed
per model there are no per-seed lines, means or bands, and the titles say so. ``note``: a
footer under the axes saying what the figure shows (``seq2d mnist`` passes
:func:`seq2d.lab.mnist_comparison.plot_note`: data, test-set size, epochs, seeds), so that a figure
pasted elsewhere still carries its provenance.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ..plot.common import _check_path, integer_ticks, new_figure, save_figure

__all__ = ["plot_accuracy_vs_epoch", "plot_final_accuracy", "plot_accuracy_vs_steps"]


def _models(rows: Sequence[Mapping]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in rows))


def _one_seed_each(rows: Sequence[Mapping]) -> bool:
    """True when no model has two runs: nothing to average, no spread to draw."""
    models = [r["model"] for r in rows]
    return len(models) == len(set(models))


def _footer(fig, note: str | None) -> None:
    """``note`` in small type under the axes (kept by the tight bounding box of save_figure)."""
    if note:
        fig.text(0.01, -0.02, note, ha="left", va="top", fontsize=8, color="0.25", wrap=True)


def plot_accuracy_vs_epoch(rows: Sequence[Mapping], path=None, *, histories: Mapping, note: str | None = None,
                           dpi: float = 110):
    """Test accuracy (%) per epoch: per model a thin line per seed, the mean over seeds (thick)
    and a +- std band; a model with one seed is one line (its seed's). ``histories``:
    ``{(model, seed): metrics rows}`` (:func:`seq2d.lab.mnist_comparison.epoch_histories` reads them
    from the rows' run folders); ``note``: the footer (see the module docstring)."""
    path = _check_path(path)
    hist = histories
    fig, ax = new_figure((7, 4.2))
    xs_all = []
    for k, model in enumerate(_models(rows)):
        color = f"C{k}"
        seeds = [r["seed"] for r in rows if r["model"] == model]
        by_epoch: dict[float, list[float]] = {}
        for seed in seeds:
            h = [e for e in hist.get((model, seed), []) if e.get("test_acc") is not None]
            x, y = [e["epoch"] for e in h], [100 * e["test_acc"] for e in h]
            xs_all += x
            if len(seeds) > 1:  # one seed: its line is the thick one below
                ax.plot(x, y, color=color, alpha=0.35, lw=0.9, marker="o" if len(x) < 30 else None, ms=2.5)
            for xe, ye in zip(x, y):
                by_epoch.setdefault(xe, []).append(ye)
        if not by_epoch:
            continue
        ep = sorted(by_epoch)
        mean = [statistics.fmean(by_epoch[e]) for e in ep]
        ax.plot(ep, mean, color=color, lw=2.2, marker="o" if len(ep) < 30 else None, ms=4,
                label=f"{model} (mean of {len(seeds)} seeds)" if len(seeds) > 1 else f"{model} (seed {seeds[0]})")
        band = [(e, m, statistics.stdev(by_epoch[e])) for e, m in zip(ep, mean) if len(by_epoch[e]) > 1]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] - b[2] for b in band], [b[1] + b[2] for b in band],
                            color=color, alpha=0.15, lw=0)
    if xs_all:
        ax.set_xlim(0.5 if min(xs_all) >= 1 else 0, max(xs_all) + 0.5)
    integer_ticks(ax.xaxis)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("MNIST test accuracy per epoch\n" + ("(one seed per model: one line each)" if _one_seed_each(rows) else
                                                       "(thin: each seed; thick: mean over seeds; band: +- std)"))
    ax.grid(alpha=0.3)
    ax.margins(y=0.08)
    if ax.get_legend_handles_labels()[0]:  # outside the axes: it never hides a curve
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _footer(fig, note)
    save_figure(fig, path, dpi)
    return fig


def plot_final_accuracy(rows: Sequence[Mapping], path=None, *, note: str | None = None, dpi: float = 110):
    """Final test accuracy (%) per model: a dot per seed, the mean +- std as a diamond (only for
    a model with two seeds or more); ``note``: the footer (see the module docstring)."""
    path = _check_path(path)
    fig, ax = new_figure((6, 4))
    models = _models(rows)
    for k, model in enumerate(models):
        accs = [100 * r["test_acc"] for r in rows if r["model"] == model and r.get("test_acc") is not None]
        if not accs:
            continue
        ax.scatter([k] * len(accs), accs, color=f"C{k}", alpha=0.7, zorder=3)
        if len(accs) > 1:
            ax.errorbar([k + 0.15], [statistics.fmean(accs)], yerr=[statistics.stdev(accs)], fmt="D", color="k",
                        capsize=5, zorder=4)
    ax.set_xticks(range(len(models)), models)
    ax.set_xlim(-0.5, len(models) - 0.5)
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("final accuracy per model" + (" (one seed each: a dot per model)" if _one_seed_each(rows) else
                                               " (dots: seeds; diamond: mean +- std)"))
    ax.grid(alpha=0.3, axis="y")
    _footer(fig, note)
    save_figure(fig, path, dpi)
    return fig


def _steps(row: Mapping):
    """A run row's Sequential2D steps (``model_steps``; ``iterations`` in rows written before the
    rename); the row's ``updates`` (``steps`` in rows written before issue 36) is the optimizer's count."""
    return row.get("model_steps", row.get("iterations"))


def plot_accuracy_vs_steps(rows: Sequence[Mapping], path=None, *, label: str = "randomized model (element)",
                                dpi: float = 110):
    """Final test accuracy (%) against the model's steps (one dot per run, the mean per count as a line)."""
    path = _check_path(path)
    fig, ax = new_figure((6, 4))
    its = sorted({_steps(r) for r in rows if _steps(r) is not None and r.get("test_acc") is not None})
    means = []
    for it in its:
        accs = [100 * r["test_acc"] for r in rows if _steps(r) == it and r.get("test_acc") is not None]
        ax.scatter([it] * len(accs), accs, color="C1", alpha=0.7)
        means.append(statistics.fmean(accs))
    if its:
        ax.plot(its, means, color="C1", marker="D", label=label)
        ax.set_xlim(min(its) - 0.5, max(its) + 0.5)
        ax.legend()
    integer_ticks(ax.xaxis)
    ax.set_xlabel("Sequential2D steps per forward")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("randomized model: accuracy vs number of steps")
    ax.grid(alpha=0.3)
    save_figure(fig, path, dpi)
    return fig

