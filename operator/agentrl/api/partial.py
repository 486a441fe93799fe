"""A typed experiment built from whatever parsed, so every rule whose inputs parsed can run.

When pydantic refuses a spec, the cross-field rules have no `RLExperiment` to read, and a
user with one type error and three layout mistakes would see them over two rounds of
`validate`. `build` types the document field by field instead: each valid field gets its
parsed value (defaults included), each invalid or missing one gets an `Unparsed` marker. The
marker refuses every use (truth, comparison, arithmetic, hashing, formatting, attribute
access) by raising `UnparsedField`, so a rule that reads it stops, and `run_rules` drops that
rule's findings: its inputs did not parse, and the structural error already names the field.
A rule that never touches the marker runs to the end and reports as usual. C functions
(`re.search`) refuse the marker with a TypeError before any of its methods run, so on a
partial experiment any failure of a rule skips it; on a complete one it propagates.

The object is made with `model_construct`, so it never escapes this module's callers as a
valid experiment: `agentrl.api.validation` only hands it to the rules.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from agentrl.api.bounds import join

# Whether the rules now running read a partial experiment (require_parsed looks only then).
_PARTIAL_RUN: ContextVar[bool] = ContextVar("agentrl_partial_run", default=False)
# The leaf validators use the models' own strictness (agentrl.api.base.Model).
_LEAF_CONFIG = ConfigDict(strict=True, allow_inf_nan=False)


class UnparsedField(Exception):
    """A rule read a field that did not parse."""


class Unparsed:
    """Stands for a field that did not parse; any use raises UnparsedField."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "path", path)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise UnparsedField(object.__getattribute__(self, "path"))

    def __getattr__(self, name: str) -> NoReturn:
        raise UnparsedField(object.__getattribute__(self, "path"))

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __neg__ = __pos__ = __abs__ = __int__ = __float__ = __index__ = _refuse
    __str__ = __repr__ = __format__ = __iter__ = __len__ = __contains__ = __getitem__ = _refuse


def build(model: type[BaseModel], body: Mapping[str, Any], path: str = "") -> Any:
    """An instance of `model` from `body`, with `Unparsed` wherever a field did not parse."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        where = join(path, key)
        if key in body:
            values[name] = _value(model, name, field, body[key], where)
        elif field.is_required():
            values[name] = Unparsed(where)
    return model.model_construct(**values)


def _value(model: type[BaseModel], name: str, field: FieldInfo, raw: Any, where: str) -> Any:
    inner, optional = _unwrap_optional(field.annotation)
    if raw is None and optional:
        return None
    nested = _model_class(inner)
    if nested is not None:
        return build(nested, raw, where) if isinstance(raw, Mapping) else Unparsed(where)
    if typing.get_origin(inner) is list and _model_class(typing.get_args(inner)[0]) is not None:
        item_model = _model_class(typing.get_args(inner)[0])
        assert item_model is not None
        if not isinstance(raw, list):
            return Unparsed(where)
        return [
            build(item_model, item, join(where, i)) if isinstance(item, Mapping)
            else Unparsed(join(where, i))
            for i, item in enumerate(raw)
        ]  # fmt: skip
    try:
        return _leaf(model, name).validate_python(raw)
    except ValidationError:
        return Unparsed(where)


@functools.cache
def _leaf(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    field = model.model_fields[name]
    annotated: Any = field.annotation
    if field.metadata:
        annotated = typing.Annotated[(field.annotation, *field.metadata)]
    return TypeAdapter(annotated, config=_LEAF_CONFIG)


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) != len(typing.get_args(annotation))
    return annotation, False


def _model_class(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def require_parsed(value: Any) -> None:
    """Raise UnparsedField if anything in `value` (a model tree) did not parse: for rules that
    read a whole subtree at once (its serialized size, say)."""
    if not _PARTIAL_RUN.get():
        return  # a validated experiment: nothing to look for
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Unparsed):
            raise UnparsedField(object.__getattribute__(item, "path"))
        if isinstance(item, BaseModel):
            stack.extend(item.__dict__.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def run_rules(
    rules: Iterable[Callable[[Any], Iterator[tuple[Any, ...]]]], subject: Any, partial: bool
) -> list[tuple[Any, ...]]:
    """The findings of every rule that did not read an unparsed field.

    On a `partial` subject (built by `build`), a rule that fails in any other way is skipped
    too: C functions such as `re.search` refuse the marker with a TypeError before any of its
    methods run, and a half-built object can break an invariant a rule relies on. On a
    complete experiment every failure propagates: it is a bug in the rule.
    """
    found: list[tuple[Any, ...]] = []
    token = _PARTIAL_RUN.set(partial)
    try:
        for rule in rules:
            try:
                findings = list(rule(subject))
            except UnparsedField:
                continue
            except Exception:
                if not partial:
                    raise
                continue
            found += findings
    finally:
        _PARTIAL_RUN.reset(token)
    return found
