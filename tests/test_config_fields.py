"""TrainConfig's field properties live on the fields (``dataclasses.field(metadata=...)``, written by
``seq2d.train.config._f``); the tuples the run machinery asks (``MODEL_FIELDS``, ``OUTPUT_FIELDS``, ...)
are read from them. These tests pin what each property holds, field by field, so an edit of one
field's metadata that changes a run's identity or its resume rules fails here (the config hash of
every committed run is checked by tests/test_run_identity.py)."""

import dataclasses

import pytest

from seq2d.train import config as C

# What the properties held when they were 7 hand-written tuples (commit 5df5692).
# (issue 36: + "loop" in RESUME_FREE_FIELDS, the dense store's loop mode, once store = "loop";
# "iterations" is now "steps", hashed under its old name; "max_steps" is now "max_updates", likewise)
EXPECTED = {
    "CHOICES": {"granularity": ("element", "tile", "block"), "data": ("subset", "full", "mnist1d", "synthetic"),
                "optimizer": ("adam", "sgd"), "optimizer_impl": ("fused", "foreach", "loop"),
                "device": ("auto", "cpu", "cuda"), "dist_backend": ("auto", "gloo", "nccl")},
    "MODEL_FIELDS": {"model", "sizes", "activation", "steps", "granularity", "tile", "region", "model_seed",
                     "image_size"},
    "RESUME_FREE_FIELDS": {"epochs", "device", "dist_backend", "num_threads", "name", "out_dir", "log_every",
                           "eval_batch_size", "max_updates", "quiet", "data_root", "download", "deterministic", "store", "loop",
                           "kernel", "checkpoint_every", "divergence_factor", "tensorboard", "allow_constant_output"},
    "ALLOW_CHANGED_FIELDS": {"lr", "optimizer", "weight_decay", "optimizer_impl"},
    "LEGACY_DEFAULTS": {"optimizer_impl": "loop"},
    "RENAMED_FIELDS": {"backend": ("store", "kernel"), "iterations": ("steps",), "max_steps": ("max_updates",)},
    "OUTPUT_FIELDS": {"name", "out_dir", "quiet", "log_every", "checkpoint_every", "data_root", "download",
                      "tensorboard"},
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_derived_tables_hold_what_the_tuples_held(name):
    value = getattr(C, name)
    assert (value if isinstance(value, dict) else set(value)) == EXPECTED[name]
    if not isinstance(value, dict):
        assert len(set(value)) == len(value)  # no field twice


def test_every_field_carries_every_property():
    keys = {"help", "model", "resume", "output", "choices", "legacy", "was"}
    for f in dataclasses.fields(C.TrainConfig):
        assert set(f.metadata) == keys, f.name
        assert f.metadata["resume"] in ("same", "free", "ask"), f.name
        if f.metadata["output"]:  # where outputs go never blocks a resume
            assert f.metadata["resume"] == "free", f.name
        if f.metadata["choices"]:  # the default is one of the choices
            assert f.default in f.metadata["choices"], f.name


def test_a_field_property_is_read_from_the_field():
    """The tuples are computed from the metadata, not kept beside it: a field declared with a
    property shows up in the derived table."""

    @dataclasses.dataclass
    class Probe:
        a: int = C._f(1, "a", model=True, resume="ask", choices=(1, 2), legacy=2, was="old")
        b: str = C._f("x", "b", output=True)

    meta = {f.name: f.metadata for f in dataclasses.fields(Probe)}
    assert meta["a"]["model"] and meta["a"]["resume"] == "ask" and meta["a"]["legacy"] == 2
    assert meta["b"]["output"] and meta["b"]["resume"] == "free"  # output implies free on resume
    with pytest.raises(AssertionError):
        C._f(1, "c", resume="sometimes")
