"""The switches of a :class:`seq2d.Sequential2D`'s fast paths, in one object (``model.options``).

Each switch turns one fast path off for a comparison or a measurement; the result is the same
(each path is tested equal to the step loop). ``model.use_plan = False`` and
``model.options.use_plan = False`` are the same assignment: the model's attributes of these
names are :class:`option` views of ``model.options``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Options", "option"]


@dataclass
class Options:
    use_plan: bool = True  # evaluate an acyclic model level by level when steps >= depth
    use_held_products: bool = True  # products with the slots no step of a call writes: once per call
    use_output_demand: bool = True  # the tensor call's last steps skip rows its outputs never read
    use_schedule: bool = True  # sequence mode component by component (False: the step loop)


class option:
    """A model attribute that reads and writes the field of the same name of ``model.options``."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, model, owner=None):
        return self if model is None else getattr(model.options, self.name)

    def __set__(self, model, value) -> None:
        setattr(model.options, self.name, value)
