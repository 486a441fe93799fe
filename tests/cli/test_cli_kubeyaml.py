"""The CLI reads YAML values as kubectl sends them (go-yaml v2 + sigs.k8s.io/yaml + JSON).

tests/e2e/test_yaml_as_kubectl.py proves the same readings against the real kubectl and
kube-apiserver; these run everywhere and pin each rule of `agentrl.cli.kubeyaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import minimal_body

from agentrl.api.validation import errors, parse_experiment
from agentrl.cli import kubeyaml
from agentrl.cli.load import load_documents


def _read(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    (doc,) = load_documents([str(path)])
    assert doc.problems == [], doc.problems
    return doc.body


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-6", 1e-6), ("5e-7", 5e-7), ("1e-06", 1e-6), ("2E3", 2000), ("1e3", 1000),
        ("2.0", 2), ("3.", 3), (".5", 0.5), ("-.25", -0.25), ("1e21", 1e21),
        ("1e400", "1e400"), ("2E-999999999", 0), ("1e2.5", "1e2.5"),
        ("y", True), ("Y", True), ("n", False), ("N", False), ("yes", True), ("NO", False),
        ("on", True), ("Off", False), ("~", None), ("", None), ("Null", None),
        ("1:30", "1:30"), ("190:20:30.15", "190:20:30.15"),
        ("2024-02-28", "2024-02-28"), ("2024-02-30", "2024-02-30"),
        ("017", 15), ("0o17", 15), ("08", 8), ("0x1F", 31), ("0b101", 5), ("1_000", 1000),
        ("+12", 12), ("-0", 0), ("=", "="), ("nan", "nan"), ("inf", "inf"),
        ("9223372036854775807", 2**63 - 1), ("9" * 5000, "9" * 5000),
        ("!!float 1", 1), ("!!str 017", "017"), ("!thing value", "value"),
        ("!!binary aGVsbG8=", "hello"), ("!!binary /w==", "\ufffd"), ('"1e-6"', "1e-6"),
        ("'y'", "y"), ("!!null ~", None), ("!!timestamp 2001-12-14", "2001-12-14"),
    ],
)  # fmt: skip
def test_plain_scalars_read_as_kubectl_sends_them(tmp_path: Path, text: str, value: Any) -> None:
    read = _read(tmp_path, f"v: {text}\n")["v"]
    assert (read, type(read)) == (value, type(value))


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("y", "true"), ("n", "false"), ("on", "true"), ("1", "1"), ("1.0", "1"), ("1.5", "1.5"),
        ("1e10", "1e+10"), ("0.0001", "0.0001"), ("0.00001", "1e-05"), ("123456", "123456"),
        ("1234567.0", "1.234567e+06"), ("0.1", "0.1"), ("-0.0", "-0"),
        ("16777217.0", "1.6777216e+07"), ("1e39", ".inf"), ("'y'", "y"),
    ],
)  # fmt: skip
def test_keys_become_the_strings_sigs_yaml_makes(tmp_path: Path, key: str, name: str) -> None:
    assert _read(tmp_path, f"{key}: x\n") == {name: "x"}


def test_merge_keys_apply_in_document_order(tmp_path: Path) -> None:
    text = "base: &b {a: 1, b: 2}\nafter: {a: 0, <<: *b}\nbefore: {<<: *b, a: 9}\n"
    text += "list: {<<: [{a: 1}, {a: 2, c: 3}]}\n"
    body = _read(tmp_path, text)
    assert body["after"] == {"a": 1, "b": 2}  # go-yaml: the merge overrides the earlier key
    assert body["before"] == {"a": 9, "b": 2}
    assert body["list"] == {"a": 1, "c": 3}  # earlier mappings of a list take precedence


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ("a:\n  ~: x\n", "a.~", "a null map key has no JSON form"),
        ("a:\n  18446744073709551615: x\n", "a.18446744073709551615", "uint64 map key"),
        ("a: !!int abc\n", "a", "cannot decode !!str `abc` as a !!int"),
        ("a: !!null 10\n", "a", "cannot decode !!int `10` as a !!null"),
        ("a: !!binary '%%'\n", "a", "invalid base64"),
        ("a: {<<: 1}\n", "a.<<", "map merge requires map"),
        ("a:\n  b: 1\n  b: 2\n", "a.b", "the key is written twice"),
        ("a: {y: 1, true: 2}\n", "a.true", "the key is written twice"),
    ],
)  # fmt: skip
def test_what_kubectl_cannot_send_is_a_problem_at_its_field(
    tmp_path: Path, text: str, path: str, words: str
) -> None:
    file = tmp_path / "doc.yaml"
    file.write_text(text)
    (doc,) = load_documents([str(file)])
    assert [p.path for p in doc.problems] == [path] and words in str(doc.problems[0])


@pytest.mark.parametrize("spelling", ["1e-6", "5e-7", "1e-06", "0.000001"])
def test_the_documented_learning_rate_spellings_are_valid(tmp_path: Path, spelling: str) -> None:
    text = yaml.safe_dump(minimal_body()).replace("numRollouts: 10", "numRollouts: 10\n    "
                                                  f"learningRate: {spelling}")  # fmt: skip
    exp, problems = parse_experiment(_read(tmp_path, text))
    assert exp is not None and errors(problems) == [], problems
    assert exp.spec.grpo.learning_rate == float(spelling)


def test_integers_beyond_int64_are_read_as_float64_then_refused(tmp_path: Path) -> None:
    """kubectl sends them as float64 in Go's shortest digits; the bounds check refuses them."""
    for text, value in (("99999999999999999999", 10**20),
                        ("18446744073709551615", 18446744073709552000)):  # fmt: skip
        assert kubeyaml.json_number(kubeyaml.resolve("", text)[1]) == value
        file = tmp_path / "big.yaml"
        file.write_text(f"v: {text}\n")
        (doc,) = load_documents([str(file)])
        assert [(p.path, p.message) for p in doc.problems] == [
            ("v", "integer outside the 64-bit range Kubernetes stores")
        ]


def test_go_float32_formatting_matches_go() -> None:
    # strconv.FormatFloat(v, 'g', -1, 32) results, as Go prints them.
    cases = {3.14159: "3.14159", 1e-7: "1e-07", 100000.0: "100000", 1e6: "1e+06", 2.5e-5: "2.5e-05"}
    for value, text in cases.items():
        assert kubeyaml.map_key(value, "") == text
