import os

import pytest
import torch

# Small problems: more threads only add contention on the 2-core CI machine.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


DTYPES = [torch.float32, torch.float64]


@pytest.fixture
def doc_recipe():
    """``doc_recipe(page, name)``: run the ```python block that follows ``<!-- recipe:NAME -->`` in
    ``docs/PAGE`` and return what it defines, so tests check the code a reader copies."""
    import pathlib
    import re

    def load(page: str, name: str) -> dict:
        text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / page).read_text()
        marker = f"<!-- recipe:{name} -->"
        assert text.count(marker) == 1, f"docs/{page} has {text.count(marker)} '{marker}' markers, expected 1"
        code = re.match(r"\s*```python\n(.*?)```", text.split(marker, 1)[1], re.S)
        assert code, f"no ```python block right after '{marker}' in docs/{page}"
        ns: dict = {"__name__": f"docs_{name.replace('-', '_')}"}
        exec(compile(code.group(1), f"docs/{page} ({name})", "exec"), ns)
        return ns

    return load
