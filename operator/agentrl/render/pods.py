"""The parts every Ray container shares: env, volumes, mounts, labels, security settings.

Every container (head and GPU workers) gets the same CUDA_HOME, LD_LIBRARY_PATH and
PYTHONPATH, so the driver, the SGLang engines and the Megatron actors load the same libraries
and the same agentrl code. Secrets reach the pods only as `secretKeyRef` env vars; the
runtime config names those variables and never holds a value.

Every pod runs as strictly as slime's image allows (`agentrl.api.security` says why each
exception exists): the runtime's default seccomp profile, no privilege escalation, every
capability dropped and only the GPU workers' needs added back, no Kubernetes API token.
KubeRay copies the worker container's securityContext onto the init container it injects,
so that one is covered too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.api.constants import (
    BUNDLE_ARCHIVE_PATH,
    BUNDLE_MOUNT_DIR,
    BUNDLE_VOLUME,
    CONFIG_FILE_NAME,
    CONFIG_MOUNT_DIR,
    CONFIG_PATH,
    CONFIG_VOLUME,
    ENV_CONFIG_PATH,
    ENV_NODE_NAME,
    ENV_POD_NAME,
    EXTRA_CODE_MOUNT_ROOT,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    LABEL_PART_OF,
    MANAGED_BY,
    SHM_MOUNT_DIR,
    SHM_VOLUME,
)
from agentrl.api.models import RLExperiment
from agentrl.api.runtime import ENV_WANDB_API_KEY, http_header_env_name
from agentrl.api.security import interconnect_env, worker_capabilities
from agentrl.render import names
from agentrl.render.defaults import OperatorDefaults

Obj = dict[str, Any]

# Driver libraries the NVIDIA device plugin mounts on some clouds (GKE); they hold
# libcuda, never a libcudart, so they cannot cause a CUDA-major clash.
NVIDIA_DRIVER_LIBS = "/usr/local/nvidia/lib64"


def labels(exp: RLExperiment, defaults: OperatorDefaults, component: str | None = None) -> Obj:
    """The labels on every child object and pod template."""
    out: dict[str, str] = dict(defaults.extra_labels)
    out.update(
        {
            LABEL_EXPERIMENT: exp.metadata.name,
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_PART_OF: MANAGED_BY,
        }
    )
    if component is not None:
        out[LABEL_COMPONENT] = component
    return out


def python_path(exp: RLExperiment, defaults: OperatorDefaults) -> str:
    extra = [extra_code_dir(i) for i in range(len(exp.spec.runtime.extra_code))]
    return ":".join([BUNDLE_ARCHIVE_PATH, *extra, *defaults.image_pythonpath])


def extra_code_dir(index: int) -> str:
    return f"{EXTRA_CODE_MOUNT_ROOT}/{index}"


def container_env(exp: RLExperiment, defaults: OperatorDefaults) -> list[Obj]:
    """The env of every Ray container, in a fixed order."""
    spec = exp.spec
    cuda = spec.runtime.cuda_home.rstrip("/")
    env: list[Obj] = [
        {"name": "CUDA_HOME", "value": cuda},
        {"name": "LD_LIBRARY_PATH", "value": f"{cuda}/lib64:{NVIDIA_DRIVER_LIBS}"},
        {"name": "PYTHONPATH", "value": python_path(exp, defaults)},
        {"name": ENV_CONFIG_PATH, "value": CONFIG_PATH},
        # The launcher's gang preflight names the pod and node of every problem it finds.
        _field_env(ENV_POD_NAME, "metadata.name"),
        _field_env(ENV_NODE_NAME, "spec.nodeName"),
    ]
    user = {e.name for e in spec.runtime.env}
    for name, value in interconnect_env(spec.resources.extra_resources).items():
        if name not in user:
            env.append({"name": name, "value": value})
    if spec.tracking.wandb is not None:
        env.append(_secret_env(ENV_WANDB_API_KEY, spec.tracking.wandb.api_key_secret.dump()))
    if spec.agent.http is not None:
        for i, header in enumerate(spec.agent.http.headers):
            env.append(_secret_env(http_header_env_name(i), header.secret_key_ref.dump()))
    env.extend(e.dump() for e in spec.runtime.env)
    return env


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _secret_env(name: str, ref: Obj) -> Obj:
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def volumes(exp: RLExperiment, bundle_cm: str, shm: str) -> list[Obj]:
    vols: list[Obj] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
        {
            "name": CONFIG_VOLUME,
            "configMap": {
                "name": names.config_map_name(exp),
                "items": [{"key": CONFIG_FILE_NAME, "path": CONFIG_FILE_NAME}],
            },
        },
        {"name": BUNDLE_VOLUME, "configMap": {"name": bundle_cm}},  # the archive, one file
    ]
    for i, code in enumerate(exp.spec.runtime.extra_code):
        vols.append(
            {"name": names.extra_code_volume_name(i), "configMap": {"name": code.config_map}}
        )
    vols.extend(exp.spec.runtime.volumes)
    return vols


def volume_mounts(exp: RLExperiment) -> list[Obj]:
    mounts: list[Obj] = [
        {"name": SHM_VOLUME, "mountPath": SHM_MOUNT_DIR},
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_DIR, "readOnly": True},
        {"name": BUNDLE_VOLUME, "mountPath": BUNDLE_MOUNT_DIR, "readOnly": True},
    ]
    for i in range(len(exp.spec.runtime.extra_code)):
        mounts.append(
            {
                "name": names.extra_code_volume_name(i),
                "mountPath": extra_code_dir(i),
                "readOnly": True,
            }
        )
    mounts.extend(exp.spec.runtime.volume_mounts)
    return mounts


def pod_spec_common(exp: RLExperiment, defaults: OperatorDefaults) -> Obj:
    """Pod-level settings shared by head, workers and the submitter."""
    rt = exp.spec.runtime
    spec: Obj = {
        # Nothing in these pods calls the Kubernetes API. Cloud identities (IRSA, EKS Pod
        # Identity, Azure Workload Identity) mount their own projected token, and GKE's
        # goes through the metadata server, so they work without this one.
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if rt.service_account_name:
        spec["serviceAccountName"] = rt.service_account_name
    if defaults.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in defaults.image_pull_secrets]
    return spec


def container_security(capabilities: list[str]) -> Obj:
    """A container's securityContext: every capability dropped, `capabilities` added back.

    Not set, and why: runAsNonRoot (slime's image keeps slime and Megatron-LM under /root
    and runs as root) and readOnlyRootFilesystem (Triton, FlashInfer, DeepGEMM and torch
    extensions compile kernels into caches under the home directory at run time; Ray keeps
    its session under /tmp).
    """
    caps: Obj = {"drop": ["ALL"]}
    if capabilities:
        caps["add"] = list(capabilities)
    return {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": caps}


def image(exp: RLExperiment, defaults: OperatorDefaults) -> str:
    found = exp.spec.runtime.image or defaults.image
    if not found:  # validation with the same defaults reports it on spec.runtime.image first
        raise ValueError("no Ray pod image: spec.runtime.image is unset and there is no default")
    return found


@dataclass(frozen=True)
class PodParts:
    """What the head, the workers and the submitter share, computed once per render."""

    exp: RLExperiment
    env: list[Obj]
    mounts: list[Obj]
    pod: Obj
    bundle_config_map: str
    security: Obj  # head and submitter containers: no capability at all
    worker_security: Obj  # GPU workers: plus what the spec's devices need

    @classmethod
    def build(cls, exp: RLExperiment, defaults: OperatorDefaults, bundle_cm: str) -> PodParts:
        return cls(
            exp=exp,
            env=container_env(exp, defaults),
            mounts=volume_mounts(exp),
            pod=pod_spec_common(exp, defaults),
            bundle_config_map=bundle_cm,
            security=container_security([]),
            worker_security=container_security(worker_capabilities(exp)),
        )

    def volumes(self, shm_size: str) -> list[Obj]:
        return volumes(self.exp, self.bundle_config_map, shm_size)
