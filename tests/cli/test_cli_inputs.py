"""`-f` reads what `kubectl apply -f` reads: multi-document files, `kind: List`, directories
(`--recursive` for subdirectories), several `-f`, stdin. Problems go to stderr, results to
stdout, and the exit codes are the documented ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.cli.main import EXIT_CODES, main
from conftest import EXAMPLES_DIR, minimal_body

IMAGE = "runtime@sha256:" + "1" * 64
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"}, "stringData": {}}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The CLI with an operator default image (these tests are about inputs, not images)."""
    code = main([*argv, "--image", IMAGE] if argv[0] in ("validate", "render") else list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def named(name: str, **spec: Any) -> dict[str, Any]:
    body = minimal_body(**spec)
    body["metadata"]["name"] = name
    return body


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_multi_document_file_checks_each_experiment_and_skips_other_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(tmp_path / "all.yaml", SECRET, named("one"), named("two", agent={}))
    code, out, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1
    assert out.startswith(f"{spec}#2: OK (RLExperiment rl/one: 1 node(s) x 8 GPUs; policy: ")
    assert f"{spec}#1: skipped v1/Secret hf (not an RLExperiment)" in err
    assert f"{spec}#3: spec.agent: no agent backend is set" in err
    assert f"{spec}#3: 1 error(s); nothing would be created" in err


def test_kind_list_items_are_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "list.json"
    spec.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [named("a"), named("b")]}))  # fmt: skip
    code, out, _ = run(capsys, "validate", "-f", str(spec))
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines()] == [f"{spec}[0]", f"{spec}[1]"]


def test_directories_like_kubectl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "b.yaml", named("b"))
    write(tmp_path / "a.yml", named("a"))
    (tmp_path / "readme.md").write_text("# not a manifest\n")
    write(tmp_path / "sub" / "c.json", named("c"))
    code, out, _ = run(capsys, "validate", "-f", str(tmp_path))
    assert code == 0
    assert [line.split(": OK")[0].rsplit("/", 1)[-1] for line in out.splitlines()] == [
        "a.yml",
        "b.yaml",
    ]
    code, out, _ = run(capsys, "validate", "-R", "-f", str(tmp_path))
    assert code == 0 and out.count(": OK ") == 3 and "c.json" in out


def test_several_files_and_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(named("piped"))))
    first = write(tmp_path / "one.yaml", named("one"))
    code, out, _ = run(capsys, "validate", "-f", str(first), "-f", "-")
    assert code == 0
    assert "rl/one" in out and "stdin: OK (RLExperiment rl/piped" in out


def test_render_is_all_or_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = named("good"), named("bad", grpo={"numRollouts": 0})
    spec = write(tmp_path / "two.yaml", good, bad)
    code, out, err = run(capsys, "render", "-f", str(spec))
    assert code == 1 and out == ""
    assert f"{spec}#2: spec.grpo.numRollouts:" in err and "nothing rendered" in err
    write(spec, good, named("also-good"))
    code, out, err = run(capsys, "render", "-f", str(spec), "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    names = {o["metadata"]["name"] for o in items if o["kind"] == "RayJob"}
    assert names == {"good", "also-good"}


def test_only_other_kinds_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path / "secret.yaml", SECRET)
    code, out, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and out == "" and "no RLExperiment found" in err


def test_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["validate", "--help"], ["render", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        assert EXIT_CODES in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["validate"])  # -f is required
    assert exit_.value.code == 2


def test_exit_codes_are_in_the_docs() -> None:
    docs = (EXAMPLES_DIR.parent / "docs" / "api.md").read_text()
    for line in EXIT_CODES.splitlines()[1:]:
        code, meaning = line.strip().split("  ", 1)
        assert f"| {code} | {meaning} |" in docs


def test_one_type_error_and_three_cross_field_mistakes_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14: every problem at once, not over two rounds of validate."""
    body = named(
        "mixed",
        grpo={"numRollouts": "ten", "globalBatchSize": 100},  # type error + divisibility
        resources={"parallelism": {"tensor": 3}, "rolloutGpusPerEngine": 3},  # two layout
    )
    spec = write(tmp_path / "mixed.yaml", body)
    code, _, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1
    found = {line.split(": ")[1] for line in err.splitlines() if line.count(": ") >= 2}
    assert found >= {
        "spec.grpo.numRollouts",
        "spec.grpo.globalBatchSize",
        "spec.resources.parallelism",
        "spec.resources.rolloutGpusPerEngine",
    }, err


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("spec:\n  grpo: [unclosed\n", "spec.grpo", "not valid YAML: line 3"),
        ("spec:\n  runtime:\n    env:\n    - name: A\n      value: \"open\n",
         "spec.runtime.env[0].value", "not valid YAML"),
        ("spec:\n  resources:\n    cpu: 1\x07\n", "spec.resources.cpu", "U+0007 on line 3"),
        ("spec:\n  model: !!python/object:os.system x\n", "spec.model",
         "must be an object, not a string"),  # an unknown tag is a string to kubectl
    ],
)  # fmt: skip
def test_yaml_that_does_not_parse_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, words: str
) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text(text)
    code, out, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and out == ""
    assert f"{spec}: {field}: " in err and words in err, err


def test_the_examples_directory_renders(capsys: pytest.CaptureFixture[str]) -> None:
    policy = str(EXAMPLES_DIR / "platform" / "policy.yaml")  # the SWE example needs one
    code, out, _ = run(
        capsys, "render", "-f", str(EXAMPLES_DIR), "--show-command", "--policy", policy
    )
    assert code == 0 and out.count("# rl/") == len(list(EXAMPLES_DIR.glob("*.yaml")))
    assert copy.copy(out).count("python3 ") == out.count("# rl/")


def test_a_key_written_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = yaml.safe_dump(named("twice")).replace(
        "numRollouts: 10", "numRollouts: 10\n    numRollouts: 99"
    )
    spec = tmp_path / "twice.yaml"
    spec.write_text(text)
    code, _, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and f"{spec}: spec.grpo.numRollouts: the key is written twice" in err


def test_a_misspelt_kind_is_refused_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = named("typo")
    body["kind"] = "RLexperiment"
    spec = write(tmp_path / "kind.yaml", body, SECRET)
    code, _, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and f"{spec}#1: kind: " in err and "skipped v1/Secret" in err


@pytest.mark.parametrize("unset", [("apiVersion",), ("kind",), ("apiVersion", "kind")])
def test_a_document_without_apiversion_or_kind_is_refused_as_kubectl_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unset: tuple[str, ...]
) -> None:
    """kubectl apply says "apiVersion not set, kind not set" (tests/e2e/test_yaml_as_kubectl.py
    runs it); the models default both, so validate said OK to a file apply refuses."""
    body = named("untyped")
    for key in unset:
        del body[key]
    spec = write(tmp_path / "untyped.yaml", body)
    for verb in ("validate", "render"):
        code, out, err = run(capsys, verb, "-f", str(spec))
        assert code == 1 and out == "", (verb, out)
        for key in unset:
            assert f"{spec}: {key}: not set: kubectl apply refuses a document without it" in err
        assert "start the document with apiVersion: agentrl.io/v1alpha1 and kind: " in err


def test_recursive_directories_do_not_follow_link_loops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "a" / "one.yaml", named("one"))
    (tmp_path / "a" / "loop").symlink_to(tmp_path, target_is_directory=True)
    code, out, _ = run(capsys, "validate", "-R", "-f", str(tmp_path))
    assert code == 0 and out.count(": OK ") == 1


@pytest.mark.parametrize(
    ("piped", "expected"),
    [
        ("", ["error: stdin: nothing was read"]),
        (yaml.safe_dump(SECRET), ["stdin: skipped v1/Secret hf (not an RLExperiment)",
                                  "error: stdin: no RLExperiment found"]),
    ],
)  # fmt: skip
def test_stdin_is_named_stdin_in_every_message(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    piped: str,
    expected: list[str],
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(piped))
    code, out, err = run(capsys, "validate", "-f", "-")
    assert code == 1 and out == "" and err.splitlines() == expected
