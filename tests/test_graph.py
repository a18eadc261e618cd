"""Block-graph structure for every registered constructor: edges, depths, SCCs, memory."""

import networkx as nx
import pytest
import torch

import seq2d
from seq2d import graph


def test_mlp_graph():
    m = seq2d.mlp([7, 6, 5, 3])
    g = graph.to_networkx(m)
    assert sorted(g.edges()) == [(0, 1), (1, 2), (2, 3)]
    assert g.nodes[0]["role"] == "input" and g.nodes[0]["held"] and g.nodes[3]["role"] == "output"
    assert g.nodes[1]["activation"] == "relu" and g.nodes[1]["bias"]
    e = g.edges[0, 1]
    assert e["kind"] == "linear" and e["shape"] == (6, 7) and e["params"] == 42 and e["density"] == 1.0 and e["tie"] is None
    assert graph.is_acyclic(m)
    assert graph.depths(m) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert graph.recurrent_cores(m) == []
    assert graph.memory(m) == 3  # an MLP of L layers forgets its initial state after L steps
    assert graph.influence(m, 1) == {2, 3}
    assert graph.influence(m, 5) == {0, 1, 2, 3}


@pytest.mark.parametrize("L", [1, 2, 3])
def test_rnn_graph(L):
    r = seq2d.rnn(4, 5, num_layers=L)
    g = graph.to_networkx(r)
    expected = {(0, 1)} | {(l, l) for l in range(1, L + 1)} | {(l - 1, l) for l in range(2, L + 1)}
    assert set(g.edges()) == expected
    assert not graph.is_acyclic(r)
    assert graph.recurrent_cores(r) == [{l} for l in range(1, L + 1)] or \
        sorted(map(sorted, graph.recurrent_cores(r))) == [[l] for l in range(1, L + 1)]
    assert graph.memory(r) is None  # an RNN never forgets its initial state exactly
    d = graph.distances(r)
    assert [d[i] for i in range(L + 1)] == list(range(L + 1))
    assert tuple(max(x - 1, 0) for x in d.values()) == r.core.delays()
    assert graph.depths(r)[0] == 0 and graph.depths(r)[1] is None


@pytest.mark.parametrize("k,L", [(1, 1), (4, 1), (3, 2)])
def test_truncated_rnn_graph(k, L):
    t = seq2d.create_model("truncated_rnn", input_size=4, hidden_size=5, num_layers=L, k=k)
    g = graph.to_networkx(t)
    assert graph.is_acyclic(t)
    assert graph.recurrent_cores(t) == []
    assert max(graph.depths(t).values()) == t.core.depth == k + L - 1
    if L == 1:
        assert graph.memory(t) == k  # the k-truncation forgets everything after k steps
    else:
        assert graph.memory(t) == k + L - 1
    ties = {e["tie"] for _, _, e in g.edges(data=True)}
    assert (None not in ties) == (k > 1 or L > 1) or k == 1
    if k > 1:
        # W_ih sits at k positions per layer, W_hh at k - 1: all tied
        n_tied = sum(1 for _, _, e in g.edges(data=True) if e["tie"] is not None)
        assert n_tied == L * (2 * k - 1)


def test_transformer_graph():
    tl = seq2d.transformer_layer(8, 2, 16)
    g = graph.to_networkx(tl)
    kinds = sorted(e["kind"] for _, _, e in g.edges(data=True))
    assert kinds.count("module") == 1 and kinds.count("identity") == 2 and kinds.count("linear") == 4
    assert graph.is_acyclic(tl) and graph.memory(tl) == tl.core.depth == 5
    module_edge = [(u, v) for u, v, e in g.edges(data=True) if e["kind"] == "module"][0]
    assert g.edges[module_edge]["stored"] is None and g.edges[module_edge]["params"] == 0


def test_from_mask_cycle_and_held_hidden_slot():
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[1, 0] = mask[2, 1] = mask[1, 2] = mask[3, 2] = True  # 1 <-> 2 cycle
    m = seq2d.from_mask([3, 4, 4, 2], mask, steps=5)
    assert graph.recurrent_cores(m) == [{1, 2}]
    assert graph.memory(m) is None
    assert graph.depths(m)[3] is None
    # a held hidden slot feeding the output: its initial value persists forever
    mask2 = torch.zeros(3, 3, dtype=torch.bool)
    mask2[2, 0] = mask2[2, 1] = True
    m2 = seq2d.from_mask([3, 3, 2], mask2, inputs=[0])
    assert graph.memory(m2) is None
    m3 = seq2d.from_mask([3, 3, 2], mask2, inputs=[0, 1])
    assert graph.memory(m3) == 1


@pytest.mark.parametrize("name", seq2d.list_models())
def test_every_constructor_graph_matches_grid(name):
    kw = {"transformer_layer": dict(d_model=8, nhead=2, dim_feedforward=16),
          "transformer_encoder": dict(d_model=8, nhead=2, dim_feedforward=16, num_layers=2)}.get(name, {})
    model = seq2d.create_model(name, **kw)
    core = model if isinstance(model, seq2d.Sequential2D) else model.core
    g = graph.to_networkx(model)
    assert g.number_of_nodes() == core.n
    assert {(j, i) for i, j, _, _ in core.positions()} == set(g.edges())
    # trainable parameters on edges + biases + activations == num_parameters (ties counted once)
    seen, total = set(), 0
    for i, j, kind, blk in core.positions():
        if kind == "linear":
            if id(blk) not in seen:
                seen.add(id(blk))
                total += g.edges[j, i]["params"]
        else:
            total += g.edges[j, i]["params"]
    total += sum(p.numel() for p in core.slot_bias.parameters()) + sum(p.numel() for p in core.acts.parameters())
    assert total == core.num_parameters()
    if core.depth is not None:
        assert graph.is_acyclic(model) and max(d for d in graph.depths(model).values()) == core.depth
        assert graph.memory(model) is not None
    assert nx.is_directed_acyclic_graph(g) == (core.depth is not None)
