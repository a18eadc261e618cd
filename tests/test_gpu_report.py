"""The GPU section of docs/performance.md and the CUDA dense crossovers come from the committed
JSON of the GPU session (benchmarks/gpu/report.py): nothing in them is typed by hand."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from seq2d.sparse import DENSE_CROSSOVER, dense_crossover

ROOT = Path(__file__).resolve().parents[1]
DATE = "2026-11-26"


def _report():
    spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "benchmarks" / "gpu" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cuda_crossovers_are_the_measured_ones():
    report = _report()
    text, cross = report.render(DATE)
    for tile, value in cross.items():
        assert value is not None, f"tile {tile}: no crossover in the bf16 table"
        assert DENSE_CROSSOVER[("cuda", "16-bit", tile)] == round(value, 2), tile
    import json

    tf32 = json.loads(report.files(DATE)["tf32"].read_text())
    assert DENSE_CROSSOVER[("cuda", "float32", 64)] == round(report.crossover(tf32["cases"], 64), 2)


def test_the_page_section_is_regenerated_from_the_json():
    text, _ = _report().render(DATE)
    page = (ROOT / "docs" / "performance.md").read_text()
    m = re.search(r"<!-- gpu:begin -->\n(.*?)\n<!-- gpu:end -->", page, flags=re.S)
    assert m, "docs/performance.md has no generated 'gpu' section"
    assert m.group(1) == text.strip("\n"), "rerun: python benchmarks/gpu/report.py --date 2026-11-26 --doc docs/performance.md"


def test_crossover_interpolates_and_says_when_it_was_not_measured():
    report = _report()

    def case(d, fast, slow, tile=64):
        return {"tile": tile, "density_actual": d, "rows": {"a": {"status": "ok", "median_ms": fast},
                                                             "b": {"status": "ok", "median_ms": slow}}}

    cases = [case(0.1, 1.0, 2.0), case(0.5, 3.0, 2.0)]  # ratio 0.5 -> 1.5: crosses 1 at 0.3
    assert report.crossover(cases, 64, "a", "b") == pytest.approx(0.3)
    assert report.crossover([case(0.1, 1.0, 2.0)], 64, "a", "b") is None  # never overtaken
    assert report.crossover([case(0.1, 3.0, 2.0)], 64, "a", "b") == 0.0
    assert report.crossover(cases, 128, "a", "b") is None  # tile not measured


@pytest.mark.parametrize("dtype,tile,expected", [
    (torch.bfloat16, 64, ("cuda", "16-bit", 64)), (torch.float16, 128, ("cuda", "16-bit", 128)),
    (torch.bfloat16, 16, ("cuda", "16-bit", 32)),  # nearest measured tile
    (torch.float32, 64, ("cuda", "float32", 64)), (torch.float32, 128, ("cuda", "float32", 64)),
    (torch.bfloat16, None, ("cuda", "16-bit", 32)),
])
def test_dense_crossover_lookup(dtype, tile, expected):
    assert dense_crossover("cuda", dtype, tile) == DENSE_CROSSOVER[expected]


def test_dense_crossover_cpu_is_never():
    assert dense_crossover("cpu", torch.float32, 64) == float("inf")
    assert dense_crossover("cpu", torch.bfloat16, None) == float("inf")


PROBE = ROOT / "benchmarks" / "results" / "gpu-2026-11-29"


def test_the_probe_section_is_regenerated_from_the_files():
    text = _report().render_probe(PROBE)
    page = (ROOT / "docs" / "performance.md").read_text()
    assert f"<!-- gpu-probe:begin -->\n{text.strip()}\n<!-- gpu-probe:end -->" in page


def test_the_probe_targets_can_come_out_either_way():
    """Each verdict follows the numbers: the same file with the passes made 10% slower or faster
    flips the targets that sit near their line (0.85 of cuBLAS at density 1: 0.89-0.93)."""
    import copy
    import json

    report = _report()
    probe = json.loads((PROBE / "kernel_probe-cuda.json").read_text())
    lines = report.probe_targets(probe)
    assert any("of cuBLAS" in x and x.endswith("**met**.") for x in lines)
    assert any("of ideal" in x and x.endswith("**missed**.") for x in lines)
    slow = copy.deepcopy(probe)
    for p in slow["passes"]:
        p["device_ms"] *= 1.1
    assert any("of cuBLAS" in x and x.endswith("**missed**.") for x in report.probe_targets(slow))
    fast = copy.deepcopy(probe)
    for p in fast["passes"]:
        p["device_ms"] *= 0.9
    assert any("of ideal" in x and x.endswith("**met**.") for x in report.probe_targets(fast))
    for s in fast["model_step"]:
        s["graph_ms"] = s["kernel_graph_ms"] * 1.1
    assert any("model step" in x and x.endswith("**met**.") for x in report.probe_targets(fast))


def test_the_step_ops_section_is_regenerated_from_its_json():
    import json

    spec = importlib.util.spec_from_file_location("step_ops", ROOT / "benchmarks" / "gpu" / "step_ops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    record = json.loads((ROOT / "benchmarks" / "results" / "step_ops-cpu-2026-11-29.json").read_text())
    page = (ROOT / "docs" / "performance.md").read_text()
    assert f"<!-- gpu-step-ops:begin -->\n{mod.report(record).strip()}\n<!-- gpu-step-ops:end -->" in page
    steps = record["steps"]
    # the counts hold together: the probe's step is at least its loss plus the flat step's model work
    assert steps["probe step"]["kernels"] >= steps["loss alone"]["kernels"] + steps["kernel"]["kernels"]
    assert steps["kernel"]["ops"].get("bsmm") == 1 and steps["flat step"]["ops"].get("bsmm") == 1
