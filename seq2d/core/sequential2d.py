"""``Sequential2D``: a block matrix of functions iterated over a list of slots.

This file is the single source of truth for the semantics (see also
``docs/concepts.md``). Every fast path (the dense and tiled stores, and later
execution plans) must equal :func:`seq2d.core.reference.reference_forward`, which is
the docstring loop below written out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat

import torch
from torch import Tensor, nn

from ..arguments import check_factory
from ..blocks import ContextModule, LinearBlock, block_kind
from ..stores import TiledStore, build_store, check_store, choose_store
from ..stores.migrate import migrate_state_dict
from ..errors import InvalidType, InvalidValue, renamed_keyword
from ..gridtext import LEGEND, grid_text
from .checks import (build_activations, check_block_fits, check_degenerate, check_sizes, check_slot_list, check_steps,
                     normalize_grid, slot_biases, warn_steps)
from . import parameters, sequence as sequence_mode, state as state_io  # called by name below
from .options import Options, option
from .slot_bias import SlotBias
from .state import Segments, State
from .step import Step
from .topology import depth_and_levels, far_output
from ..memo import memo_dict

__all__ = ["Sequential2D", "block_kind", "core_of"]


def core_of(model, what: str = "expected") -> "Sequential2D":
    """The Sequential2D of ``model``: itself, or the ``.core`` of an interface wrapper
    (``seq2d.RNN``, ``TruncatedRNN``, the transformer wrappers)."""
    if isinstance(model, Sequential2D):
        return model
    core = getattr(model, "core", None)
    if isinstance(core, Sequential2D):
        return core
    raise InvalidType(f"{what} a Sequential2D (or a model with a .core Sequential2D), got {type(model).__name__}")


class Sequential2D(ContextModule):
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
        (``x @ W.T`` with ``W = frozen + weight * mask``, ``+ b_ij`` when the block has its
        own bias: added only when ``x[j]`` is present, as the loop says) or any ``nn.Module``,
        ``b[i]`` = optional per-slot bias (one per slot, shared across its blocks),
        ``act[i]`` = per-slot activation, applied once after the sum.

    Fast paths, each tested equal to the loop above: all linear blocks of a step are
    evaluated together by the model's parameter store (``store``, see :mod:`seq2d.stores`:
    dense boxes, or the block-sparse tiles of :meth:`to_blocksparse`) on a flat state
    (:mod:`seq2d.core.step`); and when the block graph is acyclic and
    ``steps >= depth`` the model evaluates each slot once, level by level in depth order
    (the fixed point the iteration reaches; ``use_plan = False`` turns this off); when it
    iterates, the product with the slots no step of the call writes (the held inputs) is
    computed once per call, and a step whose other columns are all still absent multiplies
    nothing (``use_held_products = False`` turns this off); on a store whose products cost only
    the rows asked for (the tiled one), the tensor call's last steps leave out the rows its
    outputs never read (``use_output_demand = False`` turns this off).

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
    :class:`~seq2d.ContextModule` (e.g. attention masks) and to nested Sequential2Ds, each
    getting the keys it declares (``context_keys``); a key no block declares is refused
    (:class:`~seq2d.errors.InvalidType`), as Python refuses an unknown keyword.

    Malformed models and calls (docs/concepts.md, "Malformed models and calls"): a module
    block's output must have shape ``(*batch, sizes[i])`` (checked on every call, never
    broadcast); a model with no block is refused, one with no trainable parameter warns; a
    tensor call whose ``steps`` is below the distance from the input slots to an output slot (or
    whose output no input reaches) warns, once per model: the output cannot depend on ``x``.

    Args:
        sizes: positive slot sizes ``s_0 .. s_{n-1}``.
        blocks: the grid, as an ``n x n`` nested list or a dict ``{(i, j): block}``.
            A block is ``None``, ``"identity"``, a ``LinearBlock`` or an ``nn.Module``.
            The same ``LinearBlock`` object may appear at several positions (tied).
        bias: ``True`` (a bias on every non-held slot), ``False``, or a per-slot list
            of ``bool``/tensor/``nn.Parameter`` (one Parameter may be shared by slots).
        activations: one name/module for every non-held slot, or a per-slot list
            (names: identity, relu, tanh, sigmoid, gelu, gelu_tanh, layernorm).
        inputs: slots filled from the caller (default: the held slots; non-empty when given).
        outputs: slots read by the tensor call and sequence mode (default: the last; non-empty).
        steps: default number of steps (default: the depth when the graph is acyclic).
        store: the parameter store: "dense", "tiled" or "auto" (see :mod:`seq2d.stores`,
            :func:`seq2d.available_stores`); ``model.store.kind`` says which holds the blocks.
        loop: evaluate the dense store one ``F.linear`` per block position (the docstring
            loop, the slow reference) instead of one GEMM per box; settable as ``model.loop``.
    """

    use_plan = option()  # model.use_plan = False sets model.options.use_plan (the switches: seq2d/core/options.py)
    use_held_products = option()
    use_output_demand = option()
    use_schedule = option()

    @renamed_keyword("backend", "store", "store choice")
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
        store: str = "dense",
        loop: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        check_factory(device, dtype, "Sequential2D")
        self.sizes = check_sizes(sizes)
        n = len(self.sizes)
        grid = normalize_grid(blocks, n)
        self.blocks = nn.ModuleDict()
        for (i, j), blk in sorted(grid.items()):
            check_block_fits(self.sizes, i, j, blk)
            self.blocks[f"{i}_{j}"] = blk
        self._positions = sorted(grid)  # (i, j) of every non-absent block
        self._rows: dict[int, list[int]] = {}
        for i, j in self._positions:
            self._rows.setdefault(i, []).append(j)
        held = [i for i in range(n) if i not in self._rows]

        self.inputs = check_slot_list("inputs", held if inputs is None else inputs, n, allow_empty=inputs is None)
        self.outputs = check_slot_list("outputs", [n - 1] if outputs is None else outputs, n, allow_empty=False)
        self.acts = build_activations(self.sizes, activations, held, factory_kwargs)
        given, self._fresh_bias = slot_biases(self.sizes, bias, held, factory_kwargs)
        self.slot_bias = SlotBias(self.sizes, given, self._fresh_bias, **factory_kwargs)
        check_store("Sequential2D", store, loop)
        self._store_arg, self._loop = store, loop  # the constructor's request (repr, to_spec)
        self.depth = self._compute_depth()
        # static row sets a call iterates over (computed once, not per call)
        self._all_rows_t = tuple(sorted(self._rows))
        self._all_rows = frozenset(self._rows)
        self._level_rows = None if self._levels is None else [tuple(sorted(level)) for level in self._levels]
        self.options = Options()  # the fast paths' switches (seq2d/core/options.py)
        if steps is None:
            steps = self.depth
        self.steps = None if steps is None else check_steps(steps)
        self._far_output = far_output(n, self._positions, self.inputs, self.outputs)
        self.store = self._build_store()
        self.reset_bias_parameters()
        self._register_load_state_dict_pre_hook(self._migrate_state_dict)
        check_degenerate(self)
        self._prepare()

    def _migrate_state_dict(self, state_dict, prefix, *args) -> None:
        """Checkpoints of the per-block layout load through the handles (seq2d/stores/migrate.py)."""
        migrate_state_dict(self, state_dict, prefix)

    @property
    def loop(self) -> bool:
        """Whether the dense store evaluates one ``F.linear`` per block position (the reference)
        instead of one GEMM per box. Setting it switches the store (a tiled store has no loop
        mode and ignores it)."""
        return self._loop

    @loop.setter
    def loop(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise InvalidType(f"Sequential2D.loop must be a bool, got {type(on).__name__} {on!r}")
        self._loop = on
        if self.store is not None:
            self.store.set_loop(on)

    def _build_store(self):
        """The model's parameter store (:mod:`seq2d.stores`), or None without linear blocks."""
        linear = [(i, j, b) for i, j, k, b in self.positions() if k == "linear"]
        # a LinearBlock bound to another model's store and used here inside a module block
        # owns its values again (it is trained as part of that module)
        # (not when that store is inside the module block too: a nested Sequential2D keeps its own)
        for i, j, k, blk in self.positions():
            if k == "module":
                inner = {id(m.store) for m in blk.modules() if isinstance(m, Sequential2D) and m.store is not None}
                for m in blk.modules():
                    if isinstance(m, LinearBlock) and m.store is not None and id(m.store) not in inner:
                        m._release()
        if not linear:
            return None
        store = build_store(self.sizes, linear, self._levels, self._loop)  # the store the blocks name
        if self._store_arg in ("auto", "tiled") and not store.block_sparse and not self._loop:
            mask = [[False] * self.n for _ in range(self.n)]
            for i, j, _ in linear:
                mask[i][j] = True
            kind, tile = choose_store(self.sizes, mask, store.device.type,
                                      boxes=[(box.rows, box.cols) for box in store.boxes], tiled=self._store_arg == "tiled")
            if kind == "tiled":
                self.store = store
                self.to_blocksparse(tile)
                return self.store
        return store

    def reset_bias_parameters(self, generator: torch.Generator | None = None) -> None:
        """Biases created here start U(-1/sqrt(f), 1/sqrt(f)), f = the row's input width
        (sum of the sizes of the slots its blocks read), as ``nn.Linear`` does."""
        parameters.reset_bias(self, generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """The one entry point for (re)initialisation: every LinearBlock (``nn.Linear``'s
        default, masked), every bias this model created, and every activation or module
        block that has its own ``reset_parameters`` (LayerNorm: ones/zeros)."""
        parameters.reset_all(self, generator)

    def _compute_depth(self) -> int | None:
        """Longest path (in blocks) from the held slots, or None when the graph has a cycle; sets
        the execution plan's levels (non-held slots grouped by depth)."""
        depth, self._levels = depth_and_levels(len(self.sizes), self._positions, self._rows)
        return depth

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
    def matrix(self):
        """The block-sparse matrix (``seq2d.sparse.BlockSparseLinear``) of a tiled model, else None."""
        return self.store.matrix if self.store is not None and self.store.block_sparse else None

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
        return self.slot_bias.handle(i % self.n)  # a view into the bias vector; its .grad works

    def bias_grad(self, i: int) -> Tensor | None:
        """Slot ``i``'s range of the bias vector's gradient (None: no bias or no backward yet)."""
        return self.slot_bias.grad(i % self.n)

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
        """Trainable entries: masked and frozen entries excluded, tied weights counted once. A
        module block that implements ``num_trainable()`` (or a nested Sequential2D, through its
        ``num_parameters()``) reports its own count; other modules count their parameters
        that require grad.

        With the dense store ``sum(p.numel() for p in self.parameters())`` is the same number (a
        masked box stores its trained entries only, :mod:`seq2d.stores.compact`); the tiled store
        (:meth:`to_blocksparse`) keeps whole tiles, so its parameters also hold the masked entries of
        partly trained tiles and the padding of slots that are not whole tiles (docs/concepts.md)."""
        return parameters.num_trainable(self, nested=Sequential2D)

    def grid(self) -> str:
        """The block grid as text (:func:`seq2d.gridtext.grid_text`: the legend is there)."""
        return grid_text(self)

    def summary(self) -> str:
        """Grid, slot table and parameter count as text."""
        return (
            f"Sequential2D: {self.n} slots, N = {self.offsets[-1]}, steps = {self.steps}, "
            f"depth = {self.depth if self.depth is not None else 'cyclic'}, "
            f"trainable parameters = {self.num_parameters():,}\n"
            "rows = outputs, columns = inputs; slot size role | activation\n" + self.grid() + "\n" + LEGEND
        )

    def extra_repr(self) -> str:
        s = f"sizes={list(self.sizes)}, steps={self.steps}"
        if self.inputs != self.held():
            s += f", inputs={list(self.inputs)}"
        if self.outputs != (self.n - 1,):
            s += f", outputs={list(self.outputs)}"
        if self._store_arg != "dense":
            s += f", store={self._store_arg!r}"
        if self._loop:
            s += ", loop=True"
        return s

    @property
    def context_keys(self) -> frozenset | None:
        """The call-time context keys this model accepts (:func:`seq2d.core.state.context_keys`)."""
        return state_io.context_keys(self)

    def _grid_changed(self) -> None:
        """Forget what was computed from the blocks (the step and its plans, context keys, sequence plans)."""
        for k in ("_step_v", "_context_keys_v", "_schedule_plans"):
            self.__dict__.pop(k, None)

    # ------------------------------------------------------------------ the state (seq2d/core/state.py)
    def check_state(self, state) -> State:
        """Validate a state list and return it as a list (typed errors name the slot)."""
        return state_io.check_state(self, state)

    def to_flat(self, state: State) -> tuple[Tensor, frozenset]:
        """``(flat, present)``: the state list as one ``(*batch, flat_size)`` tensor (``None``
        slots and tile padding as zeros; one ``cat``) and the set of non-None slots."""
        return state_io.to_flat(self, state)

    def from_flat(self, flat, present=None, keep: State | None = None, touched=None) -> State:
        """The flat state as slot views: None outside ``present``, ``keep[i]`` outside ``touched``."""
        return state_io.from_flat(self, flat, present, keep, touched)

    def split_inputs(self, x: Tensor) -> State:
        """A state with ``x`` (*batch, in_features) split over the input slots, others None."""
        return state_io.split_inputs(self, x)

    def join_outputs(self, state: State) -> Tensor:
        """The output slots of a state list, concatenated (zeros for None slots)."""
        return state_io.join_outputs(self, state)

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

    # ------------------------------------------------------------------ the flat state
    def _step(self) -> Step:
        """The compiled step (:class:`seq2d.core.step.Step`), built from this model's parts when first
        needed and again after its grid or its store changed (:meth:`_grid_changed`)."""
        step = self.__dict__.get("_step_v")
        store = self.store
        if step is None or step.store is not store:
            step = self.__dict__["_step_v"] = Step(self.sizes, self.flat_offsets, self._rows, self.blocks, self.acts,
                                                   self.slot_bias, store)
        return step

    def _iterate(self, x, present: frozenset, steps: int, hold, context,
                 read: tuple[int, ...] | None = None) -> tuple[Segments, frozenset, frozenset]:
        """``steps`` updates on the flat state (a tensor or Segments; the plan when it applies).
        Returns the new state, the present slots and the slots that were updated. ``read``: the
        only slots the caller reads afterwards (None: all); with a store whose products cost only
        the rows asked for, the last steps then leave out the rows those slots do not depend on
        (:meth:`seq2d.core.step.Step.demand_schedule`; the other slots' values are then stale)."""
        x = x if isinstance(x, Segments) else Segments(x)
        if steps == 0:
            return x, present, frozenset()
        schedule, touched, const = self._schedule(steps, hold, read)
        cache: dict = {} if const is None else {"const": const}  # weights formed once for all the steps of this call
        present = self._step().run(x, present, schedule, context, cache)
        return x, present, touched

    def _schedule(self, steps: int, hold, read) -> tuple:
        """``(schedule, touched, const)`` of a call of ``steps >= 1`` updates (see :meth:`_iterate`):
        the updated slots of each step, all the slots it updates, and the slots no step writes
        (None: the products with them are not hoisted)."""
        if hold is None and self.options.use_plan and self._levels is not None and steps >= self.depth:
            # Acyclic and at least `depth` steps: Jacobi iteration has reached its fixed
            # point, which is evaluating each slot once, level by level (proof in
            # docs/graphs.md; tested against plain iteration in tests/test_plan.py).
            return self._level_rows, self._all_rows, None
        upd, const = self._all_rows_t, None
        if hold is not None:
            held = set(check_slot_list("hold", hold, self.n))
            upd = tuple(i for i in upd if i not in held)
        if steps > 1 and self.store is not None and self.options.use_held_products:
            # slots no step of this call writes (the held inputs, and ``hold``): the store computes
            # their products once per call instead of once per step (seq2d/stores/dense.py)
            memo = memo_dict(self, "_held_during")  # updated rows -> slots never written
            const = memo.get(upd)
            if const is None:
                const = memo[upd] = frozenset(range(self.n)) - frozenset(upd)
            const = const or None
        schedule = repeat(upd, steps)
        if read is not None and self.store is not None and self.store.partial_rows and self.options.use_output_demand:
            schedule = self._step().demand_schedule(upd, steps, read)
        return schedule, frozenset(upd), const

    def _prepare(self) -> None:
        """Build the step plans and the store's index plans of the default calls now, eagerly (the
        tensor call, a list call from the inputs or from every slot, the flat call and ``step``,
        each with the default ``steps``): ``torch.compile`` then traces a model without a graph
        break before any eager call (docs/concepts.md, "Compiled calls"). Other calls (``hold``,
        other ``steps``) build theirs at their first call."""
        step = self._step()
        every, ins = frozenset(range(self.n)), frozenset(self.inputs)
        step.prepare(every, [self._all_rows_t], None)
        if not self.steps:
            return
        for present, read in ((ins, self.outputs), (ins, None), (every, None)):
            step.prepare(present, *self._schedule(self.steps, None, read)[::2])

    def forward_flat(self, x: Tensor, steps: int | None = None, *, hold=None, **context) -> Tensor:
        """``steps`` Jacobi updates on a flat state ``x`` of shape ``(*batch, flat_size)`` (slot
        ``i`` at ``[flat_offsets[i], flat_offsets[i] + sizes[i])``; every slot present).
        Returns the new flat state. The same computation as :meth:`forward` on
        ``from_flat(x)``, without the list conversion at either end."""
        if context:
            state_io.check_context(self, context, "forward_flat")
        x = state_io.check_flat(self, x)
        steps = state_io.resolve_steps(self, steps)
        return self._iterate(x, frozenset(range(self.n)), steps, hold, context)[0].tensor()

    def step_flat(self, x: Tensor, **context) -> Tensor:
        """One Jacobi update of every non-held slot on a flat state (see :meth:`forward_flat`)."""
        if context:
            state_io.check_context(self, context, "step_flat")
        seg = Segments(state_io.check_flat(self, x))
        self._step().advance(seg, frozenset(range(self.n)), self._all_rows_t, context, None)
        return seg.tensor()

    @renamed_keyword("backend", "kernel", "kernel choice")
    def to_blocksparse(self, tile: int = 64, kernel: str = "auto") -> "Sequential2D":
        """Move every linear block into one block-sparse matrix (in place; returns self).

        Slots are padded to whole tiles; tiles with no trainable or frozen entry are not
        stored; tied LinearBlocks share tiles. Outputs are unchanged (within dtype rounding).
        The LinearBlocks are replaced in the grid by :class:`seq2d.stores.TiledBlock` views
        (the old LinearBlock objects own their current values again). ``kernel``: the
        block-sparse kernel, a name from :func:`seq2d.sparse.available_kernels` or "auto"
        (see :func:`seq2d.sparse.resolve_kernel`)."""
        from ..stores import TiledBlock
        from ..sparse import TILE_SIZES
        from ..sparse.linear import BlockSparseLinear

        if isinstance(tile, bool) or tile not in TILE_SIZES:
            raise InvalidValue(f"to_blocksparse: tile must be one of {', '.join(map(str, TILE_SIZES))}, got {tile!r}")
        if self.store is not None and self.store.block_sparse:
            raise InvalidValue("this model is already block-sparse")
        entries = [(i, j, blk) for i, j, _, blk in self.positions() if isinstance(blk, LinearBlock)]
        if not entries:
            raise InvalidValue("this model has no linear blocks to convert")
        eng, groups = BlockSparseLinear.from_blocks(self.sizes, entries, tile, kernel=kernel)
        views: dict[int, TiledBlock] = {}  # one view per group: tied positions stay one object
        for (i, j, blk), g in zip(entries, groups):
            self.blocks[f"{i}_{j}"] = views.setdefault(g, TiledBlock(eng, g, bias=getattr(blk, "bias", None)))
        for blk in {id(b): b for _, _, b in entries}.values():
            blk._release()
        self.store = TiledStore(eng, self._levels)
        self._grid_changed()
        self._prepare()
        return self

    def step(self, state, **context) -> State:
        """One Jacobi update of every non-held slot."""
        if context:
            state_io.check_context(self, context, "step")
        state = state_io.check_state(self, state)
        seg, present = state_io.segments(self, state)
        present = self._step().advance(seg, present, self._all_rows_t, context, None)
        return state_io.from_flat(self, seg, present, state, self._all_rows)

    def forward(self, state, steps: int | None = None, *, hold=None, **context):
        """Run ``steps`` Jacobi updates (see the class docstring). ``hold``: optional slots
        that keep their value during this call, as if their rows were empty."""
        if context:
            state_io.check_context(self, context, "forward")
        if isinstance(state, Tensor):
            return self._forward_tensor(state, steps, context, hold)
        state = state_io.check_state(self, state)
        steps = state_io.resolve_steps(self, steps)
        if steps == 0:
            return list(state)
        x, present = state_io.segments(self, state)
        x, present, touched = self._iterate(x, present, steps, hold, context)
        return state_io.from_flat(self, x, present, state, touched)

    # ------------------------------------------------------------------ sequence mode (seq2d/core/sequence.py)
    def delays(self) -> tuple[int, ...]:
        """Pipeline delay of every slot: (shortest number of blocks from an input slot) - 1,
        0 for input slots and for slots no input reaches."""
        return sequence_mode.delays(self)

    def sequence(self, xs: Tensor, state=None, *, pipeline: bool = True, **context) -> tuple[Tensor, list]:
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
        return sequence_mode.run_sequence(self, xs, state, pipeline, context)

    def _forward_tensor(self, x: Tensor, steps, context, hold=None) -> Tensor:
        state = state_io.split_inputs(self, x)
        state_io.check_state(self, state)
        steps = state_io.resolve_steps(self, steps)
        far = self.__dict__.get("_far_output")
        if far is not None and (far[1] is None or steps < far[1]):
            warn_steps(self, steps)  # the output cannot depend on x (warned once per model)
        flat, present = state_io.segments(self, state)
        flat, present, _ = self._iterate(flat, present, steps, hold, context, read=self.outputs)
        return state_io.read_outputs(self, flat, present)
