"""The block graph's facts that Sequential2D uses, computed from the grid alone (edge ``j -> i``
per block ``F[i][j]``; ``positions``: the ``(i, j)`` of every block): the depth of every slot and
the levels of the execution plan, the distances from the input slots (sequence mode's delays),
and the strongly connected components (sequence mode's schedule). :mod:`seq2d.graph` answers its
questions about a model with these too."""

from __future__ import annotations

from collections import deque

__all__ = ["slot_depths", "depth_and_levels", "input_distances", "far_output", "components"]


def _successors(n: int, positions) -> list[list[int]]:
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, j in positions:
        succ[j].append(i)
    return succ


def slot_depths(n: int, positions) -> tuple[int | None, ...]:
    """Longest path (in blocks) from a held slot (one with no block in its row) to every slot;
    ``None`` for slots on a cycle or reached from one."""
    indeg = [0] * n
    succ = _successors(n, positions)
    for i, _ in positions:
        indeg[i] += 1
    depth: list[int | None] = [None] * n
    queue = deque(k for k in range(n) if indeg[k] == 0)
    for k in queue:
        depth[k] = 0
    while queue:
        j = queue.popleft()
        for i in succ[j]:
            depth[i] = max(depth[i] or 0, depth[j] + 1)
            indeg[i] -= 1
            if indeg[i] == 0:
                queue.append(i)
    return tuple(d if indeg[k] == 0 else None for k, d in enumerate(depth))


def depth_and_levels(n: int, positions, rows) -> tuple[int | None, list[frozenset] | None]:
    """``(depth, levels)``: the longest path (in blocks) from the held slots and the non-held
    slots grouped by depth (levels 1 .. depth), or ``(None, None)`` when the graph has a cycle."""
    depth = slot_depths(n, positions)
    if any(d is None for d in depth):
        return None, None
    # the execution plan: non-held slots grouped by depth (level 1 .. depth)
    levels: dict[int, list[int]] = {}
    for i in range(n):
        if i in rows:
            levels.setdefault(depth[i], []).append(i)
    return (max(depth) if n else 0), [frozenset(levels[d]) for d in sorted(levels)]


def input_distances(n: int, positions, inputs) -> tuple[int | None, ...]:
    """Shortest path (in blocks) from an input slot to every slot: 0 for the inputs, ``None``
    for slots no input reaches (edge ``j -> i`` per block ``F[i][j]``)."""
    succ = _successors(n, positions)
    dist: list[int | None] = [None] * n
    queue = deque()
    for i in inputs:
        dist[i] = 0
        queue.append(i)
    while queue:
        j = queue.popleft()
        for i in succ[j]:
            if dist[i] is None:
                dist[i] = dist[j] + 1
                queue.append(i)
    return tuple(dist)


def far_output(n: int, positions, inputs, outputs) -> tuple[int, int | None] | None:
    """``(slot, distance)`` of the output slot farthest from the input slots (distance ``None``:
    no input reaches it), or None for a model without input slots."""
    if not inputs:
        return None
    dist = input_distances(n, positions, inputs)
    unreached = [o for o in outputs if dist[o] is None]
    if unreached:
        return unreached[0], None
    o = max(outputs, key=lambda o: dist[o])
    return o, dist[o]


def components(rows) -> list[tuple[int, ...]]:
    """Strongly connected components of the non-held slots (``rows``: ``{slot: [the slots its
    blocks read]}`` for every slot with a block in its row), each sorted, in topological order
    (after all they read)."""
    succ: dict[int, list[int]] = {v: [] for v in sorted(rows)}
    for i in succ:
        for j in (j for j in rows[i] if j in succ):
            succ[j].append(i)
    index, low = {}, {}  # low: of the slots still on the stack
    stack, out = [], []
    for root in (v for v in succ if v not in index):  # Tarjan, iterative
        work = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, k = work[-1]
            if k < len(succ[v]):
                work[-1], w = (v, k + 1), succ[v][k]
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, 0))
                elif w in low:  # on the stack
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                cut = stack.index(v)
                out.append(tuple(sorted(stack[cut:])))
                for w in stack[cut:]:
                    del low[w]
                del stack[cut:]
    return out[::-1]  # Tarjan emits a component after every component it reaches
