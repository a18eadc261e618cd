import os
import shutil
import subprocess
import tarfile
from pathlib import Path

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
def committed_tree(tmp_path) -> Path:
    """The committed tree (HEAD) unpacked into ``tmp_path/repo``: what a clean checkout holds (a page
    that regenerates there needs nothing uncommitted). Skips outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tar = tmp_path / "head.tar"
    subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "-o", str(tar), "HEAD"], check=True)
    repo = tmp_path / "repo"
    with tarfile.open(tar) as t:
        t.extractall(repo, filter="data")
    return repo
