"""The building blocks every API model shares: the base class and common field types.

Kept apart from the spec and status models so both can use them without importing each other.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

# Kubernetes resource quantities ("16", "500m", "64Gi"): apimachinery's own grammar, the
# pattern controller-gen writes into CRDs for resource.Quantity.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantity_text(value: object) -> object:
    # YAML reads `cpu: 32` as an int and `cpu: 0.5` as a float; Kubernetes accepts numbers
    # for quantities, so do we (the pattern below still judges the text).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


# On the wire an int-or-string, exactly like Kubernetes' own resource.Quantity.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    Field(pattern=QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# An open Kubernetes object passed through as the user wrote it (volumes, affinity...).
KubeObject = dict[str, Any]


class Model(BaseModel):
    """Base for every API object: camelCase aliases, unknown fields are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        # The docstring under each field is its description: in the CRD (`kubectl explain`)
        # and in docs/api.md, from one place.
        use_attribute_docstrings=True,
    )

    def dump(self) -> dict[str, Any]:
        """Wire form: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SecretKeyRef(Model):
    """A key of a Secret in the experiment's namespace. Values never leave the Secret."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Secret name."""
    key: Annotated[str, Field(min_length=1, max_length=253)]
    """Key inside the Secret."""
