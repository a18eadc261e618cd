"""Smoke tests of benchmarks/model_step.py (issue 9): the JSON it writes, not its timings."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "model_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_model_step", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, *flags):
    mod = _load()
    out = tmp_path / "model_step.json"
    threads = torch.get_num_threads()
    assert mod.main(["--quick", "--json", str(out), *flags]) == 0
    assert torch.get_num_threads() == threads  # restored
    return mod, json.loads(out.read_text())


def _busy_children() -> list[int]:
    """Our child processes running the contender's busy loop (there must be none after main)."""
    me, found = os.getpid(), []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"while True" in cmd:
            found.append(int(d.name))
    return found


def _positive_ms(row):
    assert row["status"] == "ok", row
    assert row["median_ms"] > 0 and all(t > 0 for t in row["times_ms"])


def test_quick_writes_every_row(tmp_path, capsys):
    mod, res = _run(tmp_path)
    env = res["environment"]
    for key in ("date", "command", "torch", "cpu", "threads", "uptime_start", "loadavg_start", "seeds", "wall_s"):
        assert key in env, key
    assert env["torch"] == torch.__version__
    assert res["modes"] == ["quiet"]
    grid = res["grid"]
    assert sorted((r["threads"], r["n"], r["density"]) for r in grid) == [
        (1, n, d) for n in (4, 16) for d in (0.1, 0.25)]
    for r in grid:
        assert r["blocks"] == round(r["density"] * r["n"] ** 2)
        assert r["S"] * r["n"] == res["config"]["N"] == 256
        assert 0 < r["tile_density"] <= 1 and r["stored_tiles"] > 0
        assert r["check_max_abs_err"] < 1e-4
        quiet = r["modes"]["quiet"]
        assert set(quiet["rows"]) == set(mod.IMPLS)
        for name in mod.IMPLS:
            _positive_ms(quiet["rows"][name])
        for key in ("default/dense", "default/masked_dense", "tiled/kernel", "tiled/ideal", "kernel/ideal"):
            assert quiet["ratios"][key] > 0, key
        for key in ("tiled-loss/kernel", "default-loss/masked_dense"):  # net of the loss (noisy at this size)
            assert isinstance(quiet["ratios"][key], float), key
    nodes = res["autograd_nodes"]
    assert len(nodes) == 4
    for r in nodes:
        for which in ("default", "tiled"):
            c = r[which]
            assert c["loss"] >= c["step"] >= c["ops"] > 0
    for key in ("sequence", "transformer"):
        rows = res[key]["modes"]["quiet"]["rows"]
        assert len(rows) == 2 and "seq2d" in rows
        for row in rows.values():
            _positive_ms(row)
        assert res[key]["modes"]["quiet"]["ratio"] > 0
        assert res[key]["max_abs_err"] < 1e-4
    assert any(t["target"].startswith("tiled <= 1.2x kernel") for t in res["targets"])
    text = capsys.readouterr().out
    assert "autograd nodes per step" in text and "sequence mode" in text and "targets" in text


@pytest.mark.slow
def test_quick_contend_both(tmp_path):
    _, res = _run(tmp_path, "--contend", "both", "--slots", "4", "--densities", "0.25",
                  "--sections", "grid", "sequence")
    assert _busy_children() == []  # the competing process is gone
    assert res["modes"] == ["quiet", "contended"]
    (r,) = res["grid"]
    for m in ("quiet", "contended"):
        for row in r["modes"][m]["rows"].values():
            _positive_ms(row)
    c = r["contention"]
    for key in ("default", "tiled", "kernel", "dense", "masked_dense", "default/dense", "tiled/dense"):
        assert c[key] > 0, key
    assert res["sequence"]["contention"]["seq2d/nn.RNN"] > 0
    assert "transformer" not in res


@pytest.mark.slow
def test_budget_skips_and_probes(tmp_path, capsys):
    # a budget no call can meet: the library paths are probed in a child and skipped, the
    # others are skipped after their first call, and the larger density inherits the skips
    # (--probe-ready-s: on a loaded machine the child's import alone took over the default 37 s,
    # and a probe that is not ready says nothing)
    _, res = _run(tmp_path, "--budget-s", "1e-9", "--probe", "always", "--probe-ready-s", "600", "--slots", "16",
                  "--densities", "0.1", "0.25", "--sections", "grid")
    first, second = sorted(res["grid"], key=lambda r: r["density"])
    assert set(first["probes"]) == {"default", "tiled"}
    assert not any(p["fits"] for p in first["probes"].values())
    for r in (first, second):
        for row in r["modes"]["quiet"]["rows"].values():
            assert row["status"] == "skipped" and row["reason"].startswith(">"), row
    assert "n=16 d=0.1" in second["modes"]["quiet"]["rows"]["dense"]["note"]
    assert "skipped (>" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_compile_rows_and_costs(tmp_path, capsys):
    """--compile (issue 35): the compiled library paths are timed beside the eager ones, each compiled
    once per setting (no recompilation while timing), with a cold and a warm first call; the
    compiler's cache directory of the caller is left as it was. aot_eager: no code generation."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    _, res = _run(tmp_path, "--compile", "aot_eager", "--probe-ready-s", "600", "--slots", "4", "--densities", "0.25",
                  "--sections", "grid")  # --probe-ready-s: a loaded machine's child may take long to import
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before
    assert res["config"]["compile"] == "aot_eager" and res["compile"]["process_warmup_s"] > 0
    (r,) = res["grid"]
    quiet = r["modes"]["quiet"]
    for name in ("default", "tiled", "default_compiled", "tiled_compiled"):
        _positive_ms(quiet["rows"][name])
    for base in ("default", "tiled"):
        assert quiet["ratios"][f"{base}_compiled/{base}"] > 0
        c = r["compile"][base]
        assert c["backend"] == "aot_eager" and c["graphs"] == 1, c
        assert c["cold_s"] > 0 and c["warm_s"] > 0, c  # the warm call ran in a child process
        assert "cache_dir" not in c  # a temporary directory, gone
    assert r["compile_graphs_timing"] == 0  # nothing recompiled while timing
    assert "compiled (aot_eager): default" in capsys.readouterr().out
    # the docs' table, from the JSON
    spec = importlib.util.spec_from_file_location("report_model_step", ROOT / "benchmarks" / "report_model_step.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    report.main(["--compiled", str(tmp_path / "model_step.json")])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 | 4 x 64 |")]
    assert len(table) == 1
    cells = [c.strip() for c in table[0].strip("|").split("|")]
    assert float(cells[4]) == pytest.approx(quiet["rows"]["default"]["median_ms"], abs=0.06)
    assert float(cells[8]) == pytest.approx(quiet["rows"]["tiled_compiled"]["median_ms"], abs=0.06)
    assert cells[12] == "0"


def test_compile_needs_one_thread_count(tmp_path):
    with pytest.raises(SystemExit):
        _load().main(["--quick", "--compile", "--threads", "1", "2", "--json", str(tmp_path / "x.json")])
