"""`torch.cuda` as a process on a Kubernetes pod sees it (test support; served by
`upstream_imports` in place of the real module, which needs an NVIDIA driver).

What the pod exposes is given by the environment, the way the container runtime and Ray
decide it in a real pod:

- `AGENTRL_POD_GPUS`: how many GPUs the container runtime put into this container (the
  device plugin's `nvidia.com/gpu` limit). Unset or 0 is a pod without GPUs, or one whose
  image runs with `NVIDIA_VISIBLE_DEVICES=void` (agentrl's Ray head): no driver, no device.
- `CUDA_VISIBLE_DEVICES`: CUDA's own filter over those devices. Ray sets it per worker
  process; an empty value hides every device, as it does in CUDA.

Only the calls slime's and Megatron's argument code make are modelled (device count and
properties, availability). They fail as CUDA builds of torch fail: querying a device where
no driver is loaded raises `RuntimeError("Found no NVIDIA driver ...")`, and where the driver
sees no device, `RuntimeError("No CUDA GPUs are available")`; both come from torch's lazy
CUDA initialisation, which every device query runs first. A visible device reports the
properties of an H100 (compute capability 9.0).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
    "installed a driver from http://www.nvidia.com/Download/index.aspx"
)
NO_DEVICE = "No CUDA GPUs are available"


@dataclass(frozen=True)
class _CudaDeviceProperties:
    name: str = "NVIDIA H100 80GB HBM3"
    major: int = 9
    minor: int = 0
    total_memory: int = 85_031_714_816
    multi_processor_count: int = 132
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"


def _pod_gpus() -> int:
    return int(os.environ.get("AGENTRL_POD_GPUS") or 0)


def _visible() -> int:
    pod = _pod_gpus()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return pod
    return len([d for d in mask.split(",") if d.strip() and int(d) < pod])


def _lazy_init() -> None:
    if _pod_gpus() == 0:
        raise RuntimeError(NO_DRIVER)
    if _visible() == 0:
        raise RuntimeError(NO_DEVICE)


def is_available() -> bool:
    return _pod_gpus() > 0 and _visible() > 0


def device_count() -> int:
    return _visible() if _pod_gpus() else 0


def _index(device: Any) -> int:
    index = getattr(device, "index", None)
    return int(device) if isinstance(device, int) else int(index or 0)


def get_device_properties(device: Any = None) -> _CudaDeviceProperties:
    _lazy_init()
    if _index(device) >= _visible():
        raise AssertionError("Invalid device id")
    return _CudaDeviceProperties()


def get_device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def current_device() -> int:
    _lazy_init()
    return 0


def is_initialized() -> bool:
    return False


def __getattr__(name: str) -> Any:
    """Every other name (streams, nvtx, amp...) is a placeholder, as in the rest of torch."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    from upstream_imports import placeholder

    return placeholder(f"torch.cuda.{name}")
