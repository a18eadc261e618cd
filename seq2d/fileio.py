"""One way to write a file so that a crash at any moment leaves the old file or the new one.

``atomic_write(path, data)`` writes ``data`` (text, bytes, or a function that writes to the open
binary file) to ``.<name>.tmp-<pid>`` in the same folder, optionally ``fsync``\\ s it, and renames
it over ``path`` (``os.replace``, atomic on one filesystem); on any error the temporary file is
removed. Run folders clean up temporary files of processes that died (seq2d.train.rundir)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "temp_name"]


def temp_name(path: Path) -> Path:
    """The temporary file :func:`atomic_write` uses for ``path`` in this process."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write(path: str | os.PathLike, data: str | bytes | Callable[[BinaryIO], None], *, fsync: bool = False,
                 encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring); returns the path."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode(encoding) if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
