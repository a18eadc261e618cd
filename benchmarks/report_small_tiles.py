"""The small-tile targets of issue 35 item 3, judged from committed JSON (for docs/performance.md).

    python benchmarks/report_small_tiles.py --model-step benchmarks/results/model_step-smalltile-cpu-2026-11-28.json \\
        --store-auto benchmarks/results/store_auto-cpu-2026-11-28.json

Targets (one thread, medians of interleaved rounds, ``ideal`` = stored-tile density x dense):

* (a) ``benchmarks/model_step.py``, n = 256 slots of 16 features, tile 16: ``tiled/ideal`` <= 2.5
  at every density in the JSON;
* (b) the same script, tile 64 (n <= 64) at density 0.25: ``tiled/ideal`` <= 1.5;
* (c) ``benchmarks/store_auto.py`` (the irregular 96-slot model): ``store="auto"`` picks the
  tiled store where it is faster than the dense store (by their medians), the dense store
  elsewhere.

Every number printed is read from the JSON or computed here from its medians.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from report_model_step import _ms, _others


def _env(data: dict, name: str) -> str:
    env = data.get("environment", {})
    return (f"`{name}`: `{env.get('command', '')}`; {env.get('cpu', '')}, {env.get('cpu_capability', '')}, "
            f"torch {env.get('torch', '')}, 1 thread; {env.get('date', '')}; start `{env.get('uptime_start', '').strip()}`, "
            f"end `{env.get('uptime_end', '').strip()}`")


def _verdict(value: float, limit: float) -> str:
    return "met" if value <= limit else "**MISSED**"


def model_step_rows(data: dict) -> list[list[str]]:
    out = []
    for g in data.get("grid", []):
        m = g.get("modes", {}).get("quiet")
        if not m or g.get("threads") != 1:
            continue
        if g["tile"] == 16 and g["n"] == 256:
            target, limit = "(a) n = 256 x 16, tile 16: tiled <= 2.5x ideal", 2.5
        elif g["tile"] == 64 and g["density"] == 0.25:
            target, limit = f"(b) tile 64, d = 0.25 (n = {g['n']} x {g['S']}): tiled <= 1.5x ideal", 1.5
        else:
            continue
        rows = m["rows"]
        t = {k: _ms(rows, k) for k in ("tiled", "kernel", "dense", "default")}
        if not (t["tiled"] and t["dense"]):
            out.append([target, f"{g['density']}", "not measured", "–", "–", "–", "–", "**MISSED** (not measured)"])
            continue
        ideal = g["tile_density"] * t["dense"]
        tiled, kernel = t["tiled"] / ideal, (t["kernel"] / ideal if t["kernel"] else None)
        default = t["default"] / ideal if t["default"] else None
        why = ""
        if tiled > limit and kernel:  # where the time over the target goes
            why = (f" (the kernel alone is {kernel:.2f}x)" if kernel > limit
                   else f" (the kernel alone is {kernel:.2f}x; the model path adds {t['tiled'] / t['kernel']:.2f}x)")
        out.append([target, f"{g['density']}", f"{ideal:.1f}", f"**{tiled:.2f}x**",
                    f"{kernel:.2f}x" if kernel else "–", f"{default:.2f}x" if default else "–", _others(g, "quiet"),
                    _verdict(tiled, limit) + why])
    return out


def store_auto_rows(data: dict) -> list[list[str]]:
    out = []
    for c in data.get("cases", []):
        rows = c["rows"]
        d_ms, t_ms, a_ms = _ms(rows, "dense_store"), _ms(rows, "tiled"), _ms(rows, "auto")
        faster = "tiled" if t_ms < d_ms else "dense"
        picked = c["auto_store"]
        ok = picked == faster
        why = "" if ok else f" (auto took {picked}; {faster} was {max(d_ms, t_ms) / min(d_ms, t_ms):.2f}x faster)"
        out.append([f"(c) 96 irregular slots, auto picks the faster store", f"{c['density']}", f"{c['tile_density']:.3f}",
                    f"{picked}" + (f" (tile {c['auto_tile']})" if c.get("auto_tile") else ""),
                    f"{c['ratios']['auto/ideal']:.2f}x", f"{c['ratios']['dense_store/ideal']:.2f}x",
                    f"{c['ratios']['tiled/ideal']:.2f}x", ("met" if ok else "**MISSED**") + why])
    return out


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-step", type=Path, nargs="*", default=[], help="benchmarks/model_step.py JSON")
    ap.add_argument("--store-auto", type=Path, nargs="*", default=[], help="benchmarks/store_auto.py JSON")
    args = ap.parse_args(argv)
    rows, envs = [], []
    for p in args.model_step:
        data = json.loads(p.read_text())
        rows += model_step_rows(data)
        envs.append(_env(data, p.name))
    if rows:
        print(_table(["target", "d", "ideal ms", "tiled / ideal", "kernel / ideal", "default / ideal", "other processes", "verdict"], rows) + "\n")
    rows = []
    for p in args.store_auto:
        data = json.loads(p.read_text())
        rows += store_auto_rows(data)
        envs.append(_env(data, p.name))
    if rows:
        print(_table(["target", "d", "stored-tile density", "auto picked", "auto / ideal", "dense store / ideal",
                      "tiled (16) / ideal", "verdict"], rows) + "\n")
    for e in envs:
        print(f"- {e}")


if __name__ == "__main__":
    main()
