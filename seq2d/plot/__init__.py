"""Pictures of a Sequential2D: the block graph (:func:`draw_graph`) and the mask of its
linear part (:func:`spy`).

Both accept a :class:`~seq2d.Sequential2D` or a wrapper with a ``.core`` (RNN,
TruncatedRNN, transformer layers), draw into ``ax`` when given (else into a new figure),
save to ``path`` when given (``.png`` or ``.svg``) and return the Figure.

New figures are plain :class:`matplotlib.figure.Figure` objects on the Agg canvas, never
registered with ``pyplot``: nothing needs closing, no window opens, and the global
matplotlib backend is left alone. A figure the caller passed in (through ``ax``) is only
drawn into and saved, never closed.

Reading the pictures:

- **graph**: one node per slot, one arrow ``j -> i`` per block ``F[i][j]``. Columns are
  the depth (longest path from the held slots); a held input slot is drawn one column
  before its first reader (so the inputs of a truncated RNN line up with their time
  steps). A recurrent core (a strongly connected component) occupies consecutive columns
  (shortest distance from the inputs inside it), later slots follow it, and its edges
  that point back or stay in a column, self-loops included, are red and curved. Edges that
  skip columns arc above. Node area grows with the slot size (log scale by default),
  colour = role; edge width grows with the block's trainable parameters (log scale), style =
  kind (linear solid, identity dashed, module dotted), tied blocks share a colour.
- **spy**: the ``N x N`` matrix of the linear blocks, rows = outputs at the top. A dark
  entry is *stored* (trainable, or frozen and non-zero: the support of
  ``model.linear_weight()``, counting entries whose current value happens to be zero);
  identity blocks are green diagonals, module blocks hatched rectangles, each non-empty
  block is labelled with its density in a band above its block row (never over the
  entries; a label that would overlap its neighbour is left out). A slot narrower than
  ``min_slot`` (4%) of the side is drawn that wide, its entries as wider cells; the axes
  name the true sizes. Above ``N = 2000`` the mask is block-max pooled to at most
  ``max_size x max_size`` pixels.

For a paper: ``style="paper"`` (``seq2d draw --style paper``) sets fonts 1.4x, a 0.02 in
margin and no generated title; ``slot_labels=["x", "h", "y"]`` (``--slot-labels x,h,y``)
names the slots. :func:`integer_ticks` keeps an epoch or iteration axis on whole numbers.

The package: :mod:`.graph_plot` (:func:`draw_graph`), :mod:`.spy_plot` (:func:`spy`,
:func:`spy_image`), :mod:`.layout` (:func:`graph_layout`) and :mod:`.common` (path check,
figures, saving, number formats). Importing it imports matplotlib; ``import seq2d`` does not.
"""

from __future__ import annotations

from .graph_plot import draw_graph
from .layout import graph_layout
from .spy_plot import SPY_DOWNSAMPLE_ABOVE, spy, spy_image
from .common import SAVE_FORMATS, STYLES, PlotStyle, integer_ticks

# every other name of the former single module seq2d/plot.py, importable from seq2d.plot as before
from .common import _check_path, _fmt_count, _model_name, _pct  # noqa: F401
from .graph_plot import (KIND_STYLE, RECURRENT_COLOR, ROLE_COLORS, TIE_COLORS, _blocked,  # noqa: F401
                         _radii, _self_loop)
from .layout import ROW_GAP, _columns, _pav, _place_column  # noqa: F401
from .spy_plot import (_CHUNK, FROZEN_COLOR, IDENTITY_COLOR, MODULE_COLOR, SPY_COLOR, _alpha_cmap,  # noqa: F401
                       _pool_into, _slot_ticks, _spy_data, _spy_tiles, _tie_keys)

__all__ = ["draw_graph", "spy", "graph_layout", "spy_image", "SAVE_FORMATS", "SPY_DOWNSAMPLE_ABOVE", "STYLES", "PlotStyle",
           "integer_ticks"]
