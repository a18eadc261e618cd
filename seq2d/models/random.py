"""``randomize``: a Sequential2D with exactly a template's trainable-parameter count, its
trainable entries placed uniformly at random over a region of the full block matrix.

This is the "randomized" model of Hershey et al. (arXiv 2404.00880), made exact: the public
scripts masked every block of rows 1-4 at density 0.5108 and reported an approximate count
(biases unmasked, dense count reported). Here

    weights placed  =  template.num_parameters()  -  biases  -  activation parameters

so ``randomize(t).num_parameters() == t.num_parameters()`` always.

Granularities:

``element``  exactly ``W`` entries drawn without replacement, uniformly over the region.
``tile``     whole ``T x T`` tiles of the matrix (drawn uniformly among the region's tiles,
             slots padded to whole tiles as the matrix does), then a top-up of single
             entries inside one more tile to reach ``W`` exactly. Built directly as a
             block-sparse matrix (no dense block is ever formed), so the matrix really
             skips the absent tiles.
``block``    whole slot-blocks ``F[i][j]`` drawn uniformly among the region's blocks, then a
             top-up of single entries inside one more block.

Initialisation (all granularities): the trainable weights and the bias of output unit
``r`` are drawn ``U(-1/sqrt(m_r), 1/sqrt(m_r))``, where ``m_r`` is the number of trainable
weights in row ``r`` of the N x N matrix (its actual fan-in; 1 when it has none). For a
dense MLP this is exactly ``nn.Linear``'s rule; for a sparse row it keeps the pre-activation
variance independent of how many entries the draw happened to give that unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ..errors import InvalidValue, renamed_keyword
from ..sampling import choose
from ..activations import activation_name
from ..arguments import check_factory, check_seed
from .feedforward import from_mask
from ..core.checks import check_sizes
from ..core import Sequential2D, core_of
from .registry import register_model

__all__ = ["randomize", "region_mask", "random_model", "random_mask", "random_blocks_density", "random_tiles",
           "random_tile_matrix"]

GRANULARITIES = ("element", "tile", "block")


def region_mask(core: Sequential2D, region=None) -> Tensor:
    """The (n, n) bool block mask of blocks where trainable entries may go.

    ``None`` / ``"default"``: every non-input row x every column (input rows held);
    ``"feedforward"``: non-input rows, columns strictly earlier (i > j): an acyclic model;
    ``"no-shortcut"``: the default region without the blocks from an input slot straight into
    an output slot (no linear input -> output shortcut: the prediction must pass a hidden slot);
    ``"template"``: the template's own non-absent blocks; or an explicit (n, n) bool mask.
    """
    n = core.n
    inputs = set(core.inputs)
    if region is None or region == "default":
        m = torch.ones(n, n, dtype=torch.bool)
        for i in inputs:
            m[i] = False
        return m
    if region == "no-shortcut":
        m = region_mask(core, "default")
        for o in core.outputs:
            for i in inputs:
                m[o, i] = False
        return m
    if region == "feedforward":
        m = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
        for i in inputs:
            m[i] = False
        return m
    if region == "template":
        m = torch.zeros(n, n, dtype=torch.bool)
        for i, j, _, _ in core.positions():
            m[i, j] = True
        return m
    if isinstance(region, str):
        raise InvalidValue(f"Unknown region {region!r}. Select from 'default', 'feedforward', 'no-shortcut', 'template', or pass an (n, n) bool mask")
    m = torch.as_tensor(region)
    if m.dtype != torch.bool or tuple(m.shape) != (n, n):
        raise InvalidValue(f"region must be an ({n}, {n}) bool block mask, got {m.dtype} of shape {tuple(m.shape)}")
    bad = [i for i in inputs if bool(m[i].any())]
    if bad:
        raise InvalidValue(f"region puts entries in the rows of input slots {bad}; input slots are held")
    return m.clone()


def _act_spec(core: Sequential2D) -> list:
    import copy

    out = []
    for i in range(core.n):
        a = core.acts[i]
        name = activation_name(a)
        out.append(name if name is not None else copy.deepcopy(a))
    return out


@register_model
@renamed_keyword("backend", "kernel", "kernel choice")
def random_model(sizes: Sequence[int] = (64, 32, 16, 10), activation="relu", granularity: str = "element",
                 region=None, seed: int = 0, tile: int = 64, steps: int | None = None, kernel: str = "auto", *,
                 device=None, dtype=None) -> Sequential2D:
    """The randomized model of the paper: ``randomize(mlp(sizes, activation))``, i.e. the MLP's
    exact trainable-parameter count placed at random over ``region`` (see :func:`randomize`).
    The registry entry that ``seq2d train``, ``seq2d mnist`` and the ``random_model:`` preset use."""
    from .feedforward import mlp

    check_seed(seed, "random_model")
    check_factory(device, dtype, "random_model")
    return randomize(mlp(sizes, activation=activation), granularity=granularity, region=region, seed=seed,
                     tile=tile, steps=steps, kernel=kernel, device=device, dtype=dtype)


@register_model(name="random_mask")
def random_mask(sizes: Sequence[int] = (64, 32, 16, 10), density: float = 0.1, seed: int = 0, activation="relu",
                steps: int | None = None, *, device=None, dtype=None) -> Sequential2D:
    """An element mask over every non-input row x every column (slot 0 is the input), each
    entry kept with probability ``density``: a cyclic model iterated ``steps`` (default
    ``len(sizes) - 1``) times."""
    _check_density(density)
    check_seed(seed, "random_mask")
    check_factory(device, dtype, "random_mask")
    sizes = list(check_sizes(sizes))
    N, s0 = sum(sizes), sizes[0]
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(N, N, dtype=torch.bool)
    mask[s0:] = torch.rand(N - s0, N, generator=g) < density
    return from_mask(sizes, mask, activations=activation, seed=seed, inputs=[0],
                     steps=len(sizes) - 1 if steps is None else steps, device=device, dtype=dtype)


@register_model(name="random_blocks_density")
def random_blocks_density(sizes: Sequence[int] = (2500, 500, 200, 100, 10), density: float = 0.5108, seed: int = 0,
                          activation="relu", steps: int | None = None, output_activation: bool = True, *,
                          device=None, dtype=None) -> Sequential2D:
    """Our reading of the MS-thesis randomized model (the scripts as described in our audit,
    not re-read): every block of rows 1..L (every non-input slot x every slot, slot 0 the
    input) is a masked :class:`~seq2d.blocks.LinearBlock` keeping exactly
    ``round(density * block size)`` entries, drawn uniformly, with its own bias
    (``LinearBlock(bias=True)``; no slot biases); ``activation`` on every non-input slot,
    the output too when ``output_activation`` (so between steps and on the returned
    logits; the held input slot keeps its value, which ReLU leaves alone for pixels in
    [0, 1]). ``steps`` default ``len(sizes) - 1``. The parameter count is not matched to
    the MLP's (masked weights plus one bias per block)."""
    from ..blocks import LinearBlock

    _check_density(density)
    check_seed(seed, "random_blocks_density")
    check_factory(device, dtype, "random_blocks_density")
    sizes = list(check_sizes(sizes))
    n = len(sizes)
    g = torch.Generator().manual_seed(seed)
    blocks = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in range(1, n):
            for j in range(n):
                total = sizes[i] * sizes[j]
                keep = max(1, round(density * total))
                mask = torch.zeros(total, dtype=torch.bool)
                mask[choose(total, keep, g)] = True
                blocks[(i, j)] = LinearBlock(sizes[j], sizes[i], mask=mask.view(sizes[i], sizes[j]), bias=True,
                                             device=device, dtype=dtype)
    acts = [None] + [activation] * (n - 2) + [activation if output_activation else None]
    return Sequential2D(sizes, blocks, bias=False, activations=acts, inputs=[0], outputs=[n - 1],
                        steps=n - 1 if steps is None else steps, device=device, dtype=dtype)


@register_model(name="random_tiles")
@renamed_keyword("backend", "kernel", "kernel choice")
def random_tiles(sizes: Sequence[int] = (64, 32, 16, 10), density: float = 0.1, tile: int = 64, seed: int = 0,
                 activation="relu", steps: int | None = None, kernel: str = "auto", *, device=None, dtype=None
                 ) -> Sequential2D:
    """``T x T`` tiles placed at random (exactly ``round(density * allowed)`` of the tiles of every
    non-input row x every column) in one block-sparse matrix; slot 0 is the input, the last
    slot the output, rows without a tile are held."""
    from ..stores import TiledBlock

    check_seed(seed, "random_tiles")
    check_factory(device, dtype, "random_tiles")
    g = torch.Generator().manual_seed(seed)
    eng = random_tile_matrix(sizes, tile, density, generator=g, kernel=kernel, device=device, dtype=dtype)
    blocks = {(i, j): TiledBlock(eng, grp) for i, j, grp in eng.placements}
    n = len(sizes)
    acts = [None] + [activation] * (n - 2) + [None]
    rows = {i for i, _ in blocks}
    acts = [a if i in rows else None for i, a in enumerate(acts)]
    return Sequential2D(sizes, blocks, bias=[i in rows for i in range(n)], activations=acts, inputs=[0],
                        outputs=[n - 1], steps=n - 1 if steps is None else steps, device=device, dtype=dtype)


def _check_density(p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InvalidValue(f"density must be a number in (0, 1], got {type(p).__name__} {p!r}")
    if not 0 < p <= 1:
        raise InvalidValue(f"density must be in (0, 1], got {p}")


# ---------------------------------------------------------------------- tile placement (one implementation)
def _tile_counts(sizes: Sequence[int], T: int) -> list[int]:
    return [math.ceil(s / T) for s in sizes]


def _matrix_of(sizes, T: int, blocks, patterns: dict, *, kernel, device, dtype):
    """The matrix holding the chosen tiles: one group per block of the region with a tile."""
    from ..sparse import TILE_SIZES
    from ..sparse.linear import BlockSparseLinear, Group

    if T not in TILE_SIZES:
        raise InvalidValue(f"tile must be one of {', '.join(map(str, TILE_SIZES))}, got {T}")
    groups, placements = [], []
    for bi, (i, j) in enumerate(blocks):
        if bi in patterns and bool(patterns[bi].any()):
            placements.append((i, j, len(groups)))
            groups.append(Group((sizes[i], sizes[j]), patterns[bi]))
    return BlockSparseLinear(sizes, T, groups, placements, kernel=kernel, device=device, dtype=dtype)


@renamed_keyword("backend", "kernel", "kernel choice")
def random_tile_matrix(sizes: Sequence[int], tile: int, density: float, *, region: Tensor | None = None,
                       generator: torch.Generator | None = None, kernel: str = "auto", device=None, dtype=None):
    """A :class:`~seq2d.sparse.BlockSparseLinear` with tiles placed uniformly at random: exactly
    ``round(density * allowed)`` of the allowed tiles, each grid block its own group, values
    ``U(-1/sqrt(f), 1/sqrt(f))`` with ``f`` the stored fan-in of the tile-row. ``region`` is an
    (n, n) bool block mask of allowed blocks (default: every non-first row, every column).
    Never forms anything N x N."""
    _check_density(density)
    T, n = tile, len(sizes)
    nt = _tile_counts(sizes, T)
    if region is None:
        region = torch.ones(n, n, dtype=torch.bool)
        region[0] = False
    blocks = region.nonzero().tolist()
    counts = [nt[i] * nt[j] for i, j in blocks]
    total = sum(counts)
    k = round(density * total)
    if not 0 < k <= total:
        raise InvalidValue(f"density {density} gives {k} tiles of {total} allowed; need at least one")
    pick = choose(total, k, generator)
    starts = torch.tensor([0] + counts).cumsum(0)
    which = torch.searchsorted(starts, pick, right=True) - 1
    patterns = {}
    for bi in which.unique().tolist():
        i, j = blocks[bi]
        loc = pick[which == bi] - starts[bi]
        p = torch.zeros(nt[i], nt[j], dtype=torch.bool)
        p[loc // nt[j], loc % nt[j]] = True
        patterns[bi] = p
    eng = _matrix_of(sizes, T, blocks, patterns, kernel=kernel, device=device, dtype=dtype)
    eng.reset_parameters(generator)
    return eng


@renamed_keyword("backend", "kernel", "kernel choice")
def randomize(template, granularity: str = "element", region=None, seed: int = 0, *, tile: int = 64,
              steps: int | None = None, bias: bool = True, kernel: str = "auto", params: int | None = None,
              device=None, dtype=None) -> Sequential2D:
    """A linear-block Sequential2D with exactly ``template.num_parameters()`` trainable
    parameters, placed uniformly at random over ``region`` (see the module docstring).

    ``params``: place this many trainable parameters instead (weights + biases + activation
    parameters, as for the template's count): the template then gives only the block matrix
    (slot sizes, activations, steps), e.g. a smaller MLP's count over a larger matrix.

    Slot sizes, activations, inputs and outputs are the template's; ``steps`` defaults to
    the template's (its depth for an MLP: 4 for [2500, 500, 200, 100, 10]). Every non-input
    slot has a bias when ``bias`` (the biases count towards the total). ``seed`` fixes the
    placement and the initial values.
    """
    check_seed(seed, "randomize")
    check_factory(device, dtype, "randomize")
    if granularity not in GRANULARITIES:
        raise InvalidValue(f"Unknown granularity {granularity!r}. Select from " + ", ".join(repr(g) for g in GRANULARITIES))
    core = core_of(template, "randomize expects")
    if params is not None and (isinstance(params, bool) or not isinstance(params, int) or params < 1):
        raise InvalidValue(f"randomize: params must be a positive int (or None for the template's count), got {params!r}")
    target = template.num_parameters() if params is None else params
    sizes = core.sizes
    n = core.n
    inputs = list(core.inputs)
    reg = region_mask(core, region)
    if steps is None:
        steps = core.steps
    if steps is None:
        raise InvalidValue("the template has no default step count (cyclic); pass steps=")
    acts = _act_spec(core)
    n_act = sum(p.numel() for p in core.acts.parameters() if p.requires_grad)
    off = [0]
    for s in sizes:
        off.append(off[-1] + s)
    area = sum(sizes[i] * sizes[j] for i, j in reg.nonzero().tolist())
    biased = [bias and i not in inputs and bool(reg[i].any()) for i in range(n)]
    # A slot that draws no entry at all is held (empty row) and can carry no bias; its bias
    # budget then goes to the weights and the draw is repeated with the same seed.
    for _ in range(n + 1):
        n_bias = sum(sizes[i] for i in range(n) if biased[i])
        W = target - n_bias - n_act
        if W <= 0 or W > area:
            raise InvalidValue(f"cannot place {W} weights (template {target} - biases {n_bias} - activation "
                             f"parameters {n_act}) in a region of {area} entries")
        gen = torch.Generator().manual_seed(seed)
        kw = dict(activations=acts, bias=list(biased), inputs=inputs, outputs=list(core.outputs), steps=steps,
                  device=device, dtype=dtype)
        if granularity == "tile":
            model, filled = _tile_model(core, reg, W, tile, gen, kernel=kernel, **kw)
        else:
            elem = _element_mask(sizes, off, reg, W, granularity, area, gen)
            filled = {i for i in range(n) if bool(elem[off[i]:off[i + 1]].any())}
            if all(filled >= {i} for i in range(n) if biased[i]):
                kw["activations"] = [a if i in filled else None for i, a in enumerate(acts)]  # empty rows are held
                model = from_mask(sizes, elem, seed=int(torch.randint(0, 2**31 - 1, (1,), generator=gen)), **kw)
        empty = [i for i in range(n) if biased[i] and i not in filled]
        if not empty:
            break
        for i in empty:
            biased[i] = False
    got = model.num_parameters()
    if got != target:  # an invariant, not a user error: fail loudly
        raise RuntimeError(f"randomize produced {got} trainable parameters, expected {target}")
    return model


def _element_mask(sizes, off, reg: Tensor, W: int, granularity: str, area: int, gen: torch.Generator) -> Tensor:
    """The N x N element mask of ``W`` entries drawn by element or by whole blocks + top-up."""
    N = off[-1]
    elem = torch.zeros(N, N, dtype=torch.bool)
    blocks = reg.nonzero().tolist()
    if granularity == "element":
        # one flat index space over the region's blocks, row-major inside each block
        counts = [sizes[i] * sizes[j] for i, j in blocks]
        _scatter(elem, blocks, counts, choose(area, W, gen), sizes, off)
        return elem
    left = W
    for b in torch.randperm(len(blocks), generator=gen).tolist():
        i, j = blocks[b]
        c = sizes[i] * sizes[j]
        if c <= left:
            elem[off[i]:off[i + 1], off[j]:off[j + 1]] = True
            left -= c
        elif left > 0:  # top up inside this block
            sub = torch.zeros(c, dtype=torch.bool)
            sub[choose(c, left, gen)] = True
            elem[off[i]:off[i + 1], off[j]:off[j + 1]] = sub.view(sizes[i], sizes[j])
            left = 0
    return elem


def _scatter(elem: Tensor, blocks, counts, picks: Tensor, sizes, off) -> None:
    """Set the flat region indices ``picks`` in the N x N element mask."""
    starts = torch.tensor([0] + list(counts)).cumsum(0)
    which = torch.searchsorted(starts, picks, right=True) - 1
    for b in which.unique().tolist():
        i, j = blocks[b]
        loc = picks[which == b] - starts[b]
        elem[off[i] + loc // sizes[j], off[j] + loc % sizes[j]] = True


def _tile_model(core: Sequential2D, reg: Tensor, W: int, T: int, gen: torch.Generator, *, kernel, activations,
                bias, inputs, outputs, steps, device, dtype) -> Sequential2D:
    from ..stores import TiledBlock

    sizes = core.sizes
    n = core.n
    nt = _tile_counts(sizes, T)
    # every candidate tile of the region with its number of real (unpadded) entries
    cand = []  # (block index, a, b, real entries)
    blocks = reg.nonzero().tolist()
    for bi, (i, j) in enumerate(blocks):
        for a in range(nt[i]):
            ra = min(T, sizes[i] - a * T)
            for b in range(nt[j]):
                cand.append((bi, a, b, ra * min(T, sizes[j] - b * T)))
    order = torch.randperm(len(cand), generator=gen).tolist()
    chosen, left, partial = [], W, None
    for t in order:
        c = cand[t][3]
        if c <= left:
            chosen.append(t)
            left -= c
            if left == 0:
                break
        elif partial is None:
            partial = t  # the first tile that does not fit whole: top up inside it
    if left > 0:
        if partial is None:
            raise InvalidValue(f"cannot place {W} weights in whole tiles of this region")
        chosen.append(partial)
    patterns = {bi: torch.zeros(nt[i], nt[j], dtype=torch.bool) for bi, (i, j) in enumerate(blocks)}
    for t in chosen:
        bi, a, b, _ = cand[t]
        patterns[bi][a, b] = True
    filled = {blocks[bi][0] for bi, p in patterns.items() if bool(p.any())}
    if any(bias[i] and i not in filled for i in range(n)):
        return None, filled
    activations = [a if i in filled else None for i, a in enumerate(activations)]  # empty rows are held
    eng = _matrix_of(sizes, T, blocks, patterns, kernel=kernel, device=device, dtype=dtype)
    placements = eng.placements
    if left > 0:  # keep `left` random real entries of the partial tile trainable
        bi, a, b, c = cand[partial]
        g = next(gi for gi, (ii, jj, _) in enumerate(placements) if (ii, jj) == tuple(blocks[bi]))
        d = eng.groups[g].data_index[eng.groups[g].tiles.index([a, b])]
        i, j = blocks[bi]
        ra, rb = min(T, sizes[i] - a * T), min(T, sizes[j] - b * T)
        keep = torch.zeros(ra * rb, dtype=torch.bool)
        keep[choose(ra * rb, left, gen)] = True
        tm = eng.tmask if eng.tmask is not None else torch.ones_like(eng.data, dtype=torch.bool)
        tm = tm.clone()
        tile_mask = torch.zeros(T, T, dtype=torch.bool)
        tile_mask[:rb, :ra] = keep.view(ra, rb).T  # transposed storage: [in, out]
        tm[d] = tile_mask.to(tm.device)
        eng.tmask = tm
    eng.reset_parameters(gen)
    model = Sequential2D(sizes, {(i, j): TiledBlock(eng, g) for i, j, g in placements}, bias=bias,
                         activations=activations, inputs=inputs, outputs=outputs, steps=steps, device=device, dtype=dtype)
    # biases: the same fan-in rule as the weights
    with torch.no_grad():
        fan = _matrix_fan_in(eng)
        for k, p in model.biases.items():
            i = int(k)
            o = eng.toff[i] * T
            bound = fan[o:o + sizes[i]].clamp(min=1).rsqrt()
            u = torch.rand(sizes[i], generator=gen, dtype=torch.float64) * 2 - 1
            p.copy_((u * bound.to(torch.float64).cpu()).to(p.dtype))
    return model, filled


def _matrix_fan_in(eng) -> Tensor:
    """Trainable fan-in of every padded output unit of the matrix (length Mt*T)."""
    L = eng._layout  # the CPU copy of the layout: counted on the CPU whatever the matrix's device
    T = eng.tile
    per = eng.tmask.sum(dim=1).cpu() if eng.tmask is not None else torch.full((L.n_data, T), T)
    fan = torch.zeros(L.Mt, T, dtype=torch.long)
    fan.index_add_(0, L.row, per.index_select(0, L.data_index).long())
    return fan.view(-1).to(torch.float64)
