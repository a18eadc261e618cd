r"""``python -m seq2d.train`` (one process) or, data-parallel,

    torchrun --standalone --nproc_per_node=2 -m seq2d.train --config run.toml --epochs 3

The parser and the command are ``seq2d train``'s (:mod:`seq2d.train.command`, the one training
entry point): the same flags, defaults and output.
"""

from __future__ import annotations

from .command import build_parser, main

__all__ = ["build_parser", "main"]


if __name__ == "__main__":
    raise SystemExit(main())
