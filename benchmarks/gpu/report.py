"""The GPU section of docs/performance.md, rendered from the JSON files a GPU session brings back
(benchmarks/gpu/README.md, "Where the results go"); nothing is measured here.

    python benchmarks/gpu/report.py --date 2026-11-26 --doc docs/performance.md

reads ``benchmarks/results/``: ``gpu-env-DATE.json`` (env_check.py), ``blocksparse-cuda-DATE-bf16.json``
and ``-tf32.json`` (the ``kernels`` stage), ``memory-cuda-DATE.json`` and ``model_step-cuda-DATE.json``
(the ``model-step`` stage), and ``gpu-tests-DATE.json`` (the CUDA test counts, written from the
stage's JUnit file by ``--tests-xml``). It writes the page's ``gpu`` section and prints the dense
crossover per tile that ``seq2d.sparse.ops.DENSE_CROSSOVER`` takes from the bf16 table
(:func:`crossover`; ``tests/test_gpu_report.py`` checks that the constants are these numbers).

    python benchmarks/gpu/report.py --probe benchmarks/results/gpu-2026-11-29 --doc docs/performance.md

renders issue 37's session instead (``suite.sh v2-check`` and ``v2-probe``, the files as they came
back in one folder: ``env.json``, ``tests-*.xml``, ``triton_v2_tune-cuda.json``,
``kernel_probe-cuda.json``) into the page's ``gpu-probe`` section: the targets, met or missed,
computed from the probe's own ideal (stored density x cuBLAS's time for the pass), memory floor
(bytes the pass must move / the copy bandwidth it measured) and CUDA-graph timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seq2d.results_page import write_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PEERS = ("dense", "masked_dense", "torch_bsr_triton", "stk", "blksprs", "seq2d[triton]", "seq2d[dense]", "seq2d[auto]")


def files(date: str, results: Path = RESULTS) -> dict[str, Path]:
    return {"env": results / f"gpu-env-{date}.json", "bf16": results / f"blocksparse-cuda-{date}-bf16.json",
            "tf32": results / f"blocksparse-cuda-{date}-tf32.json", "memory": results / f"memory-cuda-{date}.json",
            "model_step": results / f"model_step-cuda-{date}.json", "tests": results / f"gpu-tests-{date}.json"}


def tests_from_junit(xml_path: Path) -> dict:
    """Counts of a pytest JUnit file (the ``install-and-test`` stage's ``test_cuda.xml``)."""
    suite = ET.parse(xml_path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    n["passed"] = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    n["files"] = sorted({c.get("classname", "").split(".")[1] + ".py" for c in suite.iter("testcase") if c.get("classname")})
    return n


def _ms(case: dict, impl: str) -> float | None:
    row = case["rows"].get(impl)
    return row["median_ms"] if row and row.get("status") == "ok" else None


def crossover(cases: list[dict], tile: int, fast: str = "seq2d[triton]", slow: str = "seq2d[dense]") -> float | None:
    """The stored-tile density from which ``slow`` (the dense kernel) beats ``fast`` (the
    block-sparse kernel) at ``tile``: the first pair of measured densities between which the ratio
    ``fast / slow`` crosses 1, interpolated linearly in the ratio (actual densities). None when
    ``fast`` wins at every measured density (inf would claim more than was measured), 0.0 when it
    loses at the first."""
    pts = sorted((c["density_actual"], _ms(c, fast) / _ms(c, slow)) for c in cases
                 if c["tile"] == tile and _ms(c, fast) and _ms(c, slow))
    if not pts:
        return None
    if pts[0][1] >= 1:
        return 0.0
    for (d0, r0), (d1, r1) in zip(pts, pts[1:]):
        if r1 >= 1 > r0:
            return d0 + (1 - r0) * (d1 - d0) / (r1 - r0)
    return None


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def kernel_table(data: dict, tile: int, impls=PEERS) -> str:
    cases = sorted((c for c in data["cases"] if c["tile"] == tile), key=lambda c: c["density"])
    dens = [c["density"] for c in cases]
    shown = [i for i in impls if any(_ms(c, i) for c in cases)]
    head = "| implementation | " + " | ".join(f"{d:g}" for d in dens) + " |"
    lines = [head, "| --- |" + " ---: |" * len(dens)]
    for impl in shown:
        cells = [_fmt(_ms(c, impl)) for c in cases]
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    # the ratios the kernel issue asks about
    for name, other in (("dense / seq2d[triton]", "dense"), ("stk / seq2d[triton]", "stk"),
                        ("blksprs / seq2d[triton]", "blksprs"), ("torch BSR / seq2d[triton]", "torch_bsr_triton")):
        if other not in shown:
            continue
        got = {(t, d): r for t, d, r in _ratios(cases, other)}
        cells = [_fmt(got.get((c["tile"], c["density"]))) for c in cases]
        lines.append(f"| *{name}* | " + " | ".join(cells) + " |")
    cells = [_fmt(c["rows"]["seq2d[triton]"].get("x_ideal")) if "seq2d[triton]" in c["rows"] else "n/a" for c in cases]
    lines.append("| *seq2d[triton] / ideal* | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pass_table(data: dict, tile: int) -> str:
    """Forward, dX and dW of seq2d[triton] against cuBLAS, TFLOP/s of useful work."""
    cases = sorted((c for c in data["cases"] if c["tile"] == tile and "seq2d[triton]:fwd" in c["rows"]),
                   key=lambda c: c["density"])
    lines = ["| density | " + " | ".join(f"{p} ms (useful TFLOP/s)" for p in ("fwd", "dX", "dW")) + " | cuBLAS fwd ms (useful TFLOP/s) |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for c in cases:
        cells = []
        for p in ("fwd", "dX", "dW"):
            r = c["rows"][f"seq2d[triton]:{p}"]
            cells.append(f"{r['median_ms']:.2f} ({r['gflops'] / 1e3:.0f})")
        r = c["rows"].get("dense:fwd", {})
        dense = f"{r['median_ms']:.2f} ({r['gflops'] / 1e3:.0f})" if r.get("median_ms") else "n/a"
        lines.append(f"| {c['density']:g} | " + " | ".join(cells) + f" | {dense} |")
    return "\n".join(lines)


def _ratios(cases: list[dict], num: str, den: str = "seq2d[triton]", tile: int | None = None) -> list[tuple]:
    """(tile, density, num time / den time) of every case where both ran."""
    return [(c["tile"], c["density"], _ms(c, num) / _ms(c, den)) for c in cases
            if (tile is None or c["tile"] == tile) and _ms(c, num) and _ms(c, den)]


def _ratio_range(cases: list[dict], num: str, den: str = "seq2d[triton]", tile: int | None = None) -> str:
    rs = [r for _, _, r in _ratios(cases, num, den, tile)]
    return f"{min(rs):.2f}x to {max(rs):.2f}x" if rs else "n/a"


def summary(data: dict, cross: dict[int, float | None]) -> str:
    """The findings of the bf16 kernel table, each computed from it."""
    cases, tiles = data["cases"], sorted({c["tile"] for c in data["cases"]}, reverse=True)
    beats = {t: crossover(cases, t, fast="seq2d[triton]", slow="dense") for t in tiles}
    ideal1 = {t: next((c["rows"]["seq2d[triton]"]["x_ideal"] for c in cases if c["tile"] == t and c["density"] == 1.0
                       and "seq2d[triton]" in c["rows"]), None) for t in tiles}
    out = [f"- seq2d[triton] against stanford-stk (tile 128 only): stk takes {_ratio_range(cases, 'stk', tile=128)} "
           "seq2d's time over the densities (above 1: seq2d faster).",
           f"- Against blksprs: {_ratio_range(cases, 'blksprs')}; against torch's Triton BSR kernels: "
           f"{_ratio_range(cases, 'torch_bsr_triton')} (all tiles and densities).",
           "- Against cuBLAS on the dense matrix: seq2d[triton] is faster below a stored density of "
           + ", ".join(f"{_fmt(beats[t])} (tile {t})" for t in tiles) + ".",
           "- Distance from ideal (dense time x stored density) at density 1: "
           + ", ".join(f"{_fmt(ideal1[t])}x (tile {t})" for t in tiles)
           + "; the per-pass table shows where the tile-128 time goes.",
           "- seq2d's dense kernel overtakes its Triton kernel from a stored density of "
           + ", ".join(f"{_fmt(cross[t])} (tile {t})" for t in tiles) + "."]
    return "\n".join(out)


def targets(bf16: dict, mem: dict, step: dict) -> str:
    """Issue 13's targets, met or missed, each computed from the JSON."""
    cases = bf16["cases"]

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    out = []
    for t in (64, 128):
        c = next((c for c in cases if c["tile"] == t and c["density"] == 0.25), None)
        if c and "seq2d[triton]" in c["rows"]:
            x = c["rows"]["seq2d[triton]"]["x_ideal"]
            out.append(f"- >= 0.85 of ideal at density 0.25, tile {t}: {1 / x:.2f} of ideal ({x:.2f}x the ideal time): {verdict(1 / x >= 0.85)}.")
    for peer in ("stk", "blksprs"):
        rs = _ratios(cases, peer)
        if rs:
            slower = [f"tile {t}, density {d:g} ({r:.2f})" for t, d, r in rs if r < 1]
            out.append(f"- Faster than {peer} at every density it supports ({len(rs)} cases): {verdict(not slower)}"
                       + (f"; {peer} is faster at {', '.join(slower)}." if slower else "."))
    k = mem["kernel"]
    out.append(f"- N = 131,072 at density 0.01, forward + backward, fits on one GPU: {verdict(k['peak_gib'] < mem['environment']['gpu_total_gib'])} "
               f"(peak {k['peak_gib']:.2f} GiB of {mem['environment']['gpu_total_gib']:.0f}); masked dense would hold a "
               f"{k['dense_weight_gib']:.0f} GiB weight and an equal mask before any gradient (not run).")
    nets = [(s["n"], s["batch"], (s["rows"]["tiled"]["median_ms"] - s["rows"]["loss"]["median_ms"]) / s["rows"]["kernel"]["median_ms"],
             s["rows"]["tiled"]["median_ms"] / s["rows"]["kernel"]["median_ms"]) for s in step["settings"]
            if all(s["rows"].get(k, {}).get("median_ms") for k in ("tiled", "loss", "kernel"))]
    if nets:
        worst = max(nets, key=lambda r: r[2])
        out.append(f"- Model step <= 1.2x kernel-only: {verdict(max(r[2] for r in nets) <= 1.2)}: the tiled model's step "
                   f"less the benchmark's own loss is {min(r[2] for r in nets):.2f}x to {worst[2]:.2f}x the kernel alone "
                   f"(worst at n = {worst[0]}, batch {worst[1]}), {min(r[3] for r in nets):.2f}x to {max(r[3] for r in nets):.2f}x "
                   "with the loss. Neither CUDA graphs nor torch.compile were tried.")
    return "\n".join(out)


def model_step_table(data: dict) -> str:
    lines = ["| batch | slots n | block density | stored tiles | default | tiled | kernel | dense | masked dense | loss alone | (tiled - loss) / kernel | check |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in data["settings"]:
        r = {k: v.get("median_ms") for k, v in s["rows"].items()}
        net = (r["tiled"] - r["loss"]) / r["kernel"] if r.get("tiled") and r.get("loss") and r.get("kernel") else None
        lines.append(f"| {s['batch']} | {s['n']} | {s['density']:g} | {s['stored_tiles']} | "
                     + " | ".join(_fmt(r.get(k)) for k in ("default", "tiled", "kernel", "dense", "masked_dense", "loss"))
                     + f" | {_fmt(net)} | {s['check_rel']:.1e} |")
    return "\n".join(lines)


def render(date: str, results: Path = RESULTS) -> tuple[str, dict[int, float | None]]:
    f = files(date, results)
    env = json.loads(f["env"].read_text())
    bf16 = json.loads(f["bf16"].read_text())
    tf32 = json.loads(f["tf32"].read_text())
    mem = json.loads(f["memory"].read_text())
    step = json.loads(f["model_step"].read_text())
    tests = json.loads(f["tests"].read_text()) if f["tests"].is_file() else None
    ceil = env.get("ceilings", {})
    tiles = sorted({c["tile"] for c in bf16["cases"]}, reverse=True)
    cross = {t: crossover(bf16["cases"], t) for t in tiles}
    cross_tf32 = {t: crossover(tf32["cases"], t) for t in sorted({c["tile"] for c in tf32["cases"]})}
    out = [f"Generated by `python benchmarks/gpu/report.py --date {date} --doc docs/performance.md` from the JSON files "
           f"named below (benchmarks/results/); measured by `benchmarks/gpu/suite.sh` (stages install-and-test, kernels, "
           f"model-step) on one **{env['gpu']}** ({env['sm_count']} SMs, {env['memory_gib']:.0f} GiB, L2 {env['l2_mib']:.0f} MiB), "
           f"torch {env['torch']}, CUDA {env['cuda']}, triton {env['triton']}, cuDNN {env.get('cudnn')}, "
           f"driver {env.get('driver') or 'not recorded in env.json'}, {date}. "
           "One session, one machine: every ratio below compares implementations timed in the same run.", ""]
    if ceil:
        out += [f"Ceilings measured first (`env_check.py`, `gpu-env-{date}.json`): device-to-device copy "
                f"{ceil['copy_TBps_read_plus_write']:.2f} TB/s (read + write); 8192^3 GEMM "
                f"{ceil['gemm_bf16_TFLOPs']:.0f} TFLOP/s bf16, {ceil['gemm_fp16_TFLOPs']:.0f} fp16, "
                f"{ceil['gemm_tf32_TFLOPs']:.0f} tf32, {ceil['gemm_fp32_TFLOPs']:.0f} fp32.", ""]
    if tests:
        out += [f"**CUDA tests** ({', '.join(tests['files'])}; `gpu-tests-{date}.json`): {tests['passed']} passed, "
                f"{tests['failures']} failed, {tests['errors']} errors, {tests['skipped']} skipped.", ""]
    out += ["Issue 13's targets:", "", targets(bf16, mem, step), "",
            "Findings (bf16 table below, forward + dX + dW):", "", summary(bf16, cross), ""]
    e = bf16["environment"]
    out += [f"#### Kernels: bf16, N = {bf16['cases'][0]['N']}, batch {bf16['cases'][0]['batch']}, forward + dX + dW",
            "",
            f"`blocksparse-cuda-{date}-bf16.json`; command: `{e['command']}`. Milliseconds, median of {e['repeats']} "
            f"after {e['warmup']} warm-up; columns are the requested tile densities (the stored density of each "
            "random mask is in the JSON). Ratios > 1 mean seq2d's Triton kernel is faster. "
            f"`seq2d[auto]` shows what `kernel='auto'` picked at that density with the crossover then in the code "
            f"({json.dumps(e.get('dense_crossover'))}).", ""]
    for t in tiles:
        out += [f"Tile {t}:", "", kernel_table(bf16, t), ""]
    out += ["Where seq2d's dense kernel (W materialised from the tiles, then cuBLAS) overtakes its Triton kernel, "
            "forward + backward, by stored-tile density (interpolated between the measured densities; "
            "`crossover()` in this script): "
            + ", ".join(f"tile {t}: {_fmt(cross[t])}" for t in tiles)
            + ". `DENSE_CROSSOVER['cuda']` in `seq2d/sparse/ops.py` holds these for bf16/fp16.", ""]
    for t in tiles[:1]:
        out += [f"Per pass, tile {t} (seq2d[triton] against cuBLAS's forward; useful work counts the stored tiles "
                "only, so cuBLAS's rate is its real rate times the density):", "", pass_table(bf16, t), ""]
    e = tf32["environment"]
    out += [f"#### Kernels: float32 with tf32 dots, tile {', '.join(str(t) for t in cross_tf32)}", "",
            f"`blocksparse-cuda-{date}-tf32.json`; command: `{e['command']}`.", ""]
    for t in cross_tf32:
        out += [kernel_table(tf32, t, ("dense", "torch_bsr_triton", "seq2d[triton]", "seq2d[dense]")), "",
                f"Dense-kernel crossover at tile {t} in float32: {_fmt(cross_tf32[t])}.", ""]
    k, m = mem["kernel"], mem["model"]
    out += ["#### Memory at N = 131,072", "",
            f"`memory-cuda-{date}.json` (`{mem['environment']['command']}`), {mem['environment']['dtype']}: "
            f"`bsmm` with tile {k['tile']}, stored density {k['density_actual']:.4f} ({k['stored_tiles']} tiles), batch {k['batch']}: "
            f"peak {k['peak_gib']:.2f} GiB (inputs and tiles {k['inputs_gib']:.2f} GiB), {k['median_ms']:.2f} ms forward + backward, "
            f"{k['tflops']:.0f} TFLOP/s of useful work, spot-check relative error {k['spot_check_rel_err']:.1e}; "
            f"a dense N x N weight alone would take {k['dense_weight_gib']:.0f} GiB ({k['dense_weight_grad_adam_gib']:.0f} GiB "
            f"with its gradient and Adam's moments). A {m['slots']}-slot Sequential2D of {m['N'] // m['slots']} features each, "
            f"{m['stored_tiles']} tiles ({m['parameters']:,} parameters), batch {m['batch']}, forward + backward + Adam: "
            f"peak {m['peak_gib']:.2f} GiB, {m['median_ms']:.2f} ms per step, finite {m['finite']}.", ""]
    e = step["environment"]
    out += [f"#### Model step (the public API, list state), N = {e['N']}, {e['dtype']}", "",
            f"`model_step-cuda-{date}.json` (`{e['command']}`). Milliseconds, median, wall clock with synchronisation "
            "(Python launch overhead counts). `default`: the model as `from_mask` builds it; `tiled`: after "
            "`to_blocksparse`; `kernel`: `bsmm` alone; `loss alone`: the benchmark's per-slot loss terms, which the model "
            "paths pay and the kernels do not; check: largest relative difference of tiled from default outputs.", "",
            model_step_table(step), ""]
    return "\n".join(out), cross


# ---------------------------------------------------------------------------- issue 37's probe session
PROBE_TARGETS = {"ideal": 0.85, "cublas": 0.85, "floor": 2.0, "step": 1.2}  # the numbers
OPS = ("dds_t", "dds", "sdd_t")
OP_NAMES = {"dds_t": "forward", "dds": "dX", "sdd_t": "dW"}


def _pass(probe: dict, kernel: str, tile: int, density: float, op: str) -> dict | None:
    for p in probe["passes"]:
        if (p["kernel"], p["tile"], p["density"], p["op"]) == (kernel, tile, density, op):
            return p
    return None


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def probe_targets(probe: dict) -> list[str]:
    """Issue 37's targets against the probe's passes (v2) and model step, each met or missed."""
    t, out = PROBE_TARGETS, []
    dense = probe["ceilings"]["dense_ms"]
    for tile, density, key, what in ((128, 0.25, "ideal", "of ideal at density 0.25, tile 128"),
                                     (128, 1.0, "cublas", "of cuBLAS at density 1, tile 128")):
        ps = {op: _pass(probe, "triton_v2", tile, density, op) for op in OPS}
        if not all(ps.values()):
            out.append(f"- >= {t[key]} {what}: not measured.")
            continue
        frac = {op: (p["ideal_ms"] if key == "ideal" else dense[op]) / p["device_ms"] for op, p in ps.items()}
        v1 = {op: _pass(probe, "triton", tile, density, op) for op in OPS}
        out.append(f"- >= {t[key]} {what}: " + ", ".join(
            f"{OP_NAMES[op]} {frac[op]:.2f} ({ps[op]['device_ms']:.3f} ms against "
            f"{ps[op]['ideal_ms'] if key == 'ideal' else dense[op]:.3f})" for op in OPS)
            + f"; v1 " + ", ".join(f"{(p['ideal_ms'] if key == 'ideal' else dense[op]) / p['device_ms']:.2f}"
                                   for op, p in v1.items() if p)
            + f": {_verdict(min(frac.values()) >= t[key])}.")
    for tile in sorted({p["tile"] for p in probe["passes"]}, reverse=True):
        ps = {op: _pass(probe, "triton_v2", tile, 0.01, op) for op in OPS}
        if not all(ps.values()):
            continue
        r = {op: p["device_ms"] / p["floor_ms"] for op, p in ps.items()}
        worst = max(r, key=r.get)
        out.append(f"- density 0.01, tile {tile}, <= {t['floor']:g}x the pass's memory floor: "
                   + ", ".join(f"{OP_NAMES[op]} {r[op]:.2f}x ({ps[op]['device_ms']:.3f} ms, floor {ps[op]['floor_ms']:.3f})"
                               for op in OPS)
                   + (f": {_verdict(True)}." if r[worst] <= t["floor"] else
                      f": {_verdict(False)} ({OP_NAMES[worst]}; v1's {OP_NAMES[worst]} took "
                      f"{_pass(probe, 'triton', tile, 0.01, worst)['device_ms']:.3f} ms)."))
    for s in probe.get("model_step", []):
        if s["kernel"] != "triton_v2":
            continue
        ratio = s["graph_ms"] / s["kernel_graph_ms"]
        line = (f"- model step <= {t['step']}x the kernel with CUDA graphs ({s['slots']} slots, N {s['N']}, "
                f"batch {s['batch']}, density {s['density']:g}, tile {s['tile']}): the step replayed from a CUDA "
                f"graph {s['graph_ms']:.3f} ms, the kernel alone {s['kernel_graph_ms']:.3f} ms, {ratio:.1f}x")
        if "flat_graph_ms" in s:  # the flat state with one loss term, the kernel's harness (step_ops.py)
            flat = s["flat_graph_ms"] / s["kernel_graph_ms"]
            line += f"; on a flat state with one loss term {s['flat_graph_ms']:.3f} ms, {flat:.1f}x"
            ratio = flat
        out.append(f"{line}: {_verdict(ratio <= t['step'])}.")
    out.append("- faster than stk and blksprs at every density they support: **not measured** (the probe does not run them).")
    return out


def probe_pass_table(probe: dict) -> str:
    lines = ["| tile | density (stored) | pass | v1 ms | v2 ms | v2 / v1 | v2 wall ms | ideal ms | floor ms "
             "| v2 of ideal | v2 TFLOP/s | v2 rel. err. vs v1 |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    keys = sorted({(p["tile"], p["density"]) for p in probe["passes"]}, key=lambda k: (-k[0], k[1]))
    for tile, density in keys:
        for op in OPS:
            a, b = _pass(probe, "triton", tile, density, op), _pass(probe, "triton_v2", tile, density, op)
            if not (a and b):
                continue
            lines.append(f"| {tile} | {density:g} ({b['stored_density']:.4f}) | {OP_NAMES[op]} | {a['device_ms']:.3f} | "
                         f"{b['device_ms']:.3f} | {b['device_ms'] / a['device_ms']:.2f} | {b['wall_ms']:.3f} | "
                         f"{b['ideal_ms']:.3f} | {b['floor_ms']:.3f} | {b['ideal_ms'] / b['device_ms']:.2f} | "
                         f"{b['useful_tflops']:.0f} | {b['rel_err_vs_v1']:.1e} |")
    return "\n".join(lines)


def probe_tune_table(tune: dict) -> str:
    lines = ["| pass | tile | density | candidates (ok / run) | v1 ms | best v2 ms | v2 / v1 | best config |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in tune["cases"]:
        ok = [r for r in c["rows"] if r.get("status") == "ok"]
        best = min(ok, key=lambda r: r["device_ms"]) if ok else None
        lines.append(f"| {OP_NAMES[c['op']]} | {c['tile']} | {c['density']:g} | {len(ok)} / {len(c['rows'])} | "
                     f"{c['v1_ms']:.3f} | " + (f"{best['device_ms']:.3f} | {best['device_ms'] / c['v1_ms']:.2f} | "
                                               f"`{best['config']}` |" if best else "n/a | n/a | n/a |"))
    return "\n".join(lines)


def probe_profile_table(probe: dict, top: int = 3) -> str:
    lines = ["| tile | density | kernel | device time of the launches (us, count) | host-only rows (us) |",
             "| ---: | ---: | --- | --- | --- |"]
    for p in probe["profile"]:
        dev = sorted((r for r in p["rows"] if r["device_us"] > 0 and not r["name"].startswith(("aten::", "void "))),
                     key=lambda r: -r["device_us"])[:top]
        host = sorted((r for r in p["rows"] if r["host_us"] > 0), key=lambda r: -r["host_us"])[:top]
        lines.append(f"| {p['tile']} | {p['density']:g} | {p['kernel']} | "
                     + ", ".join(f"`{r['name']}` {r['device_us']:.0f} ({r['count']})" for r in dev) + " | "
                     + ", ".join(f"`{r['name'][:40]}` {r['host_us']:.0f}" for r in host) + " |")
    return "\n".join(lines)


def probe_step_table(probe: dict) -> str:
    rows = probe.get("model_step", [])
    flat = any("flat_graph_ms" in s for s in rows)
    lines = ["| kernel | eager ms | compiled ms (compile s) | CUDA-graph replay ms | kernel alone, graph ms | step / kernel |"
             + (" flat step, graph ms | flat / kernel |" if flat else ""),
             "| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if flat else "")]
    for s in rows:
        lines.append(f"| {s['kernel']} | {s['eager_ms']:.2f} | {s['compiled_ms']:.2f} ({s['compile_s']:.1f}) | "
                     f"{s['graph_ms']:.3f} | {s['kernel_graph_ms']:.3f} | {s['graph_ms'] / s['kernel_graph_ms']:.1f}x |"
                     + (f" {s['flat_graph_ms']:.3f} | {s['flat_graph_ms'] / s['kernel_graph_ms']:.1f}x |"
                        if "flat_graph_ms" in s else " | |" if flat else ""))
    return "\n".join(lines)


def render_probe(folder: Path) -> str:
    folder = Path(folder)
    env = json.loads((folder / "env.json").read_text())
    probe = json.loads((folder / "kernel_probe-cuda.json").read_text())
    tune = json.loads((folder / "triton_v2_tune-cuda.json").read_text())
    rel = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder.name
    c = env.get("ceilings", {})
    out = [f"Generated by `python benchmarks/gpu/report.py --probe {rel} --doc docs/performance.md` from the files "
           f"in `{rel}/` as the GPU returned them; measured by `bash benchmarks/gpu/suite.sh v2-check` and "
           f"`v2-probe` on one **{env['gpu']}** ({env['sm_count']} SMs, {env['memory_gib']:.0f} GiB, L2 {env['l2_mib']:.0f} MiB), "
           f"driver {env.get('driver')}, torch {env['torch']}, CUDA {env['cuda']}, triton {env['triton']}, "
           f"{probe['environment']['date']}. Device time from CUDA-graph replay (`triton.testing.do_bench_cudagraph`), "
           f"bf16, N = 8192, batch 8192, one pass at a time (forward `dds_t`, dX `dds`, dW `sdd_t`).", ""]
    if c:
        out += [f"Ceilings (`env_check.py`): device-to-device copy {c['copy_TBps_read_plus_write']:.2f} TB/s (read + write); "
                f"8192^3 GEMM {c['gemm_bf16_TFLOPs']:.0f} TFLOP/s bf16. The probe's own copy bandwidth, which its memory "
                f"floors divide by: {probe['ceilings']['copy_Bps'] / 1e12:.2f} TB/s; cuBLAS's time for each dense pass: "
                + ", ".join(f"{OP_NAMES[op]} {probe['ceilings']['dense_ms'][op]:.3f} ms" for op in OPS) + ".", ""]
    tests = []
    for name in sorted(folder.glob("tests-*.xml")):
        n = tests_from_junit(name)
        tests.append(f"`{name.name}` ({', '.join(n['files'])}): {n['passed']} passed, {n['failures']} failed, "
                     f"{n['errors']} errors, {n['skipped']} skipped")
    if tests:
        out += ["**CUDA tests**: " + "; ".join(tests) + ".", ""]
    out += ["Issue 37's targets (v2 kernels, tuned configs of `triton_v2_best.json`):", "", *probe_targets(probe), "",
            "#### Per pass, v1 against v2", "",
            f"`kernel_probe-cuda.json`; command: `{probe['environment']['command']}`. Ideal: stored density x cuBLAS's "
            "time for the dense pass; floor: the bytes the pass must move over the probe's copy bandwidth.", "",
            probe_pass_table(probe), "",
            "#### Tuning (v2's pruned grid)", "",
            f"`triton_v2_tune-cuda.json`; command: `{tune['environment']['command']}`; every candidate checked against v1.",
            "", probe_tune_table(tune), "",
            "#### Profiler, per launch (tile 128)", "",
            "From `kernel_probe-cuda.json`'s profile: the kernels' device time and the largest host-only rows.", "",
            probe_profile_table(probe), "",
            "#### Model step with CUDA graphs", "",
            "From `kernel_probe-cuda.json`: forward + backward (no optimizer step) of the tiled model "
            "(`model_step_cuda.py`'s `tiled` path) and of its kernel alone (`kernel`); eager and `torch.compile(step)` "
            "(default mode, graph breaks allowed) in wall time, the captured and replayed CUDA graphs in device time.", "",
            probe_step_table(probe), ""]
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--date", help="the date in the result file names, e.g. 2026-11-26")
    ap.add_argument("--probe", type=Path, help="a folder of issue 37's probe session: render its 'gpu-probe' section instead")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--tests-xml", type=Path, help="the install-and-test stage's test_cuda.xml: write gpu-tests-DATE.json from it")
    ap.add_argument("--doc", help="write the 'gpu' section of this page")
    args = ap.parse_args(argv)
    if args.probe:
        text = render_probe(args.probe)
        print(text)
        if args.doc:
            write_section(args.doc, "gpu-probe", text)
            print(f"wrote the 'gpu-probe' section of {args.doc}")
        return
    if not args.date:
        ap.error("give --date (issue 13's layout) or --probe FOLDER")
    if args.tests_xml:
        dest = files(args.date, args.results)["tests"]
        dest.write_text(json.dumps(tests_from_junit(args.tests_xml), indent=1) + "\n")
        print(f"wrote {dest}")
    text, cross = render(args.date, args.results)
    print(text)
    print("dense crossover (bf16) by tile: " + ", ".join(f"{t}: {_fmt(v, '.3f')}" for t, v in cross.items()))
    if args.doc:
        write_section(args.doc, "gpu", text)
        print(f"wrote the 'gpu' section of {args.doc}")


if __name__ == "__main__":
    main()
