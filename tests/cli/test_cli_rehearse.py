"""`agentrl rehearse` when it cannot run: exit status 2 and a message naming the fix.

Every case here stops before an episode starts: no engine, a spec or a path the rehearsal
cannot use, the core install without the bundle's dependencies. (Rehearsals that run are
tests/bundle/rehearse.)
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.process import free_port

from agentrl.api.tokenizer_files import has_vocabulary
from agentrl.cli.main import main
from conftest import EXAMPLES_DIR, ROOT

HTTP_EXAMPLE = EXAMPLES_DIR / "qwen2.5-7b-http-agent-two-evals.yaml"
RUN: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 120}


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_without_engine_the_error_says_how_to_start_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE)
    assert (code, out) == (2, "")
    assert "--engine is required" in err
    # As docs/rehearse.md says: the spec's model and the SGLang flags it implies.
    assert "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct" in err
    assert "--tool-call-parser qwen25" in err


def test_the_launch_command_serves_a_hub_id_and_not_a_tokenizer_only_model_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/rehearse.md's --model-dir holds the tokenizer's files only: SGLang cannot serve
    that directory, and the spec's hub id downloads the weights. A path in the pods has
    only its local copy to serve."""
    tokenizer_only = tmp_path / "qwen2.5-7b"
    tokenizer_only.mkdir()
    (tokenizer_only / "tokenizer.json").write_text("{}")
    code, _, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--model-dir", tokenizer_only)
    assert code == 2
    assert "--model-path Qwen/Qwen2.5-7B-Instruct --tool-call-parser qwen25" in err
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    body["spec"]["model"].update(path="/models/qwen2.5-7b-instruct", rendererFamily="default")
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump(body))
    code, _, err = run(capsys, "rehearse", "-f", local, "--model-dir", tokenizer_only)
    assert code == 2 and f"--model-path {tokenizer_only} --tool-call-parser qwen25" in err


def test_an_engine_nobody_serves_is_refused_with_the_spec_s_launch_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    code, _, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--engine", url,
                       "--data", data, "--out", tmp_path)  # fmt: skip
    assert code == 2
    assert f"--engine {url}: no SGLang engine answers there" in err
    # The command names the spec's model and the SGLang settings it implies.
    assert "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct" in err
    assert "--tool-call-parser qwen25" in err


def test_an_invalid_spec_is_refused_with_its_problems(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    body["spec"]["grpo"]["samplesPerPrompt"] = 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(body))
    code, _, err = run(capsys, "rehearse", "-f", bad, "--engine", "http://127.0.0.1:1")
    assert code == 2
    assert "spec.grpo.samplesPerPrompt" in err and "nothing rehearsed" in err


def test_a_spec_kubectl_would_refuse_for_its_missing_kind_is_not_rehearsed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The rehearsal is the step before `kubectl apply -f` of the same file."""
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    del body["apiVersion"], body["kind"]
    untyped = tmp_path / "untyped.yaml"
    untyped.write_text(yaml.safe_dump(body))
    code, _, err = run(capsys, "rehearse", "-f", untyped, "--engine", "http://127.0.0.1:1")
    assert code == 2 and "nothing rehearsed" in err
    assert f"{untyped}: apiVersion: not set" in err and f"{untyped}: kind: not set" in err


def test_a_data_path_only_the_pods_have_asks_for_a_local_copy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--engine", "http://127.0.0.1:1",
                       "--out", tmp_path)  # fmt: skip
    assert code == 2
    assert "spec.data.train is /data/web/train.jsonl" in err and "pass --data" in err


def test_an_unknown_split_lists_the_eval_sets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--engine", "http://127.0.0.1:1",
                       "--split", "eval:nope", "--out", tmp_path)  # fmt: skip
    assert code == 2 and "known: eval:web-dev, eval:web-hard" in err


def test_the_cli_never_imports_the_bundle_until_rehearse_runs() -> None:
    """The core install (pydantic, pyyaml) runs every other verb: importing the CLI must not
    pull in the bundle, whose dependencies it does not have."""
    probe = (
        "import sys, agentrl.cli.main\n"
        "print(sorted(m for m in sys.modules if m.startswith('agentrl.bundle') or m == 'aiohttp'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=False, **RUN)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_the_bundle_extra_rehearse_names_it_and_the_rest_still_works() -> None:
    """The bundle's dependencies made unimportable, as in a core-only install."""
    probe = (
        "import sys\n"
        "for name in ('aiohttp', 'orjson', 'tokenizers', 'renderers', 'boto3', 'stamina'):\n"
        "    sys.modules[name] = None  # what an install without the extra looks like\n"
        "from agentrl.cli.main import main\n"
        f"code = main(['rehearse', '-f', {str(HTTP_EXAMPLE)!r}, '--engine', 'http://x:1'])\n"
        "print('rehearse', code)\n"
        "print('validate', main(['validate', '-f', sys.argv[1], '--policy', sys.argv[2]]))\n"
    )
    policy = EXAMPLES_DIR / "platform" / "policy.yaml"
    argv = [sys.executable, "-c", probe, str(HTTP_EXAMPLE), str(policy)]
    out = subprocess.run(argv, check=False, **RUN)
    assert out.returncode == 0, out.stderr
    assert "rehearse 2" in out.stdout and "validate 0" in out.stdout
    assert "needs the bundle extra (orjson is not installed)" in out.stderr  # the first it met
    assert "pip install 'agentrl[bundle]'" in out.stderr


def test_a_checkpoint_only_the_pods_have_asks_for_a_local_copy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    body["spec"]["model"].update(path="/models/qwen2.5-7b-instruct", rendererFamily="qwen3")
    spec = tmp_path / "local-model.yaml"
    spec.write_text(yaml.safe_dump(body))
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    code, _, err = run(capsys, "rehearse", "-f", spec, "--engine", "http://127.0.0.1:1",
                       "--data", data, "--out", tmp_path / "out")  # fmt: skip
    assert code == 2
    assert "spec.model.path is /models/qwen2.5-7b-instruct" in err and "--model-dir" in err


@pytest.mark.parametrize("local_spec", [False, True])
def test_a_model_dir_without_tokenizer_files_says_what_to_copy(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    local_spec: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """transformers' own error for it blamed a missing sentencepiece or tiktoken."""
    empty = tmp_path / "qwen2.5-7b"
    (empty / "weights").mkdir(parents=True)
    spec, flags = HTTP_EXAMPLE, ["--model-dir", empty]
    if local_spec:  # spec.model.path readable here, as on a machine that mounts the volume
        body = yaml.safe_load(HTTP_EXAMPLE.read_text())
        body["spec"]["model"].update(path=str(empty), rendererFamily="default")
        spec, flags = tmp_path / "local.yaml", []
        spec.write_text(yaml.safe_dump(body))
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    code, _, err = run(capsys, "rehearse", "-f", spec, "--engine", "http://127.0.0.1:1", *flags,
                       "--data", data, "--out", tmp_path)  # fmt: skip
    assert code == 2
    what = f"spec.model.path {empty}" if local_spec else f"--model-dir {empty}"
    assert f"error: {what} holds no tokenizer files (tokenizer.json, " in err
    # The copy it suggests, run through huggingface_hub's own CLI, fetches a vocabulary.
    command = re.search(r"e\.g\. (hf download .*? --local-dir \S+)", err)
    assert command is not None, err
    fetched = hf_fetches(command[1].replace("<hub id>", "Qwen/Qwen2.5-7B-Instruct"), monkeypatch)
    assert has_vocabulary(fetched) and "config.json" in fetched, fetched


def test_the_walkthrough_s_download_fetches_the_tokenizer_and_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/rehearse.md's `--model-dir` copy: `huggingface-cli` is gone from the
    huggingface_hub that transformers 5 installs, and `hf download ID --include 'tokenizer*'
    config.json` fetches config.json alone (a file name makes it ignore `--include`), a
    directory the rehearsal then refuses."""
    text = " ".join((ROOT / "docs" / "rehearse.md").read_text().split())
    commands = re.findall(r"`((?:hf|huggingface-cli) download [^`]*)`", text)
    assert commands, "docs/rehearse.md shows no download command"
    for command in commands:
        fetched = hf_fetches(command, monkeypatch)
        assert has_vocabulary(fetched) and "config.json" in fetched, (command, fetched)


def hf_fetches(command: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files or patterns huggingface_hub's `hf download` asks the hub for when given
    `command` (its own argument parsing; the downloads are recorded, not made)."""
    hf = pytest.importorskip("huggingface_hub.cli.hf", reason="huggingface_hub has no hf CLI")
    if not hasattr(hf, "app"):  # before huggingface_hub 1.0, `hf` was argparse's
        pytest.skip("this huggingface_hub's hf CLI is not the typer app of 1.0 and later")
    download = importlib.import_module("huggingface_hub.cli.download")
    argv = shlex.split(command)
    assert argv[0] == "hf", f"{command}: not huggingface_hub's CLI (`hf`)"
    asked: list[str] = []

    def one(**kw: Any) -> str:
        asked.append(kw["filename"])
        return "/nowhere"

    def snapshot(**kw: Any) -> str:
        asked.extend(kw["allow_patterns"] or ["*"])
        return "/nowhere"

    monkeypatch.setattr(download, "hf_hub_download", one)
    monkeypatch.setattr(download, "snapshot_download", snapshot)
    hf.app(args=argv[1:], standalone_mode=False, windows_expand_args=False)
    return asked


@pytest.mark.parametrize(
    ("flag", "field"),
    [("--gateway-url", ["gateway", "publicUrl"]), ("--agent-url", ["agent", "http", "url"])],
)
@pytest.mark.parametrize("url", ["https://tunnel.example/gw?sig=abc", "https://tunnel.example/#x"])
def test_a_url_option_with_a_query_or_fragment_is_refused_as_its_spec_field_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, field: list[str], url: str
) -> None:
    """--gateway-url stands in for spec.gateway.publicUrl and --agent-url for
    agent.http.url; both are bases that paths are appended to (`<url>/sessions/<id>/v1`),
    which a query or fragment swallows. validate refuses the fields; --gateway-url was taken
    as it came (agents were handed `...?sig=abc/sessions/<id>/v1`), and --agent-url was
    refused with pydantic's regular expression. Both now say what validate says, before
    the engine is even looked for."""
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    node = body["spec"]
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node[field[-1]] = url
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(body))
    code, _, said = run(capsys, "validate", "-f", spec)
    (line,) = [s for s in said.splitlines() if f"spec.{'.'.join(field)}:" in s]
    problem = line.split(f"spec.{'.'.join(field)}: ", 1)[1]
    assert code != 0 and "no query or fragment" in problem

    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    code, out, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--engine", "http://127.0.0.1:1",
                         "--data", data, "--out", tmp_path / "out", flag, url)  # fmt: skip
    assert (code, out) == (2, "")
    assert err == f"error: {flag} {url}: {problem}\n"


def test_spec_runtime_env_reaches_the_rehearsal_s_context_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The runtime config leaves spec.runtime.env out (the pods get it as env), so the
    rehearsal's copy of the launcher's context check must get it from the spec: with
    SGLang's switch for a longer context set there, the rehearsal goes on to the engine."""
    local = tmp_path / "qwen2.5-7b"
    local.mkdir()
    (local / "tokenizer.json").write_text("{}")
    (local / "config.json").write_text('{"max_position_embeddings": 32768}')
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    body["spec"]["model"].update(path=str(local), rendererFamily="default", contextLength=65536)
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    argv = ["--engine", "http://127.0.0.1:1", "--data", data, "--out", tmp_path / "out"]
    for env, says in (
        ([], "spec.model.contextLength: 65536 is more than the 32768 tokens"),
        ([{"name": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "value": "true"}],
         "--engine http://127.0.0.1:1: no SGLang engine answers there"),
    ):  # fmt: skip
        body["spec"]["runtime"] = {**body["spec"].get("runtime", {}), "env": env}
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(body))
        code, _, err = run(capsys, "rehearse", "-f", spec, *argv)
        assert code == 2 and says in err, err


AGENTCORE_EXAMPLE = EXAMPLES_DIR / "qwen2.5-3b-gsm8k-agentcore.yaml"
Reach = tuple[list[str], str | None, bool]  # extra options, boto3's endpoint, refused


@pytest.mark.parametrize(
    "case",
    [
        ([], None, True),  # AWS's runtime, handed 127.0.0.1
        (["--listen", "localhost"], None, True),
        (["--gateway-url", "https://tunnel.example/gw"], None, False),
        ([], "http://127.0.0.1:1", False),  # a runtime on this machine reaches loopback
    ],
)
def test_an_agentcore_rehearsal_without_a_reachable_gateway_is_refused_before_any_invocation(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: Reach,
) -> None:
    """Without --gateway-url the gateway hands agents its listen address, 127.0.0.1; a
    runtime deployed in AgentCore calls its own host there, and every episode failed after
    its invocation was paid for. Refused first, naming the option and what it must be."""
    extra, endpoint, refused = case
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    if endpoint is not None:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", endpoint)
    data = EXAMPLES_DIR / "data" / "gsm8k-train.jsonl"
    code, out, err = run(capsys, "rehearse", "-f", AGENTCORE_EXAMPLE, "--engine",
                         "http://127.0.0.1:1", "--data", data, "--out", tmp_path / "out",
                         *extra)  # fmt: skip
    assert (code, out) == (2, "")
    said = "error: --gateway-url is required for an AgentCore agent: the runtime at "
    assert (said in err) is refused, err
    if refused:
        assert "https://bedrock-agentcore.us-west-2.amazonaws.com" in err
        assert "Pass --gateway-url with a URL the runtime can reach" in err
    else:  # on to the next check: the checkpoint only the pods have
        assert "spec.model.path is /models/Qwen2.5-3B-Instruct" in err


# ---- nothing written when the rehearsal cannot run --------------------------------------


def _argv_for(case: str, tmp_path: Path) -> list[str | Path]:
    """A rehearsal of HTTP_EXAMPLE that stops before it can run, each in its own way."""
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    closed = f"http://127.0.0.1:{free_port()}"
    if case == "invalid spec":
        body = yaml.safe_load(HTTP_EXAMPLE.read_text())
        body["spec"]["grpo"]["samplesPerPrompt"] = 0
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump(body))
        return ["-f", bad, "--engine", closed, "--data", data]
    flags: dict[str, list[str | Path]] = {
        "no --engine": [],
        "--prompts 0": ["--engine", closed, "--prompts", "0"],
        "unknown split": ["--engine", closed, "--split", "eval:nope"],
        "bad --agent-url": ["--engine", closed, "--agent-url", "https://a.example/#x"],
        "data only the pods have": ["--engine", closed],
        "no engine": ["--engine", closed],
    }
    extra = flags[case]
    with_data = case not in ("data only the pods have", "no --engine")
    return ["-f", HTTP_EXAMPLE, *extra, *(["--data", data] if with_data else [])]


@pytest.mark.parametrize(
    "case",
    ["invalid spec", "no --engine", "--prompts 0", "unknown split", "bad --agent-url",
     "data only the pods have", "no engine"],
)  # fmt: skip
@pytest.mark.parametrize("out", ["--out", "default"])
def test_a_rehearsal_that_cannot_run_writes_nothing(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: str,
    out: str,
) -> None:
    """`rehearsal/<name>/` (or `--out DIR`) was created, with an empty rehearse.log in it,
    before the engine was asked: a rehearsal stopped by its exit 2 left a folder behind that
    looked like a run's. The folder now appears once the engine, the gateway and the agent
    backend are up (tests/bundle/rehearse covers the tokenizer and the agent's secrets)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = _argv_for(case, tmp_path)
    if out == "--out":
        argv += ["--out", tmp_path / "out" / "nested"]
    code, stdout, err = run(capsys, "rehearse", *argv)
    assert (code, stdout) == (2, ""), err
    assert list(work.iterdir()) == [] and not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_refused_before_the_engine_is_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It failed with a FileExistsError traceback; now it is a refusal naming the flag."""
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    data = EXAMPLES_DIR / "data" / "web-train.jsonl"
    code, _, err = run(capsys, "rehearse", "-f", HTTP_EXAMPLE, "--engine", "http://127.0.0.1:1",
                       "--data", data, "--out", taken)  # fmt: skip
    assert code == 2
    assert err.startswith(f"error: --out {taken}: a file, not a directory;"), err
    assert taken.read_text() == "mine\n"


def test_the_launch_command_carries_the_sglang_flags_of_extra_args(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """slime starts the pods' engines with extraArgs' `--sglang-*` flags (speculative
    decoding reserves tokens of every call's context): the rehearsal's engine gets them too,
    and nothing else of extraArgs (slime's own flags, which SGLang would refuse)."""
    body = yaml.safe_load(HTTP_EXAMPLE.read_text())
    extra = ["--use-tis", "--sglang-speculative-algorithm", "EAGLE",
             "--sglang-speculative-num-steps", "3", "--eval-top-k", "5",
             "--sglang-enable-metrics"]  # fmt: skip
    body["spec"].setdefault("runtime", {})["extraArgs"] = extra
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(body))
    code, _, err = run(capsys, "rehearse", "-f", path)
    assert code == 2, err
    (command,) = [line.strip() for line in err.splitlines() if "sglang.launch_server" in line]
    assert command == (
        "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --tool-call-parser "
        "qwen25 --speculative-algorithm EAGLE --speculative-num-steps 3 --enable-metrics "
        "--port 30000"
    )
