"""The operator's own Prometheus metrics (names in docs/monitoring.md), on a registry of their own.

A private registry keeps tests and the benchmark free of global state and keeps the
endpoint to exactly what the dashboards and alerts use.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from agentrl.api.constants import Phase

RESULTS = ("ok", "invalid", "conflict", "refused", "rejected", "incompatible", "retry", "error")


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.experiments = Gauge(
            "agentrl_experiments", "RLExperiments by phase.", ["phase"], registry=self.registry
        )
        # One series per experiment, 1 under its current phase: the dashboard's namespace and
        # experiment filters and its phase-change annotations read it. `experiment_namespace`,
        # because Prometheus gives the scraped operator's own namespace to `namespace`.
        self.experiment_phase = Gauge(
            "agentrl_experiment_phase",
            "1 for each RLExperiment's current phase.",
            ["experiment_namespace", "experiment", "phase"],
            registry=self.registry,
        )
        # Where each experiment's Ray dashboard opens (KubeRay's status.dashboardURL, or the
        # operator's AGENTRL_RAY_DASHBOARD_URL template of it): the dashboard's links read it.
        self.experiment_info = Gauge(
            "agentrl_experiment_info",
            "1 for each RLExperiment whose Ray dashboard address KubeRay has reported.",
            ["experiment_namespace", "experiment", "ray_dashboard_url"],
            registry=self.registry,
        )
        # One series per pod of an experiment (head, GPU workers, submitter), from the pod
        # watch: what joins per-pod series of other exporters (dcgm-exporter's GPU series carry
        # `pod` and `namespace`) to the experiment, as kube-state-metrics' kube_pod_labels
        # would with a label allow-list most clusters do not set.
        self.experiment_pod = Gauge(
            "agentrl_experiment_pod_info",
            "1 for each pod of an RLExperiment, with its agentrl.io/component.",
            ["experiment_namespace", "experiment", "pod", "component"],
            registry=self.registry,
        )
        # One series per problem an experiment's conditions report (conditions.problems):
        # none for a healthy experiment, a handful at most for a troubled one, all gone with
        # the experiment. AgentRLExperimentStalled and AgentRLExperimentFailed read it.
        self.experiment_condition = Gauge(
            "agentrl_experiment_condition",
            "1 for each problem an RLExperiment's conditions report (a problem condition that "
            "is True, or Valid that is False), with the condition's reason.",
            ["experiment_namespace", "experiment", "condition", "reason"],
            registry=self.registry,
        )
        self.reconcile_total = Counter(
            "agentrl_reconcile", "Spec reconciles by result.", ["result"], registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "agentrl_reconcile_seconds",
            "Time of one spec reconcile (validate, render, children, status).",
            registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        # Which replica acts: 1 on the leader (or on the one operator without leader
        # election), 0 on a standby. Prometheus's pod label names the replica; a standby
        # has no experiments, so its per-experiment series are absent and its counts zero.
        self.leader = Gauge(
            "agentrl_operator_leader",
            "1 while this operator replica leads (reconciles, writes status), 0 on standby.",
            registry=self.registry,
        )
        for phase in Phase:
            self.experiments.labels(str(phase)).set(0)
        for result in RESULTS:
            self.reconcile_total.labels(result)

    def move(self, old: str | None, new: str | None, key: tuple[str, str] | None = None) -> None:
        """One experiment (`key`: namespace, name) changed phase (None: not counted, i.e. new
        or deleted)."""
        if old == new:
            return
        if old is not None:
            self.experiments.labels(old).dec()
            if key is not None:
                self.experiment_phase.remove(*key, old)
        if new is not None:
            self.experiments.labels(new).inc()
            if key is not None:
                self.experiment_phase.labels(*key, new).set(1)

    def link(self, key: tuple[str, str], old: str | None, new: str | None) -> None:
        """An experiment's Ray dashboard address changed (None: none, or deleted)."""
        if old == new:
            return
        if old is not None:
            self.experiment_info.remove(*key, old)
        if new is not None:
            self.experiment_info.labels(*key, new).set(1)

    def flag(
        self,
        key: tuple[str, str],
        old: frozenset[tuple[str, str]],
        new: frozenset[tuple[str, str]],
    ) -> None:
        """An experiment's problems (condition, reason) changed (empty: none, or deleted)."""
        for condition, reason in old - new:
            self.experiment_condition.remove(*key, condition, reason)
        for condition, reason in new - old:
            self.experiment_condition.labels(*key, condition, reason).set(1)

    def pod(self, key: tuple[str, str], pod: str, old: str | None, new: str | None) -> None:
        """An experiment's pod appeared, changed component or went (None: not there)."""
        if old == new:
            return
        if old is not None:
            self.experiment_pod.remove(*key, pod, old)
        if new is not None:
            self.experiment_pod.labels(*key, pod, new).set(1)

    def serve(self, port: int) -> None:
        """Serve /metrics on 0.0.0.0:port in a thread (prometheus_client's own server)."""
        start_http_server(port, registry=self.registry)
