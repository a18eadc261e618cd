"""Shared helpers of :mod:`seq2d.plot`: the output path check, new figures on the Agg
canvas, saving, and the short number formats of titles and labels."""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..errors import InvalidType, InvalidValue, MissingFile

SAVE_FORMATS = (".png", ".svg")


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


def _new_axes(figsize) -> tuple[Figure, object]:
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)  # the Agg canvas: no screen, no pyplot registry
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Figure, path: Path | None, dpi: float) -> None:
    if path is not None:
        try:
            fig.savefig(path, dpi=dpi, bbox_inches="tight", facecolor="white")
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
