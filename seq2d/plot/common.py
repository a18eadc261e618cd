"""Shared helpers of :mod:`seq2d.plot` and of the experiments' plots: the output path check,
new figures on the Agg canvas (:func:`new_figure`), saving (:func:`save_figure`), the styles
(``"default"``, ``"paper"``), slot labels, integer ticks, and the short number formats of
titles and labels."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..errors import InvalidType, InvalidValue, MissingFile

SAVE_FORMATS = (".png", ".svg")


@dataclass(frozen=True)
class PlotStyle:
    """How a picture is dressed. ``scale`` multiplies every font size; ``pad_inches`` is the
    white margin a saved file keeps around the drawing; ``auto_title``: draw the generated
    title when the caller gives none (a paper's caption carries it instead); ``legend_pad``: the
    legend's border padding (font sizes; matplotlib's default 0.4)."""

    name: str
    scale: float
    pad_inches: float
    auto_title: bool
    legend_pad: float = 0.4

    def fs(self, size: float) -> float:
        """A font size of the default style, in this style."""
        return size * self.scale


STYLES = {
    "default": PlotStyle("default", scale=1.0, pad_inches=0.1, auto_title=True),
    # for a paper: fonts 1.4x (legible at column width), a 0.02 in margin, no generated title
    "paper": PlotStyle("paper", scale=1.4, pad_inches=0.02, auto_title=False, legend_pad=0.05),
}


def _style(style) -> PlotStyle:
    if isinstance(style, PlotStyle):
        return style
    if style not in STYLES:
        raise InvalidValue(f"Unknown style {style!r}. Select from " + " or ".join(repr(k) for k in STYLES) + ".")
    return STYLES[style]


def _slot_labels(labels, n: int) -> list[str]:
    """The label of each of the ``n`` slots: ``labels`` (a sequence of n strings) or the indices."""
    if labels is None:
        return [str(k) for k in range(n)]
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise InvalidType(f"slot_labels must be a sequence of {n} strings (one per slot), got {type(labels).__name__}")
    if len(labels) != n:
        raise InvalidValue(f"slot_labels: expected {n} labels (one per slot), got {len(labels)}: {list(labels)!r}")
    bad = [x for x in labels if not isinstance(x, str)]
    if bad:
        raise InvalidType(f"slot_labels: expected strings, got {bad[0]!r} ({type(bad[0]).__name__})")
    return list(labels)


def integer_ticks(axis) -> None:
    """Ticks at whole numbers only on ``axis`` (``ax.xaxis``): epochs, steps, k. A range
    narrower than one (a one-epoch run) gets its one integer (``min_n_ticks=1``), never 0.96 .. 1.04
    or a fallback to 0.5, 0.6, ... Used by every epoch axis (seq2d.lab.mnist_plots)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def _check_path(path, what: str = "path") -> Path | None:
    """The figure path ``path`` (``what`` names it in messages: the argument or CLI flag),
    checked before anything is drawn: a .png/.svg name, not a folder, in a folder that exists.
    Figures are never written into new folders: a typo in the folder fails here, naming it."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidType(f"{what} must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if p.suffix.lower() not in SAVE_FORMATS:
        raise InvalidValue(f"{what}: cannot save a figure as {p.suffix or 'a file without suffix'!r} ({p.name}); "
                         f"use one of {', '.join(SAVE_FORMATS)}")
    if p.is_dir():
        raise InvalidValue(f"{what}: {str(p)!r} is a folder; give a file name ending in {' or '.join(SAVE_FORMATS)}")
    parent = p.parent
    if not parent.is_dir():
        up = parent
        while not up.exists() and up != up.parent:
            up = up.parent
        if up.exists() and not up.is_dir():
            raise InvalidValue(f"{what}: cannot write {str(p)!r}: {str(up)!r} is a file, not a folder")
        raise MissingFile(f"{what}: cannot write {str(p)!r}: the folder {str(parent)!r} does not exist "
                          "(create it first; figures are not written into new folders)")
    return p


def new_figure(figsize, ncols: int = 1) -> tuple[Figure, object]:
    """A new Figure on the Agg canvas (no screen, never registered with pyplot: nothing to
    close, the global backend left alone) and its axes: one, or ``ncols`` side by side."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, (fig.add_subplot(1, 1, 1) if ncols == 1 else fig.subplots(1, ncols))


def save_figure(fig: Figure, path: Path | None, dpi: float, style: PlotStyle = STYLES["default"]) -> None:
    """``fig`` written to ``path`` (nothing when None) as every seq2d picture is: the drawing's
    tight bounding box, ``style``'s margin, a white background. Check a user's path first
    (:func:`_check_path`); a failed write is an InvalidValue naming the file."""
    if path is not None:
        try:
            fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=style.pad_inches, facecolor="white")
        except OSError as e:  # checked by _check_path; what remains: permissions, a full disk, a race
            raise InvalidValue(f"cannot write the figure {str(path)!r}: {e.strerror or e}") from e


def _model_name(model) -> str:
    return type(model).__name__


def _fmt_count(x: int) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return str(x)


def _pct(d: float) -> str:
    if d >= 0.995:
        return "100%"
    if d >= 0.1:
        return f"{100 * d:.0f}%"
    if d >= 0.01:
        return f"{100 * d:.1f}%"
    return f"{100 * d:.2g}%"
