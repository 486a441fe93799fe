"""What agentrl's pods need from the node, and what no spec may ask for whatever the policy.

One home for these facts: the renderer builds every container's securityContext from them,
the operator's policy check (`agentrl.api.policy`) judges them against what the platform team
allows, and docs/operator.md explains them.

The Ray image runs as root (slime's base image keeps slime and Megatron-LM under /root), so
the pods cannot be non-root. They drop every Linux capability instead and add back only
what a spec really needs:

- `IPC_LOCK` on the GPU workers when the spec requests an RDMA device (EFA, `rdma/*`):
  registering memory with the NIC pins it, which RLIMIT_MEMLOCK forbids without it.
- `SYS_PTRACE` on the GPU workers when a colocated run turns on PyTorch's expandable
  segments: slime then hands weights from the Megatron process to the SGLang engine as CUDA
  memory shared by file descriptor, which the receiver takes with `pidfd_getfd(2)`; the
  container runtime's default seccomp profile and the kernel's ptrace access check both
  refuse that call without CAP_SYS_PTRACE (https://github.com/pytorch/pytorch/issues/165685).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from agentrl.api.findings import Finding, Rule, err, warn
from agentrl.api.models import RLExperiment

# Kubernetes' Pod Security Standards, baseline level: the capabilities a container may add
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline).
BASELINE_CAPABILITIES = frozenset(
    (
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    )
)  # fmt: skip

# Extended resources that are RDMA NICs (a name ending in "/" is a prefix).
RDMA_RESOURCES = ("vpc.amazonaws.com/efa", "rdma/")

# The env the interconnect behind an RDMA device resource needs (NCCL over libfabric on EFA;
# NCCL's own IB transport on RDMA devices): the render sets it in every Ray container (a
# user env var of the same name wins) and the launcher's gang preflight checks it on every
# GPU worker. The keys are RDMA_RESOURCES (a test keeps them equal).
INTERCONNECT_ENV: dict[str, dict[str, str]] = {
    RDMA_RESOURCES[0]: {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
    },
    RDMA_RESOURCES[1]: {"NCCL_IB_DISABLE": "0"},
}

# Env vars that turn on PyTorch's expandable segments, for the whole process or (slime's own
# switch, read by its train actors) for Megatron only.
ALLOC_CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
SLIME_EXPANDABLE_ENV = "SLIME_ENABLE_EXPANDABLE_SEGMENTS"
_EXPANDABLE_ON = re.compile(r"(^|,)\s*expandable_segments\s*:\s*true\s*(,|$)", re.IGNORECASE)


def rdma_prefix(resource: str) -> str | None:
    """The RDMA_RESOURCES entry `resource` falls under, or None."""
    return next(
        (
            prefix
            for prefix in RDMA_RESOURCES
            if resource == prefix or (prefix.endswith("/") and resource.startswith(prefix))
        ),
        None,
    )


def is_rdma(resource: str) -> bool:
    return rdma_prefix(resource) is not None


def interconnect_env(extra_resources: Iterable[str]) -> dict[str, str]:
    """The env NCCL needs for the RDMA devices among `extra_resources`."""
    env: dict[str, str] = {}
    for resource in sorted(extra_resources):
        prefix = rdma_prefix(resource)
        if prefix is not None:
            env.update(INTERCONNECT_ENV[prefix])
    return env


@dataclass(frozen=True)
class CapabilityNeed:
    """One capability a GPU worker container gets, and the spec field that asks for it."""

    capability: str
    path: str
    reason: str


def capability_needs(exp: RLExperiment) -> list[CapabilityNeed]:
    """Every capability the GPU workers add to their (otherwise empty) set, with its cause.

    The head and the submitter never add any: they hold no GPU and no RDMA device.
    """
    needs: list[CapabilityNeed] = []
    res = exp.spec.resources
    for name in sorted(res.extra_resources):
        if is_rdma(name):
            needs.append(
                CapabilityNeed(
                    "IPC_LOCK",
                    "spec.resources.extraResources",
                    f"{name} is an RDMA device: NCCL pins the memory it registers with it",
                )
            )
            break
    if res.colocate:
        path = expandable_segments_env(exp)
        if path is not None:
            needs.append(
                CapabilityNeed(
                    "SYS_PTRACE",
                    path,
                    "expandable segments in a colocated run: slime shares the new weights "
                    "with SGLang by file descriptor, taken with pidfd_getfd",
                )
            )
    return needs


def worker_capabilities(exp: RLExperiment) -> list[str]:
    """The capabilities the GPU worker containers add, sorted."""
    return sorted({need.capability for need in capability_needs(exp)})


def expandable_segments_env(exp: RLExperiment) -> str | None:
    """The path of the env var that turns expandable segments on, if one does."""
    for i, env in enumerate(exp.spec.runtime.env):
        value = env.value
        if value is None:  # from a Secret: not knowable here, and not where this is set
            continue
        if (env.name in ALLOC_CONF_ENV and _EXPANDABLE_ON.search(value)) or (
            env.name == SLIME_EXPANDABLE_ENV and value.strip() == "1"
        ):
            return f"spec.runtime.env[{i}].value"
    return None


# ---- what no spec may ask for, whatever the policy ---------------------------------


def mount_propagation(exp: RLExperiment) -> Iterator[Finding]:
    """`Bidirectional` mount propagation needs a privileged container, which agentrl never
    renders (the API server would refuse the pods KubeRay creates, leaving the job stuck).
    """
    for i, mount in enumerate(exp.spec.runtime.volume_mounts):
        if mount.get("mountPropagation") == "Bidirectional":
            yield err(
                f"spec.runtime.volumeMounts[{i}].mountPropagation",
                "Bidirectional propagation needs a privileged container; agentrl never runs "
                "privileged containers (Kubernetes' baseline Pod Security level forbids them)",
                "remove it (None, the default) or use HostToContainer",
            )


def gateway_exposure(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: a LoadBalancer gateway that any address can reach (no source ranges, or one
    that admits every address). Agents hold per-session tokens, but the open port still
    takes connections, request bodies and token guesses from anyone on the path.
    """
    svc = exp.spec.gateway.service
    if svc.type != "LoadBalancer":
        return
    path = "spec.gateway.service.loadBalancerSourceRanges"
    hint = (
        "list the CIDRs your agents connect from (e.g. the AgentCore VPC's subnets); "
        "an internal load balancer is still open to the whole VPC and its peers"
    )
    if not svc.load_balancer_source_ranges:
        yield warn(path, "the gateway's LoadBalancer accepts connections from any address", hint)
    for i, cidr in enumerate(svc.load_balancer_source_ranges):
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue  # reported by the CIDR rule
        if net.prefixlen == 0:
            yield warn(f"{path}[{i}]", f"{cidr} admits every address", hint)


# The annotations Kubernetes' baseline Pod Security level judges (AppArmor, and seccomp's
# deprecated ones): a profile that turns the confinement off is forbidden.
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_KEYS = ("seccomp.security.alpha.kubernetes.io/pod",)
SECCOMP_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"


def pod_annotations_confined(exp: RLExperiment) -> Iterator[Finding]:
    """`runtime.podAnnotations` keep AppArmor and seccomp on: Kubernetes' baseline Pod
    Security level forbids an `unconfined` profile (and AppArmor profiles other than
    `runtime/default` and `localhost/*`), so a namespace that enforces it refuses every pod
    KubeRay creates, and agentrl never runs unconfined containers anyway."""
    for key, value in exp.spec.runtime.pod_annotations.items():
        path = f"spec.runtime.podAnnotations.{key}"
        if key.startswith(APPARMOR_PREFIX):
            if value != "runtime/default" and not value.startswith("localhost/"):
                yield err(
                    path,
                    f"AppArmor profile {value!r} is forbidden by Kubernetes' baseline Pod "
                    "Security level",
                    "remove it (the runtime's default profile applies) or name a "
                    "localhost/<profile>",
                )
        elif (key in SECCOMP_KEYS or key.startswith(SECCOMP_PREFIX)) and value == "unconfined":
            yield err(
                path,
                "an unconfined seccomp profile is forbidden by Kubernetes' baseline Pod "
                "Security level",
                "remove it: agentrl's pods run with the RuntimeDefault profile",
            )


RULES: tuple[Rule, ...] = (mount_propagation, pod_annotations_confined, gateway_exposure)


def mounts_of(exp: RLExperiment, volume: str) -> list[tuple[int, Mapping[str, object]]]:
    """(index, mount) of every volumeMount of the named volume."""
    return [(i, m) for i, m in enumerate(exp.spec.runtime.volume_mounts) if m.get("name") == volume]
