"""The Python blocks of a docs page, run as a reader pasting them would (tests check the code the
docs show: tests/test_docs.py, and the recipes of docs/training.md in test_compile.py and test_cuda.py)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_blocks(page: str, heading: str) -> list[str]:
    """The ```python blocks of the section of ``docs/<page>`` that starts at ``heading`` (to the next ``## ``)."""
    text = (ROOT / "docs" / page).read_text()
    assert heading in text, (page, heading)
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)


def run_blocks(page: str, heading: str, blocks: list[str]) -> dict:
    """Run the blocks in order in one namespace, as a reader pasting them would; the namespace."""
    ns: dict = {}
    for k, code in enumerate(blocks, 1):
        exec(compile(code, f"docs/{page} '{heading}' block {k}", "exec"), ns)
    return ns


GRAPH_STEPS = "## Compiled and CUDA-graph training steps"


def graph_step_recipe() -> dict:
    """docs/training.md's recipe (its first block): ``compiled_loss``, ``step_signature``, ``CapturedStep``."""
    return run_blocks("training.md", GRAPH_STEPS, python_blocks("training.md", GRAPH_STEPS)[:1])
