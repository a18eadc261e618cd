"""Markdown tables from the JSON of ``benchmarks/model_step.py`` (for docs/performance.md).

    python benchmarks/report_model_step.py benchmarks/results/model_step-grid-cpu-2026-11-23.json [...]

Every number printed is read from the JSON (medians over the interleaved rounds); ratios
are computed here from those medians exactly as model_step.py prints them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

IMPLS = ("default", "tiled", "kernel", "dense", "masked_dense", "loss")


def _ms(rows: dict, name: str) -> float | None:
    r = rows.get(name)
    return r["median_ms"] if r and r.get("status") == "ok" else None


def _others(g: dict, mode: str) -> str:
    """Median CPU share of other processes over the rounds used (the load during the timing)."""
    shares = sorted(r["others"][mode] for r in g.get("rounds", []) if r.get("used") and mode in r.get("others", {}))
    return f"{100 * shares[len(shares) // 2]:.0f}%" if shares else "–"


def grid_table(data: dict, mode: str = "quiet") -> str:
    out = ["| threads | n x S | d | tile | stored tiles | default ms | tiled ms | kernel ms | dense ms | masked ms | "
           "loss ms | default/dense | default/masked | tiled/kernel | tiled/ideal | kernel/ideal | "
           "(tiled - loss)/kernel | (default - loss)/masked | other processes |",
           "|" + "---|" * 19]
    for g in data.get("grid", []):
        m = g.get("modes", {}).get(mode)
        if not m:
            continue
        rows = m["rows"]
        t = {k: _ms(rows, k) for k in IMPLS}

        def r(a, b):
            return f"{a / b:.2f}" if a and b else "–"

        ideal = g["tile_density"] * t["dense"] if t["dense"] else None
        cells = [str(g["threads"]), f"{g['n']} x {g['S']}", f"{g['density']}", str(g["tile"]), f"{g['tile_density']:.3f}"]
        cells += [f"{t[k]:.1f}" if t[k] else ("–" if k not in rows else "skipped") for k in IMPLS]
        net = {k: t[k] - t["loss"] if t[k] and t["loss"] else None for k in ("tiled", "default")}
        cells += [r(t["default"], t["dense"]), r(t["default"], t["masked_dense"]), r(t["tiled"], t["kernel"]),
                  r(t["tiled"], ideal), r(t["kernel"], ideal), r(net["tiled"], t["kernel"]),
                  r(net["default"], t["masked_dense"]), _others(g, mode)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def compiled_table(datas: list[dict], mode: str = "quiet") -> str:
    """``--compile`` runs (one or several JSON files): eager vs compiled medians of the library paths,
    and the first call's cost, cold and warm."""
    out = ["| threads | n x S | d | tile | default ms | compiled ms | compiled / eager | tiled ms | compiled ms | "
           "compiled / eager | first call cold s (default / tiled) | warm s (default / tiled) | graphs while timing | "
           "other processes |", "|" + "---|" * 14]
    for data in datas:
        for g in data.get("grid", []):
            m = g.get("modes", {}).get(mode)
            if not m or "compile" not in g:
                continue
            rows, c = m["rows"], g["compile"]
            cells = [str(g["threads"]), f"{g['n']} x {g['S']}", f"{g['density']}", str(g["tile"])]
            for base in ("default", "tiled"):
                a, b = _ms(rows, base), _ms(rows, f"{base}_compiled")
                cells += [f"{a:.1f}" if a else "–", f"{b:.1f}" if b else "–", f"{b / a:.2f}" if a and b else "–"]

            def secs(key):
                return " / ".join(f"{c[k][key]:.1f}" if c.get(k, {}).get(key) is not None else "–" for k in ("default", "tiled"))

            cells += [secs("cold_s"), secs("warm_s"), str(g.get("compile_graphs_timing", "–")), _others(g, mode)]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def contention_table(data: dict) -> str:
    out = ["| threads | n x S | d | impl | quiet ms | contended ms | contended / quiet | ÷ dense's ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for g in data.get("grid", []):
        q, c = g.get("modes", {}).get("quiet"), g.get("modes", {}).get("contended")
        if not (q and c):
            continue
        dq, dc = _ms(q["rows"], "dense"), _ms(c["rows"], "dense")
        dense_ratio = dc / dq if dq and dc else None
        for k in IMPLS:
            a, b = _ms(q["rows"], k), _ms(c["rows"], k)
            if not (a and b):
                continue
            rel = f"{(b / a) / dense_ratio:.2f}" if dense_ratio else "–"
            out.append(f"| {g['threads']} | {g['n']} x {g['S']} | {g['density']} | {k} | {a:.1f} | {b:.1f} | {b / a:.2f} | {rel} |")
    return "\n".join(out)


def nodes_table(data: dict) -> str:
    rows = data.get("autograd_nodes") or []
    if not rows:
        return ""
    keys = list(rows[0].keys())
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        out.append("| " + " | ".join(str(r[k]) for k in keys) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", type=Path)
    ap.add_argument("--compiled", action="store_true",
                    help="only the compiled-vs-eager table of --compile runs, one table over all the files")
    args = ap.parse_args(argv)
    if args.compiled:
        datas = [json.loads(p.read_text()) for p in args.json]
        for p, d in zip(args.json, datas):
            env, c = d.get("environment", {}), d.get("compile", {})
            print(f"- `{p.name}`: `{env.get('command', '')}`, {env.get('date', '')}, {env.get('cpu', '')} "
                  f"({env.get('cpu_capability', '')}), torch {env.get('torch', '')}, backend {c.get('backend')}, "
                  f"compiler start-up {c.get('process_warmup_s', 0):.1f} s; {env.get('uptime_start', '')}")
        print(f"\n{compiled_table(datas)}")
        return
    for p in args.json:
        data = json.loads(p.read_text())
        env = data.get("environment", {})
        print(f"### {p.name}\n")
        print(f"`{env.get('command', '')}` — {env.get('cpu', '')} ({env.get('cpu_count', '')} vCPUs), torch {env.get('torch', '')}, "
              f"commit {env.get('git_commit', '')[:8]}, {env.get('date', '')}, {env.get('uptime_start', '')}\n")
        for mode in ("quiet", "contended"):
            t = grid_table(data, mode)
            if t.count("\n") > 1:
                print(f"**{mode}**\n\n{t}\n")
        t = contention_table(data)
        if t.count("\n") > 1:
            print(f"**contended / quiet**\n\n{t}\n")
        t = nodes_table(data)
        if t:
            print(f"**autograd nodes per step**\n\n{t}\n")
        for sec in ("sequence", "transformer"):
            s = data.get(sec)
            if s:
                rows = s["modes"]["quiet"]["rows"]
                names = list(rows)
                a, b = _ms(rows, names[0]), _ms(rows, names[1])
                print(f"**{sec}** {s.get('config')}: {names[0]} {a:.2f} ms, {names[1]} {b:.2f} ms, "
                      f"ratio {names[1]}/{names[0]} = {b / a:.3f}\n")


if __name__ == "__main__":
    main()
