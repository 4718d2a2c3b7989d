"""Deckhouse's discovery-data schemas: the shared pieces each cloud's models are built of.

Two documents per cloud, each checked by Deckhouse's hooks against a schema of its kind and
apiVersion (``dhctl`` ``config.ValidateDiscoveryData``): the layout's ``cloud_discovery_data``
(``d8-provider-cluster-configuration``, key ``cloud-provider-discovery-data.json``) and the
discoverer's document (``d8-cloud-provider-discovery-data``, key ``discovery-data.json``).

Rules:
- Each cloud's ``discovery_schema`` module describes its two documents as models of these
  pieces and names them in a :class:`DiscoverySchemas` on its provider record;
  :func:`validate` raises pydantic's ``ValidationError`` for what Deckhouse would refuse.
- Closed where upstream is: dhctl closes every object schema that leaves
  ``additionalProperties`` unset, nested ones included, so those models forbid extra keys.
- Types are strict (no ``"true"`` for a boolean); a key may be absent, never ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

T = TypeVar("T")


def unique(items: list[T]) -> list[T]:
    """``uniqueItems: true`` (objects compared by value)."""
    seen: list[Any] = []
    for item in items:
        key = item.model_dump() if isinstance(item, BaseModel) else item
        if key in seen:
            raise ValueError(f"duplicate item {key!r}")
        seen.append(key)
    return items


NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Names = Annotated[list[NonEmpty], AfterValidator(unique)]
SomeNames = Annotated[list[NonEmpty], Field(min_length=1), AfterValidator(unique)]


class Closed(BaseModel):
    """An object schema Deckhouse closes: unknown keys are refused (a default stands for an
    absent key; it is not checked)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Open(BaseModel):
    """``additionalProperties: true``: any further key passes."""

    model_config = ConfigDict(extra="allow", strict=True)


@dataclass(frozen=True)
class DiscoverySchemas:
    """One cloud's two documents: the layout's ``cloud_discovery_data`` and the discoverer's
    ``discovery-data.json``."""

    layout: type[BaseModel]
    discoverer: type[BaseModel]


def validate(model: type[BaseModel], document: Mapping[str, Any]) -> BaseModel:
    """``document`` as ``model`` reads it; ``ValidationError`` when Deckhouse would refuse it."""
    return model.model_validate(dict(document))
