"""The library's layout stays navigable (issue 10): no file over 600 lines, and no import
circle between its files (imports inside functions count too: a lazy import is still a
dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "seq2d"
MAX_LINES = 600


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Modules of the package that ``path`` imports (relative and absolute, at any depth)."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n for n in names if n == "seq2d" or n.startswith("seq2d."))
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        deps = set()
        for target in _imports(path):
            while target and target not in files:  # a name inside a module: the module
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != mod and not mod.startswith(target + "."):  # a package's own __init__ is not a cycle
                deps.add(target)
        graph[mod] = deps
    return graph


def test_no_library_file_over_600_lines():
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and d in graph:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circles():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_sparse_knows_nothing_of_sequential2d():
    for path in (PKG / "sparse").rglob("*.py"):
        deps = {d for d in _imports(path) if not d.startswith("seq2d.sparse")}
        leaves = ("seq2d.threads", "seq2d.errors", "seq2d.memo")  # leaf utilities that import nothing of seq2d
        assert {d for d in deps if not d.startswith(leaves)} == set(), (path, deps)


def _in_lab(mod: str) -> bool:
    return mod == "seq2d.lab" or mod.startswith("seq2d.lab.")


def test_the_library_never_imports_the_lab():
    """seq2d/lab/ holds the experiments' machinery (docs/concepts.md, "Where things live"): no library
    file imports it, lazily or not; the one exception is the command line's front (`seq2d mnist`)."""
    up = {m: sorted(d for d in deps if _in_lab(d)) for m, deps in _graph().items() if not _in_lab(m) and m != "seq2d.cli"}
    assert not {m: d for m, d in up.items() if d}, "library files importing seq2d.lab"
    assert any(_in_lab(d) for d in _graph()["seq2d.cli"])  # the check reads the CLI's lazy imports
