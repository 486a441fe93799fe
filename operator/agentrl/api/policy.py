"""The operator's policy: what an RLExperiment may ask of the cluster.

The operator creates the RayJob and KubeRay creates the pods, so whoever may create an
RLExperiment gets whatever its spec can express, with the operator's and KubeRay's rights
rather than their own: a hostPath of `/`, the node's container runtime socket, a
`system-node-critical` priority, any ServiceAccount of the namespace. The platform team bounds
that with this policy (the chart's `policy` value). Every experiment is checked against it
before anything is created, and every violation names the field, the policy entry and both
ways out: change the spec, or ask for the chart value to change.

The default is the safe one. For what a spec can put into a pod it is Kubernetes' baseline
Pod Security level: no hostPath, no capability beyond baseline's list (and `gitRepo`
volumes, deprecated and disabled since Kubernetes 1.33, are left out too). For the rest it is
the least: the namespace's default ServiceAccount only, any PriorityClass but Kubernetes'
own `system-` ones. Image registries are open by default: the user runs their own code in
these pods anyway (`runtime.extraCode`), so a registry list is about provenance, which only
the platform team can name.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from agentrl.api.base import Model
from agentrl.api.findings import Finding, err
from agentrl.api.kube_rules import VOLUME_SOURCES
from agentrl.api.models import RLExperiment
from agentrl.api.paths import clean
from agentrl.api.security import BASELINE_CAPABILITIES, capability_needs, mounts_of

# Volume types a baseline pod may use: all but hostPath (which `hostPaths` governs) and
# gitRepo (it ran git on the node as root: CVE-2024-10220; deprecated, off since 1.33).
BASELINE_VOLUME_TYPES = frozenset(VOLUME_SOURCES - {"hostPath", "gitRepo"})
# Kubernetes reserves PriorityClass names starting with this for its own critical pods.
SYSTEM_PRIORITY_PREFIX = "system-"
CHART_VALUE = "agentrl chart value policy"
_NAME_PATTERN = re.compile(r"^[a-z0-9*?\[\]/.-]+$")


class PolicyError(ValueError):
    """A policy that cannot be read; the message names the entry and the fix."""


class HostPath(Model):
    """A host directory pods may mount, with everything beneath it."""

    # Not strict like the spec models: chart values arrive as lists for these tuples.
    model_config = ConfigDict(frozen=True, strict=False)

    path_prefix: Annotated[str, Field(min_length=1)]
    """Absolute path on the node; `/data` allows `/data` and `/data/x`, not `/database`."""
    read_only: bool = True
    """Every mount of such a volume must be `readOnly: true`. A writable host directory lets a
    pod plant symlinks that a later pod's hostPath follows out of the prefix: allow writes only
    where no other workload mounts the same directory.
    """

    @field_validator("path_prefix")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError(f"{value!r}: write an absolute path without '..'")
        return clean(value)


class SecretsPolicy(Model):
    """The Secrets an experiment may reference (env, headers, W&B key, volumes)."""

    model_config = ConfigDict(frozen=True, strict=False)

    names: tuple[str, ...] = ()
    """Secret names (`*` wildcards) experiments may reference; empty: any Secret of the
    namespace."""

    @field_validator("names")
    @classmethod
    def _secret_names(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _NAME_PATTERN.match(value) or "/" in value:
                raise ValueError(f"{value!r} is not a Secret name or a `*` pattern")
        return values

    @property
    def any(self) -> bool:
        return not self.names


class Policy(Model):
    """What RLExperiments may ask for; the defaults are the safe ones (see the module doc).

    Immutable (tuples, frozen), so one instance can be shared by every reconcile.
    """

    # Not strict like the spec models: chart values arrive as lists for these tuples.
    model_config = ConfigDict(frozen=True, strict=False)

    volume_types: tuple[str, ...] = tuple(sorted(BASELINE_VOLUME_TYPES))
    """Volume types `spec.runtime.volumes` may use (core/v1 Volume source names)."""
    host_paths: tuple[HostPath, ...] = ()
    """Host directories pods may mount as hostPath volumes; empty: none (baseline)."""
    capabilities: tuple[str, ...] = ()
    """Linux capabilities beyond Kubernetes' baseline set that the GPU workers may add, e.g.
    IPC_LOCK for RDMA devices; empty: baseline's only. (agentrl drops every capability and
    adds back only what a spec needs: `agentrl.api.security`.)
    """
    service_accounts: tuple[str, ...] = ()
    """ServiceAccounts `runtime.serviceAccountName` may name (`*` wildcards; `ns/name` for one
    namespace); empty: only the namespace's `default`.
    """
    image_registries: tuple[str, ...] = ()
    """Prefixes `runtime.image` must start with (a registry host, or host/path); empty: any."""
    priority_classes: tuple[str, ...] = ()
    """PriorityClasses `resources.priorityClassName` may name (`*` wildcards); empty: any but
    Kubernetes' own `system-` classes, which only an exact entry allows.
    """
    secrets: SecretsPolicy = Field(default_factory=SecretsPolicy)
    """Secrets experiments may reference by name (env `secretKeyRef`, HTTP headers, the W&B
    key, secret and projected volumes); the default: any Secret of the namespace."""

    @field_validator("volume_types")
    @classmethod
    def _known_volume_types(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if value == "hostPath":
                raise ValueError("hostPath: list the allowed directories in hostPaths instead")
            if value not in VOLUME_SOURCES:
                raise ValueError(f"{value!r} is not a volume type (e.g. persistentVolumeClaim)")
        return values

    @field_validator("capabilities")
    @classmethod
    def _capability_names(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if value.upper().startswith("CAP_"):
                raise ValueError(f"{value!r}: write it without CAP_, as Kubernetes does")
            if value == "ALL" or not re.fullmatch(r"[A-Z_]+", value):
                raise ValueError(f"{value!r} is not a capability name (e.g. IPC_LOCK)")
        return values

    @field_validator("service_accounts", "priority_classes")
    @classmethod
    def _name_patterns(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _NAME_PATTERN.match(value):
                raise ValueError(f"{value!r} is not a name or a `*` pattern")
        return values

    @field_validator("priority_classes")
    @classmethod
    def _system_classes_by_name(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if value.startswith(SYSTEM_PRIORITY_PREFIX) and any(c in value for c in "*?["):
                raise ValueError(
                    f"{value!r}: Kubernetes' own {SYSTEM_PRIORITY_PREFIX} classes are allowed "
                    "only by their exact names (system-cluster-critical, system-node-critical), "
                    "never by a pattern"
                )
        return values

    @field_validator("image_registries")
    @classmethod
    def _prefixes(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not value or any(c.isspace() for c in value) or "@" in value:
                raise ValueError(f"{value!r} is not an image reference prefix")
        return values


BASELINE = Policy()


def load_policy(doc: object, source: str) -> Policy:
    """A policy from a parsed document: the policy itself, or a chart values file holding it
    under `policy`. `source` names where it came from, for the error message."""
    if isinstance(doc, Mapping) and isinstance(doc.get("policy"), Mapping):
        doc = doc["policy"]
    if doc is None:
        return Policy()
    if not isinstance(doc, Mapping):
        raise PolicyError(f"{source}: a policy is a mapping like the chart's `policy` value")
    entries = {f.alias or n for n, f in Policy.model_fields.items()}
    near = [k for k in doc if difflib.get_close_matches(str(k), entries, n=1)]
    if doc and not set(doc) & entries and not near:  # a typo of an entry says "did you mean"
        raise PolicyError(
            f"{source}: holds no policy: neither a `policy:` key (as chart values have it) nor "
            f"a policy entry ({', '.join(sorted(entries))}); the keys are "
            f"{', '.join(map(str, list(doc)[:8]))}. Chart values without `policy:` mean the "
            "chart's default policy: leave out --policy"
        )
    try:
        return Policy.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise PolicyError("; ".join(_describe(source, e) for e in exc.errors())) from None


def _describe(source: str, error: Mapping[str, Any]) -> str:
    path = "policy" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    if error["type"] == "extra_forbidden":
        accepted = [f.alias or n for n, f in _model_at(error["loc"]).model_fields.items()]
        close = difflib.get_close_matches(str(error["loc"][-1]), accepted, n=1)
        hint = f"did you mean {close[0]}?" if close else "accepted: " + ", ".join(accepted)
        return f"{source}: {path}: unknown field ({hint})"
    return f"{source}: {path}: {str(error['msg']).removeprefix('Value error, ')}"


def _model_at(loc: Sequence[int | str]) -> type[Model]:
    if loc and loc[0] == "secrets" and len(loc) > 1:
        return SecretsPolicy
    return HostPath if loc and loc[0] == "hostPaths" and len(loc) > 2 else Policy


def policy_warnings(policy: Policy) -> list[str]:
    """What a readable policy says twice or in a way that reads wrongly: a host path listed
    both read-only and writable (the writable entry wins)."""
    found: list[str] = []
    seen: dict[str, tuple[int, bool]] = {}
    for i, rule in enumerate(policy.host_paths):
        before = seen.get(rule.path_prefix)
        if before is not None and before[1] != rule.read_only:
            writable = before[0] if not before[1] else i
            found.append(
                f"policy.hostPaths[{i}]: {rule.path_prefix} is listed read-only and writable "
                f"(hostPaths[{before[0]}]); the writable entry, hostPaths[{writable}], wins: "
                "keep one entry"
            )
        seen.setdefault(rule.path_prefix, (i, rule.read_only))
    return found


# ---- the check ---------------------------------------------------------------------


def check(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    """Every way the experiment exceeds the policy, as errors naming the policy entry."""
    yield from _volumes(exp, policy)
    yield from _capabilities(exp, policy)
    yield from _service_account(exp, policy)
    yield from _image(exp, policy)
    yield from _priority_class(exp, policy)
    yield from _secrets(exp, policy)


def _refused(path: str, what: str, field: str, allowed: str, fix: str) -> Finding:
    return err(
        path,
        f"{what} is not allowed by the operator's policy.{field} ({allowed})",
        f"{fix}, or ask your platform team to allow it in the {CHART_VALUE}.{field}",
    )


def _volumes(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    for i, vol in enumerate(exp.spec.runtime.volumes):
        sources = set(vol) & VOLUME_SOURCES
        if len(sources) != 1:
            continue  # malformed: the volume rules report it
        source = sources.pop()
        path = f"spec.runtime.volumes[{i}]"
        if source == "hostPath":
            yield from _host_path(exp, policy, path, vol)
        elif source not in policy.volume_types:
            yield _refused(
                f"{path}.{source}",
                f"volume type {source}",
                "volumeTypes",
                _volume_types_allowed(policy),
                "use a persistentVolumeClaim, configMap or emptyDir volume",
            )
        elif source == "image":  # an OCI image mounted as a volume: pulled like runtime.image
            reference = vol["image"].get("reference") if isinstance(vol["image"], Mapping) else None
            if isinstance(reference, str):
                yield from _registry(f"{path}.image.reference", reference, policy)


def _volume_types_allowed(policy: Policy) -> str:
    if set(policy.volume_types) == BASELINE_VOLUME_TYPES:
        return "the default: every type but hostPath and gitRepo"
    return "allowed: " + (", ".join(sorted(policy.volume_types)) or "none")


def _host_path(
    exp: RLExperiment, policy: Policy, path: str, vol: Mapping[str, Any]
) -> Iterator[Finding]:
    spec = vol.get("hostPath")
    host = spec.get("path") if isinstance(spec, Mapping) else None
    if not isinstance(host, str) or not host.startswith("/") or ".." in host.split("/"):
        yield err(
            f"{path}.hostPath.path",
            "must be an absolute path without '..'",
            "write the host directory's absolute path",
        )
        return
    rule = _host_rule(clean(host), policy.host_paths)
    if rule is None:
        allowed = (
            "allowed: " + ", ".join(r.path_prefix for r in policy.host_paths)
            if policy.host_paths
            else "none: Kubernetes' baseline Pod Security level forbids hostPath"
        )
        yield _refused(
            f"{path}.hostPath.path",
            f"host path {host}",
            "hostPaths",
            allowed,
            "mount your data through a persistentVolumeClaim instead",
        )
        return
    if not rule.read_only:
        return
    for j, mount in mounts_of(exp, str(vol.get("name"))):
        if mount.get("readOnly") is not True:
            yield _refused(
                f"spec.runtime.volumeMounts[{j}].readOnly",
                f"a writable mount of host path {host}",
                "hostPaths",
                f"{rule.path_prefix} is allowed read-only",
                "set readOnly: true",
            )


def _host_rule(host: str, rules: Sequence[HostPath]) -> HostPath | None:
    """The most permissive entry whose prefix holds the path (component-wise)."""
    matching = [
        r for r in rules if r.path_prefix in ("/", host) or host.startswith(r.path_prefix + "/")
    ]
    return min(matching, key=lambda r: r.read_only, default=None)


def _capabilities(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    fixes = {
        "IPC_LOCK": "remove the RDMA device, and NCCL falls back to slower TCP sockets",
        "SYS_PTRACE": "leave expandable segments off in colocated runs, or set colocate: false",
    }
    for need in capability_needs(exp):
        if need.capability in BASELINE_CAPABILITIES or need.capability in policy.capabilities:
            continue
        allowed = "Kubernetes' baseline set" + (
            " and " + ", ".join(policy.capabilities) if policy.capabilities else ", the default"
        )
        yield _refused(
            need.path,
            f"{need.reason}; that needs CAP_{need.capability}, which",
            "capabilities",
            allowed,
            fixes.get(need.capability, "change the spec"),
        )


def _service_account(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    name = exp.spec.runtime.service_account_name
    if name in (None, "", "default"):
        return
    qualified = f"{exp.metadata.namespace}/{name}"
    patterns = policy.service_accounts
    if any(fnmatch.fnmatchcase(qualified if "/" in p else name, p) for p in patterns):
        return
    allowed = (
        "allowed: " + ", ".join(policy.service_accounts)
        if policy.service_accounts
        else "the default: only the namespace's default ServiceAccount"
    )
    yield _refused(
        "spec.runtime.serviceAccountName",
        f"ServiceAccount {name!r}",
        "serviceAccounts",
        allowed,
        "remove it to run as the namespace's default ServiceAccount",
    )


def _image(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    if exp.spec.runtime.image is not None:
        yield from _registry("spec.runtime.image", exp.spec.runtime.image, policy)


def _registry(path: str, image: str, policy: Policy) -> Iterator[Finding]:
    if not policy.image_registries:
        return
    if any(image_under(image, prefix) for prefix in policy.image_registries):
        return
    yield _refused(
        path,
        f"image {image}",
        "imageRegistries",
        "allowed: " + ", ".join(policy.image_registries),
        "use an image from an allowed registry; unset runtime.image means the operator's own",
    )


def image_under(image: str, prefix: str) -> bool:
    """Whether an image reference lies under a prefix, at a component boundary.

    `reg.example/team` holds `reg.example/team/x` and `reg.example/team:tag`; a prefix without
    `/` is a registry host, so `reg.example` holds `reg.example/x` but not `reg.example:5000/x`
    (another endpoint) nor `reg.example.other/x`.
    """
    if prefix.endswith("/"):
        return image.startswith(prefix)
    if image == prefix:
        return True
    if not image.startswith(prefix):
        return False
    boundary = "/:@" if "/" in prefix else "/"
    return image[len(prefix)] in boundary


def _priority_class(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    res = exp.spec.resources
    for path, name in (
        ("spec.resources.priorityClassName", res.priority_class_name),
        ("spec.resources.head.priorityClassName", res.head.priority_class_name),
    ):
        if name:
            yield from _one_priority_class(path, name, policy)


def _one_priority_class(path: str, name: str, policy: Policy) -> Iterator[Finding]:
    system = name.startswith(SYSTEM_PRIORITY_PREFIX)
    if system:
        ok = name in policy.priority_classes
    else:
        patterns = policy.priority_classes
        ok = not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)
    if ok:
        return
    allowed = (
        "allowed: " + ", ".join(policy.priority_classes)
        if policy.priority_classes
        else "the default: any class but Kubernetes' own system-* ones"
    )
    yield _refused(
        path,
        f"PriorityClass {name!r}" + (", which preempts the node's own daemons," if system else ""),
        "priorityClasses",
        allowed,
        "remove it or name one of your cluster's workload classes",
    )


def secret_references(exp: RLExperiment) -> list[tuple[str, str]]:
    """(wire path, Secret name) of every Secret the spec makes the pods read."""
    spec = exp.spec
    refs = [
        (f"spec.runtime.env[{i}].valueFrom.secretKeyRef.name", env.value_from.secret_key_ref.name)
        for i, env in enumerate(spec.runtime.env)
        if env.value_from is not None
    ]
    if spec.agent.http is not None:
        refs += [
            (f"spec.agent.http.headers[{i}].secretKeyRef.name", h.secret_key_ref.name)
            for i, h in enumerate(spec.agent.http.headers)
        ]
    if spec.tracking.wandb is not None:
        refs.append(
            ("spec.tracking.wandb.apiKeySecret.name", spec.tracking.wandb.api_key_secret.name)
        )
    for i, volume in enumerate(spec.runtime.volumes):
        refs += _volume_secrets(volume, f"spec.runtime.volumes[{i}]")
    return refs


def _volume_secrets(node: Any, path: str) -> list[tuple[str, str]]:
    """Secret names inside a volume: `secret.secretName`, a projected `secret.name`, and the
    `secretRef`/`nodePublishSecretRef`/`secretName` of the volume plugins that take one."""
    found: list[tuple[str, str]] = []
    if isinstance(node, list):
        for i, item in enumerate(node):
            found += _volume_secrets(item, f"{path}[{i}]")
    elif isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{path}.{key}"
            if key == "secretName" and isinstance(value, str):
                found.append((where, value))
            elif key in ("secretRef", "nodePublishSecretRef") and isinstance(value, Mapping):
                if isinstance(value.get("name"), str):
                    found.append((f"{where}.name", value["name"]))
            elif key == "secret" and isinstance(value, Mapping) and "name" in value:
                if isinstance(value["name"], str):  # a projected volume's source
                    found.append((f"{where}.name", value["name"]))
            else:
                found += _volume_secrets(value, where)
    return found


def _secrets(exp: RLExperiment, policy: Policy) -> Iterator[Finding]:
    rules = policy.secrets
    if rules.any:
        return
    for path, name in secret_references(exp):
        if any(fnmatch.fnmatchcase(name, p) for p in rules.names):
            continue
        yield _refused(
            path,
            f"Secret {name!r}",
            "secrets",
            "allowed: " + ", ".join(rules.names),
            "reference a Secret the policy lists",
        )
