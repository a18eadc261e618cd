"""tests/pages.py's rule for regenerated pages: text byte for byte, pictures up to edge pixels."""

import io

import numpy as np
from PIL import Image

from pages import MAX_STRONG, changes


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a.astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_the_rule_allows_edge_pixels_only():
    base = np.full((200, 300, 4), 255)
    base[100, 10:290, :3] = 0  # a line
    shifted = base.copy()
    shifted[100, 150, :3] = 3  # one anti-aliased edge pixel, 3 levels: what another CPU's log can do
    label = base.copy()
    label[20:30, 20:60, :3] = 0  # a changed label: 400 dark pixels
    few = base.copy()
    few[50, 50:50 + MAX_STRONG + 1, :3] = 100  # one strong pixel too many
    before = {"page.md": b"x = 1\n", "a.png": _png(base)}
    assert changes(before, {"page.md": b"x = 1\n", "a.png": _png(base)}) == []
    assert changes(before, {"page.md": b"x = 1\n", "a.png": _png(shifted)}) == []
    assert changes(before, {"page.md": b"x = 2\n", "a.png": _png(shifted)}) == ["page.md (not byte for byte)"]
    assert changes(before, {"page.md": b"x = 1\n", "a.png": _png(label)})[0].startswith("a.png (400 pixels differ")
    assert changes(before, {"page.md": b"x = 1\n", "a.png": _png(few)}) != []
    assert changes(before, {"page.md": b"x = 1\n", "a.png": _png(base[:100])})[0].startswith("a.png (size")
    assert changes(before, {"page.md": b"x = 1\n"}) == ["a.png (removed)"]
    assert changes(before, {**before, "b.png": b""}) == ["b.png (added)"]
