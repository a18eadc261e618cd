"""What "a results page regenerates from a clean checkout" means in the tests (one rule for every page).

Text files (the page, its JSON and CSV) must come out byte for byte. Pictures are compared pixel by pixel:
matplotlib transforms coordinates through numpy, which picks its float64 log/exp kernels by CPU (SIMD
variants on AVX512 machines, others on AVX2 ones: our explanation of what we saw, not traced to the kernel),
and a last-bit shift moves an anti-aliased edge pixel now and then (seen: docs/results/stability/prop2_tests.png regenerated on an AMD EPYC with AVX2
differs from the Intel AVX512 original in 2 of its 782,000 pixels, by at most 3 of 255 levels). On one
machine a picture regenerates byte for byte too; across CPUs this rule allows such edge pixels only: at
most ``MAX_FAINT`` pixels may differ at all and at most ``MAX_STRONG`` by more than ``STRONG`` levels, so a
changed label, point or line (hundreds of pixels by more than 16 levels) still fails.
"""

from __future__ import annotations

import io
from pathlib import Path

MAX_FAINT = 0.001  # fraction of the picture's pixels
STRONG = 16  # levels of 255, in any channel
MAX_STRONG = 8  # pixels


def snapshot(paths) -> dict[str, bytes]:
    """``{name: bytes}`` of ``paths`` (the page and the files next to it), read now."""
    return {Path(p).name: Path(p).read_bytes() for p in paths}


def picture_difference(a: bytes, b: bytes) -> str | None:
    """None when the two PNGs are the same picture under the rule above, else what differs."""
    import numpy as np
    from PIL import Image

    x, y = (np.asarray(Image.open(io.BytesIO(v)).convert("RGBA")).astype(int) for v in (a, b))
    if x.shape != y.shape:
        return f"size {x.shape[1]} x {x.shape[0]} became {y.shape[1]} x {y.shape[0]}"
    d = np.abs(x - y).max(axis=-1)
    faint, strong = int((d > 0).sum()), int((d > STRONG).sum())
    if faint > MAX_FAINT * d.size or strong > MAX_STRONG:
        return f"{faint} pixels differ, {strong} of them by more than {STRONG} levels (largest {int(d.max())})"
    return None


def changes(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """The files that did not regenerate: a text file not byte for byte, a picture not under the rule above,
    a file added or removed."""
    out = sorted(f"{k} (added)" for k in after.keys() - before.keys())
    out += sorted(f"{k} (removed)" for k in before.keys() - after.keys())
    for k in sorted(before.keys() & after.keys()):
        if before[k] == after[k]:
            continue
        why = picture_difference(before[k], after[k]) if k.endswith(".png") else "not byte for byte"
        if why is not None:
            out.append(f"{k} ({why})")
    return out


def regenerate(repo: Path, page: str, command: list[str]) -> list[str]:
    """Run ``python *command`` in ``repo`` (a clean checkout: conftest.py's ``committed_tree``) and return
    what did not regenerate (:func:`changes`) of ``page`` (relative to ``repo``) and the pictures in its
    folder (``docs/results/<stem>/``)."""
    import subprocess
    import sys

    doc = Path(repo) / page
    pics = doc.parent / doc.stem

    def files():
        return snapshot([doc, *sorted(pics.glob("*.png"))])

    before = files()
    env = {"PYTHONPATH": str(repo), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, *command], cwd=repo, env=env, check=True, capture_output=True)
    return changes(before, files())
