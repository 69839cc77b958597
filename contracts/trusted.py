"""`trusted(model, values)`: a model instance from values already in its validated form."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)


def trusted(model: type[Model], values: dict[str, Any]) -> Model:
    """An instance of `model` from `values` that are already in its validated form and name
    every field: what `model_construct` makes (same `__dict__`, every field counted as set),
    without its per-field alias and default lookups, which cost more than the copy itself
    on the hot path (a spec resolved, a scratch frozen, an event drafted, per command)."""
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
