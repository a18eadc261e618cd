r"""The command line of a training run: ``python -m seq2d.train`` (one process) or, data-parallel,

    torchrun --standalone --nproc_per_node=2 -m seq2d.train --config run.toml --epochs 3

Flags: ``--config``, ``--set``, one per config field (:func:`seq2d.train.config.add_config_args`),
``--resume``, ``--overwrite``, ``--allow-changed``. Errors in the config or the run directory (every
:class:`~seq2d.errors.Seq2DError`) print one line and exit with status 2.
``python -m seq2d.train.distributed`` still runs this entry.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import Seq2DError
from .config import add_config_args, config_from_args
from .identity import parse_allow_changed
from .errors import cli_terms
from .rundir import reuse_line
from .trainer import DivergenceError, run

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m seq2d.train",
        allow_abbrev=False,  # "--epoch" must not silently mean "--epochs"
        description="Train a seq2d model (one process, or several under torchrun).",
    )
    ap.add_argument("--resume", action="store_true", help="continue from <out_dir>/checkpoint.pt (exactly)")
    ap.add_argument("--overwrite", action="store_true", help="start afresh even if <out_dir> holds a checkpoint")
    ap.add_argument("--allow-changed", dest="allow_changed", metavar="FIELDS", default=None,
                    help="with --resume: let these comma-separated fields (lr, optimizer, weight_decay) differ from "
                         "the checkpoint's config (the change is recorded)")
    add_config_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Parse flags (``--config``, ``--set``, one per config field, ``--resume``) and run."""
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        allow = parse_allow_changed(args.allow_changed, where="--allow-changed")
        with cli_terms():  # the run's errors name flags (--resume), not keyword arguments
            summary = run(cfg, resume=args.resume, overwrite=args.overwrite, allow_changed=allow)
            if summary.get("reused") and cfg.quiet:  # else the trainer said it
                print(reuse_line(summary))
    except DivergenceError as e:  # every rank stops at the same step: one message is enough
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"seq2d train: error: {e}", file=sys.stderr)
        return 2
    except Seq2DError as e:
        print(f"seq2d train: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
