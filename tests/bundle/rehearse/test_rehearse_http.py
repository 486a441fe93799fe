"""`agentrl rehearse` with an HTTP agent: a clean rehearsal, and each mistake named.

Everything runs as it would for a researcher: `agentrl rehearse` is a subprocess, the agent
is the example HTTP agent in a process of its own (`mistaken_agent.py` adds the agent-side
mistakes a row asks for), the engine is the SGLang protocol stub on its own port. Each of
the five mistakes a rehearsal exists for comes out as a named reason and exit status 1.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from tests.support.down_hub import cache_snapshot, down_hub, hub_env
from tests.support.process import free_port
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway.tokenizer import load_tokenizer

from .rig import (
    AGENT,
    AgentProcess,
    Model,
    ModelApiProxy,
    http_agent,
    rehearse,
    row,
    run_agent,
    spec,
    start_engine,
    write,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def model(checkpoint: Path) -> Model:
    return Model(load_tokenizer(str(checkpoint)))


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    yield from run_agent(AGENT, tmp_path_factory.mktemp("agent") / "agent.log")


def flags(engine: Any, checkpoint: Path, data: Path, out: Path) -> list[str | Path]:
    return ["--engine", engine.url, "--model-dir", checkpoint, "--data", data, "--out", out]


async def test_a_clean_rehearsal_reports_every_episode_and_exits_0(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        body = spec(http_agent(agent.url), dynamicSamplingFilter="zeroRewardVariance")
        spec_path, data = write(tmp_path, body, [row()])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "j"),
                             "-o", "json")  # fmt: skip
        text = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "t"))
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err + agent.log_tail()
    report = run.json()
    assert [e["status"] for e in report["episodes"]] == ["ok"] * 4
    for e in report["episodes"]:
        assert e["reward"] == 1.0 and e["reward_received"] == {"value": 1.0, "type": "number"}
        assert e["turns"] == 2 and e["sequences"] == 1 and e["result_via"] == "callback"
        assert e["trained_tokens"] > 0 and e["masked_tokens"] > 0  # the tool result is masked
        assert e["base_url"].endswith(f"/sessions/{e['session_id']}/v1") and e["model_calls"] == 2
    # Every episode scored 1: the spec's dynamic sampling would drop the group, as slime's.
    (group,) = report["groups"]
    assert group["rewards"] == [1.0] * 4 and group["zero_variance"] is True
    assert group["dynamic_sampling"] == {"filter": "zeroRewardVariance", "verdict": "dropped",
                                         "reason": "zero_std_1.0", "error": None}  # fmt: skip
    assert report["network"]["episodes_calling_base_url"] == 4
    # Two turns are 73 response tokens, the budget is 64: the second call trains nothing.
    assert "4 episode(s) outgrew the response budget (64 tokens" in " ".join(report["notes"])
    assert "the engine serves 'stub', the spec names 'Qwen/Qwen3-8B'" in " ".join(report["notes"])
    assert report["network"]["results_via"] == {"callback": 4}
    # What the pods hand agents instead (no publicUrl: the in-cluster Service), not tried here.
    pods = "http://web-agent-gateway.rl.svc:9090"
    assert report["network"]["in_pods"] == {
        "gateway": pods,
        "from": "the gateway's in-cluster Service: spec.gateway.publicUrl is unset, and the "
        "name resolves only inside the cluster",
        "rehearsed": False,
        "base_url": f"{pods}/sessions/<session id>/v1",
        "callback_url": f"{pods}/agentrl/callback/<session id>",
    }
    # The samples slime would train on, with the advantage the reward hook gives them.
    lines = (tmp_path / "j" / "samples.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert len(samples) == 4 and {s["advantage"] for s in samples} == {0.0}
    for s in samples:
        assert len(s["tokens"]) == s["prompt_length"] + s["response_length"]
        assert len(s["loss_mask"]) == len(s["rollout_log_probs"]) == s["response_length"]
    assert text.code == 0 and "exit status 0" in text.out and "[trained 36]" in text.out
    assert f"in the pods agents are handed {pods} instead" in text.out
    assert f"base_url {pods}/sessions/<session id>/v1" in text.out
    assert "not rehearsed: this rehearsal's agents called the gateway on this machine" in text.out
    # The gateway's start is logged before the rehearsal writes anything: held, then kept.
    log = (tmp_path / "j" / "rehearse.log").read_text()
    assert "WARNING agentrl.gateway: gateway: the model's context length is unknown" in log
    # ...and the report says what that leaves unrehearsed (the pods read the checkpoint's).
    note = f"context is unknown here: spec.model.contextLength is unset and {checkpoint} has no"
    assert note in " ".join(report["notes"])
    assert "in the pods the gateway caps every call" in text.out


MIRROR = "https://hf-mirror.internal"
FILTER = """
def keep_within_budget(args, samples):
    # A DAPO-style filter: the budget and the batch from slime's args, as in the pods.
    assert args.rollout_batch_size == 2 and args.n_samples_per_prompt == len(samples)
    return all(s.response_length <= args.rollout_max_response_len for s in samples)
"""


async def test_a_user_filter_reads_slime_s_args_as_the_pods_command_line_sets_them(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """The filter is called with the args the pods' slime command sets, not a few of them:
    one reading `rollout_max_response_len` works in the pods, and must here too."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "length_filter.py").write_text(FILTER, encoding="utf-8")
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        body = spec(http_agent(agent.url), dynamicSamplingFilter="length_filter.keep_within_budget")
        spec_path, data = write(tmp_path, body, [row()])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json", env={"PYTHONPATH": str(code)})  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err
    (group,) = run.json()["groups"]
    kept = {"verdict": "kept", "reason": None, "error": None}
    assert group["dynamic_sampling"] == {"filter": "length_filter.keep_within_budget", **kept}


async def test_what_timeout_and_samples_replace_of_the_pods_is_noted(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """`--timeout` and `--samples` replace the pods' deadline and group size: an episode
    that outlived the pods' deadline passes here, and says it would not have there."""
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        body = spec(http_agent(agent.url, timeoutSeconds=1))
        spec_path, data = write(tmp_path, body, [row(mistake="slow")])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "--timeout", 60, "--samples", 2, "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err
    notes = " ".join(run.json()["notes"])
    assert "2 episode(s) ran longer than the agent's timeoutSeconds (1s), which --timeout " in notes
    assert "in the pods each would fail as timeout" in notes
    assert "each group ran 2 episode(s) (--samples); the pods run 4 per prompt" in notes


async def test_a_reward_sent_as_a_string_is_bad_result_and_shown_as_sent(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        spec_path, data = write(
            tmp_path, spec(http_agent(agent.url)), [row(mistake="string_reward")]
        )
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        assert (e["status"], e["reason"]) == ("failed", "bad_result")
        assert e["reward_received"] == {"value": "1.0", "type": "string"} and e["reward"] == 0.0
        assert "not a number: '1.0'" in e["message"]
    # No episode is a task outcome: the group has too few valid ones to train.
    (group,) = run.json()["groups"]
    assert group["counted"] == 0 and group["dynamic_sampling"]["verdict"] == "skipped"


async def test_a_nan_reward_is_bad_result_and_the_json_report_stays_json(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """A Python agent's 0/0 reward goes out as the bare token NaN. The rehearsal names it,
    and its JSON report (stdout and report.json) must still parse with a strict parser
    (orjson, JavaScript's JSON.parse, Go's encoding/json): NaN is no JSON value."""
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        spec_path, data = write(tmp_path, spec(http_agent(agent.url)), [row(mistake="nan_reward")])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err
    for text in (run.out, (tmp_path / "out" / "report.json").read_text()):
        report = orjson.loads(text)
        for e in report["episodes"]:
            assert (e["reason"], e["reward"]) == ("bad_result", 0.0)
            assert e["reward_received"] == {"value": "NaN", "type": "number"}


async def test_an_agent_ignoring_base_url_is_no_turns_and_never_called_it(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        rows = [row(mistake="ignores_base_url")]
        spec_path, data = write(tmp_path, spec(http_agent(agent.url)), rows)
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        assert (e["reason"], e["model_calls"], e["turns"]) == ("no_turns", 0, 0)
        assert e["reward_received"] == {"value": 1.0, "type": "number"}  # sent, but not earned
    assert run.json()["network"]["episodes_calling_base_url"] == 0
    assert engine.requests == []


async def test_a_tool_call_format_the_spec_does_not_parse_is_named(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """The model writes Qwen3-Coder's XML tool calls; the spec parses Qwen3's JSON ones. In
    training nothing fails: the agent gets the calls as text and scores 0. A rehearsal
    names it."""
    engine = await start_engine(model.tok, model.xml_calls())
    try:
        spec_path, data = write(tmp_path, spec(http_agent(agent.url)), [row()])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        assert e["reason"] is None and e["reward"] == 0.0  # what training would see: a success
        assert e["status"] == "failed" and e["tool_call_parse_failures"] == 1
        (check,) = e["checks"]
        assert check["name"] == "tool_call_parse_failed"
        assert "invalid_json" in check["message"] and "rendererFamily qwen3" in check["message"]


async def rehearse_behind_proxy(
    tmp_path: Path, checkpoint: Path, model: Model, body: dict[str, Any], data_row: Any
) -> tuple[Any, ModelApiProxy]:
    """`agentrl rehearse -o json` of `body` on one row, the agent reaching the gateway through
    a proxy that routes only the model API (its callbacks get nowhere), against an engine
    that clicks, then finishes."""
    engine = await start_engine(model.tok, model.click_then_finish())
    port = free_port()
    proxy = ModelApiProxy(f"http://127.0.0.1:{port}")
    await proxy.start()
    try:
        spec_path, data = write(tmp_path, body, [data_row])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "--gateway-port", port, "--gateway-url", proxy.url,
                             "-o", "json")  # fmt: skip
    finally:
        await proxy.stop()
        await engine.stop()
    return run, proxy


async def test_a_callback_url_the_agent_cannot_reach_is_named(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """The agent reaches the gateway through a proxy that routes only the model API: its
    model calls get through, its result callbacks do not, and the result reaches agentrl
    only through the status poll, the backstop."""
    body = spec(http_agent(agent.url, pollIntervalSeconds=0.5))
    run, proxy = await rehearse_behind_proxy(tmp_path, checkpoint, model, body, row())
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        assert e["reason"] is None and e["reward"] == 1.0 and e["result_via"] == "poll"
        assert e["base_url"].startswith(proxy.url + "/sessions/") and e["model_calls"] == 2
        assert e["callback_url"] == f"{proxy.url}/agentrl/callback/{e['session_id']}"
        assert [c["name"] for c in e["checks"]] == ["callback_unreachable"]
    assert run.json()["network"]["results_via"] == {"poll": 4}
    assert len(proxy.refused) == 4  # each agent tried, and the proxy had no route for it


async def test_a_refused_result_that_came_by_poll_names_the_callback_too(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    """Two mistakes in one episode: a reward sent as a string, by an agent whose callbacks
    cannot reach the gateway. Both are named (`bad_result`, then the check), not the first
    alone, so the second does not wait for the next rehearsal, or the GPU gang."""
    body = spec(http_agent(agent.url, pollIntervalSeconds=0.5), samples=2)
    run, _ = await rehearse_behind_proxy(
        tmp_path, checkpoint, model, body, row(mistake="string_reward")
    )
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        assert (e["reason"], e["result_via"]) == ("bad_result", "poll")
        assert [c["name"] for c in e["checks"]] == ["callback_unreachable"]
    assert run.json()["network"]["results_via"] == {"poll": 2}


async def test_a_conversation_that_outgrows_the_context_is_named(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    engine = await start_engine(model.tok, model.clicks_forever())
    try:
        body = spec(http_agent(agent.url), context_length=1024)
        spec_path, data = write(tmp_path, body, [row()])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err
    for e in run.episodes():
        # In training nothing fails: the full context is answered with finish reason length
        # and no content, the agent ends its episode unfinished, reward 0. A rehearsal names it.
        assert e["reason"] is None and e["reward"] == 0.0 and e["truncated"] is True
        (check,) = e["checks"]
        assert check["name"] == "context_exceeded" and "(1024 tokens)" in check["message"]
    # The spec's context is the budget here as in the pods: nothing to say about it.
    assert "context is unknown" not in " ".join(run.json()["notes"])


async def test_an_eval_split_runs_its_own_rows_and_sampling(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess
) -> None:
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        body = spec(http_agent(agent.url))
        body["spec"]["data"]["eval"] = [
            {"name": "dev", "path": "/data/web/dev.jsonl", "samplesPerPrompt": 2,
             "temperature": 0.0}
        ]  # fmt: skip
        # The pods' hub mirror: their gateway reads it, the rehearsal is told it did not.
        body["spec"]["runtime"] = {"env": [{"name": "HF_ENDPOINT", "value": MIRROR}]}
        spec_path, data = write(tmp_path, body, [row("dev-1"), row("dev-2")])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "out"),
                             "--split", "eval:dev", "--prompts", 2, "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err
    report = run.json()
    assert report["split"] == "eval:dev" and len(report["episodes"]) == 4
    assert [g["dynamic_sampling"]["verdict"] for g in report["groups"]] == [None, None]
    # The eval set's sampling reached the engine: greedy, as the set says.
    assert {r["sampling_params"]["temperature"] for r in engine.requests} == {0.0}
    assert f"ran without: HF_ENDPOINT='{MIRROR}' (here: " in " ".join(report["notes"])


@pytest.mark.parametrize("listen", ["::1", "::"])
async def test_an_ipv6_listen_address_rehearses_like_an_ipv4_one(
    tmp_path: Path, checkpoint: Path, model: Model, agent: AgentProcess, listen: str
) -> None:
    # aiohttp binds "::" to IPv6 alone (asyncio sets IPV6_V6ONLY): the admin client and the
    # agents must be handed an IPv6 address, in brackets, as on a machine with no IPv4.
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        spec_path, data = write(tmp_path, spec(http_agent(agent.url)), [row()])
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, tmp_path / "j"),
                             "--listen", listen, "-o", "json")  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err + agent.log_tail()
    episodes = run.episodes()
    assert [e["status"] for e in episodes] == ["ok"] * 4
    for e in episodes:
        host = urlsplit(e["base_url"]).hostname or ""
        assert ipaddress.ip_address(host).version == 6, e["base_url"]


async def test_a_hub_id_without_model_dir_and_no_hub_fails_at_once_naming_model_dir(
    tmp_path: Path, model: Model
) -> None:
    """The spec names a hub id, no --model-dir is given, and the hub is out of reach with
    nothing in the cache: the gateway's tokenizer load went through huggingface_hub's
    retries for each file (280 seconds, 88 requests) before the rehearsal failed with
    transformers' "couldn't connect". Now the hub is asked once, before the gateway starts,
    and the error names --model-dir."""
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        spec_path, data = write(tmp_path, spec(http_agent("http://127.0.0.1:9/run")), [row()])
        with down_hub() as (url, seen):
            env = hub_env(url, tmp_path / "home", tmp_path / "hub", offline=False)
            run = await rehearse("-f", spec_path, "--engine", engine.url, "--data", data,
                                 "--out", tmp_path / "out", env=env)  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 2, run.out + run.err
    (said,) = [line for line in run.err.splitlines() if line.startswith("error: ")]
    assert said.startswith(
        "error: spec.model.path is the Hugging Face id 'Qwen/Qwen3-8B', and the tokenizer of "
        f"'Qwen/Qwen3-8B' cannot be loaded: the hub {url} answered 503, and the Hugging Face "
        f"cache {tmp_path / 'hub'} holds no tokenizer of 'Qwen/Qwen3-8B'"
    )
    assert said.endswith(
        "Or pass --model-dir with a local copy of its tokenizer files (hf download "
        "Qwen/Qwen3-8B tokenizer.json tokenizer_config.json config.json --local-dir DIR)"
    )
    assert [s for s in seen if "Qwen3-8B" in s] == ["HEAD /Qwen/Qwen3-8B/resolve/main/config.json"]
    assert engine.requests == []  # nothing was sampled
    assert not (tmp_path / "out").exists()  # nor written


async def test_an_agent_backend_that_cannot_be_built_writes_nothing(
    tmp_path: Path, checkpoint: Path, model: Model
) -> None:
    """The agent's header comes from a Secret, and its env var is not set here: the backend
    cannot be built, after the engine answered and the gateway started. The rehearsal stops
    with exit 2 naming the variable, and `--out` is not created (it was, with an empty
    rehearse.log, before the engine was asked)."""
    engine = await start_engine(model.tok, model.click_then_finish())
    header = {"name": "Authorization", "secretKeyRef": {"name": "web-agent", "key": "bearer"}}
    try:
        body = spec(http_agent("http://127.0.0.1:9/run", headers=[header]))
        spec_path, data = write(tmp_path, body, [row()])
        out = tmp_path / "out"
        run = await rehearse("-f", spec_path, *flags(engine, checkpoint, data, out))
    finally:
        await engine.stop()
    assert run.code == 2, run.out + run.err
    assert "header 'Authorization' expects its value in env var" in run.err
    assert "In a rehearsal the pod's env vars are yours to set: export " in run.err
    assert engine.requests == [] and not out.exists()


async def test_a_rehearsal_of_a_cached_hub_id_asks_the_silent_hub_once(
    tmp_path: Path, model: Model, agent: AgentProcess
) -> None:
    """A hub id the Hugging Face cache holds, no --model-dir, a prompt length in extraArgs,
    and a hub that does not answer: each question to it costs up to HF_HUB_ETAG_TIMEOUT,
    and the rehearsal asked it five times (the prompt count's check and its tokenizer load,
    the check before the gateway, the gateway's tokenizer and its config.json). One answer
    now serves the run."""
    cache = tmp_path / "hub"
    snapshot = write_checkpoint(cache_snapshot(cache, "Qwen/Qwen3-8B"))
    (snapshot / "config.json").write_text('{"max_position_embeddings": 40960}')
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        body = spec(http_agent(agent.url))
        body["spec"]["runtime"] = {"extraArgs": ["--rollout-max-prompt-len", "64"]}
        spec_path, data = write(tmp_path, body, [row()])
        with down_hub() as (url, seen):
            env = hub_env(url, tmp_path / "home", cache, offline=False)
            run = await rehearse("-f", spec_path, "--engine", engine.url, "--data", data,
                                 "--out", tmp_path / "out", "-o", "json", env=env)  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err + agent.log_tail()
    assert [e["status"] for e in run.episodes()] == ["ok"] * 4
    assert [s for s in seen if "Qwen3-8B" in s] == ["HEAD /Qwen/Qwen3-8B/resolve/main/config.json"]
