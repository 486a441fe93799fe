"""parse_experiment / validate_experiment: examples are clean, problems carry wire paths."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.api.validation import Problem, errors, parse_experiment
from conftest import minimal_body


def paths(problems: list[Problem]) -> list[str]:
    return [p.path for p in problems]


def test_examples_have_no_problem(example_body: dict[str, Any]) -> None:
    exp, problems = parse_experiment(example_body)
    assert problems == []
    assert exp is not None


def test_minimal_spec_takes_slimerunner_defaults() -> None:
    exp, problems = parse_experiment(minimal_body())
    assert problems == [] and exp is not None
    grpo, res = exp.spec.grpo, exp.spec.resources
    assert (grpo.rollout_batch_size, grpo.samples_per_prompt) == (32, 8)
    assert (grpo.max_response_length, grpo.learning_rate) == (1024, 1e-6)
    assert (grpo.eps_clip, grpo.eps_clip_high, grpo.kl_loss_type) == (0.2, 0.28, "low_var_kl")
    assert grpo.max_tokens_per_gpu == 9216
    assert (res.gpus_per_node, res.parallelism.tensor, res.rollout_gpus_per_engine) == (8, 2, 2)
    assert res.colocate is True
    assert exp.spec.agent.max_concurrent == 100


def test_all_problems_at_once() -> None:
    body = minimal_body(
        resources={"parallelism": {"tensor": 3}, "rolloutGpusPerEngine": 3},
        grpo={"numRollouts": 1, "globalBatchSize": 100},
    )
    body["metadata"]["name"] = "x" * 48
    exp, problems = parse_experiment(body)
    assert exp is None
    assert set(paths(problems)) == {
        "metadata.name",
        "spec.resources.parallelism",
        "spec.resources.parallelism.tensor",  # nor does it divide the model's 14 heads
        "spec.resources.rolloutGpusPerEngine",
        "spec.grpo.globalBatchSize",
    }


def test_a_typo_does_not_hide_the_cross_field_rules() -> None:
    body = minimal_body(
        resources={"parallelism": {"tensor": 3}}, grpo={"numRollouts": 1, "lerningRate": 1e-6}
    )
    exp, problems = parse_experiment(body)
    assert exp is None
    assert set(paths(problems)) == {
        "spec.grpo.lerningRate",
        "spec.resources.parallelism",
        "spec.resources.parallelism.tensor",  # 3 divides neither 8 GPUs nor the 14 heads
    }


def test_snake_case_keys_are_unknown_with_the_camel_case_spelling() -> None:
    # The CRD knows only camelCase: the API server would prune or refuse `num_rollouts`.
    body = minimal_body(grpo={"numRollouts": 2, "global_batch_size": 8})
    body["spec"]["agent"]["max_concurrent"] = 4
    exp, problems = parse_experiment(body)
    assert exp is None
    by_path = {p.path: p for p in problems}
    assert by_path["spec.grpo.global_batch_size"].message == "unknown field"
    assert (
        by_path["spec.grpo.global_batch_size"].hint
        == "fields are camelCase: write 'globalBatchSize'"
    )
    assert (
        by_path["spec.agent.max_concurrent"].hint == "fields are camelCase: write 'maxConcurrent'"
    )


def test_structural_errors_use_wire_paths() -> None:
    body = minimal_body(resources={"parallelism": {"tensor": 0}}, grpo={"numRollout": 3})
    exp, problems = parse_experiment(body)
    assert exp is None
    by_path = {p.path: p for p in problems}
    assert "spec.resources.parallelism.tensor" in by_path
    assert by_path["spec.grpo.numRollout"].message == "unknown field"
    assert "numRollouts" in by_path["spec.grpo.numRollout"].hint
    # One mistake, one problem: the typo's hint names the required field it misspells.
    assert "spec.grpo.numRollouts" not in by_path


def test_document_rules_run_even_when_types_are_wrong() -> None:
    body = minimal_body(
        grpo={"numRollouts": "ten"},
        resources={"tolerations": [{"key": "gpu", "operater": "Exists"}]},
    )
    body["metadata"]["name"] = "Bad_Name"
    exp, problems = parse_experiment(body)
    assert exp is None
    assert paths(problems) == [
        "spec.grpo.numRollouts",
        "metadata.name",
        "spec.resources.tolerations[0].operater",
    ]


def test_quantity_errors_read_well() -> None:
    _, problems = parse_experiment(minimal_body(resources={"memory": "256 GB"}))
    (problem,) = problems
    assert str(problem) == (
        "spec.resources.memory: '256 GB' is not a Kubernetes quantity (e.g. 64Gi, 500m or 8)"
    )


def test_numeric_quantities_are_quantities_as_in_kubernetes() -> None:
    exp, problems = parse_experiment(minimal_body(resources={"cpu": 95.5}))
    assert exp is not None, problems
    assert exp.spec.resources.cpu == "95.5"


def test_small_pool_is_a_warning_not_an_error() -> None:
    body = minimal_body()
    body["spec"]["agent"].update(maxConcurrent=64, maxPoolConnections=10)
    exp, problems = parse_experiment(body)
    assert exp is not None
    assert errors(problems) == []
    (warning,) = problems
    assert warning.severity == "warning"
    assert warning.path == "spec.agent.maxPoolConnections"
    assert "64" in warning.hint
    assert "wait for a free connection" in warning.message  # an HTTP agent: aiohttp's pool


def test_small_pool_of_an_agentcore_agent_says_connections_are_discarded() -> None:
    """boto3's (urllib3's) pool discards and re-opens connections past its size."""
    body = minimal_body()
    agent = body["spec"]["agent"]
    agent.pop("http")
    arn = "arn:aws:bedrock-agentcore:us-west-2:1:runtime/a"
    agent.update(agentCore={"runtimeArn": arn, "region": "us-west-2", "s3Bucket": "rl-results"},
                 maxConcurrent=64, maxPoolConnections=10)  # fmt: skip
    _, problems = parse_experiment(body)
    (warning,) = [p for p in problems if p.path == "spec.agent.maxPoolConnections"]
    assert "discarded and re-opened" in warning.message


def test_agentcore_without_public_url_is_warned() -> None:
    body = minimal_body(
        agent={"agentCore": {"runtimeArn": "arn:aws:bedrock-agentcore:us-west-2:1:runtime/a",
                             "region": "us-west-2", "s3Bucket": "bucket"}}
    )  # fmt: skip
    exp, problems = parse_experiment(body)
    assert exp is not None
    assert [(p.path, p.severity) for p in problems] == [("spec.gateway.publicUrl", "warning")]
    body["spec"]["gateway"] = {"publicUrl": "http://gw.example.internal:9090"}
    assert parse_experiment(body)[1] == []


@pytest.mark.parametrize(
    ("region", "ok"), [("us-west-2", True), ("us-east-1", False), ("eu-central-1", False)]
)
def test_agentcore_region_must_be_the_runtime_arns(region: str, ok: bool) -> None:
    """boto3 sends the invoke to `region`'s endpoint whatever the ARN says (agentcore-rl-
    toolkit's client takes the region from the ARN): another region fails every episode."""
    arn = "arn:aws:bedrock-agentcore:us-west-2:111122223333:runtime/math_agent-AbCdEf1234"
    body = minimal_body(
        agent={"agentCore": {"runtimeArn": arn, "region": region, "s3Bucket": "rl-results"}}
    )
    body["spec"]["gateway"] = {"publicUrl": "http://gw.example.internal:9090"}
    exp, problems = parse_experiment(body)
    if ok:
        assert problems == []
        return
    assert exp is None  # refused before anything is created
    (problem,) = errors(problems)
    assert problem.path == "spec.agent.agentCore.region"
    assert region in problem.message and "us-west-2" in problem.message
    assert "region: us-west-2" in problem.hint


@pytest.mark.parametrize(
    ("url", "outside"),
    [
        ("https://agents.example.com/v1/episodes", True),
        ("http://agent.rl:8080", True),  # <service>.<namespace>, or a domain: cannot tell
        ("http://agent.rl.svc:8080", False),
        ("http://agent.rl.svc.cluster.local:8080/episodes", False),
        ("http://agent:8080", False),  # a Service in the experiment's namespace
        ("http://localhost:8080", False),
        ("http://10.0.3.7:8080", False),  # a pod, or a host in the VPC: cannot tell
        ("http://[fd00::1]:8080", False),
    ],
)
def test_an_http_agent_outside_the_cluster_without_public_url_is_warned(
    url: str, outside: bool
) -> None:
    """It would get the in-cluster Service's URL to call the model and to post its result."""
    body = minimal_body(agent={"http": {"url": url}})
    exp, problems = parse_experiment(body)
    assert exp is not None
    # (a loopback url has a warning of its own, on spec.agent.http.url)
    problems = [p for p in problems if p.path != "spec.agent.http.url"]
    found = [(p.path, p.severity) for p in problems]
    assert found == ([("spec.gateway.publicUrl", "warning")] if outside else [])
    if outside:
        assert "_rollout.callback_url" in problems[0].message
    body["spec"]["gateway"] = {"publicUrl": "https://agentrl-gw.example.com"}
    assert [p for p in parse_experiment(body)[1] if p.path != "spec.agent.http.url"] == []


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://localhost:8000/v1/episodes", True),
        ("http://LOCALHOST.:8000", True),
        ("http://agent.localhost:8000", True),
        ("http://127.0.0.1:8000/v1/episodes", True),
        ("http://127.0.1.1:8000", True),  # Debian's /etc/hosts name for the machine itself
        ("http://[::1]:8000", True),
        ("http://0.0.0.0:8000", True),  # connects to the local host
        ("http://agent.rl.svc:8080", False),
        ("http://10.0.3.7:8080", False),
        ("http://localhost-agent.rl.svc:8080", False),
    ],
)
def test_a_loopback_agent_url_is_warned_naming_the_field_and_rehearse_flag(
    url: str, loopback: bool
) -> None:
    """In the pods, loopback is the Ray pod itself: every episode would fail as agent_error.
    It is the URL that works on a laptop, and a rehearsal without --agent-url passes with it."""
    exp, problems = parse_experiment(minimal_body(agent={"http": {"url": url}}))
    assert exp is not None  # a warning: validate and the operator still accept it
    found = [p for p in problems if p.path == "spec.agent.http.url"]
    if not loopback:
        assert found == []
        return
    (problem,) = found
    assert problem.severity == "warning" and "loopback" in problem.message
    assert "agent_error" in problem.message and "--agent-url" in problem.hint
    assert "<service>.<namespace>.svc" in problem.hint


@pytest.mark.parametrize("field", ["agent.http.url", "gateway.publicUrl"])
def test_credentials_in_a_url_are_named_as_such(field: str) -> None:
    """`https://bot:pw@host` has a host and no query: a message about those alone sent the
    user looking for the wrong mistake. The password is never repeated."""
    url = "https://bot:hunter2@agents.example.com/v1/episodes"
    if field == "agent.http.url":
        body = minimal_body(agent={"http": {"url": url}})
    else:
        body = minimal_body(gateway={"publicUrl": url})
    exp, problems = parse_experiment(body)
    assert exp is None
    (problem,) = errors(problems)
    assert problem.path == f"spec.{field}"
    assert "user:password@" in problem.message and "agent.http.headers" in problem.hint
    assert "hunter2" not in str(problem)


_HEADER = {"name": "Authorization", "secretKeyRef": {"name": "agent", "key": "bearer"}}


@pytest.mark.parametrize(
    ("url", "headers", "warned"),
    [
        ("http://agents.example.com/v1/episodes", [_HEADER], True),
        ("https://agents.example.com/v1/episodes", [_HEADER], False),
        ("http://agents.example.com/v1/episodes", [], False),  # no Secret to leak
        ("http://agent.rl.svc:8080", [_HEADER], False),  # inside the cluster
        ("http://agent:8080", [_HEADER], False),
    ],
)
def test_secret_headers_to_an_agent_outside_the_cluster_over_plain_http_are_warned(
    url: str, headers: list[dict[str, Any]], warned: bool
) -> None:
    """The rollout's HTTP session sends every header with every request to the agent: a
    Secret's value over plain http crosses every network between the pods and the agent."""
    agent = {"http": {"url": url, "headers": headers}}
    body = minimal_body(agent=agent, gateway={"publicUrl": "https://agentrl-gw.example.com"})
    exp, problems = parse_experiment(body)
    assert exp is not None  # a warning: validate and the operator still accept it
    found = [p for p in problems if p.path == "spec.agent.http.url"]
    if not warned:
        assert found == []
        return
    (problem,) = found
    assert problem.severity == "warning" and "unencrypted" in problem.message
    assert "Authorization" in problem.message and "https://agents.example.com" in problem.hint


def test_a_loopback_public_url_is_warned() -> None:
    """Agents would be handed their own machine to call the model and post results at."""
    body = minimal_body(agent={"http": {"url": "http://agent.rl.svc:8080"}})
    body["spec"]["gateway"] = {"publicUrl": "http://127.0.0.1:9090"}
    exp, problems = parse_experiment(body)
    assert exp is not None
    assert [(p.path, p.severity) for p in problems] == [("spec.gateway.publicUrl", "warning")]
    assert "--gateway-url" in problems[0].hint
    body["spec"]["gateway"] = {"publicUrl": "https://agentrl-gw.example.com"}
    assert parse_experiment(body)[1] == []


def test_status_and_server_metadata_never_invalidate_a_spec() -> None:
    body = minimal_body()
    body["metadata"].update(uid="u-1", generation=3, resourceVersion="42",
                            managedFields=[{"manager": "kubectl"}])  # fmt: skip
    body["status"] = {"phase": "Running", "kopf": {"progress": {}}, "futureField": 1}
    exp, problems = parse_experiment(body)
    assert problems == [] and exp is not None
    assert exp.metadata.uid == "u-1" and exp.status is None


def test_not_a_mapping() -> None:
    exp, problems = parse_experiment(["a", "list"])  # type: ignore[arg-type]
    assert exp is None and problems[0].message == "the document is not a mapping"


@pytest.mark.parametrize(
    ("name", "warned"),
    [
        ("OPENAI_API_KEY", True), ("HF_TOKEN", True), ("DB_PASSWORD", True),
        ("AWS_SECRET_ACCESS_KEY", True), ("SSH_PRIVATE_KEY", True), ("GITHUB_AUTHTOKEN", True),
        ("CLIENT_SECRET_ID", True), ("APP_CREDENTIALS", True),
        ("TOKENIZERS_PARALLELISM", False), ("MAX_TOKENS", False), ("NCCL_DEBUG", False),
        ("KEY_PATH", False), ("AWS_ACCESS_KEY_ID", False), ("PWD", False),
    ],
)  # fmt: skip
def test_secret_looking_env_values_warn_naming_value_from(name: str, warned: bool) -> None:
    exp, problems = parse_experiment(minimal_body(runtime={"env": [{"name": name, "value": "v"}]}))
    assert exp is not None
    if warned:
        (problem,) = problems
        assert problem.severity == "warning" and problem.path == "spec.runtime.env[0].value"
        assert "valueFrom" in problem.hint and "v" not in problem.message.split()  # no value
    else:
        assert problems == []
    from_secret = {"name": name, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    assert parse_experiment(minimal_body(runtime={"env": [from_secret]}))[1] == []


_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"  # the shape of one, not a real token


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("AGENT_AUTH", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "an HTTP Authorization value"),
        ("AUTHORIZATION", "basic dXNlcjpwYXNzd29yZA==", "an HTTP Authorization value"),
        ("HF_HUB", _TOKEN, "an API token"),
        ("OPENAI", "sk-proj-" + "a1" * 12, "an API token"),
        ("GITHUB_PAT", "ghp_" + "Z9" * 18, "an API token"),
        ("DATABASE_URL", "postgres://rl:hunter2@db.rl.svc:5432/runs", "a URL with a password"),
        ("REWARD_CACHE", "redis://:hunter2@cache.rl.svc:6379/0", "a URL with a password"),
        ("AGENT_MODE", "bearer", None),  # a word, not a credential
        ("HF_HOME", "/models/hf_cache", None),
        ("MODEL_URL", "https://user@models.example.com/x", None),  # a user, no password
        ("SKLEARN_ALLOW", "sk-learn", None),
        ("BAD_URL", "http://a:b@host:99999", "a URL with a password"),
        ("BAD_PORT", "http://host:notaport/x", None),
        # A phrase, not base64 of user:password (RFC 7617).
        ("REWARD_STYLE", "Basic configuration", None),
        ("AUTH_HEADER", "Basic dTpw", "an HTTP Authorization value"),  # u:p
        # Kubernetes `$(NAME)` references: the credential comes from a variable of a Secret.
        ("DATABASE_URL", "postgres://rl:$(DB_PASSWORD)@db.rl.svc:5432/runs", None),
        ("REWARD_CACHE", "redis://:$(REDIS_PASSWORD)@cache.rl.svc:6379/0", None),
        ("AGENT_AUTH", "Bearer $(AGENT_API_TOKEN)", None),
        ("MIRROR", "https://$(MIRROR_USER):hunter2@mirror.example.com/", "a URL with a password"),
    ],
)
def test_a_credential_in_a_plain_env_value_is_warned_whatever_its_name(
    name: str, value: str, kind: str | None
) -> None:
    """The name is the user's choice; a bearer token, an API token or a password in a URL is
    a secret by its value, and sits in the RayJob in plain text."""
    body = minimal_body(runtime={"env": [{"name": name, "value": value}]})
    exp, problems = parse_experiment(body)
    assert exp is not None  # a warning: validate and the operator still accept it
    if kind is None:
        assert problems == []
        return
    (problem,) = problems
    assert (problem.severity, problem.path) == ("warning", "spec.runtime.env[0].value")
    assert kind in problem.message and name in problem.message
    assert value not in str(problem) and "hunter2" not in str(problem)
    assert "valueFrom.secretKeyRef" in problem.hint


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # The path of a file that holds the secret (a Secret mounted as a volume).
        ("GOOGLE_APPLICATION_CREDENTIALS", "/var/secrets/gcp/key.json"),
        ("HF_TOKEN_PATH", "/var/secrets/hf/token"),
        ("POSTGRES_PASSWORD_FILE", "/run/secrets/pg"),
        # A switch, a count.
        ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"),
        ("AGENT_DISABLE_TOKEN_CHECK", "true"),
        ("TOKEN_BUDGET", "4096"),
    ],
)
def test_a_secret_named_env_whose_value_is_a_path_a_switch_or_a_count_is_not_warned(
    name: str, value: str
) -> None:
    """The name says secret, the value is none: the hint (put it in a Secret) would be wrong."""
    body = minimal_body(runtime={"env": [{"name": name, "value": value}]})
    assert parse_experiment(body)[1] == []


def test_a_secret_named_env_whose_value_merely_starts_like_a_path_or_number_is_warned() -> None:
    for value in ("12345678901234567890", "/not a path", "truely-secret"):
        body = minimal_body(runtime={"env": [{"name": "API_TOKEN", "value": value}]})
        (problem,) = parse_experiment(body)[1]
        assert problem.path == "spec.runtime.env[0].value"


@pytest.mark.parametrize("value", ["$(HUGGING_FACE_HUB_TOKEN)", "Bearer $(AGENT_API_TOKEN)"])
def test_a_secret_named_env_holding_a_reference_to_another_variable_is_not_warned(
    value: str,
) -> None:
    """`$(NAME)` is Kubernetes' dependent variable: the pod gets the value of a variable set
    before it (here one from a Secret); the spec holds the reference, no secret."""
    ref = {
        "name": "HUGGING_FACE_HUB_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
    }
    env = [ref, {"name": "HF_TOKEN", "value": value}]
    assert parse_experiment(minimal_body(runtime={"env": env}))[1] == []


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"resources": {"nodeSelector": {"country": False}}}, "spec.resources.nodeSelector.country",
         "must be a string, not a boolean (kubectl reads y/n, yes/no, on/off and true/false as "
         "booleans; quote it)"),
        ({"grpo": {"numRollouts": "10"}}, "spec.grpo.numRollouts",
         "must be an integer, not a string (write the number without quotes"),
        ({"resources": {"nodes": 2.5}}, "spec.resources.nodes",
         "must be an integer, not a number (write a whole number)"),
        ({"resources": {"nodes": 1e20}}, "spec.resources.nodes",
         "must be an integer, not a number (Kubernetes stores 64-bit integers"),
        ({"agent": {"http": {"url": "http://a:1", "timeoutSeconds": "1:30"}}},
         "spec.agent.http.timeoutSeconds",
         "must be an integer, not a string (kubectl reads 1:30 as text, not base 60"),
        ({"suspend": "no"}, "spec.suspend", "must be true or false, not a string"),
        ({"runtime": {"volumes": ["pvc"]}}, "spec.runtime.volumes[0]",
         "must be an object, not a string"),
    ],
)  # fmt: skip
def test_type_errors_say_what_yaml_did(spec: dict[str, Any], path: str, words: str) -> None:
    _, problems = parse_experiment(minimal_body(**spec))
    (problem,) = problems
    assert problem.path == path and str(problem).startswith(f"{path}: {words}")


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("slime:latest", True), ("nvcr.io/nvidia/pytorch:24.05-py3", True),
        ("localhost:5000/team/slime@sha256:" + "a" * 64, True), ("REG.example.com/x:1", True),
        ("slime :latest", False), ("Team/Slime:1", False), ("https://r.example.com/s:1", False),
        ("slime:", False), ("slime@sha256:xyz", False),
    ],
)  # fmt: skip
def test_image_references_follow_the_kubelets_grammar(image: str, ok: bool) -> None:
    exp, problems = parse_experiment(minimal_body(runtime={"image": image}))
    assert (exp is not None) is ok, problems
    if not ok:
        assert [p.path for p in problems] == ["spec.runtime.image"]


@pytest.mark.parametrize(
    ("path", "ok"),
    [("Qwen/Qwen2.5-0.5B-Instruct", True), ("Qwen/Qwen 2.5", False), ("a/" + "b" * 97, False),
     ("/models/q\nx", False)],
)  # fmt: skip
def test_hub_ids_and_control_characters_in_model_paths(path: str, ok: bool) -> None:
    body = minimal_body(model={"path": path, "type": "qwen2.5-0.5B", "refLoad": "/models/q",
                               "rendererFamily": "default"})  # fmt: skip
    exp, problems = parse_experiment(body)
    assert (exp is not None) is ok, problems
    if not ok:
        assert [p.path for p in problems] == ["spec.model.path"]


@pytest.mark.parametrize(
    ("interval", "rollouts", "words"),
    [(10, 25, "after rollout 20"), (30, 25, "only before training")],
)
def test_an_eval_interval_that_misses_the_final_weights_is_warned(
    interval: int, rollouts: int, words: str
) -> None:
    """slime forces a save after the last rollout but not an eval: with numRollouts 25 and
    evalInterval 10 the weights after rollouts 21-25 are never evaluated (unless an epoch
    of the data happens to end there)."""
    body = minimal_body(
        data={"train": "/data/train.jsonl", "eval": [{"name": "e", "path": "/data/e.jsonl"}],
              "evalInterval": interval},
        grpo={"numRollouts": rollouts},
    )  # fmt: skip
    exp, problems = parse_experiment(body)
    assert exp is not None
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", "spec.data.evalInterval")
    assert words in warning.message and "multiple of evalInterval" in warning.hint
    assert errors(problems) == []
    body["spec"]["grpo"]["numRollouts"] = 2 * interval  # divides: nothing to say
    assert parse_experiment(body)[1] == []
    del body["spec"]["data"]["eval"]  # no eval sets: no eval at all
    body["spec"]["grpo"]["numRollouts"] = rollouts
    assert parse_experiment(body)[1] == []
