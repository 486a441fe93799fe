"""Every label set the rollout's step and episode records can count is exported from the start.

A counter series created by its first increment starts at that count, which Prometheus'
rate() and increase() never see; the bundle creates each one at 0 instead (docs/monitoring.md).
These tests drive the rollout's own recording code with every outcome, reason and split it
has and check that nothing it counts is new to a fresh registry.
"""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from agentrl.api.constants import SPLIT_EVAL, SPLIT_TRAIN
from agentrl.bundle.failures import REASONS
from agentrl.bundle.hub import apply_delta
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout.batch import BATCH_FULL
from agentrl.bundle.rollout.driver import record_step
from agentrl.bundle.rollout.report import Recorder
from agentrl.bundle.rollout.sampling import StepReport

COUNTERS = (
    "agentrl_episodes_total",
    "agentrl_failed_sessions_total",
    "agentrl_excluded_episodes_total",
    "agentrl_groups_total",
    "agentrl_discarded_episode_seconds_total",
    "agentrl_aborted_episodes_total",
)


def series(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in registry.collect()
        for s in family.samples
        if s.name in COUNTERS
    }


def fresh_values(name: str, label: str) -> dict[str, float]:
    """A fresh registry's samples of `name`, by the value of `label`."""
    return {
        s.labels[label]: s.value
        for family in BundleMetrics().registry.collect()
        for s in family.samples
        if s.name == name
    }


def test_nothing_the_rollout_counts_is_a_new_series() -> None:
    fresh = series(BundleMetrics().registry)
    rec = Recorder()
    for split in (SPLIT_TRAIN, SPLIT_EVAL):
        for failure in (None, *REASONS):
            rec.episode_started(split)
            rec.episode_finished(split, failure, 0.0, 1, 0, seconds=1.0)
        rec.episode_started(split)
        rec.episode_aborted(split, BATCH_FULL, 1.0)
    groups = ("kept", "filtered", "backfilled", "skipped", "aborted", "carried_over")
    every = StepReport(**dict.fromkeys(groups, 1))  # every group count record_step reads
    every.filtered_seconds = every.aborted_seconds = 1.0
    every.masked_seconds = every.failed_seconds = 1.0
    every.excluded.update(dict.fromkeys(REASONS, 1))
    every.trained_episodes = len(REASONS)
    record_step(SimpleNamespace(recorder=rec), every)  # type: ignore[arg-type]
    metrics = BundleMetrics()
    apply_delta(metrics, rec.take())
    counted = series(metrics.registry)
    assert counted - fresh == set()
    assert {name for name, _ in counted} == set(COUNTERS)


def test_every_trace_break_reason_is_exported_from_the_start() -> None:
    """The merge's and the gateway's reasons for a trace break are the ones the registry
    creates at 0, so one agent's one-off rewrite still moves rate() on the dashboard."""
    from agentrl.api.constants import TRACE_BREAK_REASONS
    from agentrl.bundle.gateway.prompt import PROMPT_BREAK_REASONS
    from agentrl.bundle.traces import BREAK_REASONS

    assert sorted({*BREAK_REASONS, *PROMPT_BREAK_REASONS}) == sorted(TRACE_BREAK_REASONS)
    fresh = fresh_values("agentrl_trace_breaks_total", "reason")
    assert fresh == dict.fromkeys(TRACE_BREAK_REASONS, 0.0)


def test_every_gateway_api_and_code_is_exported_from_the_start() -> None:
    """Every API's requests by every status the gateway answers exist at 0, and each API's
    latency histogram too: a first 502 (or an Anthropic agent's first request) moves rate()."""
    from agentrl.api.constants import GATEWAY_APIS, GATEWAY_CODE_OTHER, GATEWAY_CODES
    from agentrl.bundle.gateway.frontend import FRONTS

    assert tuple(FRONTS) == GATEWAY_APIS
    fresh = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in BundleMetrics().registry.collect()
        for s in family.samples
        if s.name in ("agentrl_gateway_requests_total", "agentrl_gateway_request_seconds_count")
    }
    codes = [*map(str, GATEWAY_CODES), GATEWAY_CODE_OTHER]
    requests = {
        ("agentrl_gateway_requests_total", (("api", api), ("code", code))): 0.0
        for api in GATEWAY_APIS
        for code in codes
    }
    latency = {
        ("agentrl_gateway_request_seconds_count", (("api", api),)): 0.0 for api in GATEWAY_APIS
    }
    assert fresh == requests | latency


def test_a_status_the_gateway_does_not_answer_with_counts_as_other() -> None:
    """The `code` label is bounded: a status outside GATEWAY_CODES (an aiohttp error nobody
    foresaw) is counted under `other`, never as a new series."""
    from agentrl.bundle.gateway.frontend import Frontend

    metrics = BundleMetrics()
    fresh = {s.labels["code"] for f in metrics.registry.collect() for s in f.samples
             if s.name == "agentrl_gateway_requests_total"}  # fmt: skip
    front = SimpleNamespace(metrics=metrics, _series={})
    for status in (418, 507, 200, 418):
        Frontend.tally(front, "openai", status, 0.5)  # type: ignore[arg-type]
    value = metrics.registry.get_sample_value
    assert value("agentrl_gateway_requests_total", {"api": "openai", "code": "other"}) == 3
    assert value("agentrl_gateway_requests_total", {"api": "openai", "code": "200"}) == 1
    assert value("agentrl_gateway_request_seconds_count", {"api": "openai"}) == 4
    codes = {s.labels["code"] for f in metrics.registry.collect() for s in f.samples
             if s.name == "agentrl_gateway_requests_total"}  # fmt: skip
    assert codes == fresh


def test_every_status_the_gateway_answers_with_is_a_known_code() -> None:
    """GATEWAY_CODES is the whole set the agent APIs' request path answers with: every
    status literal it raises (ApiError and its subclasses), counts (`status = ...`, a
    stream's `return resp, 499`) or answers a finished stream with."""
    import ast
    from pathlib import Path

    from agentrl.api.constants import GATEWAY_CODES
    from agentrl.bundle import gateway

    # Served on other listeners (admin API, callbacks) or the engine's side: not tallied.
    elsewhere = {"admin.py", "callbacks.py", "client.py", "hub.py", "sglang.py", "http1.py"}
    errors = {"ApiError", "RenderFailed", "busy", "bad_request", "__init__"}
    found: dict[int, set[str]] = {}
    for path in sorted(Path(gateway.__file__).parent.glob("*.py")):
        if path.name in elsewhere:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            literals: list[ast.expr] = []
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in errors:
                    literals.append(node.args[0])
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "status" for t in node.targets
            ):
                literals.append(node.value)
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                literals.append(node.value.elts[-1])
            elif isinstance(node, ast.IfExp):  # `499 if self.gone else 200`
                literals += [node.body, node.orelse]
            for lit in literals:
                if (
                    isinstance(lit, ast.Constant)
                    and type(lit.value) is int
                    and 100 <= lit.value < 600
                ):
                    found.setdefault(lit.value, set()).add(path.name)
    unknown = set(found) - set(GATEWAY_CODES)
    assert not unknown, {code: found[code] for code in unknown}
    # Every code but 500 (the default for an error nobody raised as an ApiError) is one the
    # path really answers with, so the set holds no dead code either.
    assert set(GATEWAY_CODES) - set(found) <= {500}, set(GATEWAY_CODES) - set(found)


def test_every_callback_outcome_is_exported_from_the_start() -> None:
    """The gateway's first lost result callback (an unreachable listener) moves rate()."""
    from agentrl.api.constants import CALLBACK_OUTCOMES

    fresh = fresh_values("agentrl_gateway_callbacks_total", "outcome")
    assert fresh == dict.fromkeys(CALLBACK_OUTCOMES, 0.0)
