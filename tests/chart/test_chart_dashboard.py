"""The Grafana dashboard: the panels researchers need, queries promtool parses that read only
exported metrics, and JSON that type-checks against @grafana/schema with tsc.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, TOOLS, exported_series_names, metric_names
from test_chart_alerts import promtool

DASHBOARD = CHART / "files" / "dashboards" / "agentrl.json"
NODE_MODULES = TOOLS / "node" / "node_modules"
# A Grafana variable left in a query ($1 is label_replace's capture group, not a variable).
UNSUBSTITUTED = re.compile(r"\$(?![0-9])")
# What Grafana substitutes before a query reaches Prometheus ("All" selected).
GRAFANA_VARS = {
    "$namespace": ".+",
    "$experiment": ".+",
    "$__rate_interval": "1m",
    "$run": "rl/demo",  # one panel of the reward XY panel's repeat: <namespace>/<experiment>
}
# Panel type -> (module under @grafana/schema's exports, option and field-config type names).
PANEL_TYPES = {
    "timeseries": "timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen",
    "xychart": "xychart/panelcfg/x/XYChartPanelCfg_types.gen",
    "bargauge": "bargauge/panelcfg/x/BarGaugePanelCfg_types.gen",
}
REQUIRED_PANELS = {
    "Reward vs rollout step: $run",
    "Reward (train, eval)",
    "Failed sessions by reason",
    "Connection-pool saturation",
    "Connection-pool discards",
    "Sessions in flight",
    "Gateway latency quantiles",
    "Generated tokens/s",
    "Result callbacks by outcome",
    "Truncated samples",
    "Trace breaks by reason",
    "Experiments by phase",
    "Groups by outcome",
    "Zero-variance group share",
    "Episode duration quantiles",
    "Rollout step duration",
    "Excluded episodes by reason",
    "Excluded episode share",
    "Policy lag of trained episodes",
    "Stale tokens",
    "GPU utilisation",
    "GPU memory used",
    "GPU power",
    "Engine requests running and queued",
    "Engine token throughput",
    "Engine prefix-cache hit rate and KV usage",
}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dash["panels"] if p["type"] != "row"]


def substitute(expr: str, values: dict[str, str] = GRAFANA_VARS) -> str:
    """`expr` with Grafana's variables replaced as Grafana would (`values`: variable ->
    text)."""
    for var, value in values.items():
        expr = expr.replace(var, value)
    return expr


def queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title/refId, PromQL with Grafana's variables substituted)."""
    out = []
    for panel in panels(dash):
        for target in panel["targets"]:
            expr = substitute(target["expr"])
            assert not UNSUBSTITUTED.search(expr), (panel["title"], expr)
            out.append((f"{panel['title']}/{target['refId']}", expr))
    for annotation in dash.get("annotations", {}).get("list", []):
        if "expr" in annotation.get("target", {}):
            expr = substitute(annotation["target"]["expr"])
            assert not UNSUBSTITUTED.search(expr), (annotation["name"], expr)
            out.append((f"annotation {annotation['name']}", expr))
    return out


def test_panels_and_variables() -> None:
    dash = dashboard()
    titles = {p["title"] for p in panels(dash)}
    assert titles >= REQUIRED_PANELS
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "experiment"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(dash):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["description"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for target in panel["targets"]:
            if target["expr"].startswith("sum by (phase)") or "reconcile" in target["expr"]:
                continue  # operator metrics carry the operator's namespace, not an experiment
            assert 'experiment=~"$experiment"' in target["expr"], panel["title"]
    reward = next(p for p in panels(dash) if p["type"] == "xychart")
    assert reward["repeat"] == "run"
    run = variables["run"]
    assert (run["multi"], run["includeAll"], run["hide"]) == (True, True, 2)
    splits = {t["legendFormat"] for t in reward["targets"]}
    assert splits == {"rollout step", "{{split}} reward"}


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(queries(dashboard()))
    ]
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]})
    )
    proc = promtool("check", "rules", "queries.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    bad = {
        "groups": [{"name": "q", "rules": [{"record": "x:y", "expr": "sum by (le (rate(x[1m]))"}]}]
    }
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        ["promtool", "check", "rules", "bad.yaml"], cwd=tmp_path, capture_output=True, check=False
    )
    assert proc.returncode != 0


def test_queries_name_only_exported_metrics() -> None:
    exported = exported_series_names()
    used: set[str] = set()
    for where, expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, where
        assert names <= exported, (where, names - exported)
        used |= names
    # Every bundle family shows up somewhere on the dashboard.
    families = {
        "agentrl_rollout_step",
        "agentrl_batch_reward_mean",
        "agentrl_episode_reward_bucket",
        "agentrl_episodes_total",
        "agentrl_failed_sessions_total",
        "agentrl_sessions_in_flight",
        "agentrl_connection_pool_size",
        "agentrl_connection_pool_in_use",
        "agentrl_connection_pool_discarded_total",
        "agentrl_gateway_requests_total",
        "agentrl_gateway_request_seconds_bucket",
        "agentrl_gateway_callbacks_total",
        "agentrl_generated_tokens_total",
        "agentrl_samples_total",
        "agentrl_trace_breaks_total",
        "agentrl_truncated_samples_total",
        "agentrl_groups_total",
        "agentrl_zero_variance_group_share",
        "agentrl_aborted_episodes_total",
        "agentrl_discarded_episode_seconds_total",
        "agentrl_episode_seconds_bucket",
        "agentrl_rollout_step_seconds_sum",
        "agentrl_episode_length_bias",
        "agentrl_rollout_total_steps",
        "agentrl_response_tokens_bucket",
        "agentrl_eval_reward_mean",
        "agentrl_eval_step",
        "agentrl_experiment_phase",
        "agentrl_experiment_info",
        "agentrl_wandb_run_info",
        "agentrl_checkpoint_iteration",
        "agentrl_excluded_episodes_total",
        "agentrl_excluded_episode_share",
        "agentrl_policy_lag_steps_bucket",
        "agentrl_stale_tokens_total",
        "agentrl_stale_episodes_restarted_total",
        "agentrl_context_full_turns_total",
        "agentrl_experiment_pod_info",
        # GPUs (dcgm-exporter) and SGLang's engines, as recorded from their source.
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:generation_tokens_total",
        "sglang:prompt_tokens_total",
        "sglang:cache_hit_rate",
        "sglang:token_usage",
    }
    assert families <= used, families - used


def typescript_check(dash: dict[str, Any]) -> str:
    """A TypeScript module assigning the dashboard and each panel's options to their types.

    Object literals (not a JSON import) so tsc also rejects unknown keys. Grafana's string
    enums are compared by value: `Lit<T>` turns them into their string literal types.
    """
    lines = [
        "import type { Dashboard } from '@grafana/schema';",
        "type Lit<T> = T extends string ? (string extends T ? string : `${T}`)",
        "  : T extends (infer U)[] ? Lit<U>[]",
        "  : T extends object ? { [K in keyof T]: Lit<T[K]> } : T;",
    ]
    for kind, module in PANEL_TYPES.items():
        path = f"@grafana/schema/dist/esm/raw/composable/{module}"
        lines.append(f"import type * as {kind} from '{path}';")
    # An annotation's target is typed as the common DataQuery only; its Prometheus fields
    # (expr, step, title and text formats) are the datasource's, so they are checked by
    # promtool and the real Prometheus through `queries` instead.
    typed = copy.deepcopy(dash)
    for annotation in typed.get("annotations", {}).get("list", []):
        target = annotation.get("target", {})
        for key in ("expr", "step", "titleFormat", "textFormat"):
            target.pop(key, None)
    lines.append(f"export const dashboard: Lit<Dashboard> = {json.dumps(typed, indent=1)};")
    for panel in panels(dash):
        kind, pid = panel["type"], panel["id"]
        lines.append(
            f"export const options{pid}: Lit<{kind}.Options> = {json.dumps(panel['options'])};"
        )
        custom = panel["fieldConfig"]["defaults"].get("custom")
        if custom is not None:
            lines.append(
                f"export const custom{pid}: Lit<{kind}.FieldConfig> = {json.dumps(custom)};"
            )
    return "\n".join(lines) + "\n"


def run_tsc(dash: dict[str, Any], workdir: Path) -> subprocess.CompletedProcess[str]:
    if not (NODE_MODULES / "@grafana" / "schema").is_dir():
        raise RuntimeError(f"{NODE_MODULES} lacks @grafana/schema: run hack/setup.sh")
    os.symlink(NODE_MODULES, workdir / "node_modules")
    (workdir / "check.ts").write_text(typescript_check(dash))
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "module": "esnext",
            "moduleResolution": "bundler",
            "target": "es2022",
            "skipLibCheck": True,
        },
        "files": ["check.ts"],
    }
    (workdir / "tsconfig.json").write_text(json.dumps(config))
    tsc = NODE_MODULES / "typescript" / "bin" / "tsc"
    return subprocess.run(
        ["node", str(tsc), "-p", "."],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_dashboard_type_checks_against_grafana_schema(tmp_path: Path) -> None:
    proc = run_tsc(dashboard(), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("breakage", ["grid_height_string", "unknown_option", "bad_enum"])
def test_tsc_rejects_a_broken_dashboard(breakage: str, tmp_path: Path) -> None:
    dash = dashboard()
    first = panels(dash)[0 if breakage != "bad_enum" else 1]
    if breakage == "grid_height_string":
        first["gridPos"]["h"] = "eight"
    elif breakage == "unknown_option":
        first["options"]["legnd"] = {}
    else:
        first["options"]["tooltip"]["mode"] = "everything"
    proc = run_tsc(dash, tmp_path)
    assert proc.returncode != 0
    assert "error TS" in proc.stdout


def test_gpu_queries_join_dcgm_series_whether_or_not_their_pod_labels_are_honoured(
    tmp_path: Path,
) -> None:
    """dcgm-exporter labels each GPU with the pod using it. Scraped with honorLabels (as some
    installs set) the labels stay `pod`/`namespace`; with its chart's default they arrive as
    `exported_pod`/`exported_namespace`. promtool evaluates the GPU panels' queries on both."""
    exprs = {where: expr for where, expr in queries(dashboard()) if where.startswith("GPU ")}
    assert len(exprs) == 4
    rules = [{"record": f"gpu:{i}", "expr": e} for i, e in enumerate(exprs.values())]
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "gpu", "rules": rules}]})
    )
    gpu = 'modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
    honoured = f'job="dcgm-a",namespace="team-a",pod="a-w",{gpu}'
    scraper = 'job="dcgm-b",namespace="gpu-operator",pod="dcgm-x",exported_namespace="team-b"'
    exported = f'{scraper},exported_pod="b-w",{gpu}'
    stranger = f'{scraper},exported_pod="someone-else",{gpu}'
    pods = (
        'agentrl_experiment_pod_info{{namespace="agentrl",experiment_namespace="{}",'
        'experiment="{}",pod="{}",component="worker"}}'
    )
    series = [
        (f'DCGM_FI_DEV_GPU_UTIL{{{honoured},gpu="0"}}', "80"),
        (f'DCGM_FI_DEV_GPU_UTIL{{{honoured},gpu="1"}}', "60"),
        (f'DCGM_FI_DEV_GPU_UTIL{{{exported},gpu="0"}}', "30"),
        (f'DCGM_FI_DEV_GPU_UTIL{{{stranger},gpu="1"}}', "99"),
        (f'DCGM_FI_DEV_POWER_USAGE{{{honoured},gpu="0"}}', "500"),
        (f'DCGM_FI_DEV_POWER_USAGE{{{exported},gpu="0"}}', "300"),
        (f'DCGM_FI_DEV_FB_USED{{{honoured},gpu="0"}}', "1024"),
        (f'DCGM_FI_DEV_FB_FREE{{{honoured},gpu="0"}}', "3072"),
        (pods.format("team-a", "a", "a-w"), "1"),
        (pods.format("team-b", "b", "b-w"), "1"),
    ]
    util, used, total, power = (f"gpu:{i}" for i in range(4))
    mib, team_a = 2**20, '{namespace="team-a",experiment="a"}'
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": f"{v}x5"} for s, v in series],
            "promql_expr_test": [
                {"expr": util, "eval_time": "2m", "exp_samples": [
                    {"labels": f'{util}{{namespace="team-a",experiment="a"}}', "value": 70},
                    {"labels": f'{util}{{namespace="team-b",experiment="b"}}', "value": 30},
                ]},
                {"expr": power, "eval_time": "2m", "exp_samples": [
                    {"labels": f'{power}{{namespace="team-a",experiment="a"}}', "value": 500},
                    {"labels": f'{power}{{namespace="team-b",experiment="b"}}', "value": 300},
                ]},
                {"expr": used, "eval_time": "2m", "exp_samples": [
                    {"labels": used + team_a, "value": mib * 1024},
                ]},
                {"expr": total, "eval_time": "2m", "exp_samples": [
                    {"labels": total + team_a, "value": mib * 4096},
                ]},
            ],
        }],
    }  # fmt: skip
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    proc = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_eval_reward_by_set_draws_every_eval_pass_of_a_run(tmp_path: Path) -> None:
    """A healthy run as the bundle's real code exports it (run_timeline): eval passes at
    rollout 0 before training (10m), after rollout 1 (55m) and after rollout 3 (100m). Each is
    drawn at the scrapes after it and nowhere else. The baseline pass at rollout 0 created the
    `agentrl_eval_step` series at 0, which changes() never counts: it was never drawn."""
    from run_timeline import EVAL_SET, Run, events

    run = Run()
    passes = [(t, rollout) for t, what, rollout in events(run) if what == "eval"]
    assert passes == [(600, 0), (3300, 1), (6000, 3)]
    (expr,) = [e for where, e in queries(dashboard()) if where.startswith("Eval reward by set/")]
    cases = []
    for t, rollout in passes:
        drawn = [{"labels": f'{{eval_set="{EVAL_SET}", experiment="demo", namespace="rl"}}',
                  "value": 0.3 + rollout / 100}]  # fmt: skip
        cases += [{"expr": expr, "eval_time": f"{t + s}s", "exp_samples": drawn} for s in (0, 45)]
        cases.append({"expr": expr, "eval_time": f"{t + 600}s", "exp_samples": []})
    assert_over_timeline(tmp_path, run, 110 * 60, cases)


def test_rollout_step_duration_draws_every_call_of_a_run(tmp_path: Path) -> None:
    """The same run: the baseline eval pass (300 s) ends at 10m, rollout 0 (960 s) at 26m.
    Each split's first call used to create its histogram series at count 1, which rate()
    never counts: neither was ever drawn. The panel draws points (the query has a value only
    in the interval after a call ended), not a line that single values never make."""
    from run_timeline import Run

    (panel,) = [p for p in panels(dashboard()) if p["title"] == "Rollout step duration"]
    assert panel["fieldConfig"]["defaults"]["custom"]["drawStyle"] == "points"
    (expr,) = [e for where, e in queries(dashboard()) if where.startswith("Rollout step duration/")]

    def drawn(split: str, value: float) -> dict[str, Any]:
        return {"labels": f'{{experiment="demo", namespace="rl", split="{split}"}}', "value": value}

    numbers = f"({expr}) > -1"  # 0/0 (no call ended in the interval) is NaN: not drawn
    cases = [
        {"expr": numbers, "eval_time": "10m15s", "exp_samples": [drawn("eval", 300)]},
        {"expr": numbers, "eval_time": "26m15s", "exp_samples": [drawn("train", 960)]},
        {"expr": numbers, "eval_time": "36m", "exp_samples": []},
        {"expr": numbers, "eval_time": "46m15s", "exp_samples": [drawn("train", 960)]},
    ]
    assert_over_timeline(tmp_path, Run(), 60 * 60, cases)


def test_step_time_and_eta_follow_the_runs_pace(tmp_path: Path) -> None:
    """The same run, 8 steps: each takes 960 s of generation and 240 s of training, and
    every second one a 300 s eval pass, so train rollouts end 1200 or 1500 s apart. At 2h30m
    the last hour holds the steps that ended at 1h31m (1200 s), 1h56m (1500 s) and 2h16m
    (1200 s): a step takes 1300 s, and after rollout 5 of 200, 194 are left. Once rollout 7
    of 8 is done nothing is. The panel read the rollout call alone (960 s, no training, no
    eval) and counted one step more than is left."""
    from run_timeline import Run, events

    trains = [t for t, what, _ in events(Run(steps=8)) if what == "train"]
    assert trains == [1560, 2760, 4260, 5460, 6960, 8160, 9660, 10860]
    step, eta = [e for where, e in queries(dashboard()) if where.startswith("Step time and ETA/")]
    demo = '{experiment="demo", namespace="rl"}'
    cases = [
        {"expr": step, "eval_time": "9000s", "exp_samples": [{"labels": demo, "value": 1300}]},
        {"expr": eta, "eval_time": "9000s",
         "exp_samples": [{"labels": demo, "value": 194 * 1300}]},
    ]  # fmt: skip
    assert_over_timeline(tmp_path, Run(steps=8), 9000, cases)
    done = [{"expr": eta, "eval_time": "11000s", "exp_samples": [{"labels": demo, "value": 0}]}]
    assert_over_timeline(tmp_path, Run(steps=8, num_rollouts=8), 11000, done)


def test_a_burst_of_failures_reaches_the_failure_panels(tmp_path: Path) -> None:
    """An engine dies at 10m and the 32 train episodes it served fail at once, counted in one
    flush of the rollout's Recorder, applied to the hub's registry as the hub applies it and
    scraped every 15 s; a few episodes succeed every minute before and after, and the step
    that ends then leaves the 32 out of their groups. The failures' series used to be created
    by that flush at 32, which rate() never counts: the burst never showed on any panel."""

    from agentrl.bundle.rollout.report import Recorder

    def flushes(t: int, rec: Recorder) -> None:
        ends = [("gateway_error", 32)] if t == 600 else []
        if t >= 300 and t % 60 == 0:
            ends.append((None, 4))
        for failure, n in ends:
            for _ in range(n):
                rec.episode_started("train")
                rec.episode_finished("train", failure, 0.0, 1, 0, seconds=50.0)
        if t == 600:  # the step ends: its failed episodes are left out of their groups
            rec.signal({"gateway_error": 32}, 0.5, [0] * 32, masked=0, trained=0, restarted=0)

    series = recorded_series(flushes, 1200)
    panel = {where.split("/")[0]: e for where, e in queries(dashboard())}
    demo = 'experiment="demo", namespace="rl"'
    train, burst = f'{demo}, split="train"', 'reason="gateway_error"'
    drawn = {
        "Failed sessions by reason": [f"{train}, {burst}"],
        "Failed-session ratio": [train],
        "Failed-session ratio by reason": [f"{train}, {burst}"],
        "Excluded episodes by reason": [f"{demo}, {burst}"],
        "Episodes by outcome": [f'{train}, outcome="{o}"' for o in ("failed", "succeeded")],
    }
    cases = drawn_cases(panel, drawn, "630s")
    assert_over_series(tmp_path, series, cases)


def recorded_series(flushes: Callable[[int, Any], None], until_s: int) -> list[dict[str, str]]:
    """promtool input series of what the hub's registry exports when the rollout's Recorder,
    filled by `flushes(t, recorder)` at each scrape time t, is flushed and applied as the hub
    applies it; scraped every run_timeline.SCRAPE_S seconds from the head pod's start."""
    from prometheus_client import generate_latest
    from run_timeline import SCRAPE_S, fmt, read

    from agentrl.bundle.hub import apply_delta
    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout.report import Recorder

    metrics, taken = BundleMetrics(), []
    for t in range(0, until_s + 1, SCRAPE_S):
        rec = Recorder()
        flushes(t, rec)
        apply_delta(metrics, rec.take())
        taken.append(read(generate_latest(metrics.registry).decode()))
    names = sorted({name for series in taken for name in series})
    return [{"series": n, "values": " ".join(fmt(s.get(n)) for s in taken)} for n in names]


def test_a_steps_groups_and_discarded_time_reach_the_efficiency_panels(tmp_path: Path) -> None:
    """A train step ends at 10m having kept 2 groups and aborted 1 (300 s of its finished
    episodes thrown away), cut 4 running episodes (120 s each), trained a carried-over
    episode masked whole (60 s) and had a failed episode in a kept group (45 s), recorded by
    the rollout's own record_step; episodes succeed every minute before and after. Each
    outcome's and reason's series used to be created by that step at its count, which rate()
    never counts: a step's groups, its cut episodes and its discarded time showed from the
    second step with them on, a one-off never."""
    from types import SimpleNamespace

    from agentrl.bundle.rollout.batch import BATCH_FULL
    from agentrl.bundle.rollout.driver import record_step
    from agentrl.bundle.rollout.report import Recorder
    from agentrl.bundle.rollout.sampling import StepReport

    def flushes(t: int, rec: Recorder) -> None:
        if t >= 300 and t % 60 == 0:
            for _ in range(4):
                rec.episode_started("train")
                rec.episode_finished("train", None, 1.0, 1, 0, seconds=50.0)
        if t == 600:
            for _ in range(4):
                rec.episode_started("train")
                rec.episode_aborted("train", BATCH_FULL, 120.0)
            report = StepReport(
                kept=2, aborted=1, aborted_seconds=300.0, masked_seconds=60.0, failed_seconds=45.0
            )
            record_step(SimpleNamespace(recorder=rec), report)  # type: ignore[arg-type]

    series = recorded_series(flushes, 1200)
    panel = {where.split("/")[0]: e for where, e in queries(dashboard())}
    demo = 'experiment="demo", namespace="rl"'
    drawn = {
        "Groups by outcome": [f'{demo}, outcome="{o}"' for o in ("aborted", "kept")],
        "Episode time discarded": [
            f'{demo}, reason="{r}"' for r in ("aborted", "cut", "failed", "masked")
        ],
    }
    cases = drawn_cases(panel, drawn, "630s")
    (aborted,) = [e for w, e in queries(dashboard()) if w == "Length bias and aborted episodes/B"]
    cut = "{" + demo + f', reason="{BATCH_FULL}", split="train"' + "}"
    cases.append({"expr": f"sgn({aborted}) > 0", "eval_time": "630s",
                  "exp_samples": [{"labels": cut, "value": 1}]})  # fmt: skip
    assert_over_series(tmp_path, series, cases)


def test_step_time_and_eta_hold_steps_longer_than_the_window(tmp_path: Path) -> None:
    """Steps of 90 minutes (an hour of generation, 30 minutes of training, no eval after
    rollout 0): train rollouts end at 1h10m, 2h40m, 4h10m and 5h40m, 5400 s apart. At 3h50m
    no step ended in the last hour, so the hour's mean was 0/0 and the panel drew nothing
    half of the run; it falls back to the mean over the last 6 hours (here the mean since the
    head started: the one step timed so far, 5400 s) until a step ends in the hour again."""
    from run_timeline import Run, events

    run = Run(generate_s=3600, train_s=1800, eval_interval=100, steps=4)
    trains = [t for t, what, _ in events(run) if what == "train"]
    assert trains == [4200, 9600, 15000, 20400]
    step, eta = [e for where, e in queries(dashboard()) if where.startswith("Step time and ETA/")]
    demo = '{experiment="demo", namespace="rl"}'
    cases = [
        {"expr": expr, "eval_time": f"{t}s", "exp_samples": [{"labels": demo, "value": value}]}
        for t, left in ((13800, 198), (15600, 197))  # no step / one step in the last hour
        for expr, value in ((step, 5400), (eta, left * 5400))
    ]  # fmt: skip
    assert_over_timeline(tmp_path, run, 15600, cases)


def test_series_at_0_draw_no_line_until_they_occur(tmp_path: Path) -> None:
    """A healthy train-only run: 4 episodes succeed every minute, and a step ends at 10m
    keeping its 2 groups; nothing failed, was cut, aborted, filtered or evaluated. The head
    exports every split's, outcome's and reason's series at 0 from its start (so a first
    occurrence is counted); the panels must still draw only what occurred, as before: a 0
    line for each never-seen outcome, reason and split (eval's quantiles as NaN) filled the
    legends of Episodes by outcome, Groups by outcome, Episode time discarded, aborted
    episodes and both quantile panels."""
    from types import SimpleNamespace

    from agentrl.bundle.rollout.driver import record_step
    from agentrl.bundle.rollout.report import Recorder
    from agentrl.bundle.rollout.sampling import StepReport

    def flushes(t: int, rec: Recorder) -> None:
        if t >= 60 and t % 60 == 0:
            for i in range(4):
                rec.episode_started("train")
                rec.episode_finished("train", None, i / 4, 1, 0, seconds=40.0 + i)
        if t == 600:
            record_step(SimpleNamespace(recorder=rec), StepReport(kept=2))  # type: ignore[arg-type]

    series = recorded_series(flushes, 900)
    demo = 'experiment="demo", namespace="rl"'
    train = f'{demo}, split="train"'
    drawn = {
        "Episodes by outcome/A": [f'{train}, outcome="succeeded"'],
        "Groups by outcome/A": [f'{demo}, outcome="kept"'],
        "Episode time discarded/A": [],
        "Length bias and aborted episodes/B": [],
        **{f"Episode reward quantiles/{r}": [train] for r in "ABC"},
        **{f"Episode duration quantiles/{r}": [train] for r in "ABC"},
    }
    exprs = dict(queries(dashboard()))
    cases = [  # every series the panel draws, each as 1 (a NaN one stays NaN and fails)
        {"expr": f"({exprs[where]}) * 0 + 1", "eval_time": "630s",
         "exp_samples": [{"labels": "{" + labels + "}", "value": 1} for labels in series_of]}
        for where, series_of in drawn.items()
    ]  # fmt: skip
    assert_over_series(tmp_path, series, cases)


def test_checkpoint_annotation_marks_every_save_of_a_run(tmp_path: Path) -> None:
    """A healthy run with `saveInterval: 1` as the bundle's real code exports it (run_timeline):
    slime saves after each train step, the first as iteration 0. Each save is marked at the
    scrapes after it with its iteration, nothing in between. The gauge read 0 before any save,
    so the save at iteration 0 moved nothing that changes() counts and was never marked."""
    from run_timeline import SCRAPE_S, Run, events

    run = Run()
    saves = [(t, rollout) for t, what, rollout in events(run) if what == "save"]
    assert [rollout for _, rollout in saves] == [0, 1, 2, 3]
    (expr,) = [e for where, e in queries(dashboard()) if where == "annotation Checkpoints"]
    cases = []
    for t, rollout in saves:
        marked = [{"labels": '{experiment="demo", namespace="rl"}', "value": rollout}]
        at = -(-t // SCRAPE_S) * SCRAPE_S  # the first scrape that reads the tracker
        # marked while the 1m window holds the scrape before the save (and so the change)
        cases += [{"expr": expr, "eval_time": f"{at + s}s", "exp_samples": marked} for s in (0, 30)]
        cases.append({"expr": expr, "eval_time": f"{at + 300}s", "exp_samples": []})
    assert_over_timeline(tmp_path, run, 110 * 60, cases)


def assert_over_timeline(
    tmp_path: Path, run: Any, until_s: int, cases: list[dict[str, Any]]
) -> None:
    """promtool evaluates `cases` (promql_expr_test) over what the bundle's code exports for
    `run` (a run_timeline.Run) from the head pod's start to `until_s`, scraped as the
    PodMonitor scrapes."""
    from run_timeline import input_series

    assert_over_series(tmp_path, input_series(run, until_s), cases)


def assert_over_series(
    tmp_path: Path, series: list[dict[str, str]], cases: list[dict[str, Any]]
) -> None:
    """promtool evaluates `cases` (promql_expr_test) over `series` (promtool input series),
    scraped every run_timeline.SCRAPE_S seconds, as the PodMonitor scrapes."""
    from run_timeline import SCRAPE_S

    test = {"interval": f"{SCRAPE_S}s", "input_series": series, "promql_expr_test": cases}
    suite = {"rule_files": [], "evaluation_interval": f"{SCRAPE_S}s", "tests": [test]}
    (tmp_path / "series_test.yaml").write_text(yaml.safe_dump(suite, width=1 << 20))
    proc = promtool("test", "rules", "series_test.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def drawn_cases(
    panel: dict[str, str],
    drawn: dict[str, list[str]],
    eval_time: str,
    check: str = "sgn({}) > 0",
) -> list[dict[str, Any]]:
    """promql_expr_test cases: at `eval_time`, each panel titled in `drawn` draws a line
    above 0 for exactly the series (label lists) given; `check` (the query in braces) as 1,
    e.g. `({}) * 0 + 1` for a line whatever its value (a NaN one still fails)."""
    return [
        {"expr": check.format(panel[title]), "eval_time": eval_time,
         "exp_samples": [{"labels": "{" + labels + "}", "value": 1} for labels in series_of]}
        for title, series_of in drawn.items()
    ]  # fmt: skip


def test_gateway_panels_draw_each_code_and_api_once_it_occurs(tmp_path: Path) -> None:
    """An OpenAI agent's gateway answers 200 every minute and, at 10m, one 502 (the engine
    failed). The head exports every API's and code's series at 0 from its start, so that
    first 502 is counted (a series born at 1 never moved rate()); the panels still draw only
    what occurred: no 0 line per code nobody got, no NaN latency for the unused API."""
    from types import SimpleNamespace

    from prometheus_client import generate_latest
    from run_timeline import SCRAPE_S, fmt, read

    from agentrl.bundle.gateway.frontend import Frontend
    from agentrl.bundle.metrics import BundleMetrics

    metrics = BundleMetrics()
    front = SimpleNamespace(metrics=metrics, _series={})
    taken = []
    for t in range(0, 900 + 1, SCRAPE_S):
        if t >= 60 and t % 60 == 0:
            Frontend.tally(front, "openai", 200, 0.4)  # type: ignore[arg-type]
        if t == 600:
            Frontend.tally(front, "openai", 502, 0.1)  # type: ignore[arg-type]
        taken.append(read(generate_latest(metrics.registry).decode()))
    names = sorted({name for series in taken for name in series})
    series = [{"series": n, "values": " ".join(fmt(s.get(n)) for s in taken)} for n in names]
    exprs = dict(queries(dashboard()))
    demo = 'experiment="demo", namespace="rl"'
    codes = [f'api="openai", code="{c}", {demo}' for c in ("200", "502")]
    drawn = {
        "Gateway requests by code/A": codes,
        **{f"Gateway latency quantiles/{r}": [f'api="openai", {demo}'] for r in "ABC"},
    }
    # every series the panel draws, each as 1 (a NaN one stays NaN and fails)
    cases = drawn_cases(exprs, drawn, "630s", check="({}) * 0 + 1")
    cases += drawn_cases({"requests": exprs["Gateway requests by code/A"]},
                         {"requests": codes}, "630s")  # fmt: skip
    assert_over_series(tmp_path, series, cases)


def test_callback_panel_draws_each_outcome_once_it_occurs(tmp_path: Path) -> None:
    """An HTTP agent's results are delivered every minute and, at 10m, one finds the
    rollout's listener unreachable: the gateway's own counting (every outcome at 0 from the
    start) puts that lost result on the panel, and no 0 line for an outcome nobody had."""
    from prometheus_client import generate_latest
    from run_timeline import SCRAPE_S, fmt, read

    from agentrl.api.constants import CALLBACK_DELIVERED, CALLBACK_UNREACHABLE
    from agentrl.bundle.gateway.callbacks import CallbackRelay
    from agentrl.bundle.gateway.session_store import SessionStore
    from agentrl.bundle.metrics import BundleMetrics

    metrics = BundleMetrics()
    relay = CallbackRelay(SessionStore(), lambda: "http://gateway", metrics)
    taken = []
    for t in range(0, 900 + 1, SCRAPE_S):
        if t >= 60 and t % 60 == 0:
            relay._outcomes[CALLBACK_DELIVERED].inc()
        if t == 600:
            relay._lost(CALLBACK_UNREACHABLE, "s1", "no answer", 502, "try again", retry=True)
        taken.append(read(generate_latest(metrics.registry).decode()))
    names = sorted({name for series in taken for name in series})
    series = [{"series": n, "values": " ".join(fmt(s.get(n)) for s in taken)} for n in names]
    expr = dict(queries(dashboard()))["Result callbacks by outcome/A"]
    demo = 'experiment="demo", namespace="rl"'
    outcomes = [f'{demo}, outcome="{o}"' for o in (CALLBACK_DELIVERED, CALLBACK_UNREACHABLE)]
    drawn = {"callbacks": expr}, {"callbacks": outcomes}, "630s"
    # exactly those lines (one per outcome at 0 would show as 1 here), each above 0
    cases = drawn_cases(*drawn, check="({}) * 0 + 1") + drawn_cases(*drawn)
    assert_over_series(tmp_path, series, cases)


def test_reward_xy_panel_draws_same_named_experiments_of_two_namespaces_apart(
    tmp_path: Path,
) -> None:
    """Experiment `demo` runs in namespaces `rl` (at rollout 7, reward 0.5) and `team-b` (at
    rollout 3, reward 0.9). The XY panel repeated per experiment name and took the max over
    both namespaces: one panel, rollout 7 against reward 0.9, a point neither run made. It
    repeats per <namespace>/<experiment> (the hidden `run` variable, read from Prometheus)
    and each panel reads its own run only."""
    dash = dashboard()
    (variable,) = [v for v in dash["templating"]["list"] if v["name"] == "run"]
    query = variable["query"]
    assert query.startswith("query_result(") and query.endswith(")")
    inner = substitute(query.removeprefix("query_result(")[:-1], {**GRAFANA_VARS, "$__range": "1h"})
    # The variable's regex on the line Grafana makes of each query_result sample.
    regex = re.compile(variable["regex"].strip("/"))
    line = '{experiment="demo", namespace="team-b", run="team-b/demo"} 1 1700000000000'
    assert regex.findall(line) == ["team-b/demo"]
    (reward,) = [p for p in panels(dash) if p["type"] == "xychart"]

    def panel(run: str) -> dict[str, str]:
        values = {**GRAFANA_VARS, "$run": run}
        return {target["refId"]: substitute(target["expr"], values) for target in reward["targets"]}

    series = []
    for ns, step, mean in (("rl", 7, 0.5), ("team-b", 3, 0.9)):
        target = f'namespace="{ns}",experiment="demo",pod="demo-head-{ns}"'
        series += [
            {"series": f"agentrl_rollout_step{{{target}}}", "values": f"{step}x10"},
            {"series": f'agentrl_batch_reward_mean{{{target},split="train"}}',
             "values": f"{mean}x10"},
        ]  # fmt: skip
    cases: list[dict[str, Any]] = [
        {"expr": inner, "eval_time": "2m", "exp_samples": [
            {"labels": f'{{experiment="demo", namespace="{ns}", run="{ns}/demo"}}', "value": 1}
            for ns in ("rl", "team-b")
        ]},
    ]  # fmt: skip
    for ns, step, mean in (("rl", 7, 0.5), ("team-b", 3, 0.9)):
        exprs = panel(f"{ns}/demo")
        cases += [
            {"expr": exprs["A"], "eval_time": "2m",
             "exp_samples": [{"labels": "{}", "value": step}]},
            {"expr": exprs["B"], "eval_time": "2m",
             "exp_samples": [{"labels": '{split="train"}', "value": mean}]},
        ]  # fmt: skip
    assert_over_series(tmp_path, series, cases)


def test_step_time_and_eta_follow_a_run_whose_steps_slowed_past_the_window(
    tmp_path: Path,
) -> None:
    """20 steps of 20 minutes, then steps of 100 minutes (episodes grew longer as the policy
    learned to use more turns): train rollouts end at 30m, then every 1200 s to rollout 20
    at 7h10m, then every 6000 s. At 15h no step ended in the last hour; the panel fell back
    to the mean since the head started, (20 x 1200 + 4 x 6000) / 24 = 2000 s, a third of
    the step time, and an ETA a third of the time left. The steps of the last 6 hours say
    6000 s. With 20-minute steps throughout, the last hour holds 3 steps and is read as is."""
    from run_timeline import SCRAPE_S, fmt

    from agentrl.bundle.hub import apply_delta
    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout.report import Recorder

    ends = [1800 + 1200 * i for i in range(21)]
    ends += [ends[-1] + 6000 * i for i in range(1, 6)]
    assert ends[20:] == [25800, 31800, 37800, 43800, 49800, 55800]
    now = [0.0]
    metrics = BundleMetrics(clock=lambda: now[0])
    # The four series the panel reads, sampled from the registry at each scrape (a whole
    # exposition per scrape over 15 hours takes a minute).
    names = [f"agentrl_rollout_step_interval_seconds_{s}" for s in ("sum", "count")]
    names += ["agentrl_rollout_step", "agentrl_rollout_total_steps"]
    taken: dict[str, list[str]] = {name: [] for name in names}
    pending = list(enumerate(ends))
    for t in range(0, 54000 + 1, SCRAPE_S):
        while pending and pending[0][1] <= t:
            rollout_id, now[0] = pending.pop(0)
            rec = Recorder()
            rec.batch_finished("train", rollout_id, 0.5, total_steps=200)
            apply_delta(metrics, rec.take())
        for name in names:
            taken[name].append(fmt(metrics.registry.get_sample_value(name)))
    target = '{experiment="demo",namespace="rl",pod="demo-head-x1"}'
    series = [{"series": name + target, "values": " ".join(v)} for name, v in taken.items()]
    step, eta = [e for where, e in queries(dashboard()) if where.startswith("Step time and ETA/")]
    demo = '{experiment="demo", namespace="rl"}'
    cases = [
        # round(): rate()'s extrapolation leaves the ratio a float rounding off
        {"expr": f"round({expr})", "eval_time": f"{t}s",
         "exp_samples": [{"labels": demo, "value": value}]}
        for t, value, left in (
            (54000, 6000, 200 - 24 - 1),  # no step in the last hour: the last 6 hours' 3
            (50400, 6000, 200 - 24 - 1),  # rollout 24's step in the last hour
            (18000, 1200, 200 - 13 - 1),  # 20-minute steps: the last hour's 3
        )
        for expr, value in ((step, value), (eta, left * value))
    ]  # fmt: skip
    assert_over_series(tmp_path, series, cases)
