"""Run the real helm 3 and helm 4 binaries on the chart (k8s-test-harness Q3).

`hack/setup.sh` installs both under ~/.cache/agentrl/tools; helm's own cache, config and data
directories point at a throwaway directory so tests never read or write the user's helm state.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agentrl"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
TOOLS = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl")) / "tools"
HELMS = {"helm3": TOOLS / "helm3" / "helm" / "helm", "helm4": TOOLS / "helm4" / "helm" / "helm"}
KUBE_VERSION = "1.30.0"
# Prometheus Operator objects render only where their API is served; tests claim it is.
MONITORING_API = "monitoring.coreos.com/v1"
RELEASE = "agentrl"
NAMESPACE = "agentrl"
# The chart's one required value (agentrl publishes no operator image): a test value, never
# pulled. Every render and dry-run install below passes it first, so a test's own --set wins.
OPERATOR_IMAGE = ("--set", "image.repository=agentrl/operator",
                  "--set", "image.digest=sha256:" + "0" * 64)  # fmt: skip
_HOME = Path(tempfile.mkdtemp(prefix="agentrl-helm-home-"))  # helm's cache/config/data, per run
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


def helm_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[key] = str(_HOME / key.lower())
    return env


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = HELMS[helm]
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing: run hack/setup.sh")
    proc = subprocess.run(
        [str(binary), *args],
        capture_output=True,
        text=True,
        env=helm_env(),
        timeout=120,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@functools.lru_cache(maxsize=64)
def _template(
    helm: str, values: tuple[str, ...], sets: tuple[str, ...], api: bool, namespace: str
) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace, *OPERATOR_IMAGE]
    args += ["--kube-version", KUBE_VERSION]
    if api:
        args += ["--api-versions", MONITORING_API]
    for path in values:
        args += ["--values", path]
    for item in sets:
        args += ["--set", item]
    return run_helm(helm, *args).stdout


class StrictLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key twice in one mapping is an error, not "last wins"
    (what the API server's strict decoding and `kubectl apply` make of it varies)."""


def _no_duplicate_keys(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=StrictLoader) if doc]


def render_text(
    helm: str = "helm3",
    values: Path | None = None,
    sets: tuple[str, ...] = (),
    monitoring_api: bool = True,
    namespace: str = NAMESPACE,
) -> str:
    """`helm template` output as text."""
    return _template(helm, (str(values),) if values else (), sets, monitoring_api, namespace)


def render(
    helm: str = "helm3",
    values: Path | None = None,
    sets: tuple[str, ...] = (),
    monitoring_api: bool = True,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """`helm template` output as a list of objects (fresh copies; safe to mutate). A key that
    appears twice in one mapping fails the render."""
    return load_all(render_text(helm, values, sets, monitoring_api, namespace))


def notes(helm: str, *args: str) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it (`helm template` never renders
    NOTES). helm 4 only: helm 3.17's client dry run still asks the cluster for its version."""
    assert helm == "helm4", helm
    kubeconfig = _HOME / "kubeconfig"  # no cluster, no context: nothing to connect to
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = ("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
            "--kubeconfig", str(kubeconfig), *OPERATOR_IMAGE, *args)  # fmt: skip
    out = run_helm(helm, *args).stdout
    assert "\nNOTES:\n" in out, out[-2000:]
    return out.split("\nNOTES:\n", 1)[1]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = find(objs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


PROMQL_KEYWORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan", "by", "without"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, strings, ranges ignored)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\boffset\s+-?[0-9][0-9a-z]*", "", text)
    names = set()
    for name, call in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        if not call and name not in PROMQL_KEYWORDS:
            names.add(name)
    return names


RECORDED = ROOT / "tests" / "support" / "recorded"


def recorded_series_names() -> set[str]:
    """Series names of the other exporters the dashboard reads, as recorded from their source:
    SGLang's engines (relayed by the head) and NVIDIA's dcgm-exporter."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.name
        for path in sorted(RECORDED.glob("*.prom"))
        for family in text_string_to_metric_families(path.read_text(encoding="utf-8"))
        for sample in family.samples
    }


def exported_series_names() -> set[str]:
    """Every series name the bundle and the operator export (from their real registries), the
    head's engine relay adds, and the recorded exporters serve."""
    from agentrl.bundle.engine_metrics import EngineMetricsRelay
    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.controller.metrics import OperatorMetrics

    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
    }
    names: set[str] = recorded_series_names()
    relay = EngineMetricsRelay(_no_engines, None)  # type: ignore[arg-type]  # never reads
    for registry in (BundleMetrics().registry, OperatorMetrics().registry, relay._registry):
        for family in registry.collect():
            names.update(family.name + suffix for suffix in suffixes[family.type])
    return names


async def _no_engines() -> list[str]:
    return []
