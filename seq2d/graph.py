"""Block graphs: a Sequential2D as a networkx DiGraph, and what the graph says.

One node per slot, one edge ``j -> i`` per non-absent block ``F[i][j]`` (rows are
outputs, so an edge points from the block's input slot to its output slot).

Analysis (all pure functions of the graph):

- :func:`is_acyclic`, :func:`depths` (longest path from the held slots),
  :func:`distances` (shortest path from the inputs: the sequence-mode delays + 1);
- :func:`recurrent_cores`: strongly connected components that contain a cycle;
  (these four are :mod:`seq2d.core.topology`'s, the functions Sequential2D itself uses)
- :func:`memory`: the number of steps after which the outputs no longer depend on the
  initial state of any non-input slot (``None`` when they never stop depending on it);
- :func:`influence`: the slots that can reach an output within ``k`` steps.

``memory`` follows from the step: after ``s`` steps the outputs depend on the initial
value of a non-input slot ``j`` iff some walk of exactly ``s`` blocks leads from ``j`` to
an output, where a held slot may also "stay" (it keeps its value). So the memory is
finite iff no cycle and no held non-input slot reaches an output, and then it is one more
than the longest path from a non-input slot to an output (MLP of L layers: L; k-truncated
1-layer RNN: k; an RNN: none).
"""

from __future__ import annotations

import networkx as nx

from .errors import InvalidValue
from .activations import activation_name
from .core import Sequential2D, core_of
from .core.topology import components, input_distances, slot_depths

__all__ = ["to_networkx", "is_acyclic", "depths", "distances", "recurrent_cores", "memory", "influence", "unit_mask",
           "unit_paths"]


def to_networkx(model) -> nx.DiGraph:
    """The block graph of ``model`` (a Sequential2D or a wrapper with ``.core``).

    Node attributes: ``size``, ``activation`` (name, or the module's class name),
    ``role`` ('input' / 'output' / 'hidden'), ``held`` (empty row), ``bias``.
    Edge attributes: ``kind`` ('linear' / 'identity' / 'module'), ``shape`` (out, in),
    ``stored`` (non-zero entries that take part in the product: trainable + frozen for a
    linear block, the diagonal for an identity, ``None`` for a module), ``density``
    (stored / (out * in)), ``params`` (trainable parameters of the block, its own bias included; a tied block
    reports its count at every position), ``tie`` (tied-weight group id or ``None``).
    """
    m = core_of(model)
    g = nx.DiGraph(steps=m.steps, depth=m.depth, n=m.n)
    held = set(m.held())
    for i, s in enumerate(m.sizes):
        act = m.acts[i]
        role = "input" if i in m.inputs else ("output" if i in m.outputs else "hidden")
        g.add_node(i, size=s, activation=activation_name(act) or type(act).__name__, role=role,
                   held=i in held, bias=m.bias(i) is not None)
    uses: dict[int, int] = {}
    for _, _, kind, blk in m.positions():
        if kind == "linear":
            uses[id(blk)] = uses.get(id(blk), 0) + 1
    tie_ids: dict[int, int] = {}
    for i, j, kind, blk in m.positions():
        shape = (m.sizes[i], m.sizes[j])
        tie = None
        if kind == "linear":
            stored = blk.num_stored()
            params = blk.num_trainable() + sum(b.numel() for b in [blk.bias] if b is not None and b.requires_grad)
            if uses[id(blk)] > 1:
                tie = tie_ids.setdefault(id(blk), len(tie_ids))
        elif kind == "identity":
            stored, params = m.sizes[i], 0
        else:
            stored = None
            params = sum(p.numel() for p in blk.parameters() if p.requires_grad)
        density = None if stored is None else stored / (shape[0] * shape[1])
        g.add_edge(j, i, kind=kind, shape=shape, stored=stored, density=density, params=params, tie=tie)
    return g


def _graph(model_or_graph) -> nx.DiGraph:
    return model_or_graph if isinstance(model_or_graph, nx.DiGraph) else to_networkx(model_or_graph)


def _blocks(model_or_graph) -> tuple[int, list[tuple[int, int]]]:
    """``(n, positions)``: the number of slots and the ``(i, j)`` of every block, the input of the
    graph facts of :mod:`seq2d.core.topology` (which Sequential2D computes its depth and delays with)."""
    if isinstance(model_or_graph, nx.DiGraph):
        g = model_or_graph
        if sorted(g.nodes) != list(range(g.number_of_nodes())):
            raise InvalidValue(f"expected a block graph of slots 0 .. n-1 (seq2d.graph.to_networkx), got nodes {sorted(g.nodes)}")
        return g.number_of_nodes(), [(i, j) for j, i in g.edges]
    m = core_of(model_or_graph)
    return m.n, [(i, j) for i, j, _, _ in m.positions()]


def is_acyclic(model) -> bool:
    """True when the block graph has no cycle (self-loops count as cycles)."""
    return all(d is not None for d in slot_depths(*_blocks(model)))


def depths(model) -> dict[int, int | None]:
    """Longest path (in blocks) from a held slot to each slot; ``None`` for slots on or
    after a cycle. For an acyclic model ``max(depths) == model.depth``."""
    return dict(enumerate(slot_depths(*_blocks(model))))


def distances(model) -> dict[int, int | None]:
    """Shortest path (in blocks) from an input slot to each slot (``None``: unreachable)."""
    n, positions = _blocks(model)
    if isinstance(model, nx.DiGraph):
        inputs = [k for k, d in model.nodes(data=True) if d["role"] == "input"]
    else:
        inputs = core_of(model).inputs
    return dict(enumerate(input_distances(n, positions, inputs)))


def recurrent_cores(model) -> list[set[int]]:
    """Strongly connected components that contain a cycle (size > 1, or a self-loop), in
    topological order (each after the cores it reads)."""
    n, positions = _blocks(model)
    rows: dict[int, list[int]] = {}
    for i, j in positions:
        rows.setdefault(i, []).append(j)
    edges = set(positions)
    return [set(c) for c in components(rows) if len(c) > 1 or (c[0], c[0]) in edges]


def memory(model) -> int | None:
    """Steps after which the outputs no longer depend on the initial state of any
    non-input slot; ``None`` if they always do (a cycle or a held non-input slot reaches
    an output). See the module docstring for the argument."""
    g = _graph(model)
    outputs = [n for n, d in g.nodes(data=True) if d["role"] == "output"]
    if isinstance(model, Sequential2D) or hasattr(model, "core"):
        outputs = list(core_of(model).outputs)
    ancestors = set(outputs)
    for o in outputs:
        ancestors |= nx.ancestors(g, o)
    sub = g.subgraph(ancestors)
    if not nx.is_directed_acyclic_graph(sub):
        return None
    role = nx.get_node_attributes(g, "role")
    held = nx.get_node_attributes(g, "held")
    if any(held[n] and role[n] != "input" for n in ancestors):
        return None
    # longest path from a non-input slot to each node, within the ancestors of the outputs
    longest: dict[int, int | None] = {}
    for n in nx.topological_sort(sub):
        best = 0 if role[n] != "input" else None
        for p in sub.predecessors(n):
            if longest[p] is not None:
                best = max(best or 0, longest[p] + 1)
        longest[n] = best
    vals = [longest[o] for o in outputs if longest[o] is not None]
    return (max(vals) + 1) if vals else 0


def influence(model, k: int) -> set[int]:
    """Slots with a walk of at most ``k`` blocks to an output (outputs included)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidValue(f"k must be a non-negative int, got {k!r}")
    g = _graph(model)
    outputs = list(core_of(model).outputs) if not isinstance(model, nx.DiGraph) else \
        [n for n, d in g.nodes(data=True) if d["role"] == "output"]
    seen = set(outputs)
    frontier = set(outputs)
    for _ in range(k):
        frontier = {p for n in frontier for p in g.predecessors(n)} - seen
        if not frontier:
            break
        seen |= frontier
    return seen


# ---------------------------------------------------------------------- unit level (one node per state entry)
def unit_mask(model) -> "torch.Tensor":
    """The ``(N, N)`` bool matrix of the step's entries, ``N = sum(sizes)``: ``[r, c]`` is True when
    state entry ``c`` feeds entry ``r`` through a block (rows are outputs, as in the block grid).

    Linear blocks give their trainable entries (``trainable_mask()``), identity blocks their
    diagonal, module blocks (arbitrary functions) every entry of their position."""
    import torch

    m = core_of(model)
    off = [0]
    for s in m.sizes:
        off.append(off[-1] + s)
    out = torch.zeros(off[-1], off[-1], dtype=torch.bool)
    for i, j, kind, blk in m.positions():
        view = out[off[i]:off[i + 1], off[j]:off[j + 1]]
        if kind == "linear":
            view |= blk.trainable_mask().detach().to("cpu", torch.bool)
        elif kind == "identity":
            view |= torch.eye(m.sizes[i], m.sizes[j], dtype=torch.bool)
        else:
            view |= True
    return out


def unit_paths(model, steps: int | None = None) -> dict:
    """Input-to-output walks at the unit level within ``steps`` steps (default: the model's).

    One step computes ``x_r <- act(sum_c W[r, c] x_c + b_r)`` for the non-held slots; input and
    held slots keep their values. Let ``A_t`` be the entries whose value at step ``t`` depends
    on the input (``A_0`` = the input entries; an entry joins once any of its inputs is in
    ``A_{t-1}``; the inputs stay) and ``B_k`` the entries whose value ``k`` steps before the
    last step reaches an output entry (``B_0`` = the outputs; ``B_{k+1}`` = the columns of
    ``B_k``'s rows, and the held entries of ``B_k``). Then, with ``T = steps``:

    - ``path_length``: the shortest input-to-output walk in entries, ``min{t : A_t`` meets an
      output``}`` (``None``: none within ``N`` steps); the output depends on the input iff it is
      ``<= T``;
    - a weight ``W[r, c]`` is *on an input-output walk* iff for some step ``s`` in ``1..T``:
      ``c`` is in ``A_{s-1}`` and ``r`` is in ``B_{T-s}``; a bias ``b_r`` iff ``r`` is in
      ``A_s`` and ``B_{T-s}`` for some ``s``. These are the trainable parameters through which
      the input can reach the output (the others only add a constant, or nothing);
    - ``weights``, ``biases`` and ``on_path`` count them; ``fraction = on_path / (weights + biases)``;
      ``on_path_weights`` (N, N) and ``on_path_biases`` (N,) are the bool masks themselves.

    Structural (generic values): an activation that happens to output zero is not assumed.
    """
    import torch

    m = core_of(model)
    T = m.steps if steps is None else steps
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise InvalidValue(f"steps must be a positive int (or None for the model's own), got {T!r}")
    M = unit_mask(m)
    N = M.shape[0]
    off = [0]
    for s in m.sizes:
        off.append(off[-1] + s)

    def units(slots):
        v = torch.zeros(N, dtype=torch.bool)
        for i in slots:
            v[off[i]:off[i + 1]] = True
        return v

    inp, outp = units(m.inputs), units(m.outputs)
    held = units(set(m.held()) | set(m.inputs))
    has_bias = units([i for i in range(m.n) if m.bias(i) is not None and m.bias(i).requires_grad])
    Mf = M.to(torch.float32)

    def forward(a):  # A_{t+1} from A_t
        return inp | (held & a) | (~held & ((Mf @ a.to(torch.float32)) > 0))

    def backward(b):  # B_{k+1} from B_k
        return (held & b) | ((b.to(torch.float32) @ Mf) > 0)

    A = [inp]
    for _ in range(T):
        A.append(forward(A[-1]))
    B = [outp]
    for _ in range(T):
        B.append(backward(B[-1]))
    on_w = torch.zeros(N, N, dtype=torch.bool)
    on_b = torch.zeros(N, dtype=torch.bool)
    for s in range(1, T + 1):
        on_w |= B[T - s][:, None] & A[s - 1][None, :]
        on_b |= A[s] & B[T - s]
    on_w &= M
    on_b &= has_bias
    path, a = None, inp
    for t in range(N + 1):
        if bool((a & outp).any()):
            path = t
            break
        nxt = forward(a)
        if torch.equal(nxt, a):
            break
        a = nxt
    weights, biases = int(M.sum()), int(has_bias.sum())
    on = int(on_w.sum()) + int(on_b.sum())
    return {"path_length": path, "steps": T, "weights": weights, "biases": biases, "on_path": on,
            "fraction": on / max(1, weights + biases), "on_path_weights": on_w, "on_path_biases": on_b}
