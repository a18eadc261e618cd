"""seq2d keeps derived values in per-object memo dicts through one helper (seq2d/memo.py), which
never calls ``__dict__.setdefault``: torch 2.11's Dynamo cannot trace that method, and the plans
are read inside a traced forward (the H200 run of 2026-11-29: the compiled cyclic models of the graph-step
tests broke there)."""

import re
from pathlib import Path

import torch

import seq2d
from seq2d.memo import memo_dict

ROOT = Path(__file__).resolve().parent.parent


def test_memo_dict_is_made_once_and_kept_per_object():
    class Holder:
        pass

    a, b = Holder(), Holder()
    d = memo_dict(a, "_plans")
    d["k"] = 1
    assert memo_dict(a, "_plans") is d and a.__dict__["_plans"] == {"k": 1}
    assert memo_dict(b, "_plans") == {} and memo_dict(b, "_plans") is not d
    a.__dict__.pop("_plans")
    assert memo_dict(a, "_plans") == {}


def test_no_dict_setdefault_in_the_library():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "seq2d").rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"__dict__\s*\.\s*setdefault", line) and p.name != "memo.py"]
    assert hits == [], f"use seq2d.memo.memo_dict (torch 2.11's Dynamo cannot trace __dict__.setdefault): {hits}"


def test_a_compiled_cyclic_model_reads_its_held_products_memo_in_one_graph():
    """The memo of the held products (steps > 1, the dense store) is read inside the traced
    forward: one graph, equal to eager (this torch's Dynamo; the rule above is for 2.11's)."""
    torch.manual_seed(0)
    m = seq2d.create_model("random_mask", sizes=[12, 16, 16, 5], density=0.4)
    assert m.steps > 1 and "_held_during" in m.__dict__
    x = torch.randn(3, 12)
    torch._dynamo.reset()
    out = torch.compile(m, fullgraph=True, backend="eager")(x)
    torch.testing.assert_close(out, m(x), rtol=0, atol=0)  # one path (eager kernels) against itself
    torch._dynamo.reset()
