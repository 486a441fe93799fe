"""The report's network section: the URLs the pods hand agents, beside the rehearsal's."""

from __future__ import annotations

from agentrl.bundle.rehearse.report import EpisodeReport, Report

SID = "ab" * 24
HERE = "http://127.0.0.1:40000"


def report(pods_gateway: tuple[str, str] | None, gateway: str = HERE) -> Report:
    episode = EpisodeReport(
        session_id=SID, group=0, index=0, reason=None, message="", findings=[], reward=1.0,
        received=(1.0, "number"), turns=1, prompt_tokens=3, completion_tokens=2, sequences=1,
        trained_tokens=2, masked_tokens=0, truncated=False, tool_call_failures=0, seconds=0.1,
        base_url=f"{gateway}/sessions/{SID}/v1", calls=1, answers={200: 1}, via="callback",
        callback_url=f"{gateway}/agentrl/callback/{SID}",
    )  # fmt: skip
    return Report(
        experiment="rl/web-agent", split="train", engine="http://127.0.0.1:30000",
        engine_model="m", gateway=gateway, agent="http http://127.0.0.1:8000", episodes=[episode],
        groups=[], seconds=1.0, samples_path="s", log_path="l", pods_gateway=pods_gateway,
    )  # fmt: skip


def test_the_public_url_the_pods_hand_out_is_named_and_said_to_be_unrehearsed() -> None:
    public = "https://gw.example.com/rl"
    net = report((public, "spec.gateway.publicUrl")).to_json()["network"]
    assert net["in_pods"] == {
        "gateway": public,
        "from": "spec.gateway.publicUrl",
        "rehearsed": False,
        "base_url": f"{public}/sessions/<session id>/v1",
        "callback_url": f"{public}/agentrl/callback/<session id>",
    }
    text = report((public, "spec.gateway.publicUrl")).text()
    assert f"in the pods agents are handed {public} instead (spec.gateway.publicUrl)" in text


def test_a_gateway_url_that_is_the_pods_one_was_rehearsed_and_needs_no_word() -> None:
    public = "https://gw.example.com"
    r = report((public, "spec.gateway.publicUrl"), gateway=public)
    assert "in_pods" not in r.to_json()["network"]
    assert "in the pods" not in r.text()


def test_the_pods_env_the_agent_path_reads_and_the_rehearsal_lacks_is_named() -> None:
    from agentrl.api.runtime import RuntimeConfig
    from agentrl.bundle.rehearse.run import env_notes

    from .rig import http_agent, spec

    body = spec(http_agent("http://agent:8000/run"))["spec"]
    config = RuntimeConfig.model_validate(
        {"experiment": "web-agent", "namespace": "rl", "bundle_version": "0", "spec": body,
         "gateway_url": "http://web-agent-gateway.rl.svc:9090",
         "runtime_secret_envs": ["HF_TOKEN", "SENTRY_DSN", "AWS_SECRET_ACCESS_KEY"]}
    )  # fmt: skip
    pods = {"HF_ENDPOINT": "https://hf-mirror.internal", "AWS_REGION": "us-west-2",
            "NCCL_DEBUG": "INFO"}  # fmt: skip
    here = {"AWS_REGION": "us-west-2", "AWS_SECRET_ACCESS_KEY": "x"}
    (note,) = env_notes(config, pods, here)
    # NCCL_DEBUG and SENTRY_DSN are not read on the agent path; AWS_REGION is the same here.
    assert note.endswith(
        "which this rehearsal ran without: HF_ENDPOINT='https://hf-mirror.internal' (here: "
        "unset), HF_TOKEN (from a Secret; here: unset); set them here to rehearse with them"
    )
    assert env_notes(config, {"AWS_REGION": "us-west-2"}, {**here, "HF_TOKEN": "t"}) == []
    # This machine's value is never shown: it may be a credential of the researcher's.
    local = "hf_local_credential"
    (note,) = env_notes(config, {"HF_TOKEN": "spec-value"}, {**here, "HF_TOKEN": local})
    assert "HF_TOKEN (its plain value in spec.runtime.env, not shown) (here: another value)" in note
    assert local not in note and "spec-value" not in note


def test_a_pods_env_value_whose_name_marks_a_secret_is_never_shown() -> None:
    """A token written as a plain value in spec.runtime.env (validation only warns of it) is
    named, never printed: the report goes to the terminal and to --out."""
    from agentrl.api.runtime import RuntimeConfig
    from agentrl.bundle.rehearse.run import env_notes

    from .rig import http_agent, spec

    body = spec(http_agent("http://agent:8000/run"))["spec"]
    config = RuntimeConfig.model_validate(
        {"experiment": "web-agent", "namespace": "rl", "bundle_version": "0", "spec": body,
         "gateway_url": "http://web-agent-gateway.rl.svc:9090"}
    )  # fmt: skip
    pods = {"HF_TOKEN": "hf_plain_in_spec", "AWS_SECRET_ACCESS_KEY": "aws-plain",
            "HF_ENDPOINT": "https://hf-mirror.internal"}  # fmt: skip
    (note,) = env_notes(config, pods, {})
    assert "hf_plain_in_spec" not in note and "aws-plain" not in note
    assert "HF_TOKEN (its plain value in spec.runtime.env, not shown) (here: unset)" in note
    assert "HF_ENDPOINT='https://hf-mirror.internal' (here: unset)" in note


def test_a_pods_env_value_that_is_a_credential_is_never_shown_whatever_its_name() -> None:
    """A private mirror's URL with its password, or an Authorization value, under a name that
    marks no secret: validation warns of it by its value, and the report does not print it."""
    from agentrl.api.runtime import RuntimeConfig
    from agentrl.bundle.rehearse.run import env_notes

    from .rig import http_agent, spec

    body = spec(http_agent("http://agent:8000/run"))["spec"]
    config = RuntimeConfig.model_validate(
        {"experiment": "web-agent", "namespace": "rl", "bundle_version": "0", "spec": body,
         "gateway_url": "http://web-agent-gateway.rl.svc:9090"}
    )  # fmt: skip
    pods = {"HF_ENDPOINT": "https://rl:hunter2@hf-mirror.internal",
            "AGENTRL_AGENT_AUTH": "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x",
            "AWS_REGION": "us-west-2"}  # fmt: skip
    (note,) = env_notes(config, pods, {})
    assert "hunter2" not in note and "eyJhbGciOiJIUzI1NiJ9" not in note
    assert "HF_ENDPOINT (its plain value in spec.runtime.env, not shown) (here: unset)" in note
    assert "AGENTRL_AGENT_AUTH (its plain value in spec.runtime.env, not shown)" in note
    assert "AWS_REGION='us-west-2' (here: unset)" in note


def test_the_agent_url_the_pods_call_instead_of_agent_url_is_named() -> None:
    r = report(None)
    assert "pods_agent_url" not in r.to_json()["network"]
    r.pods_agent = "http://web-agent.agents.svc:8000/v1/episodes"
    assert r.to_json()["network"]["pods_agent_url"] == r.pods_agent
    assert (
        f"agent: in the pods the rollout sends episodes to {r.pods_agent} "
        "(spec.agent.http.url) instead of --agent-url: not rehearsed"
    ) in r.text()
