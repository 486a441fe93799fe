"""Every problem with an RLExperiment, at once, each with its field path and a fix.

`parse_experiment` first checks the document's bounds (`agentrl.api.bounds`: size, depth,
JSON values, hidden characters), so nothing hostile reaches a parser; then turns pydantic's
structural errors (types, ranges, unknown fields) into `Problem`s with wire-form paths
(`spec.resources.parallelism.tensor`); then runs every rule: the checks of the Kubernetes
objects the spec passes through (`kube_rules`, on the document as written) and the
cross-field rules a schema cannot express (`rules`: GPU arithmetic, batch divisibility,
derived name lengths), and, given the operator's `Policy`, what the platform team does not
allow (`agentrl.api.policy`), and given the caller's `DefaultImage`, that the pods will have
an image (`agentrl.api.images`). When some fields did not parse, the cross-field rules run on
what did (`agentrl.api.partial`), and a rule that needs a broken field is skipped, so one run
reports every problem. The operator, the CLI and the tests all read the same list, so a spec
rejected by `agentrl validate` is rejected by the cluster with the same words.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from agentrl.api import (
    bounds,
    gpu_layout,
    kube_rules,
    model_layout,
    model_names,
    partial,
    paths,
    rules,
    security,
)
from agentrl.api.findings import Rule, Severity
from agentrl.api.formats import text_format
from agentrl.api.images import DefaultImage, image_findings
from agentrl.api.models import RLExperiment
from agentrl.api.policy import Policy
from agentrl.api.policy import check as policy_check

MISSING = "required field is missing"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where (wire path), what, and how to fix it."""

    path: str
    message: str
    hint: str = ""
    severity: Severity = "error"

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.hint:
            text += f" ({self.hint})"
        if self.severity == "warning":
            text = f"warning: {text}"
        return text


def errors(problems: Sequence[Problem]) -> list[Problem]:
    """The problems that block creation (warnings never do)."""
    return [p for p in problems if p.severity == "error"]


def parse_experiment(
    body: Mapping[str, Any],
    policy: Policy | None = None,
    *,
    default_image: DefaultImage | None = None,
) -> tuple[RLExperiment | None, list[Problem]]:
    """Parse a custom resource body: the experiment (None on any error) and every problem.

    With a `policy` (the operator's, or `agentrl validate --policy`), what it does not allow
    is an error too; without one only the spec itself is judged. With `default_image` (the
    operator's, or the CLI's `--image`), a spec the pods would get no image for is a problem
    on `spec.runtime.image`; without it, images are not judged.

    `status` and `metadata.managedFields` are ignored: they are the operator's and the API
    server's to write, not the user's to get right, and must never make a spec invalid.
    """
    if not isinstance(body, Mapping):  # YAML can hold a list or a scalar
        problem = Problem("", "the document is not a mapping", "write an RLExperiment object")  # type: ignore[unreachable]
        return None, [problem]
    body = {k: v for k, v in body.items() if k != "status"}
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        # The API server's own bookkeeping: not the user's to size, and never read here.
        body["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    violations = bounds.check_document(body)
    if violations:
        # Nothing else reads a document outside the bounds: that is what they protect.
        return None, [Problem(v.path, v.message, v.hint) for v in violations]
    try:
        exp = _typed(body)
    except ValidationError as err:
        structural = _from_pydantic(err, body)
        # Every rule whose inputs parsed still runs, on the fields that did.
        typed = partial.build(RLExperiment, body)
        checks = _checks(policy, default_image)
        found = _document_problems(body) + _rule_problems(typed, checks, complete=False)
        seen = {p.path for p in structural}
        return None, structural + [p for p in found if p.path not in seen]
    # The document rules read the body as written: the typed model keeps only what it knows
    # (an unknown metadata key, which the API server would drop, is not in it).
    checks = _checks(policy, default_image)
    problems = _document_problems(body) + _rule_problems(exp, checks)
    return (None if errors(problems) else exp), problems


def _typed(body: Mapping[str, Any]) -> RLExperiment:
    # The wire names only (camelCase), as the CRD has them: `num_rollouts` would pass here
    # and then be pruned or refused by the API server.
    return RLExperiment.model_validate(body, by_alias=True, by_name=False)


def validate_experiment(
    exp: RLExperiment, policy: Policy | None = None, *, default_image: DefaultImage | None = None
) -> list[Problem]:
    """The cross-field rules, all of them, the policy's when one is given and the image check
    when the caller's default image is given; an empty list means the spec can run."""
    checks = _checks(policy, default_image)
    return _document_problems(exp.dump()) + _rule_problems(exp, checks)


# Every rule on a typed experiment, each owning its field paths and messages, by concern.
SPEC_RULES: tuple[Rule, ...] = (
    *rules.ALL_RULES,
    *gpu_layout.RULES,
    *paths.RULES,
    *model_names.RULES,
    *model_layout.RULES,
    *security.RULES,
)


def _checks(policy: Policy | None, default_image: DefaultImage | None) -> list[Rule]:
    checks: list[Rule] = list(SPEC_RULES)
    if policy is not None:
        checks.append(lambda exp: policy_check(exp, policy))
    if default_image is not None:
        checks.append(lambda exp: image_findings(exp, default_image))
    return checks


def _rule_problems(exp: RLExperiment, checks: list[Rule], complete: bool = True) -> list[Problem]:
    found = partial.run_rules(checks, exp, partial=not complete)
    return [Problem(*finding) for finding in found]


def _document_problems(body: Mapping[str, Any]) -> list[Problem]:
    return [
        Problem(path, message, hint, severity)
        for check in kube_rules.DOCUMENT_RULES
        for path, message, hint, severity in check(body)
    ]


# ---- pydantic errors -> problems ---------------------------------------------------


def format_path(loc: Sequence[int | str]) -> str:
    """('spec', 'data', 'eval', 1, 'name') -> 'spec.data.eval[1].name'."""
    out = ""
    for part in loc:
        out = bounds.join(out, part)
    return out


def _from_pydantic(err: ValidationError, body: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for item in err.errors(include_url=False):
        loc = _clean_loc(item["loc"], body)
        problem = _problem_for(item["type"], loc, item["msg"], item.get("ctx") or {})
        if item["type"] in _EXPECTED:
            problem = _type_problem(problem.path, item["type"], item.get("input"))
        key = (problem.path, problem.message)
        if key not in seen:  # unions report the same miss once per branch
            seen.add(key)
            problems.append(problem)
    return _typos_explain_missing(problems)


def _typos_explain_missing(problems: list[Problem]) -> list[Problem]:
    """`numRolouts` is one mistake, not two: a required field reported missing next to an
    unknown sibling that is its misspelling is left to the unknown field's "did you mean".
    """
    meant = {
        p.path.rsplit(".", 1)[0] + "." + p.hint.split("'")[1]
        for p in problems
        if p.message == "unknown field" and p.hint.startswith("did you mean '")
    }
    return [p for p in problems if not (p.message == MISSING and p.path in meant)]


def _clean_loc(loc: Sequence[int | str], body: Any) -> list[int | str]:
    """The location as wire keys: pydantic can insert validator tags ('function-after[...]',
    'constrained-str') that are not keys of the document; a user's key is always kept.
    """
    out: list[int | str] = []
    node = body
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif isinstance(node, Mapping) and part in node:
            out.append(part)
            node = node[part]
        elif not ("[" in part or part.startswith(("function-", "constrained-"))):
            out.append(part)  # a missing field: its own name
            node = None
    return out


def _problem_for(kind: str, loc: list[int | str], msg: str, ctx: Mapping[str, Any]) -> Problem:
    path = format_path(loc)
    if kind == "extra_forbidden":
        return Problem(path, "unknown field", _suggest(loc))
    if kind == "missing":
        return Problem(path, MISSING, "set it; see docs/api.md")
    if kind == "string_pattern_mismatch":
        fmt = text_format(str(ctx.get("pattern")))
        if fmt is not None:
            return Problem(path, fmt.message, fmt.hint)
        return Problem(path, "does not match the expected format", f"pattern {ctx.get('pattern')}")
    if kind == "value_error":
        return Problem(path, msg.removeprefix("Value error, "), "")
    if kind == "quantity":
        return Problem(path, msg, "e.g. 64Gi, 500m or 8")
    if kind == "finite_number":
        return Problem(path, "must be a finite number", "JSON and Kubernetes have no inf or NaN")
    return Problem(path, msg, "")


# pydantic's type errors -> what the field must be, in the words of a YAML writer.
_EXPECTED = {
    "int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
    "string_type": "a string", "dict_type": "an object", "list_type": "a list",
    "model_type": "an object", "model_attributes_type": "an object",
}  # fmt: skip


def _type_problem(path: str, kind: str, value: Any) -> Problem:
    """'must be an integer, not a string' with the fix for how YAML produced the value."""
    got = _kind_of(value)
    hint = ""
    if kind == "string_type" and isinstance(value, bool):
        hint = "kubectl reads y/n, yes/no, on/off and true/false as booleans; quote it"
    elif kind == "string_type" and isinstance(value, int | float):
        hint = "YAML reads a bare number as a number; quote it"
    elif kind in ("int_type", "float_type") and isinstance(value, str):
        hint = _number_as_text_hint(value)
    elif kind == "int_type" and isinstance(value, float):
        hint = (
            "Kubernetes stores 64-bit integers; use a smaller number"
            if value.is_integer()
            else "write a whole number"
        )
    elif kind == "bool_type":
        hint = "write true or false without quotes"
    return Problem(path, f"must be {_EXPECTED[kind]}, not {got}", hint)


_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
_NUMBER = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def _number_as_text_hint(value: str) -> str:
    """Why kubectl would send this number as text: quotes, or a spelling YAML 1.1 as go-yaml
    reads it does not take for a number (base 60, a date, beyond a 64-bit float)."""
    text = value.strip().replace("_", "")
    if _SEXAGESIMAL.match(text):
        return (
            f"kubectl reads {value} as text, not base 60; write the number itself "
            "(e.g. 90 for 1:30)"
        )
    if _DATE.match(text):
        return "kubectl reads a date as text; write a number"
    if _NUMBER.match(text) and not math.isfinite(float(text)):
        return "beyond the range of a 64-bit number, so kubectl sends it as text"
    return "write the number without quotes; the API server refuses a string here"


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (Mapping, "an object"), (list, "a list")):  # fmt: skip
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _suggest(loc: list[int | str]) -> str:
    """'did you mean ...' from the fields the parent model accepts."""
    name = loc[-1] if loc else ""
    parent = _model_at(loc[:-1])
    if parent is None or not isinstance(name, str):
        return "remove it"
    accepted = [f.alias or n for n, f in parent.model_fields.items()]
    if to_camel(name) != name and to_camel(name) in accepted:
        return f"fields are camelCase: write {to_camel(name)!r}"
    close = difflib.get_close_matches(name, accepted, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "accepted fields: " + ", ".join(sorted(accepted))


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model class that sits at a wire path of RLExperiment."""
    model: type[BaseModel] = RLExperiment
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
