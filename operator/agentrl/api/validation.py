"""Every problem with an RLExperiment, at once, each with its field path and a fix.

`parse_experiment` turns pydantic's structural errors (types, ranges, unknown fields) into
`Problem`s with wire-form paths (`spec.resources.parallelism.tensor`); `validate_experiment`
adds the cross-field rules a schema cannot express (GPU arithmetic, batch divisibility,
derived name lengths), given the operator's `Policy`, what the platform team does not allow
(`agentrl.api.policy`), and given the caller's `DefaultImage`, that the pods will have an image
(`agentrl.api.images`). The operator, the CLI and the tests all read the same list, so a spec
rejected by `agentrl validate` is rejected by the cluster with the same words.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from agentrl.api import kube_rules, rules, security
from agentrl.api.base import QUANTITY_PATTERN
from agentrl.api.findings import Severity
from agentrl.api.images import DefaultImage, image_findings
from agentrl.api.models import RLExperiment
from agentrl.api.policy import Policy
from agentrl.api.policy import check as policy_check


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where (wire path), what, and how to fix it."""

    path: str
    message: str
    hint: str = ""
    severity: Severity = "error"

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}"
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

    `status` is ignored: it is the operator's to write, not the user's to get right, and
    whatever it holds (kopf's own bookkeeping included) must never make a spec invalid.
    """
    if not isinstance(body, Mapping):  # YAML can hold a list or a scalar
        problem = Problem("", "the document is not a mapping", "write an RLExperiment object")  # type: ignore[unreachable]
        return None, [problem]
    body = {k: v for k, v in body.items() if k != "status"}
    try:
        exp = _typed(body)
    except ValidationError as err:
        # Typed rules need a typed spec; the document rules still run on what was written.
        problems = _from_pydantic(err, body)
        seen = {p.path for p in problems}
        later = _document_problems(body)
        unknown = [e["loc"] for e in err.errors() if e["type"] == "extra_forbidden"]
        if len(unknown) == len(err.errors()):
            # Only unknown fields (typos): the cross-field rules can still judge the rest,
            # so one typo does not hide every other problem until the next run.
            with contextlib.suppress(ValidationError):
                typed = _typed(_without(body, unknown))
                later = validate_experiment(typed, policy, default_image=default_image)
        return None, problems + [p for p in later if p.path not in seen]
    problems = validate_experiment(exp, policy, default_image=default_image)
    return (None if errors(problems) else exp), problems


def _typed(body: Mapping[str, Any]) -> RLExperiment:
    # The wire names only (camelCase), as the CRD has them: `num_rollouts` would pass here
    # and then be pruned or refused by the API server.
    return RLExperiment.model_validate(body, by_alias=True, by_name=False)


def _without(body: Mapping[str, Any], locs: Sequence[Sequence[int | str]]) -> dict[str, Any]:
    """A deep copy of `body` without the entries at `locs` (pydantic error locations)."""
    out: dict[str, Any] = copy.deepcopy(dict(body))
    for loc in locs:
        node: Any = out
        path = _clean_loc(loc)
        for part in path[:-1]:
            node = node[part]
        node.pop(path[-1], None)
    return out


def validate_experiment(
    exp: RLExperiment, policy: Policy | None = None, *, default_image: DefaultImage | None = None
) -> list[Problem]:
    """The cross-field rules, all of them, the policy's when one is given and the image check
    when the caller's default image is given; an empty list means the spec can run."""
    found = _document_problems(exp.dump())
    for check in (*rules.ALL_RULES, *security.RULES):
        for path, message, hint, severity in check(exp):
            found.append(Problem(path, message, hint, severity))
    if policy is not None:
        found.extend(Problem(*finding) for finding in policy_check(exp, policy))
    if default_image is not None:
        found.extend(Problem(*finding) for finding in image_findings(exp, default_image))
    return found


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
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _from_pydantic(err: ValidationError, body: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for item in err.errors(include_url=False):
        loc = _clean_loc(item["loc"])
        problem = _problem_for(item["type"], loc, item["msg"], item.get("ctx") or {})
        key = (problem.path, problem.message)
        if key not in seen:  # unions report the same miss once per branch
            seen.add(key)
            problems.append(problem)
    return problems


def _clean_loc(loc: Sequence[int | str]) -> list[int | str]:
    # pydantic inserts validator tags such as 'function-after[...]' into the location.
    return [p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function")))]


def _problem_for(kind: str, loc: list[int | str], msg: str, ctx: Mapping[str, Any]) -> Problem:
    path = format_path(loc)
    if kind == "extra_forbidden":
        return Problem(path, "unknown field", _suggest(loc))
    if kind == "missing":
        return Problem(path, "required field is missing", "set it; see docs/api.md")
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == QUANTITY_PATTERN:
            return Problem(path, "not a Kubernetes quantity", "e.g. 64Gi, 500m or 8")
        return Problem(path, "does not match the expected format", f"pattern {ctx.get('pattern')}")
    if kind == "value_error":
        return Problem(path, msg.removeprefix("Value error, "), "")
    return Problem(path, msg, "")


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
