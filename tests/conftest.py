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
