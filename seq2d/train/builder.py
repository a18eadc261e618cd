"""Building the model a training config names (:func:`build_model`), and the device it runs on
(:func:`resolve_device`)."""

from __future__ import annotations

import os

import torch
from torch import nn

from ..blocks import no_cuda_error
from ..errors import InvalidValue, did_you_mean
from .config import TrainConfig
from .errors import ConstantOutputError, spell

__all__ = ["build_model", "check_output_sees_input", "resolve_device"]


# ---------------------------------------------------------------------- model
# Config field -> the constructor keyword(s) it feeds, when the registered constructor's
# signature names one of them. Not a table of models: the names are the registry's.
_MODEL_KWARGS = {
    "sizes": ("sizes",),
    "activation": ("activation",),
    "granularity": ("granularity",),
    "tile": ("tile",),
    "region": ("region",),
    "store": ("store",),
    "kernel": ("kernel",),
    "loop": ("loop",),
    "steps": ("steps",),
}


def build_model(cfg: TrainConfig, *, device=None) -> nn.Module:
    """The model ``cfg.model`` names (:func:`seq2d.models.resolve_model`), built from
    ``cfg.model_seed`` (None = ``cfg.seed``).

    - a registered name (``seq2d.list_models()``, e.g. "mlp", "random_model"): the constructor is
      called with the config fields its signature names (``sizes``, ``activation``,
      ``granularity``, ``tile``, ``region``, ``store`` and ``kernel`` unless "auto",
      ``steps`` unless None, ``seed`` = the model seed); "random_model" is
      :func:`seq2d.models.random.random_model`, ``randomize(mlp(sizes, activation))``;
    - a preset string (``"mlp:784,256,10"``, see :mod:`seq2d.models.presets`) or a spec file
      path (.toml/.json, :func:`seq2d.from_spec`): its structure comes from the string/file.

    The global RNG is seeded with the model seed while building and restored after. A model
    field set away from its default that the builder does not use raises ValueError (never
    silently ignored), except ``steps`` and ``loop``, which are then set on the model (``model.steps``,
    ``model.loop``).
    """
    from ..arguments import check_device
    from ..models import constructor_options, list_models, resolve_model
    from ..models.presets import names_a_file

    check_device(device, "build_model")
    defaults = TrainConfig()
    seed = cfg.effective_model_seed()
    changed = [k for k in _MODEL_KWARGS if k not in ("steps", "loop") and getattr(cfg, k) != getattr(defaults, k)]
    consumed: set[str] = set()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg.model in list_models():
            available = {f: (names, getattr(cfg, f)) for f, names in _MODEL_KWARGS.items()
                         if not ((f in ("store", "kernel") and getattr(cfg, f) == "auto") or (f == "steps" and cfg.steps is None)
                                 or (f == "loop" and not cfg.loop))}
            available["seed"] = (("seed",), seed)
            kwargs, consumed = constructor_options(cfg.model, available)
            consumed.discard("seed")
            model = resolve_model(cfg.model, **kwargs)
            source = "not in its signature"
        elif ":" in cfg.model or names_a_file(cfg.model):
            model = resolve_model(cfg.model, where="config field 'model'")
            source = "its structure comes from the preset string or spec file"
        else:
            raise InvalidValue(
                f"config field 'model': unknown model {cfg.model!r}{did_you_mean(cfg.model, list_models())}. Select from "
                + ", ".join(repr(m) for m in list_models())
                + ", a preset string such as 'mlp:784,256,10', or the path of a spec file (.toml/.json)"
            )
    ignored = [k for k in changed if k not in consumed]
    if ignored:
        raise InvalidValue(
            f"config field(s) {', '.join(map(repr, ignored))} are set, but model {cfg.model!r} does not use them "
            f"({source}); leave them at their defaults"
        )
    if cfg.steps is not None and "steps" not in consumed:
        from ..core.checks import check_steps
        from ..core import core_of

        try:
            target = core_of(model)
        except TypeError:
            raise InvalidValue(f"config field 'steps' is set, but a {type(model).__name__} has no Sequential2D steps to set") from None
        target.steps = check_steps(cfg.steps)
    if cfg.loop and "loop" not in consumed:
        from ..core import core_of

        try:
            target = core_of(model)
        except TypeError:
            raise InvalidValue(f"config field 'loop' is set, but a {type(model).__name__} has no Sequential2D store to "
                               "evaluate block by block") from None
        target.loop = True
    if device is not None:
        model = model.to(device)
    return model


def check_output_sees_input(model: nn.Module, cfg: TrainConfig) -> None:
    """Refuse, before any training, a Sequential2D whose output cannot depend on its input within
    the steps it runs per forward (``model.steps``: ``cfg.steps`` or its depth), because the
    trained model would be a constant predictor: :class:`~seq2d.train.errors.ConstantOutputError`
    names the output slot, its distance from the input slots and the steps it needs (the
    test of the warning a tensor call gives, :func:`seq2d.core.checks.unseen_output`).
    ``cfg.allow_constant_output`` lets it train; other models (wrappers run their own schedule)
    are not checked."""
    from ..core import Sequential2D
    from ..core.checks import unseen_output, unseen_output_text

    if cfg.allow_constant_output or not isinstance(model, Sequential2D) or model.steps is None:
        return  # a cyclic model without steps: its forward call says so
    steps = model.steps
    unseen = unseen_output(model, steps)
    if unseen is None:
        return
    slot, dist = unseen
    allow = spell("set allow_constant_output=True in the TrainConfig", "add --allow-constant-output")
    runs = ("; " + spell(f"steps={cfg.steps}", f"--steps {cfg.steps}")
            if cfg.steps is not None and dist is not None else "")
    if dist is None:
        fix = f"Add a path of blocks from an input slot to slot {slot}, or {allow} to train it anyway"
    else:
        fix = (f"Give it at least {dist} steps ({spell(f'steps={dist}', f'--steps {dist}')}; unset, "
               f"an acyclic model runs its depth), or {allow} to train it anyway")
    raise ConstantOutputError(
        f"refusing to train a model whose output cannot see its input ({unseen_output_text(model, steps, unseen)}"
        f"{runs}): the trained model would predict a constant. {fix}", slot=slot, distance=dist, steps=steps)


# ---------------------------------------------------------------------- device
def resolve_device(device: str | torch.device = "auto", local_rank: int | None = None) -> torch.device:
    """``"auto"``: cuda (this process's GPU) when available, else cpu. ``"cuda"`` without a
    GPU raises RuntimeError rather than silently running on the CPU. ``local_rank`` picks this
    process's GPU; None: ``LOCAL_RANK`` while a process group runs, else 0."""
    if isinstance(device, torch.device):
        return device
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise InvalidValue(f"Unknown device {device!r}. Select from 'auto', 'cpu', 'cuda'")
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise no_cuda_error(spell("config field 'device'", "--device"), device,
                            spell("device = 'cpu' or 'auto' (cuda when available)",
                                  "--device cpu or --device auto (cuda when available)"))
    if device.startswith("cuda:"):
        return torch.device(device)
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", 0)) if group_started() else 0
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def group_started() -> bool:
    """Whether a torch.distributed process group runs in this process (started by torchrun's
    run or by the caller)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
