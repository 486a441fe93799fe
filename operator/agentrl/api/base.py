"""The building blocks every API model shares: the base class and common field types.

Kept apart from the spec and status models so both can use them without importing each other.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from agentrl.api.formats import CONFIG_KEY, ObjectName
from agentrl.api.quantity import QUANTITY_MAX_LENGTH, QUANTITY_PATTERN, parse_quantity

__all__ = ["INT32_MAX", "QUANTITY_PATTERN", "KubeObject", "Model", "NonNegativeInt",
           "PositiveInt", "Quantity", "SecretKeyRef"]  # fmt: skip

# Kubernetes and KubeRay keep counts, seconds and replicas in int32; a larger number passes a
# Python check and is refused (or wraps) when the RayJob is created.
INT32_MAX: Final = 2**31 - 1


def _quantity_text(value: object) -> object:
    # YAML reads `cpu: 32` as an int and `cpu: 0.5` as a float; Kubernetes accepts numbers
    # for quantities, so do we (the grammar below still judges the text).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except ValueError as exc:
        raise PydanticCustomError("quantity", "{reason}", {"reason": str(exc)}) from None
    return value


# On the wire an int-or-string, exactly like Kubernetes' own resource.Quantity.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    AfterValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "minimum": 0,  # numbers only; the pattern has no sign for strings
            "pattern": QUANTITY_PATTERN,
            "maxLength": QUANTITY_MAX_LENGTH,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
PositiveInt = Annotated[int, Field(ge=1, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
# An open Kubernetes object passed through as the user wrote it (volumes, affinity...); it is
# checked against Kubernetes' own core/v1 schema (agentrl.api.kube_schema).
KubeObject = dict[str, Any]


class Model(BaseModel):
    """Base for every API object: camelCase aliases, unknown fields are errors, and types as
    strict as the API server's (no "10" for 10, no `true` for 1, no infinite numbers).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        # The API server refuses a string where the schema says integer and JSON has no
        # infinity; pydantic's lax mode would coerce both and render `--kl-loss-coef inf`.
        strict=True,
        allow_inf_nan=False,
        # The docstring under each field is its description: in the CRD (`kubectl explain`)
        # and in docs/api.md, from one place.
        use_attribute_docstrings=True,
    )

    def dump(self) -> dict[str, Any]:
        """Wire form: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SecretKeyRef(Model):
    """A key of a Secret in the experiment's namespace. Values never leave the Secret."""

    name: ObjectName
    """Secret name."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIG_KEY)]
    """Key inside the Secret."""
