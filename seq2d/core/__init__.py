"""The Sequential2D machinery, one idea per file (docs/concepts.md, "Where things live"):
``sequential2d`` the module; ``state`` the state and its flat form; ``step`` the compiled step;
``sequence`` sequence mode; ``options`` the fast paths' switches; ``parameters`` initialisation and
counts; ``slot_bias`` the bias vector; ``checks`` the argument checks;
``topology`` depth, levels, distances and components; ``reference`` the docstring loop."""

from .sequential2d import Sequential2D, block_kind, core_of

__all__ = ["Sequential2D", "block_kind", "core_of"]
