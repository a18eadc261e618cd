"""``Sequential2D``: a block matrix of functions iterated over a list of slots.

This file is the single source of truth for the semantics (see also
``docs/concepts.md``). Every fast path (the fused-linear backends, and later
execution plans) must equal :func:`seq2d.reference.reference_forward`, which is
the docstring loop below written out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from .activations import activation_name, is_identity, make_activation
from .blocks import ContextModule, Identity, LinearBlock, LinearLike  # noqa: F401 (ContextModule: re-exported)
from .engines import STORES, DenseStore, TiledStore, choose_store
from .engines.migrate import migrate_state_dict
from .flat import Segments, SlotBias, build_plan, run_plan
from .schedule import sequence_by_components

__all__ = ["Sequential2D", "block_kind", "core_of"]

State = list[Tensor | None]


def block_kind(block: nn.Module | None) -> str:
    """'absent', 'identity', 'linear' or 'module'."""
    if block is None:
        return "absent"
    if isinstance(block, Identity):
        return "identity"
    if isinstance(block, LinearLike):
        return "linear"
    return "module"


def core_of(model, what: str = "expected") -> "Sequential2D":
    """The Sequential2D of ``model``: itself, or the ``.core`` of an interface wrapper
    (``seq2d.RNN``, ``TruncatedRNN``, the transformer wrappers)."""
    if isinstance(model, Sequential2D):
        return model
    core = getattr(model, "core", None)
    if isinstance(core, Sequential2D):
        return core
    raise TypeError(f"{what} a Sequential2D (or a model with a .core Sequential2D), got {type(model).__name__}")


def _is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _module_features(block: nn.Module) -> tuple[int | None, int | None]:
    """(in_features, out_features) when a module declares them, else None."""
    if isinstance(block, Sequential2D):
        return block.in_features, block.out_features
    fin = getattr(block, "in_features", None)
    fout = getattr(block, "out_features", None)
    return (fin if _is_pos_int(fin) else None, fout if _is_pos_int(fout) else None)


class Sequential2D(nn.Module):
    r"""A Sequential2D block network (Hershey et al., arXiv 2404.00880).

    The state is a list of ``n`` slots; slot ``i`` holds a tensor of shape
    ``(*batch, sizes[i])`` (or ``None``, meaning zero). The block matrix ``F`` is
    indexed **rows = outputs, columns = inputs**: ``F[i][j]`` maps slot ``j`` to
    slot ``i``. One step is a Jacobi update (every block reads the old state)::

        x_i <- act_i(b_i + sum_j F_ij(x_j))

    A slot whose row of ``F`` is empty is *held*: it keeps its value (input slots
    are held). ``forward`` runs ``steps`` such updates, equivalent to the following::

        def forward(x, steps):               # x: list of n tensors or None
            for _ in range(steps):
                new = list(x)                # held slots keep their value
                for i in range(n):
                    if row i of F is empty:
                        continue
                    acc = b[i] if slot i has a bias else 0
                    for j in range(n):
                        if F[i][j] is not None and x[j] is not None:
                            acc = acc + F[i][j](x[j])   # None slots are skipped
                    new[i] = act[i](acc)     # acc broadcast to (*batch, sizes[i])
                x = new
            return x

    where:
        n = number of slots, ``sizes[i]`` = size of slot ``i``,
        ``F[i][j]`` = absent (``None``), identity, a :class:`~seq2d.LinearBlock`
        (``W = frozen + weight * mask``) or any ``nn.Module``,
        ``b[i]`` = optional per-slot bias (one per slot, shared across its blocks),
        ``act[i]`` = per-slot activation, applied once after the sum.

    Fast paths, each tested equal to the loop above: all linear blocks of a step are
    evaluated together by one fused operator (``backend``, see :mod:`seq2d.fused`) or by
    the block-sparse engine (:meth:`to_blocksparse`); a row holding a single plain
    LinearBlock is one ``F.linear`` with its bias; and when the block graph is acyclic and
    ``steps >= depth`` the model evaluates each slot once, level by level in depth order
    (the fixed point the iteration reaches; ``use_plan = False`` turns this off).

    Calling conventions:
        * ``model(state_list, steps=None, **ctx)`` returns the new state list.
        * ``model(x, steps=None, **ctx)`` with a tensor ``x`` of shape
          ``(*batch, sum of input slot sizes)`` fills the input slots (others
          ``None``), runs ``steps`` and returns the output slots concatenated.
          This is also how a Sequential2D behaves as a block of another one.
        * ``model.sequence(xs, state=None)`` is sequence mode (RNNs): the input
          slots are refilled with ``xs[t]`` and the outputs are read, aligned with
          the inputs (see :meth:`sequence`).

    Keyword arguments ``**ctx`` are passed to blocks deriving from
    :class:`~seq2d.ContextModule` (e.g. attention masks) and to nested Sequential2Ds.

    Args:
        sizes: positive slot sizes ``s_0 .. s_{n-1}``.
        blocks: the grid, as an ``n x n`` nested list or a dict ``{(i, j): block}``.
            A block is ``None``, ``"identity"``, a ``LinearBlock`` or an ``nn.Module``.
            The same ``LinearBlock`` object may appear at several positions (tied).
        bias: ``True`` (a bias on every non-held slot), ``False``, or a per-slot list
            of ``bool``/tensor/``nn.Parameter`` (one Parameter may be shared by slots).
        activations: one name/module for every non-held slot, or a per-slot list
            (names: identity, relu, tanh, sigmoid, gelu, gelu_tanh, layernorm).
        inputs: slots filled from the caller (default: the held slots).
        outputs: slots read by the tensor call and sequence mode (default: the last).
        steps: default number of steps (default: the depth when the graph is acyclic).
        backend: fused-linear backend name (see :func:`seq2d.fused.available_backends`).
    """

    def __init__(
        self,
        sizes: Sequence[int],
        blocks: Sequence[Sequence] | Mapping[tuple[int, int], object],
        *,
        bias: bool | Sequence = False,
        activations=None,
        inputs: Sequence[int] | None = None,
        outputs: Sequence[int] | None = None,
        steps: int | None = None,
        backend: str = "dense",
        device=None,
        dtype=None,
    ) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.sizes = self._check_sizes(sizes)
        n = len(self.sizes)
        grid = self._normalize_grid(blocks, n)
        self.blocks = nn.ModuleDict()
        for (i, j), blk in sorted(grid.items()):
            self._check_block_fits(i, j, blk)
            self.blocks[f"{i}_{j}"] = blk
        self._positions = sorted(grid)  # (i, j) of every non-absent block
        self._rows: dict[int, list[int]] = {}
        for i, j in self._positions:
            self._rows.setdefault(i, []).append(j)
        held = [i for i in range(n) if i not in self._rows]

        self.inputs = self._check_slot_list("inputs", held if inputs is None else inputs, n)
        self.outputs = self._check_slot_list("outputs", [n - 1] if outputs is None else outputs, n)
        self.acts = self._build_activations(activations, held, factory_kwargs)
        self.slot_bias = self._build_biases(bias, held, factory_kwargs)
        if not isinstance(backend, str) or backend not in STORES:
            raise ValueError(f"Unknown backend {backend!r}. Select from " + ", ".join(repr(k) for k in STORES))
        self._backend = backend
        self.depth = self._compute_depth()
        # static row sets a call iterates over (computed once, not per call)
        self._all_rows_t = tuple(sorted(self._rows))
        self._all_rows = frozenset(self._rows)
        self._level_rows = None if self._levels is None else [tuple(sorted(level)) for level in self._levels]
        self.use_plan = True  # evaluate acyclic models level by level (see forward)
        if steps is None:
            steps = self.depth
        self.steps = None if steps is None else self._check_steps(steps)
        self._plans: dict = {}
        self.store = self._build_store()
        self.reset_bias_parameters()
        self._register_load_state_dict_pre_hook(self._migrate_state_dict)

    def _migrate_state_dict(self, state_dict, prefix, *args) -> None:
        """Checkpoints of the per-block layout load through the handles (seq2d/engines/migrate.py)."""
        migrate_state_dict(self, state_dict, prefix)

    @property
    def backend(self) -> str:
        """The store name given at construction ('dense', 'loop' or 'auto'). Setting 'dense' or
        'loop' switches a dense store between one GEMM per box and one F.linear per block."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        if not isinstance(name, str) or name not in STORES:
            raise ValueError(f"Unknown backend {name!r}. Select from " + ", ".join(repr(k) for k in STORES))
        self._backend = name
        if isinstance(self.store, DenseStore):
            self.store.mode = "loop" if name == "loop" else "dense"

    def _build_store(self):
        """The model's parameter store (:mod:`seq2d.engines`), or None without linear blocks."""
        linear = [(i, j, b) for i, j, k, b in self.positions() if k == "linear"]
        # a LinearBlock bound to another model's store and used here inside a module block
        # owns its values again (it is trained as part of that module)
        for i, j, k, blk in self.positions():
            if k == "module":
                for m in blk.modules():
                    if isinstance(m, LinearBlock) and m.store is not None:
                        m._release()
        if not linear:
            return None
        tiled = [(i, j, b) for i, j, b in linear if not isinstance(b, LinearBlock)]
        if tiled:
            engines = {id(b.engine): b.engine for _, _, b in tiled}
            if len(engines) != 1:
                raise ValueError(f"all tiled blocks of one Sequential2D must share one engine, got {len(engines)}")
            eng = next(iter(engines.values()))
            if tuple(eng.sizes) != self.sizes:
                raise ValueError(f"the block-sparse engine was built for sizes {list(eng.sizes)}, not {list(self.sizes)}")
            dense = [(i, j) for i, j, b in linear if isinstance(b, LinearBlock)]
            if dense:
                raise ValueError(f"blocks {dense} are dense LinearBlocks in a model whose linear part is block-sparse; "
                                 "convert the whole model with to_blocksparse()")
            if {(i, j) for i, j, _ in eng.placements} != {(i, j) for i, j, _ in tiled}:
                raise ValueError("the grid's tiled blocks do not match the engine's placements")
            return TiledStore(eng, self._levels)
        mode = "loop" if self.backend == "loop" else "dense"
        store = DenseStore(self.sizes, linear, self._levels, mode=mode)
        if self.backend == "auto":
            mask = [[False] * self.n for _ in range(self.n)]
            for i, j, _ in linear:
                mask[i][j] = True
            kind, tile = choose_store(self.sizes, mask, store.device.type)
            if kind == "tiled":
                self.store = store
                self.to_blocksparse(tile)
                return self.store
        return store

    # ------------------------------------------------------------------ construction checks
    @staticmethod
    def _check_sizes(sizes) -> tuple[int, ...]:
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise TypeError(f"sizes must be a sequence of positive ints, got {type(sizes).__name__}")
        if len(sizes) == 0:
            raise ValueError("sizes must name at least one slot, got an empty sequence")
        for k, s in enumerate(sizes):
            if not _is_pos_int(s):
                raise ValueError(f"sizes[{k}] must be a positive int, got {s!r}")
        return tuple(int(s) for s in sizes)

    @staticmethod
    def _normalize_grid(blocks, n: int) -> dict[tuple[int, int], nn.Module]:
        items: list[tuple[tuple[int, int], object]] = []
        if isinstance(blocks, Mapping):
            for key, blk in blocks.items():
                if not (isinstance(key, tuple) and len(key) == 2
                        and all(isinstance(k, int) and not isinstance(k, bool) for k in key)):
                    raise TypeError(f"block keys must be (row, col) int pairs, got {key!r}")
                i, j = key
                if not (-n <= i < n and -n <= j < n):
                    raise IndexError(f"block position {key} is outside the {n} x {n} grid")
                items.append(((i % n, j % n), blk))
        elif isinstance(blocks, Sequence) and not isinstance(blocks, (str, bytes)):
            if len(blocks) != n:
                raise ValueError(f"blocks must be an {n} x {n} grid (one row per slot), got {len(blocks)} rows")
            for i, row in enumerate(blocks):
                if not isinstance(row, Sequence) or isinstance(row, (str, bytes)) or len(row) != n:
                    got = len(row) if isinstance(row, Sequence) else type(row).__name__
                    raise ValueError(f"blocks row {i} must hold {n} entries (one per slot), got {got}")
                for j, blk in enumerate(row):
                    items.append(((i, j), blk))
        else:
            raise TypeError(f"blocks must be an n x n nested list or a dict {{(i, j): block}}, got {type(blocks).__name__}")
        grid: dict[tuple[int, int], nn.Module] = {}
        shared_identity = None
        for (i, j), blk in items:
            if blk is None:
                continue
            if isinstance(blk, str):
                if blk.lower() != "identity":
                    raise ValueError(f"block F[{i}][{j}]: unknown block name {blk!r}. Select from 'identity', or pass a module")
                shared_identity = shared_identity or Identity()
                blk = shared_identity
            if not isinstance(blk, nn.Module):
                raise TypeError(f"block F[{i}][{j}] must be None, 'identity' or an nn.Module, got {type(blk).__name__}")
            if (i, j) in grid:
                raise ValueError(f"block F[{i}][{j}] is given twice")
            grid[(i, j)] = blk
        return grid

    def _check_block_fits(self, i: int, j: int, blk: nn.Module) -> None:
        si, sj = self.sizes[i], self.sizes[j]
        kind = block_kind(blk)
        if kind == "identity" and si != sj:
            raise ValueError(f"block F[{i}][{j}] is an identity, but slot {j} has size {sj} and slot {i} has size {si}")
        if kind == "linear":
            fin, fout = blk.in_features, blk.out_features
        elif kind == "module":
            fin, fout = _module_features(blk)
        else:
            return
        if fin is not None and fin != sj:
            raise ValueError(f"block F[{i}][{j}] takes {fin} input features, but slot {j} has size {sj}")
        if fout is not None and fout != si:
            raise ValueError(f"block F[{i}][{j}] gives {fout} output features, but slot {i} has size {si}")

    @staticmethod
    def _check_slot_list(name: str, slots, n: int) -> tuple[int, ...]:
        if isinstance(slots, int):
            slots = [slots]
        out = []
        for s in slots:
            if isinstance(s, bool) or not isinstance(s, int):
                raise TypeError(f"{name} must hold slot indices (ints), got {s!r}")
            if not -n <= s < n:
                raise IndexError(f"{name}: slot {s} does not exist (the model has {n} slots)")
            out.append(s % n)
        if len(set(out)) != len(out):
            raise ValueError(f"{name} lists a slot twice: {list(slots)}")
        return tuple(out)

    @staticmethod
    def _check_steps(steps) -> int:
        if isinstance(steps, bool) or not isinstance(steps, int):
            raise TypeError(f"steps must be a non-negative int, got {type(steps).__name__} {steps!r}")
        if steps < 0:
            raise ValueError(f"steps must be a non-negative int, got {steps}")
        return steps

    def _build_activations(self, activations, held, factory_kwargs) -> nn.ModuleList:
        n = len(self.sizes)
        per_slot = isinstance(activations, Sequence) and not isinstance(activations, str)
        if per_slot and len(activations) != n:
            raise ValueError(f"activations must be one spec or a list of {n} (one per slot), got {len(activations)}")
        acts = []
        for i in range(n):
            spec = activations[i] if per_slot else activations
            if i in held:
                if per_slot and spec is not None and not (isinstance(spec, str) and spec.lower() in ("identity", "none", "linear")) and not (isinstance(spec, nn.Module) and is_identity(spec)):
                    raise ValueError(f"slot {i} has no incoming blocks (it is held), so its activation {spec!r} would never be applied")
                spec = None
            acts.append(make_activation(spec, self.sizes[i], slot=i, **factory_kwargs))
        return nn.ModuleList(acts)

    def _build_biases(self, bias, held, factory_kwargs) -> SlotBias:
        n = len(self.sizes)
        if isinstance(bias, bool):
            per = [bias and i not in held for i in range(n)]
        elif isinstance(bias, Sequence) and not isinstance(bias, str):
            if len(bias) != n:
                raise ValueError(f"bias must be a bool or a list of {n} entries (one per slot), got {len(bias)}")
            per = list(bias)
        else:
            raise TypeError(f"bias must be a bool or a per-slot list, got {type(bias).__name__}")
        given: dict[int, Tensor] = {}
        self._fresh_bias: set[int] = set()
        for i, b in enumerate(per):
            if b is None or b is False:
                continue
            if i in held:
                raise ValueError(f"slot {i} has no incoming blocks (it is held), so it cannot have a bias")
            if b is True:
                given[i] = torch.empty(self.sizes[i], **factory_kwargs)
                self._fresh_bias.add(i)
            elif isinstance(b, Tensor):
                if tuple(b.shape) != (self.sizes[i],):
                    raise ValueError(f"bias of slot {i} must have shape ({self.sizes[i]},), got {tuple(b.shape)}")
                given[i] = b
            else:
                raise TypeError(f"bias of slot {i} must be a bool, a tensor or None, got {type(b).__name__}")
        return SlotBias(self.sizes, given, self._fresh_bias, **factory_kwargs)

    @torch.no_grad()
    def reset_bias_parameters(self, generator: torch.Generator | None = None) -> None:
        """Biases created here start U(-1/sqrt(f), 1/sqrt(f)), f = the row's input width
        (sum of the sizes of the slots its blocks read), as ``nn.Linear`` does."""
        for i in sorted(self._fresh_bias):
            fan_in = sum(self.sizes[j] for j in self._rows.get(i, []))
            bound = 1.0 / math.sqrt(max(fan_in, 1))
            self.slot_bias.view(i).uniform_(-bound, bound, generator=generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """The one entry point for (re)initialisation: every LinearBlock (``nn.Linear``'s
        default, masked), every bias this model created, and every activation or module
        block that has its own ``reset_parameters`` (LayerNorm: ones/zeros)."""
        seen: set[int] = set()
        for m in self.modules():
            if m is self or id(m) in seen:
                continue
            seen.add(id(m))
            if isinstance(m, LinearBlock):
                m.reset_parameters(generator=generator)
            elif isinstance(m, Sequential2D):
                m.reset_parameters(generator=generator)
            elif hasattr(m, "reset_parameters"):
                m.reset_parameters()
        self.reset_bias_parameters(generator=generator)

    def _compute_depth(self) -> int | None:
        """Longest path (in blocks) from the held slots, or None when the graph has a cycle."""
        n = len(self.sizes)
        indeg = [0] * n
        succ: list[list[int]] = [[] for _ in range(n)]
        for i, j in self._positions:
            succ[j].append(i)
            indeg[i] += 1
        depth = [0] * n
        queue = deque(k for k in range(n) if indeg[k] == 0)
        seen = 0
        while queue:
            j = queue.popleft()
            seen += 1
            for i in succ[j]:
                depth[i] = max(depth[i], depth[j] + 1)
                indeg[i] -= 1
                if indeg[i] == 0:
                    queue.append(i)
        if seen < n:
            self._levels = None
            return None
        # the execution plan: non-held slots grouped by depth (level 1 .. depth)
        levels: dict[int, list[int]] = {}
        for i in range(n):
            if i in self._rows:
                levels.setdefault(depth[i], []).append(i)
        self._levels = [frozenset(levels[d]) for d in sorted(levels)]
        return max(depth) if n else 0

    # ------------------------------------------------------------------ introspection
    @property
    def n(self) -> int:
        return len(self.sizes)

    @property
    def in_features(self) -> int:
        return sum(self.sizes[i] for i in self.inputs)

    @property
    def out_features(self) -> int:
        return sum(self.sizes[i] for i in self.outputs)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each slot in the concatenated (unpadded) state, length n + 1."""
        off = [0]
        for s in self.sizes:
            off.append(off[-1] + s)
        return tuple(off)

    @property
    def flat_offsets(self) -> tuple[int, ...]:
        """Start of each slot in the flat state of :meth:`forward_flat` (length n + 1). Equal to
        :attr:`offsets` except with the tiled store, which pads every slot to whole tiles."""
        return self.store.offsets if self.store is not None else self.offsets

    @property
    def flat_size(self) -> int:
        """Width of the flat state (``flat_offsets[-1]``)."""
        return self.flat_offsets[-1]

    @property
    def engine(self):
        """The block-sparse matrix (``seq2d.sparse.BlockSparseLinear``) of a tiled model, else None."""
        return self.store.matrix if isinstance(self.store, TiledStore) else None

    @property
    def biases(self) -> dict[str, Tensor]:
        """``{str(slot): bias view}`` for every slot with a bias (views into one vector)."""
        return {str(i): self.slot_bias.view(i) for i in sorted(self.slot_bias.pos)}

    def block(self, i: int, j: int) -> nn.Module | None:
        """The block at F[i][j], or None."""
        key = f"{i % self.n}_{j % self.n}"
        return self.blocks[key] if key in self.blocks else None

    def positions(self) -> Iterator[tuple[int, int, str, nn.Module]]:
        """Yield ``(i, j, kind, block)`` for every non-absent block, rows then columns."""
        for i, j in self._positions:
            blk = self.blocks[f"{i}_{j}"]
            yield i, j, block_kind(blk), blk

    def held(self) -> tuple[int, ...]:
        """Slots with an empty row (they keep their value)."""
        return tuple(i for i in range(self.n) if i not in self._rows)

    def bias(self, i: int) -> Tensor | None:
        return self.slot_bias.view(i % self.n)

    def linear_weight(self) -> Tensor:
        """The N x N effective weight of all linear blocks over the concatenated state
        (dense; for inspection and tests, never used by the forward pass)."""
        if self.store is not None:
            return self.store.dense_weight()
        ref = next(self.parameters(), None)
        N = self.offsets[-1]
        return torch.zeros(N, N, dtype=ref.dtype if ref is not None else None,
                           device=ref.device if ref is not None else None)

    def num_parameters(self) -> int:
        """Trainable entries: masked and frozen entries excluded, tied weights counted once."""
        seen: set[int] = set()
        total = 0
        if self.store is not None:
            total += self.store.num_trainable()
            seen.update(id(p) for p in self.store.parameters())
        for m in self.modules():
            if isinstance(m, LinearBlock) and m.store is None and id(m.weight) not in seen:
                seen.add(id(m.weight))
                total += m.num_trainable()
            elif type(m).__name__ == "BlockSparseLinear" and id(m.data) not in seen:
                seen.add(id(m.data))
                total += m.num_trainable()
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                if p.requires_grad:
                    total += p.numel()
        return total

    def to_spec(self, *, weights: bool = False) -> dict:
        """The declarative spec of this (linear-block) model; see :func:`seq2d.spec.to_spec`."""
        from .spec import to_spec

        return to_spec(self, weights=weights)

    def grid(self) -> str:
        """The block grid as text. Legend: ``.`` absent, ``I`` identity, ``W`` dense linear,
        ``w`` masked linear, ``F`` linear with frozen values, ``T`` a tiled block of the
        block-sparse engine, ``M`` module; a digit after the
        letter names the tied-weight group when one LinearBlock sits at several positions."""
        n = self.n
        groups: dict[int, int] = {}
        counts: dict[int, int] = {}
        for _, _, kind, blk in self.positions():
            if kind == "linear":
                counts[id(blk)] = counts.get(id(blk), 0) + 1
        for _, _, kind, blk in self.positions():
            if kind == "linear" and counts[id(blk)] > 1 and id(blk) not in groups:
                groups[id(blk)] = len(groups)
        cells = [["." for _ in range(n)] for _ in range(n)]
        for i, j, kind, blk in self.positions():
            if kind == "identity":
                c = "I"
            elif kind == "module":
                c = "M"
            else:
                c = "F" if blk.frozen is not None else ("w" if blk.mask is not None else "W")
                if not isinstance(blk, LinearBlock):
                    c = "T" + c[1:]  # tiled (block-sparse engine)
                if id(blk) in groups:
                    c += str(groups[id(blk)])
            cells[i][j] = c
        w = max(3, max(len(c) for row in cells for c in row) + 1, len(str(n - 1)) + 1)
        head = " " * 12 + "".join(f"{j:>{w}}" for j in range(n))
        lines = [head]
        for i in range(n):
            role = "in" if i in self.inputs else ("out" if i in self.outputs else "")
            name = activation_name(self.acts[i]) or type(self.acts[i]).__name__
            label = f"{i:>2} {self.sizes[i]:>5} {role:>3}"
            lines.append(f"{label:<12}" + "".join(f"{c:>{w}}" for c in cells[i]) + f"   {name}" + (" +b" if self.bias(i) is not None else ""))
        return "\n".join(lines)

    def summary(self) -> str:
        """Grid, slot table and parameter count as text."""
        return (
            f"Sequential2D: {self.n} slots, N = {self.offsets[-1]}, steps = {self.steps}, "
            f"depth = {self.depth if self.depth is not None else 'cyclic'}, "
            f"trainable parameters = {self.num_parameters():,}\n"
            "rows = outputs, columns = inputs; slot size role | activation\n" + self.grid()
        )

    def extra_repr(self) -> str:
        s = f"sizes={list(self.sizes)}, steps={self.steps}"
        if self.inputs != self.held():
            s += f", inputs={list(self.inputs)}"
        if self.outputs != (self.n - 1,):
            s += f", outputs={list(self.outputs)}"
        if self.backend != "dense":
            s += f", backend={self.backend!r}"
        return s

    # ------------------------------------------------------------------ forward
    def _param_ref(self) -> Tensor | None:
        """A floating parameter (dtype and device checks); the store's or the bias vector's
        when there is one, so a call does not walk every submodule."""
        for t in (self.store, self.slot_bias):
            for p in (t.parameters() if t is not None else ()):
                if p.is_floating_point():
                    return p
        for p in self.parameters():
            if p.is_floating_point():
                return p
        return None

    def check_state(self, state) -> State:
        """Validate a state list and return it as a list (typed errors name the slot)."""
        if isinstance(state, Tensor) or not isinstance(state, Sequence) or isinstance(state, (str, bytes)):
            raise TypeError(f"state must be a list of {self.n} tensors (or None), got {type(state).__name__}")
        if len(state) != self.n:
            raise ValueError(f"state must have {self.n} slots (sizes {list(self.sizes)}), got {len(state)}")
        batch = dtype = device = None
        first = None
        for i, x in enumerate(state):
            if x is None:
                continue
            if not isinstance(x, Tensor):
                raise TypeError(f"slot {i} of the state must be a tensor or None, got {type(x).__name__}")
            if x.dim() == 0 or x.shape[-1] != self.sizes[i]:
                raise RuntimeError(f"slot {i} expects shape (*batch, {self.sizes[i]}), got {tuple(x.shape)}")
            if first is None:
                first, batch, dtype, device = i, x.shape[:-1], x.dtype, x.device
                continue
            if x.shape[:-1] != batch:
                raise RuntimeError(
                    f"slot {i} has batch dims {tuple(x.shape[:-1])} but slot {first} has {tuple(batch)}; all slots must share them"
                )
            if x.dtype != dtype:
                raise TypeError(f"slot {i} has dtype {x.dtype} but slot {first} has {dtype}; all slots must share one dtype")
            if x.device != device:
                raise RuntimeError(f"slot {i} is on {x.device} but slot {first} is on {device}; all slots must be on one device")
        ref = self._param_ref()
        if first is not None and ref is not None:
            if dtype != ref.dtype:
                raise TypeError(f"the state has dtype {dtype} but the model's parameters are {ref.dtype}; convert one with .to()")
            if device != ref.device:
                raise RuntimeError(f"the state is on {device} but the model's parameters are on {ref.device}; move one with .to()")
        return list(state)

    def _resolve_steps(self, steps) -> int:
        if steps is None:
            if self.steps is None:
                raise ValueError("steps is not set: this model has a cycle, so give steps= to the constructor or to forward")
            return self.steps
        return self._check_steps(steps)

    def _batch_like(self, state: State) -> Tensor:
        for x in state:
            if x is not None:
                return x
        raise ValueError("every slot of the state is None: give at least one slot so the batch shape is known")

    # ------------------------------------------------------------------ the flat state
    def to_flat(self, state: State) -> tuple[Tensor, frozenset]:
        """``(flat, present)``: the state list as one ``(*batch, flat_size)`` tensor (``None``
        slots and tile padding as zeros; one ``cat``) and the set of non-None slots."""
        seg, present = self._segments(state)
        return seg.tensor(), present

    def _segments(self, state: State) -> tuple[Segments, frozenset]:
        """The state list as flat-state pieces (no copy: a slot read back is its own tensor)."""
        like = self._batch_like(state)
        batch = like.shape[:-1]
        off = self.flat_offsets
        pieces: list[tuple[int, int, Tensor]] = []
        gap = 0
        for i, x in enumerate(state):
            w = off[i + 1] - off[i]
            if x is None:
                gap += w
                continue
            if gap:
                pieces.append((off[i] - gap, off[i], like.new_zeros(*batch, gap)))
            pieces.append((off[i], off[i] + self.sizes[i], x))
            gap = w - self.sizes[i]
        if gap:
            pieces.append((off[-1] - gap, off[-1], like.new_zeros(*batch, gap)))
        return Segments.of(pieces, off[-1]), frozenset(i for i, x in enumerate(state) if x is not None)

    def from_flat(self, flat, present=None, keep: State | None = None, touched=None) -> State:
        """The flat state (a tensor or :class:`seq2d.flat.Segments`) as a list of slot views (one
        ``split`` per piece); slots not in ``present`` are None, slots not in ``touched`` are
        returned as the tensors of ``keep``."""
        seg = flat if isinstance(flat, Segments) else Segments(flat)
        off = self.flat_offsets
        if any(a not in off for a, _, _ in seg.parts):  # a piece starts inside a slot (tile padding)
            seg.tensor()
        views: dict[int, Tensor] = {}
        for a, b, t in seg.parts:
            slots = [i for i in range(self.n) if a <= off[i] < b]
            widths, index = [], []
            for i in slots:
                index.append(len(widths))
                widths.append(self.sizes[i])
                pad = off[i + 1] - off[i] - self.sizes[i]
                if pad:
                    widths.append(pad)
            parts = t.split(widths, dim=-1) if len(widths) > 1 else (t,)
            for i, k in zip(slots, index):
                views[i] = parts[k]
        out: State = []
        for i in range(self.n):
            if present is not None and i not in present:
                out.append(None)
            elif keep is not None and touched is not None and i not in touched:
                out.append(keep[i])
            else:
                out.append(views[i])
        return out

    def _plan(self, upd: tuple[int, ...], present: frozenset):
        key = (upd, present if self._reads_present else None)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = build_plan(self, upd, present)
        return plan

    @property
    def _reads_present(self) -> bool:
        """True when a step depends on which slots are None (module or identity blocks)."""
        v = self.__dict__.get("_reads_present_v")
        if v is None:
            v = self.__dict__["_reads_present_v"] = any(k in ("module", "identity") for _, _, k, _ in self.positions())
        return v

    def _advance(self, x: Segments, present: frozenset, upd: tuple[int, ...], context, cache) -> frozenset:
        """One Jacobi update of the slots ``upd`` on the flat state ``x`` (in place); returns
        the present slots after it."""
        if not upd:
            return present
        run_plan(self, self._plan(upd, present), x, context, cache)
        return present if present.issuperset(upd) else present | frozenset(upd)

    def _iterate(self, x, present: frozenset, steps: int, hold, context) -> tuple[Segments, frozenset, frozenset]:
        """``steps`` updates on the flat state (a tensor or Segments; the plan when it applies).
        Returns the new state, the present slots and the slots that were updated."""
        x = x if isinstance(x, Segments) else Segments(x)
        if steps == 0:
            return x, present, frozenset()
        cache: dict = {}  # weights formed once for all the steps of this call
        if hold is None and self.use_plan and self._levels is not None and steps >= self.depth:
            # Acyclic and at least `depth` steps: Jacobi iteration has reached its fixed
            # point, which is evaluating each slot once, level by level (proof in
            # docs/graphs.md; tested against plain iteration in tests/test_plan.py).
            for level in self._level_rows:
                present = self._advance(x, present, level, context, cache)
            return x, present, self._all_rows
        upd = self._all_rows_t
        if hold is not None:
            held = set(self._check_slot_list("hold", hold, self.n))
            upd = tuple(i for i in upd if i not in held)
        for _ in range(steps):
            present = self._advance(x, present, upd, context, cache)
        return x, present, frozenset(upd)

    def _check_flat(self, x) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"the flat state must be a tensor of shape (*batch, {self.flat_size}), got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.flat_size:
            raise RuntimeError(f"the flat state must have shape (*batch, {self.flat_size}) (slots at flat_offsets "
                               f"{list(self.flat_offsets)}), got {tuple(x.shape)}")
        ref = self._param_ref()
        if ref is not None and (x.dtype != ref.dtype or x.device != ref.device):
            raise TypeError(f"the flat state is {x.dtype} on {x.device} but the model's parameters are "
                            f"{ref.dtype} on {ref.device}; convert one with .to()")
        return x

    def forward_flat(self, x: Tensor, steps: int | None = None, *, hold=None, **context) -> Tensor:
        """``steps`` Jacobi updates on a flat state ``x`` of shape ``(*batch, flat_size)`` (slot
        ``i`` at ``[flat_offsets[i], flat_offsets[i] + sizes[i])``; every slot present).
        Returns the new flat state. The same computation as :meth:`forward` on
        ``from_flat(x)``, without the list conversion at either end."""
        x = self._check_flat(x)
        steps = self._resolve_steps(steps)
        return self._iterate(x, frozenset(range(self.n)), steps, hold, context)[0].tensor()

    def step_flat(self, x: Tensor, **context) -> Tensor:
        """One Jacobi update of every non-held slot on a flat state (see :meth:`forward_flat`)."""
        seg = Segments(self._check_flat(x))
        self._advance(seg, frozenset(range(self.n)), self._all_rows_t, context, None)
        return seg.tensor()

    def to_blocksparse(self, tile: int = 64, backend: str = "auto") -> "Sequential2D":
        """Move every linear block into one block-sparse engine (in place; returns self).

        Slots are padded to whole tiles; tiles with no trainable or frozen entry are not
        stored; tied LinearBlocks share tiles. Outputs are unchanged (within dtype rounding).
        The LinearBlocks are replaced in the grid by :class:`seq2d.engines.TiledBlock` views
        (the old LinearBlock objects own their current values again)."""
        from .engines import TiledBlock
        from .sparse.linear import BlockSparseLinear

        if isinstance(self.store, TiledStore):
            raise ValueError("this model is already block-sparse")
        entries = [(i, j, blk) for i, j, _, blk in self.positions() if isinstance(blk, LinearBlock)]
        if not entries:
            raise ValueError("this model has no linear blocks to convert")
        eng, groups = BlockSparseLinear.from_blocks(self.sizes, entries, tile, backend=backend)
        views: dict[int, TiledBlock] = {}  # one view per group: tied positions stay one object
        for (i, j, _), g in zip(entries, groups):
            self.blocks[f"{i}_{j}"] = views.setdefault(g, TiledBlock(eng, g))
        for blk in {id(b): b for _, _, b in entries}.values():
            blk._release()
        self.store = TiledStore(eng, self._levels)
        self._plans.clear()
        return self

    def step(self, state, **context) -> State:
        """One Jacobi update of every non-held slot."""
        state = self.check_state(state)
        seg, present = self._segments(state)
        present = self._advance(seg, present, self._all_rows_t, context, None)
        return self.from_flat(seg, present, state, self._all_rows)

    def forward(self, state, steps: int | None = None, *, hold=None, **context):
        """Run ``steps`` Jacobi updates (see the class docstring). ``hold``: optional slots
        that keep their value during this call, as if their rows were empty."""
        if isinstance(state, Tensor):
            return self._forward_tensor(state, steps, context, hold)
        state = self.check_state(state)
        steps = self._resolve_steps(steps)
        if steps == 0:
            return list(state)
        x, present = self._segments(state)
        x, present, touched = self._iterate(x, present, steps, hold, context)
        return self.from_flat(x, present, state, touched)

    def split_inputs(self, x: Tensor) -> State:
        """A state with ``x`` (*batch, in_features) split over the input slots, others None."""
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise RuntimeError(
                f"expected input of shape (*batch, {self.in_features}) (input slots {list(self.inputs)} "
                f"of sizes {[self.sizes[i] for i in self.inputs]}), got {tuple(x.shape)}"
            )
        state: State = [None] * self.n
        parts = x.split([self.sizes[i] for i in self.inputs], dim=-1) if len(self.inputs) > 1 else (x,)
        for i, p in zip(self.inputs, parts):
            state[i] = p
        return state

    def join_outputs(self, state: State) -> Tensor:
        like = self._batch_like(state)
        outs = [state[i] if state[i] is not None else like.new_zeros((*like.shape[:-1], self.sizes[i])) for i in self.outputs]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def _read_outputs(self, x: Segments, present: frozenset) -> Tensor:
        """The output slots of a flat state, concatenated (zeros for absent ones)."""
        off = self.flat_offsets
        outs = []
        for o in self.outputs:
            if o in present:
                outs.append(x.read(off[o], off[o] + self.sizes[o]))
            else:
                like = x.parts[0][2]
                outs.append(like.new_zeros(*like.shape[:-1], self.sizes[o]))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def _forward_tensor(self, x: Tensor, steps, context, hold=None) -> Tensor:
        state = self.split_inputs(x)
        self.check_state(state)
        steps = self._resolve_steps(steps)
        flat, present = self._segments(state)
        flat, present, _ = self._iterate(flat, present, steps, hold, context)
        return self._read_outputs(flat, present)

    # ------------------------------------------------------------------ sequence mode
    def delays(self) -> tuple[int, ...]:
        """Pipeline delay of every slot: (shortest number of blocks from an input slot) - 1,
        0 for input slots and for slots no input reaches."""
        n = self.n
        dist = [None] * n
        succ: list[list[int]] = [[] for _ in range(n)]
        for i, j in self._positions:
            succ[j].append(i)
        queue = deque()
        for i in self.inputs:
            dist[i] = 0
            queue.append(i)
        while queue:
            j = queue.popleft()
            for i in succ[j]:
                if dist[i] is None:
                    dist[i] = dist[j] + 1
                    queue.append(i)
        return tuple(0 if (d is None or i in self.inputs) else d - 1 for i, d in enumerate(dist))

    def sequence(self, xs: Tensor, state=None, *, pipeline: bool = True, **context) -> tuple[Tensor, State]:
        r"""Sequence mode: refill the input slots with ``xs[t]`` before each step; read the outputs.

        Args:
            xs: ``(T, *batch, in_features)``, time first.
            state: optional initial state (list of n; input slots are ignored, missing = zero).
            pipeline: align outputs with inputs across depth (default). A slot at
                delay ``d`` (see :meth:`delays`) sees the wave of input ``t`` at step ``t + d``,
                so it is updated only in steps ``d <= s < T + d`` and held otherwise.
                With ``pipeline=False`` every slot is updated every step and outputs are
                read after each of the T steps (delay 0 everywhere).

        Returns:
            ``(ys, state)``: ys ``(T, *batch, out_features)`` with ``ys[t]`` the output for
            input ``t``, and the final state (each slot after its last update).

        Equivalent to the following (``d`` = delays, all zero when ``pipeline=False``)::

            D = max(d[i] for non-held slots i)
            for s in range(T + D):
                if s < T:
                    x[inputs] = xs[s]
                x = step(x, only slots i with d[i] <= s < T + d[i])
                for o in outputs:
                    if d[o] <= s < T + d[o]:
                        ys[s - d[o]][o] = x[o]
        """
        if not isinstance(xs, Tensor):
            raise TypeError(f"xs must be a tensor of shape (T, *batch, {self.in_features}), got {type(xs).__name__}")
        if xs.dim() < 2 or xs.shape[-1] != self.in_features:
            raise RuntimeError(f"xs must have shape (T, *batch, {self.in_features}), got {tuple(xs.shape)}")
        T = xs.shape[0]
        if state is None:
            state = [None] * self.n
        state = list(state)
        if len(state) == self.n:
            for i, p in zip(self.inputs, self._split_in(xs[0])):
                state[i] = p
        state = self.check_state(state)
        out = sequence_by_components(self, xs, state, pipeline, context)  # seq2d/schedule.py
        if out is not None:
            return out
        d = self.delays() if pipeline else (0,) * self.n
        D = max((d[i] for i in self._rows), default=0)
        x, present = self._segments(state)
        x0 = x.parts[0][2]
        off = self.flat_offsets
        in_runs = self._input_runs()
        outs_by_delay: dict[int, list[int]] = {}
        for k, o in enumerate(self.outputs):
            outs_by_delay.setdefault(d[o], []).append(k)
        ys: list[list[Tensor | None]] = [[None] * len(self.outputs) for _ in range(T)]
        cache: dict = {}
        xs = xs.to(dtype=x0.dtype) if xs.dtype != x0.dtype else xs
        upd_cache: dict = {}
        rows = self._all_rows_t
        # products with the input slots do not depend on the state: one GEMM for all T steps
        hoisted = isinstance(self.store, DenseStore) and not self._reads_inputs_elsewhere() and \
            self.store.hoist_inputs(xs, self.inputs, cache)
        xs_t = xs.unbind(0)  # one node for all T steps (xs[s] would zero-fill xs's gradient every step)
        for s in range(T + D):
            if hoisted:
                cache["t"] = min(s, T - 1)  # after the last input the input slots keep xs[T-1]
            if s < T and s > 0:
                xin = xs_t[s]
                x.write([(a, b, xin if (ca == 0 and cb == xin.shape[-1]) else xin[..., ca:cb]) for a, b, ca, cb in in_runs])
            key = (min(s, D), max(s - T + 1, 0))
            upd = upd_cache.get(key)
            if upd is None:
                upd = upd_cache[key] = tuple(i for i in rows if key[1] <= d[i] <= key[0])
            present = self._advance(x, present, upd, context, cache)
            for k, o in enumerate(self.outputs):
                if d[o] <= s < T + d[o]:
                    ys[s - d[o]][k] = x.read(off[o], off[o] + self.sizes[o]) if o in present else \
                        x0.new_zeros(*x0.shape[:-1], self.sizes[o])
        rows_out = [r[0] if len(r) == 1 else torch.cat(r, dim=-1) for r in ys]
        return torch.stack(rows_out, dim=0), self.from_flat(x, present)

    def _reads_inputs_elsewhere(self) -> bool:
        """True when an input slot also has linear blocks in its own row (then it is not held and
        its value is not xs[t]); hoisting input products is then not valid."""
        return any(i in self._rows for i in self.inputs)

    def _split_in(self, x: Tensor) -> tuple[Tensor, ...]:
        return x.split([self.sizes[i] for i in self.inputs], dim=-1) if len(self.inputs) > 1 else (x,)

    def _input_runs(self) -> list[tuple[int, int, int, int]]:
        """``(flat start, flat end, input start, input end)`` runs where the input tensor is
        written into the flat state (consecutive input slots without padding merge)."""
        off = self.flat_offsets
        runs: list[list[int]] = []
        c = 0
        for i in self.inputs:
            a, s = off[i], self.sizes[i]
            if runs and runs[-1][1] == a and runs[-1][3] == c:
                runs[-1][1] += s
                runs[-1][3] += s
            else:
                runs.append([a, a + s, c, c + s])
            c += s
        return [tuple(r) for r in sorted(runs)]
