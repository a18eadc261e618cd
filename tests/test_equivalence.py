"""Every constructor vs its torch.nn reference with copied weights: outputs and gradients.

Tolerance: max abs error <= 1e-5 (float32) and <= 1e-10 (float64). The case table lives
in seq2d.equivalence so experiments/equivalence.py reports the same numbers.
"""

import pytest
import torch

from seq2d.equivalence import CASES, TOLERANCE, compare


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_torch(case, dtype, seed):
    err = compare(case, dtype, seed)
    tol = TOLERANCE[dtype]
    assert err["output"] <= tol, err
    assert err["grad_input"] <= tol, err
    assert err["grad_params"] <= tol, err
