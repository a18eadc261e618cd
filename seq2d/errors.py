"""The errors seq2d raises on purpose, and the policy behind them (docs/errors.md).

Every error a user can cause (a bad argument, spec, config, checkpoint or data file, a
state that does not fit the model, a run that diverged) is a :class:`Seq2DError`. Its
message says what was expected, what arrived, and where: the slot, the block ``F[i][j]``,
the spec key path, the file (and line), the config field or CLI flag. Each class also
derives from the built-in exception it refines, so ``except ValueError`` keeps working:

======================  ==================  ==============================================
class                   also a              raised for
======================  ==================  ==============================================
:class:`InvalidValue`   ``ValueError``      a value out of range, an unknown name, a
                                            combination that cannot work
:class:`InvalidType`    ``TypeError``       an argument of the wrong type or dtype
:class:`InvalidInput`   ``RuntimeError``    a tensor that does not fit (shape, device,
                                            batch dims), as torch reports shape errors
:class:`InvalidIndex`   ``IndexError``      a slot or grid position that does not exist
:class:`MissingFile`    ``FileNotFoundError``  a named file or data root that is not there
======================  ==================  ==============================================

plus the domain errors ``seq2d.train.CheckpointError``, ``seq2d.train.DivergenceError`` (and its
case ``NonFiniteLossError``), ``seq2d.train.RunLockedError``, ``seq2d.train.RunExistsError``,
``seq2d.train.ConstantOutputError`` and the data errors of :mod:`seq2d.data`, all Seq2DErrors. Anything else escaping seq2d is
a bug: the CLI prints seq2d's errors as one ``seq2d: error: ...`` line (exit 2) and shows
the traceback of anything else, saying it is a bug.
"""

from __future__ import annotations

__all__ = ["Seq2DError", "InvalidValue", "InvalidType", "InvalidInput", "InvalidIndex", "MissingFile", "closest_name",
           "did_you_mean", "show_value", "renamed_keyword"]

# How close a misspelling must be to a valid name for a hint (difflib's ratio): one rule everywhere.
HINT_CUTOFF = 0.7


def closest_name(word, choices) -> str | None:
    """The valid name closest to ``word``, or None: ``-`` read as ``_``, then difflib's ratio of at
    least :data:`HINT_CUTOFF`, then a valid name contained in the word or containing it."""
    import difflib

    if not isinstance(word, str):
        return None
    alt = word.replace("-", "_")
    if alt != word and alt in choices:
        return alt
    names = [c for c in choices if isinstance(c, str)]
    close = difflib.get_close_matches(word, names, n=1, cutoff=HINT_CUTOFF)
    if close:
        return close[0]
    # a valid name inside the word or the word inside one ('src_mask' -> 'mask'): the longest
    inside = [c for c in names if len(min(c, word, key=len)) >= 3 and (c in word or word in c)]
    return max(inside, key=len) if inside else None


def did_you_mean(word, choices) -> str:
    """``" (did you mean 'x'?)"`` for the valid name closest to ``word``, or ``""``: the hint every
    unknown-name error gives (keys, choices, fields, keyword arguments)."""
    c = closest_name(word, choices)
    return f" (did you mean {c!r}?)" if c is not None else ""


def show_value(v) -> str:
    """``type value`` for messages about a value that arrived (``int 3``, ``str 'x'``), long
    values shortened to 60 characters: how spec and config errors say what they got."""
    r = repr(v)
    if len(r) > 60:
        r = r[:57] + "..."
    return f"{type(v).__name__} {r}"


def renamed_keyword(old: str, new: str | tuple[str, ...], meaning: str | None = None):
    """Decorator for a callable whose keyword ``old`` is now ``new`` (one name, or the names that
    replace it): a call that still passes ``old`` raises :class:`InvalidType` naming the new keyword
    (``Sequential2D got backend='dense'; the store choice is now store=``, given ``meaning``;
    without it ``TrainConfig got max_steps=3; it is now called max_updates=3``). Not a shim: the
    old keyword's value is never used."""
    import functools

    news = (new,) if isinstance(new, str) else tuple(new)

    def wrap(fn):
        owner = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if old in kwargs:
                v = kwargs[old]
                now = (f"the {meaning} is now {' or '.join(n + '=' for n in news)}" if meaning is not None
                       else "it is now called " + " or ".join(f"{n}={v!r}" for n in news))
                raise InvalidType(f"{owner} got {old}={v!r}; {now}")
            return fn(*args, **kwargs)

        return call

    return wrap


class Seq2DError(Exception):
    """Base of every error seq2d raises on purpose (see the module docstring)."""


class InvalidValue(Seq2DError, ValueError):
    """A value out of range, an unknown name, or a combination that cannot work."""


class InvalidType(Seq2DError, TypeError):
    """An argument of the wrong type or dtype."""


class InvalidInput(Seq2DError, RuntimeError):
    """A tensor that does not fit: shape, batch dims, device."""


class InvalidIndex(Seq2DError, IndexError):
    """A slot or grid position that does not exist."""


class MissingFile(Seq2DError, FileNotFoundError):
    """A named file or data root that is not there."""
